"""Schedule settings a timm scheduler takes without a word but gets wrong: refused or warned of before the run."""

import pytest
from enginekit import TASKS

from swinlite.engine.preflight import check_decay_epochs, check_run


def test_unsorted_decay_epochs_are_refused_with_the_sorted_list():
    """schedule.decay_epochs=[2,1]: timm bisects the milestones as sorted, and both decays came after epoch 1."""
    cfg = TASKS["classification"].load_config(None, ["schedule.kind=step", "schedule.decay_epochs=[2,1.5,1]"])
    with pytest.raises(ValueError, match=r"^schedule.decay_epochs must be in increasing order: give "
                                         r"schedule.decay_epochs=\[1,1.5,2\]$"):  # fmt: skip
        check_run(TASKS["classification"], cfg)


def test_a_repeated_decay_epoch_is_accepted():
    """[2,2] decays twice after epoch 2 (torch's MultiStepLR does the same): not refused."""
    check_decay_epochs((1.0, 2.0, 2.0))
