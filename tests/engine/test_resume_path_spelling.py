"""--resume with a path setting spelled another way (``./data/`` for ``data``) warned that the setting changed, though
the run's validation set (resolved paths since 1374dad) was rightly taken as the same: paths compare resolved."""

from pathlib import Path

import pytest
from enginekit import TASKS, tiny_config
from trainkit import train

from swinlite.engine.config import config_diff
from swinlite.engine.trainer import as_compared


def test_a_path_spelled_another_way_is_no_changed_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    config = TASKS["detection"].load_config
    old = config(None, ["data.data_dir=data", "data.val_ann=a/v.json", "train.output_dir=runs/x", "model.pretrained=w"])
    new = config(None, [f"data.data_dir={tmp_path}/data/", "data.val_ann=./a/../a/v.json", "train.output_dir=runs/x/",
                        "model.pretrained=./w"])  # fmt: skip
    assert config_diff(old, new, as_compared) == []
    other = config(
        None, ["data.data_dir=data2", "data.val_ann=a/v.json", "train.output_dir=runs/x", "data.dataset=digits"]
    )
    assert config_diff(old, other, as_compared) == ["model.pretrained: w -> False", "data.data_dir: data -> data2",
                                                    "data.dataset: coco -> digits"]  # fmt: skip


def test_resume_with_the_data_dir_spelled_another_way_warns_of_no_change(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.chdir(folder.parent)
    out = train(tiny_config("classification", Path(folder.name), Path("out"), **{"train.epochs": 1}))
    capsys.readouterr()
    train(tiny_config("classification", f"./{folder.name}/", "./out/", **{"train.epochs": 1}), resume=True)
    printed = capsys.readouterr().out
    assert "changed setting" not in printed and (out / "resume.pt").is_file()
