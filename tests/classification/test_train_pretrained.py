"""Training from pretrained weights by name: model.pretrained=true with a tagged model.name (offline hub cache)."""

import warnings
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from scriptkit import run_script
from trainkit import tiny_config, tiny_overrides

import swinlite
import swinlite.io
from swinlite.classification import ClassificationTask
from swinlite.engine.distributed import DistInfo
from swinlite.engine.model import create_model
from swinlite.engine.preflight import check_run
from swinlite.engine.task import RunContext
from swinlite.metadata import weights_metadata

load_config = ClassificationTask.load_config

REPO = Path(__file__).resolve().parents[2]
FINETUNE = REPO / "configs" / "finetune_imagefolder.yaml"


def test_finetune_config_starts_from_the_tags_weights(offline_hub, tmp_path: Path):
    cfg = load_config(FINETUNE, [f"data.data_dir={tmp_path}"])
    assert cfg.model.name == "swinlite_tiny_patch4_window7_224.ms_in1k" and cfg.optim.layer_decay is not None
    source = offline_hub.add_timm("swin_tiny_patch4_window7_224.ms_in1k")
    check_run(ClassificationTask, cfg)  # the weights are in the (offline) cache now
    with pytest.warns(UserWarning, match=r"dropping classifier .*head.fc.weight of shape \(1000, 768\)"):
        model = create_model(cfg.model, num_classes=3)
    loaded, expected = model.state_dict(), swinlite.convert_state_dict(source)
    assert model.head.fc.out_features == 3
    assert all(torch.equal(loaded[k], v) for k, v in expected.items() if not k.startswith("head."))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.name=swinlite_pico_patch2_window4_32", "model.pretrained=true"], "has no pretrained weights"),
        (["model.pretrained=no/such/file.safetensors"], "is not a file"),
    ],
)
def test_pretrained_settings_that_cannot_work_are_config_errors(tmp_path: Path, overrides, message):
    with pytest.raises(ValueError, match=message):
        check_run(ClassificationTask, load_config(FINETUNE, [f"data.data_dir={tmp_path}", *overrides]))


def test_train_script_reports_unavailable_weights_in_one_line(offline_hub, folder: Path, tmp_path: Path, capsys):
    args = ["--config", str(FINETUNE), "--data-dir", str(folder), "--output-dir", str(tmp_path / "out")]
    name = "model.name=swinlite_tiny_patch4_window7_224.ms_in22k"  # not in the cache
    assert run_script("train", [*args, name, "model.kwargs.drop_path_rate=0.0", "data.batch_size=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: model.pretrained=true: the pretrained weights of " + name[11:])
    assert "timm/swin_tiny_patch4_window7_224.ms_in22k" in err[0]


def test_a_damaged_file_in_the_hub_cache_is_a_config_error(offline_hub, tmp_path: Path):
    """A download cut short in the cache: timm's loader failed with a traceback, after the data scan."""
    name = "swinlite_small_patch4_window7_224.ms_in1k"
    cached = offline_hub.add("timm/swin_small_patch4_window7_224.ms_in1k", {"w": torch.zeros(4096)})
    cached.write_bytes(cached.read_bytes()[:-100])
    cfg = load_config(FINETUNE, [f"data.data_dir={tmp_path}", f"model.name={name}"])
    with pytest.raises(ValueError, match=rf"model.pretrained=true: the cached weights of {name}: .* damaged .*delete"):
        check_run(ClassificationTask, cfg)


def test_a_resume_needs_no_pretrained_weights(folder: Path, tmp_path: Path, capsys):
    """resume.pt holds every weight: a resume read the pretrained weights again, and refused to start offline (or
    without model.pretrained's file) where they were gone; config.yaml keeps the setting the run started from."""
    weights = tmp_path / "start.safetensors"
    torch.manual_seed(0)
    swinlite.io.save_safetensors(weights, timm.create_model("swinlite_pico_patch2_window4_32").state_dict())
    args = tiny_overrides(folder, tmp_path / "out", **{"model.pretrained": weights, "train.epochs": 1})
    assert run_script("train", ["--config", str(REPO / "configs" / "demo.yaml"), *args]) == 0
    weights.unlink()
    resumed = [*args, "train.epochs=2"]
    assert run_script("train", ["--config", str(REPO / "configs" / "demo.yaml"), "--resume", *resumed]) == 0
    out = capsys.readouterr()
    assert "resumed from" in out.out and "dropping classifier" not in out.err
    assert f"pretrained: {weights}" in (tmp_path / "out" / "config.yaml").read_text()


@pytest.mark.parametrize("file_classes", [["c0", "c1", "c2"], ["apple", "car", "zebra"], ["c2", "c1", "c0"]])
def test_a_classifier_of_other_classes_of_the_same_count_is_warned(folder: Path, tmp_path: Path, file_classes):
    """A run's best.safetensors of classes c0..c2 started a run on apple, car, zebra: its classifier (of the model's
    size) was kept, row i now the data's class i, without a word."""
    weights = tmp_path / "start.safetensors"
    model = timm.create_model("swinlite_pico_patch2_window4_32", num_classes=3)
    preprocessing = {"input_size": (3, 32, 32), "interpolation": "bicubic", "mean": (0.5,) * 3, "std": (0.5,) * 3,
                     "crop_pct": 1.0, "crop_mode": "center"}  # fmt: skip
    meta = weights_metadata(PICO, {"num_classes": 3}, file_classes, preprocessing)
    swinlite.io.save_safetensors(weights, model.state_dict(), meta)
    cfg = tiny_config(folder, tmp_path / "out", **{"model.pretrained": weights})  # the data's classes: c0, c1, c2
    task = ClassificationTask(RunContext(cfg, torch.device("cpu"), DistInfo(), tmp_path, None))
    task.classes = ["c0", "c1", "c2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = task.build_model()
    other = [str(w.message) for w in caught if "trained on other classes" in str(w.message)]
    assert other == ([] if file_classes == ["c0", "c1", "c2"] else [
        f"model.pretrained {weights}: its classifier was trained on other classes ({', '.join(file_classes)}) than "
        "this run's (c0, c1, c2); it is kept, row i now class i of the data"])  # fmt: skip
    assert torch.equal(built.head.fc.weight, model.head.fc.weight)
