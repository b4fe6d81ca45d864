"""What --resume refuses, each with one error line and before anything is written: a folder of another task (before
its settings are compared and before the data scan), train.epochs or train.max_iters lowered below the point the run
reached, model.kwargs that change which parameters are trained (frozen_stages), and a resume file whose optimizer
groups them otherwise without their names (one with names is regrouped by them, optim.layer_decay turned on or off
included)."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from enginekit import TASKS, copied_run, finished_run, overrides, script_main, tiny_config

from swinlite.engine import optim, run, trainer
from swinlite.engine.checkpoint import RESUME_KEYS, load_resume, save_resume
from swinlite.engine.config import dump_yaml, to_dict
from swinlite.engine.optim import build_optimizer, group_names, weight_decay_groups
from swinlite.models.swin import SwinTransformer

TASK = TASKS["classification"]
FAST = {"train.max_iters": 1, "schedule.warmup_epochs": 0}


class Killed(BaseException):
    """A kill at a chosen point (a BaseException, as KeyboardInterrupt: no ``except Exception`` handles it)."""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data folder, run): a finished 2-epoch run of ``FAST``, copied by each test that resumes it."""
    return finished_run(tmp_path_factory.mktemp("finished"), **FAST)


@pytest.fixture
def scans(monkeypatch) -> list[int]:
    """One entry per data scan (the task's ``build_datasets``) from now on."""
    calls, build_datasets = [], TASK.build_datasets

    def scanned(self):
        calls.append(1)
        return build_datasets(self)

    monkeypatch.setattr(TASK, "build_datasets", scanned)
    return calls


def refused(folder: Path, out: Path, capsys, **settings: object) -> str:
    """The one error line of a --resume into ``out`` with ``settings``; every file of the folder left as it was."""
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert script_main("classification", ["--resume", *overrides("classification", folder, out, **settings)]) == 2
    printed = capsys.readouterr()
    lines = printed.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), printed.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    return lines[0] + printed.out


def test_a_folder_of_another_task_is_named_before_its_settings_and_the_data_scan(folder, tmp_path, capsys, scans):
    """A detection run resumed by scripts/train.py warned that its config.yaml could not be compared ("unknown config
    key 'model.detector'"), scanned the data, and only then said whose run it was."""
    out = tmp_path / "detection_run"
    out.mkdir()
    save_resume(out / "resume.pt", dict.fromkeys(RESUME_KEYS, 0) | {"task": "detection"})
    (out / "config.yaml").write_text(dump_yaml(to_dict(TASKS["detection"].config())))
    said = refused(folder, out, capsys)
    assert said.startswith(f"error: {out / 'resume.pt'} holds a detection run, not a classification run; choose its")
    assert "warning" not in said and scans == []


def test_a_resume_without_the_runs_options_is_refused_before_the_demo_is_built(finished, tmp_path, monkeypatch, capsys,
                                                                               scans):  # fmt: skip
    """--resume --output-dir alone (no --data-dir: the script's demo config) built the digits demo in the working
    directory, scanned it over the run's scan.json.gz, warned of ~25 changed settings and only then refused the
    classes (data.data_dir changed alone is taken: test_resume_metrics)."""
    folder, out = copied_run(finished, tmp_path / "run")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # where data/digits would be built
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert script_main("classification", ["--resume", "--output-dir", out]) == 2
    printed = capsys.readouterr()
    assert printed.err.strip() == (
        f"error: --resume: the run in {out} trained on {folder} (data.dataset=folder), this command on data/digits "
        "(data.dataset=digits); --resume does not remember the options a run was started with: repeat them "
        f"({out / 'config.yaml'} records them: data.dataset=folder data.data_dir={folder}, ...), or choose another "
        "--output-dir (train.output_dir) for a new run"
    )
    assert "warning" not in printed.out and scans == [] and not Path("data").exists()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_train_epochs_below_the_epochs_done_is_refused(finished, tmp_path, capsys, scans):
    """--resume train.epochs=1 on a finished 2-epoch run said 'resumed ... after its last epoch (1)' and rewrote
    config.yaml with epochs: 1 beside a metrics.csv of 2 epochs."""
    folder, out = copied_run(finished, tmp_path / "run")
    said = refused(folder, out, capsys, **FAST, **{"train.epochs": 1})
    assert said.startswith(f"error: --resume: train.epochs=1 ends before the point {out / 'resume.pt'} was saved at "
                           "(2 epochs done); resume with train.epochs=2 or more")  # fmt: skip
    assert scans == []
    capsys.readouterr()
    run(TASK, tiny_config("classification", folder, out, **FAST), resume=True)  # as many as done: nothing to train
    assert "after its last epoch (2); nothing to train" in capsys.readouterr().out


def test_train_max_iters_below_the_step_reached_is_refused(folder, tmp_path, capsys, monkeypatch):
    """--resume train.max_iters=1 from a step checkpoint after step 2 of 3 said 'in epoch 1/2, after step 2/1' and
    trained on with the lr of the saved step, off the new schedule."""
    out, save_resume = tmp_path / "run", trainer.save_resume
    one_epoch = {"train.epochs": 1, "train.save_every_steps": 1}  # the refusal is of the step, not of the epochs

    def killed(path, state):
        save_resume(path, state)
        if state["batch"] == 2:
            raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(trainer, "save_resume", killed)
        with pytest.raises(Killed):
            run(TASK, tiny_config("classification", folder, out, **one_epoch))
    said = refused(folder, out, capsys, **one_epoch, **FAST)
    assert said.startswith(f"error: --resume: {out / 'resume.pt'} was saved after step 2 of epoch 1, but this run's "
                           "epochs end after step 1 (train.max_iters=1)")  # fmt: skip
    run(TASK, tiny_config("classification", folder, out, **one_epoch, **{"train.max_iters": 2}), resume=True)
    assert load_resume(out / "resume.pt")["epoch"] == 1  # reaching the step: its evaluation only


def test_frozen_stages_changed_is_refused_before_the_data_scan(finished, tmp_path, capsys, scans):
    """model.kwargs.frozen_stages changed at --resume (frozen parameters are left out of the optimizer) failed after
    the data scan with 'resume.pt does not fit this run's model or optimizer (loaded state dict contains a parameter
    group that doesn't match the size of optimizer's group)', which named no cause."""
    folder, out = copied_run(finished, tmp_path / "run")  # 2 epochs done
    frozen = {**FAST, "train.epochs": 3, "model.kwargs.frozen_stages": 1}
    said = refused(folder, out, capsys, **frozen)
    assert said.startswith("error: --resume: the set of trained parameters changed with model.kwargs.frozen_stages "
                           "(frozen parameters are left out of the optimizer)")  # fmt: skip
    assert scans == []
    # the same change where config.yaml does not show it, of a resume file too old to record its settings (compared
    # with config.yaml's then): the optimizer's load, after the scan, names the cause
    settings = yaml.safe_load((out / "config.yaml").read_text())
    settings["model"]["kwargs"] = {"frozen_stages": 1}
    (out / "config.yaml").write_text(yaml.safe_dump(settings))
    save_resume(out / "resume.pt", {k: v for k, v in load_resume(out / "resume.pt").items() if k != "config"})
    said = refused(folder, out, capsys, **frozen)
    assert said.startswith(f"error: {out / 'resume.pt'} does not fit this run's optimizer (it trains ")
    assert "the set of trained parameters changed, e.g. by model.kwargs.frozen_stages" in said
    assert "; trained by it alone: patch_embed.proj.weight, patch_embed.proj.bias, " in said  # its parameter names


def old_group_matcher(self, coarse=False):  # out_norms.i after stage i, in a layer of its own
    blocks = [(r"^layers\.(\d+)\.downsample", (0,)), (r"^layers\.(\d+)\.blocks\.(\d+)", None)]
    return dict(stem=r"^patch_embed", blocks=[*blocks, (r"^out_norms\.(\d+)", (99998,)), (r"^norm", (99999,))])


def swapped_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """The weight decay groups of today's sizes, each group's first parameter in the other, each in reverse order."""
    low, high = weight_decay_groups(model, weight_decay)
    (low["params"][0], high["params"][0]) = (high["params"][0], low["params"][0])
    return [low | {"params": low["params"][::-1]}, high | {"params": high["params"][::-1]}]


# parameter groups a swinlite or timm version may form otherwise: (what it patches, the settings that use it)
GROUPINGS = {
    "out_norms apart": (  # 18 groups of pico's, now 14
        (SwinTransformer, "group_matcher", old_group_matcher),
        {"optim.layer_decay": 0.5, "model.kwargs.out_norm": True},
    ),
    # the same sizes: loaded by position, each parameter took another's moments, or failed at the first step
    "same sizes, swapped": ((optim, "weight_decay_groups", swapped_groups), {}),
}


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """(data folder, run) of a finished 1-epoch run saved with one of ``GROUPINGS``, made once, copied by each test."""
    runs = {}

    def finished(grouping: str) -> tuple[Path, Path]:
        if grouping not in runs:
            patch, settings = GROUPINGS[grouping]
            with pytest.MonkeyPatch.context() as patched:
                patched.setattr(*patch)
                root = tmp_path_factory.mktemp("grouped")
                runs[grouping] = finished_run(root, **FAST, **settings, **{"train.epochs": 1})  # resumed for a second
        return runs[grouping]

    return finished


# optim.layer_decay turned off (14 groups of layer decay -> 2 of weight decay) and on at --resume: it was refused; the
# groups of layer decay resumed without it kept their lr_scale (of 0.0156 ...), which timm's scheduler multiplies lr by
LAYER_DECAY_SWITCHED = [
    ("out_norms apart", {"optim.layer_decay": None}),
    ("same sizes, swapped", {"optim.layer_decay": 0.5}),
]


def hyperparameters(groups: list[dict]) -> list[dict]:
    """Each group's settings but those the run sets: lr and initial_lr (the scheduler's), the state (GROUP_STATE)."""
    return [{k: v for k, v in g.items() if k not in (*trainer.GROUP_STATE, "initial_lr")} for g in groups]


@pytest.mark.parametrize(
    ("grouping", "changed"),
    [*((grouping, {}) for grouping in GROUPINGS), *LAYER_DECAY_SWITCHED],
    ids=[*GROUPINGS, "layer decay turned off", "layer decay turned on"],
)
def test_parameters_grouped_otherwise_resume_each_with_its_own_state(grouped, tmp_path, monkeypatch, grouping, changed):
    """A resume file whose optimizer groups the same parameters otherwise was refused where the group sizes differ
    ("it groups the 90 parameter tensors it trains in 18 groups, this run in 14"), and where they do not, loaded each
    saved moment into the parameter at its position: another's. The file names its parameters: each parameter's state
    is its own, in this run's groups, whose settings are those of an optimizer built afresh (no key of the saved
    groups' left, e.g. layer decay's lr_scale)."""
    folder, out = copied_run(grouped(grouping), tmp_path / "run")
    saved = load_resume(out / "resume.pt")
    held = zip(saved["optimizer"]["param_groups"], saved["param_names"], strict=True)
    numbers = {name: n for group, names in held for n, name in zip(group["params"], names, strict=True)}
    state = saved["optimizer"]["state"]
    moments = {name: state[n]["exp_avg"] for name, n in numbers.items() if n in state}  # (no gradient: no state)
    settings = GROUPINGS[grouping][1] | changed | {"train.epochs": 2}
    cfg = tiny_config("classification", folder, out, **FAST, **settings)
    at_start = {}

    def fit(self):  # this run's groups, those of an optimizer built afresh, and each parameter's state
        fresh = build_optimizer(self.model, cfg.optim, global_batch=1)
        at_start["groups"], at_start["fresh"] = group_names(self.model, self.optimizer), group_names(self.model, fresh)
        at_start["settings"] = hyperparameters(self.optimizer.param_groups)
        at_start["fresh settings"] = hyperparameters(fresh.param_groups)
        names = {id(p): name for name, p in self.model.named_parameters()}
        at_start["state"] = {names[id(p)]: s["exp_avg"] for p, s in self.optimizer.state.items()}

    monkeypatch.setattr(trainer.Trainer, "fit", fit)
    run(TASK, cfg, resume=True)
    assert at_start["groups"] == at_start["fresh"] != saved["param_names"]
    assert at_start["settings"] == at_start["fresh settings"]
    assert at_start["state"].keys() == moments.keys()
    assert all(torch.equal(at_start["state"][name], moments[name]) for name in moments)


def test_a_file_without_parameter_names_grouped_otherwise_is_refused_naming_the_cause(grouped, tmp_path, capsys):
    """A resume file from before the parameter names were saved whose optimizer groups the same parameters otherwise
    was refused as 'the set of trained parameters changed, e.g. by model.kwargs.frozen_stages', telling to resume with
    the run's own settings: it was. (Its state cannot be regrouped: it is numbered by position.)"""
    folder, out = copied_run(grouped("out_norms apart"), tmp_path / "run")
    save_resume(out / "resume.pt", {k: v for k, v in load_resume(out / "resume.pt").items() if k != "param_names"})
    said = refused(folder, out, capsys, **FAST, **GROUPINGS["out_norms apart"][1], **{"train.epochs": 2})
    assert said.startswith(f"error: {out / 'resume.pt'} does not fit this run's optimizer (it groups the 90 parameter "
                           "tensors it trains in 18 groups, this run in 14: the code that saved it, its swinlite or "
                           "timm version, forms the parameter groups otherwise")  # fmt: skip
    assert f"start a new run from its weights (model.pretrained={out / 'resume.pt'}: " in said
