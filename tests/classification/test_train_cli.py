"""scripts/train.py as a user meets it: --help without torch, one error line and exit 2 for user errors,
the default for --data-dir."""

import subprocess
import sys
from pathlib import Path

import pytest
from scriptkit import run_script, script_env
from trainkit import REPO

from swinlite.classification import ClassificationTask


def test_help_lists_what_applies_without_importing_torch():
    cmd = [sys.executable, "-X", "importtime", str(REPO / "scripts" / "train.py"), "--help"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=script_env())
    assert result.returncode == 0
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "yaml" in imported and not {"torch", "timm", "swinlite"} & imported
    assert "with --data-dir, without --config: configs/finetune_imagefolder.yaml" in result.stdout
    assert "model.name = swinlite_tiny_patch4_window7_224.ms_in1k" in result.stdout
    assert "model.name = swinlite_pico_patch2_window4_32" in result.stdout  # the demo's
    assert "train.ema_decay=0.9998 train.ema_warmup=true" in result.stdout  # 0.9998 without it: long runs only


def test_unknown_config_key_is_one_line_and_exit_2(capsys):
    # in this process (as test_user_errors_are_one_line): the script's runner, its exit code and all it says
    assert run_script("train", ["optim.lrr=5e-4"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: unknown config key 'optim.lrr'; did you mean 'optim.lr'?"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model.name=swinlite_tiny_patch4_windw7_224"], "did you mean 'swinlite_tiny_patch4_window7_224'?"),
        (["--data-dir", "{data}", "--output-dir", "{out}"], "model.pretrained=true: "),
        (["--config", "{bad_yaml}"], "is not valid YAML"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--data-dir", "{missing}", "--output-dir", "{out}", "data.auto_augment=bogus"],
         "data.auto_augment=bogus is not a policy timm knows (Unknown AA policy bogus); e.g. rand-m9-mstd0.5-inc1"),
        (["--data-dir", "{missing}", "--output-dir", "{out}", "data.auto_augment=rand-q9"],
         "data.auto_augment=rand-q9 is not a policy timm knows (Unknown RandAugment config section)"),
        (["--data-dir", "{missing}", "--output-dir", "{out}", "data.scale=[1,0.5]"],
         "data.scale must be [low, high] with low <= high, got [1.0, 0.5]"),
        # a traceback after the data scan: AssertionError "Input height (32) doesn't match model (224)"
        (["--data-dir", "{missing}", "--output-dir", "{out}", "model.name=vit_tiny_patch16_224", "data.img_size=32"],
         "model vit_tiny_patch16_224 does not take data.img_size=32 images (Input height (32) doesn't match model "
         "(224)); model.kwargs.img_size=32 builds it for that size, or data.img_size=224"),
        # timm's warning "range should be of kind (min, max)" alone, then the run trained on its swapped ranges
        (["--data-dir", "{missing}", "--output-dir", "{out}", "data.ratio=[2,1]"],
         "data.ratio must be [low, high] with low <= high, got [2.0, 1.0]"),
    ],
)  # fmt: skip
def test_user_errors_are_one_line(args, message, folder: Path, tmp_path: Path, capsys, no_network):
    # no_network: the default's ImageNet weights are not in the (empty) cache and the hub does not answer
    (bad_yaml := tmp_path / "bad.yaml").write_text("train: {epochs: [1,\n")
    argv = [a.format(data=folder, missing=tmp_path / "no_data", out=tmp_path / "out", bad_yaml=bad_yaml) for a in args]
    assert run_script("train", argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    if "pretrained" in message:  # names the weights and the ways around them
        assert "swinlite_tiny_patch4_window7_224.ms_in1k" in lines[0] and "model.pretrained=PATH" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing written before the check (nor any data read: there is none)


def test_data_dir_default_is_the_documented_fine_tune_recipe():
    cfg = ClassificationTask.load_config(REPO / "configs" / "finetune_imagefolder.yaml")
    assert (cfg.model.name, cfg.data.img_size) == ("swinlite_tiny_patch4_window7_224.ms_in1k", 224)
    assert cfg.model.pretrained is True
