"""Schedule settings a timm scheduler takes without a word but gets wrong: refused or warned of before the run."""

import pytest
from enginekit import TASKS

from swinlite.engine.preflight import (
    SCHEDULE_READS,
    check_decay_epochs,
    check_run,
    warn_rising_lr,
    warn_unused_schedule,
)


def test_unsorted_decay_epochs_are_refused_with_the_sorted_list():
    """schedule.decay_epochs=[2,1]: timm bisects the milestones as sorted, and both decays came after epoch 1."""
    cfg = TASKS["classification"].load_config(None, ["schedule.kind=step", "schedule.decay_epochs=[2,1.5,1]"])
    with pytest.raises(ValueError, match=r"^schedule.decay_epochs must be in increasing order: give "
                                         r"schedule.decay_epochs=\[1,1.5,2\]$"):  # fmt: skip
        check_run(TASKS["classification"], cfg)


def test_decay_epochs_a_cosine_schedule_ignores_are_warned_of_not_refused():
    """timm's cosine and poly schedulers ignore milestones: [2,1] was refused though unused; one warning now."""
    cfg = TASKS["classification"].load_config(None, ["schedule.decay_epochs=[2,1]"])
    with pytest.warns(UserWarning, match=r"^schedule.decay_epochs is unused: schedule.kind=cosine does not read it, "
                                         r"only schedule.kind=step$"):  # fmt: skip
        with pytest.raises(ValueError, match="--data-dir"):  # the data's refusal, after the schedule passed
            check_run(TASKS["classification"], cfg)


@pytest.mark.parametrize(
    ("settings", "unused", "readers"),
    [
        (["schedule.kind=step", "schedule.decay_epochs=[1]", "schedule.min_lr=0.5"], "min_lr", "cosine or poly"),
        (["schedule.kind=step", "schedule.decay_epochs=[1]", "schedule.power=3"], "power", "poly"),
        (["schedule.power=3"], "power", "poly"),
        (["schedule.decay_rate=0.5"], "decay_rate", "step"),
        (["schedule.kind=poly", "schedule.decay_rate=0.5"], "decay_rate", "step"),
        (["schedule.kind=poly", "schedule.decay_epochs=[1]"], "decay_epochs", "step"),
        (["schedule.warmup_epochs=0", "schedule.warmup_lr=0.01"], "warmup_lr", None),
        (["schedule.kind=step", "schedule.decay_epochs=[1]", "schedule.warmup_lr=0.01"], "warmup_lr", None),
    ],
)
def test_a_schedule_setting_the_kind_does_not_read_is_warned_of(settings: list[str], unused: str, readers: str | None):
    """Only decay_epochs was: a step schedule's min_lr 250 times optim.lr, a cosine's power, a warmup_lr without a
    warm-up (every kind reads it only during one), said nothing."""
    schedule = TASKS["classification"].load_config(None, settings).schedule
    with pytest.warns(UserWarning) as record:
        warn_unused_schedule(schedule)
    said = f"schedule.{unused} is unused: schedule.kind={schedule.kind} does not read it, only schedule.kind={readers}"
    if readers is None:
        said = "schedule.warmup_lr is unused: schedule.warmup_epochs=0 (no warm-up); give schedule.warmup_epochs to " \
            "warm up from it"  # fmt: skip
    assert [str(w.message) for w in record] == [said]


@pytest.mark.parametrize("kind", SCHEDULE_READS)
@pytest.mark.parametrize("task", list(TASKS))  # detection's default: step at [8,11]; segmentation's poly
def test_a_tasks_default_schedule_settings_are_not_warned_of_under_any_kind(task: str, kind: str, recwarn):
    warn_unused_schedule(TASKS[task].load_config(None, [f"schedule.kind={kind}"]).schedule)
    assert len(recwarn) == 0


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
