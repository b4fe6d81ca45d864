"""``run(task, cfg)``: check everything that can be checked, lock the output folder, train, report."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import torch

from ..device import resolve_device
from ..files import (
    DRAWINGS,
    RUN_FILES,
    TASK_RECORD,
    earlier_outputs,
    interrupted_writes,
    other_task_files,
    outputs_without_run,
    record_task_files,
    recorded_task_files,
    remove_outputs,
    script_outputs,
)
from ..io import atomic_write, check_output
from ..lock import OutputLock
from ..weights import pretrained_checked
from .checkpoint import OUTPUT_DIR, RESUME_FILE, load_resume, seed_rng, settle_pending, writing
from .config import check_values, config_diff, dump_yaml, flatten, to_dict
from .distributed import (
    DistInfo,
    PeerGoneError,
    SharedError,
    StalledRankError,
    broadcast_object,
    cleanup,
    is_timeout,
    launched,
    notes_elsewhere,
    peer_gone,
    run_started,
    stalled_ranks,
)
from .handshake import checked_alike, join
from .model import meta_model, shared_meta_models
from .preflight import check_run, check_task, check_weights_fit, resolve_normalisation, task_written
from .rank_warnings import SharedWarnings, rank_prefixed
from .task import Task
from .trainer import BEST_FILES, WEIGHTS_FILES, Trainer, as_compared, recorded_config, saved_config

# settings --resume does not warn about: train.output_dir names the folder being resumed, and the model's weights
# come from its resume file, whatever model.pretrained says (:func:`built_from_resume`)
NOT_COMPARED_ON_RESUME = ("train.output_dir", "model.pretrained")


def log(dist: DistInfo, message: str) -> None:
    if dist.is_main:
        print(message, flush=True)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed every RNG; ``deterministic``: torch's deterministic algorithms on, cuDNN's benchmark off and cuBLAS's
    workspace (``CUBLAS_WORKSPACE_CONFIG``, unless set) fixed, for this run (:func:`run` restores the settings it found
    at its end: a sweep's next run in the same process, or the caller's code, does not inherit them)."""
    seed_rng(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def run(
    task: type[Task], cfg: Any, resume: bool = False, overwrite: bool = False, config: str | Path | None = None
) -> Path:
    """Run (or continue) a training run of ``task`` as ``cfg`` describes; returns the output folder.

    ``config`` is the ``--config`` file ``cfg`` was read from, if any: a fresh run refuses one that is a file it
    writes or removes in the output folder (:func:`check_config_file`).

    Raises:
        ValueError: a setting, the data or the output folder cannot work (before training starts); the run
            diverged (``TrainingDiverged``) or its evaluation failed (``EvaluationFailed``), each after keeping
            what was trained; a file could not be written.
        StalledRankError: multi-process: a collective waited ``train.dist_timeout`` s for a process that stalled.
        PeerGoneError: multi-process: a collective failed because another process ended.
    """
    run_started()  # a sweep's next run in these processes meets the others' under keys of its own
    import matplotlib  # noqa: F401  (curves.png's, loaded by metrics.plot_curves: a missing [train] extra named now)

    # every process checks the same settings, reads the same files, builds the same model: their warnings are shown
    # once (a process's own ones by it), and so are the refusals of the checks here (once per machine)
    shared = SharedWarnings(launched())
    # (the checks build the model once, on meta; they warn of model.pretrained's unkept settings, the builds not again)
    with shared, checked_alike(launched()), shared_meta_models(), pretrained_checked():
        check_task(task)
        check_values(cfg)
        device = resolve_device(cfg.train.device, int(os.environ.get("LOCAL_RANK", "0")), option="train.device")
        check_run(task, built_from_resume(cfg) if resume else cfg)
        cfg = resolve_normalisation(task, cfg, resume)
        check_weights_fit(task, built_from_resume(cfg) if resume else cfg)  # the data's mean and std resolved
        inputs = [*task.inputs(cfg), *([cfg.model.pretrained] if isinstance(cfg.model.pretrained, str) else [])]
        # what a run writes: none may replace an input nor lie in a data dir
        names = [*RUN_FILES, TASK_RECORD, *task.output_files]
        check_output(cfg.train.output_dir, inputs, option=OUTPUT_DIR, folder=True, names=names)
        # what --overwrite removes beside the run's files (a drawings folder holding the user's files: refused now)
        out = Path(cfg.train.output_dir)
        replaced = replaced_outputs(out, overwrite)
        removed = (*(p.name for p in replaced), *replaced_task_files(out, task)) if overwrite else ()
        check_config_file(config, out, (*names, *removed), resume)
        check_resume_or_overwrite(resume, overwrite)
    dist = join(device, cfg.train.dist_timeout, startup_settings(cfg, resume, overwrite))
    lock, trainer, preparing = None, None, False
    # (deterministic algorithms, their warn_only, cuDNN's benchmark, cuBLAS's workspace): what seed_everything changes
    found = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    try:
        out, lock, recorded = prepare_output(cfg, task, resume, overwrite, dist)
        seed_everything(cfg.train.seed + dist.rank, cfg.train.deterministic)
        with shared, pretrained_checked():
            preparing = True  # the data (rank 0 alone builds a demo's and scans it; the others wait) and the model
            trainer = Trainer(task, built_from_resume(cfg) if resume else cfg, dist, device, out)
            preparing = False
            if resume:
                trainer.load_resume(out / RESUME_FILE)
        shared.settle()
        if overwrite:  # only now: a problem of the new run's data or model keeps the old run whole
            remove_replaced_run(out, dist, task)
        if resume:
            log(dist, f"resumed from {out / RESUME_FILE} {trainer.position_note()}")
        try:
            if dist.is_main:  # only now: a resume that fails keeps the settings the run trained with
                write_config(out / "config.yaml", as_recorded(cfg, recorded))
            with rank_prefixed(dist):  # from here on a process's warnings are its own (an image of its shard)
                trainer.fit()
        except (Exception, KeyboardInterrupt):  # an error, Ctrl-C or SIGTERM (not a kill: nothing runs then)
            if dist.is_main:
                remove_unsaved(out)
            raise
        trainer.report()
    except RuntimeError as e:
        reason = peer_gone(e) if dist.enabled else None
        elsewhere = notes_elsewhere(dist) if reason is not None or is_timeout(e) else []
        if elsewhere:  # another process's evaluation failed (or its loss diverged) alone, while this one waited for it
            raise PeerGoneError(f"rank {dist.rank}: another process failed: {'; '.join(elsewhere)}") from e
        if reason is not None:  # a ~50-line traceback of gloo's before
            if preparing and dist.is_main:  # the others wait for its data at most train.dist_timeout
                reason += "; did it time out waiting while this one prepared the data? then raise train.dist_timeout"
            raise PeerGoneError(f"rank {dist.rank}: another process of the run ended ({reason})") from e
        if dist.enabled and is_timeout(e):
            raise _stall_error(dist, cfg.train.dist_timeout, preparing) from e
        raise
    finally:
        ending, unclosed = sys.exc_info()[1], None  # the error that ends the run, if one does
        if trainer is not None and trainer.tensorboard is not None:
            try:
                trainer.tensorboard.close()
            except ValueError as e:  # its last events not written (a full disk): raised once the rest is undone
                unclosed = e
        if lock is not None:
            lock.release()
        cleanup(dist)
        torch.use_deterministic_algorithms(found[0], warn_only=found[1])  # train.deterministic was this run's
        torch.backends.cudnn.benchmark = found[2]
        if found[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = found[3]
        if unclosed is not None and ending is None:  # else the error that ends the run is said: TensorBoard raises a
            raise unclosed  # full disk's again as it closes, and that error says what to run once there is room
    return out


def startup_settings(cfg: Any, resume: bool, overwrite: bool) -> dict[str, Any]:
    """What every process of a run must be started with alike: the resolved settings and the flags."""
    return {**flatten(to_dict(cfg)), "--resume": resume, "--overwrite": overwrite}


def check_resume_or_overwrite(resume: bool, overwrite: bool) -> None:
    """ValueError for ``--resume`` with ``--overwrite``: the one continues the run in the output folder, the other
    replaces it."""
    if resume and overwrite:
        raise ValueError("--resume continues the run in the output folder and --overwrite replaces it; pass one")


def built_from_resume(cfg: Any) -> Any:
    """``cfg`` as a resumed run builds its model: ``model.pretrained=false``, as ``resume.pt`` holds every weight. The
    pretrained weights were fetched (offline: an error, weights not cached) and loaded (a "classifier starts fresh"
    warning of weights then replaced) for nothing; ``config.yaml`` keeps the setting the run started from."""
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pretrained=False))


def as_recorded(cfg: Any, recorded: Any | None) -> Any:
    """``cfg`` as a resumed run's ``config.yaml`` records it: ``model.pretrained``, which a resume ignores
    (:func:`built_from_resume`), as the run recorded it (``recorded``, its ``config.yaml`` as :func:`_check_resumable`
    read it, a relative path joined to the folder it was given in), so the record of the weights the run started from
    stays; every other setting as resumed (``train.epochs`` extended, ``train.output_dir`` as this resume names the
    folder). ``recorded`` None (a fresh run, or a ``config.yaml`` that could not be read): ``cfg`` as it is."""
    if recorded is None:
        return cfg
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, pretrained=recorded.model.pretrained))


def check_config_file(config: str | Path | None, out: Path, names: tuple[str, ...], resume: bool) -> None:
    """ValueError for a fresh run whose ``--config`` file is one of ``names``, the files it writes or removes in
    ``out``: ``OUT/config.yaml`` was removed as a killed run's leftover (or by ``--overwrite``), then replaced by the
    resolved settings, its comments lost. ``--resume`` reads that file as the run's own settings: it stays accepted.
    """
    if config is None or resume:
        return
    for name in names:
        if (out / name).is_file() and os.path.samefile(config, out / name):
            what = "the file the run writes its settings to" if name == "config.yaml" else "a file the run replaces"
            raise ValueError(f"--config {config} is {what}: keep your config elsewhere or choose another {OUTPUT_DIR}")


def write_config(path: Path, cfg: Any) -> None:
    """The resolved config as YAML, atomically (itself a valid ``--config`` file)."""
    with writing(path):
        text = dump_yaml(to_dict(cfg)).encode()  # quoted where the config loader would read a number
        atomic_write(path, lambda f: f.write(text))


def prepare_output(
    cfg: Any, task: type[Task], resume: bool, overwrite: bool, dist: DistInfo
) -> tuple[Path, OutputLock | None, Any | None]:
    """Lock the output folder (rank 0) and check it against ``--resume`` / ``--overwrite``: resuming warns about
    changed settings; overwriting leaves the old run's files to :func:`remove_replaced_run`, once the new run's data
    is scanned and its model built.

    Returns:
        The folder, rank 0's lock on it (None on other ranks), to release when the run ends, and with ``resume`` the
        settings the run's ``config.yaml`` records (rank 0; None on other ranks, or where it could not be read).
    """
    out = Path(cfg.train.output_dir)
    lock, problem, recorded = None, None, None
    if dist.is_main:
        lock = OutputLock(out, "training run", OUTPUT_DIR)
        try:
            lock.acquire()
            if lock.taken_over:
                log(dist, f"note: {lock.taken_over}")
            recorded = _check_existing_run(out, task, cfg, resume, overwrite, dist)
            earlier = recorded_task_files(out)  # a record not as the engine writes it: refused before any removal
            if not resume and not overwrite:
                _clear_leftovers(out, dist)
            # before the task writes any file: a run killed while it builds its data has recorded them (a run that
            # ended before its first save left its record: a fresh run keeps its names, for --overwrite to remove)
            record_task_files(out, [*earlier, *task_written(task)])
            for stale in interrupted_writes(out):  # temp files of saves a kill interrupted; the real files are whole
                stale.unlink()
        except (ValueError, OSError) as e:
            lock.release()
            problem = str(e) if isinstance(e, ValueError) else f"output folder {out} cannot be used: {e}"
    problem = broadcast_object(problem, dist)
    if problem is not None:
        raise SharedError(problem)
    return out, lock, recorded


def _check_existing_run(
    out: Path, task: type[Task], cfg: Any, resume: bool, overwrite: bool, dist: DistInfo
) -> Any | None:
    """With ``resume``, the settings the run's ``config.yaml`` records (:func:`_check_resumable`); else None. A fresh
    run (without ``overwrite``) is refused a folder that holds a run's resume file or weights, or no run but what a
    script wrote of other weights (:func:`~swinlite.files.outputs_without_run`)."""
    if resume:
        return _check_resumable(out, task, cfg, dist)
    if overwrite:
        return None
    elif (out / RESUME_FILE).is_file():
        raise ValueError(
            f"{out} already holds a run; pass --resume to continue it, --overwrite to replace it, "
            f"or {OUTPUT_DIR} for a new one"
        )
    elif weights := [name for name in WEIGHTS_FILES if (out / name).is_file()]:  # a fresh run would replace them
        raise ValueError(
            f"{out} already holds a run's weights ({', '.join(weights)}) but no {RESUME_FILE}, so nothing to resume; "
            f"pass --overwrite to replace them, or {OUTPUT_DIR} for a new run"
        )
    elif results := outputs_without_run(out):  # evaluate.py --checkpoint A/best.safetensors --output-dir F
        raise ValueError(
            f"{out} holds what a script wrote of other weights ({', '.join(results)}) and no run: the new run's "
            f"weights would lie beside them; pass --overwrite to remove them, or {OUTPUT_DIR} for a new run"
        )


def _check_resumable(out: Path, task: type[Task], cfg: Any, dist: DistInfo) -> Any | None:
    """--resume, before the data is scanned: ValueError for a resume file of another task, another dataset
    (:func:`_check_same_dataset`, before any file of the run is written), or one whose position this run's
    ``train.epochs`` ends before; warnings naming the settings changed since those the resume file's state was
    trained with (:func:`~swinlite.engine.trainer.saved_config`); ValueError for those the saved optimizer cannot load
    into. The best weights a kill left pending are completed or removed first
    (:func:`~swinlite.engine.checkpoint.settle_pending`). Returns the settings ``config.yaml`` records (relative paths
    joined to the folder the run was given them in), None where they cannot be read (a warning says so where the
    resume file records no settings of its own to compare with)."""
    path = out / RESUME_FILE
    if not path.is_file():
        raise ValueError(f"--resume: {path} does not exist; nothing to resume")
    saved = load_resume(path, task.name, mmap=True)  # the task first: another task's settings do not compare
    try:
        old, unreadable = saved_config(saved, out, type(cfg)()), None
    except ValueError as e:
        old, unreadable = None, e
    if old is not None:  # before settle_pending writes any file of the run
        _check_same_dataset(old, cfg, out)
    settle_pending([out / name for name in BEST_FILES], saved["epoch"], task.evaluation_files)
    _check_epochs(saved["epoch"], saved["batch"], cfg.train.epochs, path)
    if old is None:
        source = path if "config" in saved else out / "config.yaml"
        log(dist, f"warning: the settings of the run cannot be compared with {source}: {unreadable}")
        return None
    for change in config_diff(old, cfg, as_compared):  # a path as it resolves: data/ and ./data are one folder
        if change.split(":", 1)[0] not in NOT_COMPARED_ON_RESUME:
            log(dist, f"warning: resuming with a changed setting {change}")
    if "param_names" not in saved:  # a file from before they were saved: its state cannot be regrouped by name
        _check_layer_decay(old, cfg, path)
    _check_trained_parameters(task, old, cfg)
    try:  # for the model.pretrained the run started from (:func:`as_recorded`): a resume's state records false
        return recorded_config(out, saved.get("cwd"), type(cfg)())
    except ValueError:
        return None


def _check_same_dataset(old: Any, cfg: Any, out: Path) -> None:
    """ValueError for a ``--resume`` whose ``data.dataset`` and ``data.data_dir`` both differ from those the run in
    ``out`` trained with (``old``): another dataset altogether, most often the demo a training script falls back to
    when ``--resume`` is given without the options the run was started with. That built the demo's data in the
    working directory, scanned it over the run's scan, warned of some 25 changed settings and only then refused its
    classes. Either changed alone is taken (another validation set, the data moved)."""
    before, now = old.data, cfg.data
    moved = as_compared("data.data_dir", before.data_dir) != as_compared("data.data_dir", now.data_dir)  # resolved
    if before.dataset == now.dataset or not moved:
        return
    raise ValueError(
        f"--resume: the run in {out} trained on {before.data_dir} (data.dataset={before.dataset}), this command on "
        f"{now.data_dir} (data.dataset={now.dataset}); --resume does not remember the options a run was started with: "
        f"repeat them ({out / 'config.yaml'} records them: data.dataset={before.dataset} "
        f"data.data_dir={before.data_dir}, ...), or choose another {OUTPUT_DIR} for a new run"
    )


def _check_epochs(done: int, batch: int, epochs: int, path: Path) -> None:
    """ValueError for ``train.epochs`` lowered at ``--resume`` below the point the run reached (``done`` epochs, and
    ``batch`` micro-batches of the next): the run would note one it is not and rewrite config.yaml with epochs its
    history exceeds. As many as it has done is taken: nothing to train."""
    if done > epochs or (done == epochs and batch):
        reached = f"{done} epochs done" + (f" and epoch {done + 1} begun" if batch else "")
        raise ValueError(
            f"--resume: train.epochs={epochs} ends before the point {path} was saved at ({reached}); resume with "
            f"train.epochs={done + bool(batch)} or more, or start over with --overwrite"
        )


def _check_trained_parameters(task: type[Task], old: Any, cfg: Any) -> None:
    """ValueError for ``model.name`` / ``model.kwargs`` changed at ``--resume`` so that the model trains another set
    of its parameters (``frozen_stages``; frozen ones are left out of the optimizer): the saved optimizer's parameter
    groups do not fit this run's. Said here, before the data is scanned, from the model (``Task.model_name``) built on
    the meta device with each config; a change of the weights' keys is left to the model's load, after the scan."""

    def parameters(c: Any) -> tuple[set[str], set[str]]:  # (every parameter, the frozen ones) of the model it builds
        named = list(meta_model(task.model_name(c), c.model.kwargs).named_parameters())
        return {n for n, _ in named}, {n for n, p in named if not p.requires_grad}

    try:
        (names_before, before), (names, now) = parameters(old), parameters(cfg)
    except (TypeError, ValueError, RuntimeError, AssertionError):  # the run's settings no longer build a model (this
        return  # run's were checked by check_run): the model's load after the scan names what differs
    if names_before == names and before != now:
        a, b = old.model.kwargs, cfg.model.kwargs
        changed = ["model.name"] if task.model_name(old) != task.model_name(cfg) else []
        changed += [f"model.kwargs.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
        raise ValueError(
            f"--resume: the set of trained parameters changed with {', '.join(changed)} (frozen parameters are left "
            "out of the optimizer), so the saved optimizer's state does not fit this run's; resume with the run's own "
            "model settings, or start over with --overwrite"
        )


def _check_layer_decay(old: Any, cfg: Any, path: Path) -> None:
    """ValueError for ``optim.layer_decay`` turned on or off at ``--resume`` of a resume file (``path``) that records
    no parameter names (saved by a swinlite from before them): its optimizer's parameter groups (one per layer and
    decay, or two) cannot be laid out in this run's, its state being numbered by position; said here, before the data
    is scanned, rather than by the optimizer's load after it. A file with names is regrouped by them."""
    before, now = old.optim.layer_decay, cfg.optim.layer_decay
    if (before is None) != (now is None):
        name = lambda value: "none" if value is None else f"{value:g}"  # noqa: E731 (as the command line takes it)
        raise ValueError(
            f"--resume: optim.layer_decay was {name(before)}, now {name(now)}: the saved optimizer's parameter groups "
            f"(those {'without' if before is None else 'of'} layer decay) do not fit this run's, and {path} records "
            "no parameter names to regroup its state by (saved by an older swinlite); resume with "
            f"optim.layer_decay={name(before)}, start a new run from its weights (model.pretrained={path}: a fresh "
            "optimizer and lr schedule), or start over with --overwrite"
        )


def remove_replaced_run(out: Path, dist: DistInfo, task: type[Task]) -> None:
    """--overwrite, once the new run's data is scanned and its model built (a problem with either, e.g. a val class
    folder that train lacks, left the old run whole): rank 0 removes the old run's files, and what the scripts wrote
    there of the old weights (:func:`replaced_outputs`), before the new run writes any. The task's own files (its
    data scan's cache) are the new run's by then: its scan read the old one only where it still describes the data,
    else replaced it; another task's (:func:`replaced_task_files`: a classification run's scan under a segmentation
    run, a task swinlite does not ship's files as its run recorded them) are removed, as no run of this task reads
    them. The folder's :data:`~swinlite.files.TASK_RECORD` then names this run's files alone."""
    problem = None
    if dist.is_main:
        try:
            _remove(out, (*RUN_FILES, *replaced_task_files(out, task)))
            outputs = replaced_outputs(out, overwrite=True)
            shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in outputs)
            remove_outputs(outputs)
            record_task_files(out, task_written(task))
            if outputs:  # files the user may have looked at, unlike the run's own
                log(
                    dist,
                    f"note: removed what scripts wrote in {out}, which --overwrite clears with any old run: {shown}",
                )
        except (OSError, ValueError) as e:
            problem = f"output folder {out} cannot be used: {e}"
    problem = broadcast_object(problem, dist)
    if problem is not None:
        raise SharedError(problem)


def replaced_task_files(out: Path, task: type[Task]) -> tuple[str, ...]:
    """What ``--overwrite`` by a run of ``task`` removes of the task files in ``out`` beside the run's own files and
    the scripts' outputs: the shipped tasks' but ``task``'s (:func:`~swinlite.files.other_task_files`), and those the
    earlier runs there recorded (:func:`~swinlite.files.recorded_task_files`: a task swinlite does not ship), but
    ``task``'s own ``output_files``, which are the new run's by then; ``task``'s ``evaluation_files`` describe the
    replaced weights, and go."""
    recorded = [*recorded_task_files(out), *task_written(task)]
    return (*other_task_files(task.name), *(name for name in recorded if name not in task.output_files))


def _clear_leftovers(out: Path, dist: DistInfo) -> None:
    """A fresh run into a folder left by a run that ended before its first save (no resume file, no weights: those
    are refused before): that run's own files (``config.yaml``, ``metrics.csv``, ``curves.png``, TensorBoard events)
    are removed, with a note; they were kept, and mixed with the new run's (two runs' events in one TensorBoard). Its
    data scan is kept for the new run to read (it is checked against the data), as are an evaluate script's results,
    which no run writes."""
    removed = _remove(out, RUN_FILES)
    if removed:
        log(dist, f"note: {out} held the files of a run that ended before its first save; removed "
                  f"{', '.join(removed)}")  # fmt: skip


def remove_unsaved(out: Path) -> None:
    """Remove what a run that ends before its first save (no resume file) wrote: its settings, TensorBoard events,
    and the weights, metrics and curves of a save it broke off (Ctrl-C before the resume file): they were said to be
    nothing to resume, yet the next run refused the folder as holding a run's weights. The folder holds no other
    run's files by then: a fresh run cleared a killed run's leftovers (or was refused), --overwrite the old run's."""
    if not (out / RESUME_FILE).is_file():
        _remove(out, RUN_FILES)


def replaced_outputs(out: Path, overwrite: bool) -> list[Path]:
    """With ``overwrite``, what the scripts of any task wrote into the run folder ``out`` of the old weights
    (:func:`~swinlite.files.script_outputs`: an evaluate script's results, ``detect.py``'s or ``segment.py``'s
    drawings and lists, whole; any task's, as the old run may have been another task's: its confusion matrix stayed
    beside a detector's weights), for :func:`remove_replaced_run`; else none.

    Raises:
        ValueError: a drawings folder there holds files no script wrote (the user's images), even with ``overwrite``.
    """
    if not overwrite:
        return []
    return earlier_outputs(out, script_outputs(out), overwrite=True, numbered=DRAWINGS)


def _remove(out: Path, names: tuple[str, ...]) -> list[str]:
    """Remove ``names`` and TensorBoard's event files from ``out``, each where it is a regular file (a folder or a
    symlink of that name is the user's: kept, and so is the symlink's target); the names of those that were there."""
    found = [out / name for name in names] + sorted(out.glob("events.out.tfevents.*"))
    found = [path for path in found if path.is_file() and not path.is_symlink()]
    for path in found:
        path.unlink(missing_ok=True)
    return [path.name for path in found]


def _stall_error(dist: DistInfo, timeout: float, preparing: bool) -> StalledRankError:
    """Name the stalled process(es) after a collective timed out on this one. While the run is ``preparing`` its data,
    rank 0 that does not answer is more likely busy than stalled: it alone builds a demo's data and scans the dataset,
    as long as that takes, while the others wait in a collective."""
    wait = min(30.0, timeout)
    stalled = stalled_ranks(dist, wait=wait)
    waited = f"a collective waited train.dist_timeout={timeout:g} s"
    if stalled is None and preparing:
        return StalledRankError(
            f"rank {dist.rank}: {waited} while the run prepared its data; rank 0 may still be at it (building the demo "
            "data, scanning the dataset): if so, raise train.dist_timeout; else rank 0 names the stalled process, or "
            "is it"
        )
    if stalled is None:
        return StalledRankError(
            f"rank {dist.rank}: {waited}; rank 0 (or the store it hosts) did not answer within {wait:g} s more: it is "
            "the stalled process (stopped?), or it names it"
        )
    if not stalled:
        return StalledRankError(f"rank {dist.rank}: {waited}, yet every process answers now; see the other ranks")
    names = ", ".join(str(r) for r in stalled)
    return StalledRankError(f"rank {names} stopped progressing ({waited} for it on rank {dist.rank}); stopping")
