"""docs/detection.md against the code: what shows every config key (--print-config; --help no longer lists them,
64b0a0f), the schedules detection takes (poly too), what frozen_stages=1 freezes (out_norms.0 too), and that a
Swin-V2 backbone serves."""

import dataclasses

import timm
import torch
import yaml
from scriptkit import REPO, run_script

import swinlite  # noqa: F401 (registers the models)
from swinlite.detection import build_fpn_backbone
from swinlite.detection.config import DetConfig
from swinlite.detection.task import DetectionTask
from swinlite.engine.config import flatten, to_dict

DOC = " ".join((REPO / "docs" / "detection.md").read_text().split())


def test_print_config_is_what_shows_every_key(capsys):
    assert "`--help` lists them all" not in DOC and "(`--print-config` prints them all" in DOC
    assert run_script("train_detection", ["--print-config"]) == 0
    assert set(flatten(yaml.safe_load(capsys.readouterr().out))) == set(flatten(to_dict(DetConfig())))


def test_the_schedule_row_names_every_kind():
    """It said "`step` or `cosine`"; poly is accepted too."""
    kind = next(f for f in dataclasses.fields(DetConfig().schedule) if f.name == "kind")
    meaning = DOC.split("| `schedule.kind`", 1)[1].split("|")[1]
    assert all(f"`{choice}`" in meaning for choice in kind.metadata["choices"])


def test_best_weights_are_picked_by_the_metric_the_doc_names():
    """COCO's AP over IoU 0.5:0.95, not AP50: the detection task's metric is the doc's."""
    assert "`best.safetensors` (by `val_map`)" in DOC and DetectionTask.metric == "val_map"


def test_frozen_stages_1_freezes_the_first_out_norm_as_the_doc_says():
    assert "patch embed, stage 0 and out_norms.0: no gradients, eval" in DOC
    model = timm.create_model("swinlite_pico_patch2_window4_32", features_only=True, out_norm=True, frozen_stages=1)
    model.train()
    frozen = {name.rsplit(".", 1)[0] for name, p in model.model.out_norms.named_parameters() if not p.requires_grad}
    assert frozen == {"0"}
    assert not model.model.out_norms[0].training and model.model.out_norms[1].training


def test_the_doc_names_a_swin_v2_backbone_that_builds():
    """It never said a V2 model serves as a backbone (one trains: tests/detection/test_train.py); both names it gives
    build an FPN backbone that runs."""
    names = ("swinlite_v2_tiny_window8_256", "swinlite_v2_pico_patch2_window4_32")
    assert f'`build_fpn_backbone("{names[0]}", ...)`' in DOC and f"`model.name={names[1]}`" in DOC
    for name, kwargs in zip(names, (dict(embed_dim=32, depths=(1, 1, 1, 1), num_heads=(1, 2, 4, 8)), {}), strict=True):
        backbone = build_fpn_backbone(name, fpn_channels=16, **kwargs)
        with torch.no_grad():
            assert list(backbone(torch.randn(1, 3, 64, 64))) == ["0", "1", "2", "3", "pool"]
