"""TensorBoard across kills and resumes: every tag on the axis of optimizer steps done, each epoch's row at the step
that ends it, written before the resume file; a resumed run's purge drops exactly what the killed run wrote after
the resume point, so that the events read as those of the run that was never interrupted."""

import time
from pathlib import Path

import pytest
from enginekit import TASKS, tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from swinlite.engine import run, trainer
from swinlite.engine.metrics import TensorBoardLog

TASK = TASKS["classification"]
# 24 images in batches of 8, 2 steps an epoch: step s of the run is step (s - 1) % 2 + 1 of epoch (s - 1) // 2 + 1
SETTINGS = {"train.epochs": 3, "train.max_iters": 2, "train.log_interval": 1, "train.tensorboard": True}
TIMES = ("epoch/epoch_time", "epoch/train_img_s")  # measured: they differ from run to run


class Killed(BaseException):
    """A kill at a chosen point (a BaseException, as KeyboardInterrupt: no ``except Exception`` handles it)."""


def scalars(out: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar as TensorBoard shows it: all event files of the folder, purges applied, per tag (step, value)."""
    events = EventAccumulator(str(out), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def kill(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next run end at ``point``: ``step 2`` (inside the second step this run trains, the first one's events
    written), ``before resume.pt 2`` / ``after resume.pt 2`` (epoch 2's save at the epoch's end), ``evaluation 2``
    (epoch 2's evaluation fails: the trained epoch is saved, to be evaluated on resume)."""
    what, _, at = point.rpartition(" ")
    if what == "step":
        steps, train_step = [], TASK.train_step

        def step(self, model, batch):
            steps.append(1)
            if len(steps) == int(at):
                raise Killed
            return train_step(self, model, batch)

        monkeypatch.setattr(TASK, "train_step", step)
    elif what == "evaluation":
        calls, evaluate = [], TASK.evaluate

        def evaluation(self, model, loader):
            calls.append(1)
            if len(calls) == int(at):
                raise ValueError("no val image")
            return evaluate(self, model, loader)

        monkeypatch.setattr(TASK, "evaluate", evaluation)
    else:
        save_resume = trainer.save_resume

        def save(path, state):
            at_the_point = state["epoch"] == int(at) and state["batch"] == 0
            if at_the_point and what == "before resume.pt":
                raise Killed
            save_resume(path, state)
            if at_the_point:
                raise Killed

        monkeypatch.setattr(trainer, "save_resume", save)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The image folder every run of the module reads (none changes it)."""
    from trainkit import make_folder

    return make_folder(tmp_path_factory.mktemp("tensorboard") / "data")


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> dict[str, list[tuple[int, float]]]:
    """The TensorBoard scalars of the run never interrupted."""
    out = tmp_path_factory.mktemp("reference") / "run"
    return scalars(run(TASK, tiny_config("classification", data, out, **SETTINGS)))


@pytest.mark.parametrize(
    "kills",
    [
        # one run killed at each point in turn: the leftovers of each kill are for the next resume's purge to drop or
        # keep, and the later purges (from later steps) do not reach them
        [
            "before resume.pt 2",  # epoch 2's row written, its resume.pt not: dropped, the epoch trained again
            "after resume.pt 2",  # epoch 2's resume.pt written: its row must have been, the run goes on at epoch 3
            "step 2",  # the run's step 6: step 5's events written after resume.pt (step 4): dropped, not step 4's
        ],
        ["evaluation 2", "before resume.pt 2"],  # epoch 2 saved trained, then evaluated, row written, killed
    ],
)
def test_events_of_a_killed_and_resumed_run_are_those_of_one_never_killed(
    kills, reference, data, tmp_path, monkeypatch
):
    """The purge from the step resumed at dropped that step's own events (logged under the count of steps done);
    epoch rows, logged with the epoch number as their step, shared the axis with the steps (a resume from step 2
    dropped epoch 2's row); a kill between epoch 2's resume.pt and its row lost the row for good; each resume
    wrote an empty event file besides its own."""
    out = tmp_path / "run"
    for resume, point in enumerate(kills):
        with monkeypatch.context() as patch:
            kill(point, patch)
            with pytest.raises((Killed, ValueError)):
                run(TASK, tiny_config("classification", data, out, **SETTINGS), resume=bool(resume))
    run(TASK, tiny_config("classification", data, out, **SETTINGS), resume=True)
    got = scalars(out)
    assert sorted(got) == sorted(reference)
    for tag, events in reference.items():
        if tag == "epoch/train_img_s":  # not measured (not logged) of an epoch trained before a resume evaluated it
            assert {step for step, _ in got[tag]} <= {step for step, _ in events}, tag
            continue
        assert [step for step, _ in got[tag]] == [step for step, _ in events], tag
        if tag not in TIMES:
            assert [value for _, value in got[tag]] == pytest.approx([value for _, value in events], rel=1e-5), tag
    assert reference["epoch/epoch"] == [(2, 1.0), (4, 2.0), (6, 3.0)]  # each row at the steps done when it ended
    assert len(list(out.glob("events.out.tfevents.*"))) == len(kills) + 1  # one per run


def test_a_resumed_runs_event_file_sorts_after_the_earlier_ones(tmp_path):
    """A run resumed within the second of the last one's file (as this module's runs are, in one process): its file
    sorted before (a process counter of 10 before 9), and TensorBoard purged its later steps as out of order (seen
    once in a full run of the suite: running_loss of steps 1..4, not 1..6)."""
    earlier = tmp_path / f"events.out.tfevents.{int(time.time()):010d}.host.1.9"
    earlier.write_bytes(b"")
    log = TensorBoardLog(tmp_path)
    log.open(purge_step=3)
    log.close()
    seconds = sorted(int(p.name.split(".")[3]) for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(seconds) == 2 and seconds[1] > seconds[0]  # its own second: it sorts after, whatever the counters
