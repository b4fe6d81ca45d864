from pathlib import Path

import pytest
from trainkit import REPO

from swinlite.classification import ClassificationTask, Config
from swinlite.engine.config import apply_overrides, config_diff, to_dict, valid_keys

load_config = ClassificationTask.load_config


def test_defaults_and_dotted_overrides_are_typed():
    cfg = load_config(None, ["optim.lr=5e-4", "train.epochs=12", "data.scale=[0.5, 1]", "optim.clip_grad=none"])
    assert cfg.optim.lr == 5e-4 and isinstance(cfg.optim.lr, float)  # PyYAML's YAML 1.1 reads 5e-4 as a string
    assert cfg.train.epochs == 12
    assert cfg.data.scale == (0.5, 1.0)
    assert cfg.optim.clip_grad is None
    assert Config().train.epochs == 30  # the defaults were not mutated


def test_yaml_overrides_then_cli(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 5e-4\ntrain:\n  epochs: 3\n")
    cfg = load_config(path, ["train.epochs=4"])
    assert (cfg.optim.lr, cfg.train.epochs) == (5e-4, 4)
    assert config_diff(Config(), cfg) == ["optim.lr: 0.001 -> 0.0005", "train.epochs: 30 -> 4"]


@pytest.mark.parametrize(
    ("override", "suggestion"),
    [("optim.lrr=1", "optim.lr"), ("train.epoch=3", "train.epochs"), ("dta.img_size=3", "data.img_size")],
)
def test_unknown_key_names_closest(override: str, suggestion: str):
    with pytest.raises(ValueError, match=f"unknown config key .*did you mean '{suggestion}'"):
        load_config(None, [override])


def test_unknown_key_in_yaml(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  nme: x\n")
    with pytest.raises(ValueError, match="'model.nme'; did you mean 'model.name'"):
        load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.epochs=ten", "train.epochs.*expected an integer"),
        ("train.epochs=2.5", "train.epochs.*expected an integer"),
        ("train.deterministic=maybe", "expected true or false"),
        ("train.deterministic=1", "expected true or false"),  # an int is no bool: config.yaml held the number
        ("data.scale=0.5", "data.scale.*list of 2 values"),
        ("epochs", "not of the form section.key=value"),
    ],
)
def test_bad_values_are_errors(override: str, message: str):
    with pytest.raises(ValueError, match=message):
        load_config(None, [override])


def test_missing_config_file():
    with pytest.raises(ValueError, match="does not exist"):
        load_config("no/such.yaml")


@pytest.mark.parametrize(
    "path",
    [p for p in sorted((REPO / "configs").glob("*.yaml")) if not p.name.startswith(("det_", "seg_"))],
    ids=lambda p: p.name,
)  # det_*, seg_*: tests/detection, tests/segmentation
def test_shipped_configs_load_and_round_trip(path: Path):
    cfg = load_config(path)
    assert apply_overrides(Config(), {f"{s}.{k}": v for s, sec in to_dict(cfg).items() for k, v in sec.items()}) == cfg
    assert len(valid_keys(Config())) == sum(len(sec) for sec in to_dict(cfg).values())
