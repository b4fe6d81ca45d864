"""Schedule settings a timm scheduler takes without a word but gets wrong: refused or warned of before the run."""

import pytest
from enginekit import TASKS

from swinlite.engine.preflight import check_decay_epochs, check_decay_schedule, check_run, warn_rising_lr


def test_unsorted_decay_epochs_are_refused_with_the_sorted_list():
    """schedule.decay_epochs=[2,1]: timm bisects the milestones as sorted, and both decays came after epoch 1."""
    cfg = TASKS["classification"].load_config(None, ["schedule.kind=step", "schedule.decay_epochs=[2,1.5,1]"])
    with pytest.raises(ValueError, match=r"^schedule.decay_epochs must be in increasing order: give "
                                         r"schedule.decay_epochs=\[1,1.5,2\]$"):  # fmt: skip
        check_run(TASKS["classification"], cfg)


def test_decay_epochs_a_cosine_schedule_ignores_are_warned_of_not_refused():
    """timm's cosine and poly schedulers ignore milestones: [2,1] was refused though unused; one warning now."""
    cfg = TASKS["classification"].load_config(None, ["schedule.decay_epochs=[2,1]"])
    with pytest.warns(UserWarning, match=r"^schedule.decay_epochs is unused: schedule.kind=cosine decays every step"):
        with pytest.raises(ValueError, match="--data-dir"):  # the data's refusal, after the schedule passed
            check_run(TASKS["classification"], cfg)


@pytest.mark.parametrize("task", ["classification", "detection"])  # detection's default: step at [8,11]
def test_default_decay_epochs_under_cosine_are_not_warned_of(task: str, recwarn):
    check_decay_schedule(TASKS[task].load_config(None, ["schedule.kind=cosine"]).schedule)
    assert not [w for w in recwarn if "decay_epochs" in str(w.message)]


def test_a_repeated_decay_epoch_is_accepted():
    """[2,2] decays twice after epoch 2 (torch's MultiStepLR does the same): not refused."""
    check_decay_epochs((1.0, 2.0, 2.0))


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (["schedule.min_lr=0.01"], r"schedule.min_lr 0.01 is above optim.lr 0.001: the cosine decay raises the lr"),
        (["schedule.kind=poly", "schedule.min_lr=0.01"], r"the poly decay raises the lr to schedule.min_lr"),
        (["schedule.warmup_epochs=1", "schedule.warmup_lr=0.01"],
         r"schedule.warmup_lr 0.01 is above optim.lr 0.001: the warm-up lowers the lr to optim.lr"),
    ],
)  # fmt: skip
def test_a_floor_or_warmup_start_above_the_peak_lr_is_warned_of(settings: list[str], said: str):
    """A min_lr above optim.lr made the cosine "decay" rise, silently (timm accepts it: warned of, not refused); the
    warning compares the settings as given, optim.lr_base_batch scaling the three alike."""
    cfg = TASKS["classification"].load_config(None, ["optim.lr=1e-3", "optim.lr_base_batch=512", *settings])
    with pytest.warns(UserWarning, match=said), pytest.raises(ValueError, match="--data-dir"):
        check_run(TASKS["classification"], cfg)  # warned of before the first refusal of the data


@pytest.mark.parametrize(
    "settings",
    [["schedule.min_lr=1e-3", "schedule.warmup_epochs=1", "schedule.warmup_lr=1e-3"],
     ["schedule.kind=step", "schedule.decay_epochs=[1]", "schedule.min_lr=0.01"],  # step: no floor
     ["schedule.warmup_epochs=0", "schedule.warmup_lr=0.01"]],  # no warm-up
)  # fmt: skip
def test_a_floor_and_warmup_start_at_or_below_the_peak_lr_are_not_warned_of(settings: list[str], recwarn):
    warn_rising_lr(1e-3, TASKS["classification"].load_config(None, ["optim.lr=1e-3", *settings]).schedule)
    assert not [w for w in recwarn if "optim.lr" in str(w.message)]
