"""A window-7 file loaded into a V1 model of another window whose stage map at ``img_size`` is smaller than that window:
timm's ``checkpoint_filter_fn`` resizes that stage's 13x13 table straight to the window it shrinks the stage to (9x9
for window 10 at 160), which swinlite embeds in its own table. swinlite resized it to the model's whole window (19x19)
and used the centre of that: 0.0146 off timm's logits. Reference: timm's Swin built alike from the same file; every
loading route must give the weights of the checked one."""

import warnings

import pytest
import timm
import torch
from weightkit import random_state_dict

from swinlite import load_checkpoint
from swinlite.classification.config import ModelConfig
from swinlite.detection import build_fpn_backbone
from swinlite.detection.config import DetModelConfig
from swinlite.detection.models import build_detector
from swinlite.engine.model import create_model
from swinlite.models.swin import SwinTransformer
from swinlite.segmentation import SegModelConfig, build_upernet

TIMM = "swin_tiny_patch4_window7_224"
LITE = "swinlite_tiny_patch4_window7_224"
TAG = ".ms_in22k_ft_in1k"
REDUCED = dict(embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 4, 8))
# (img_size, window): a stage map smaller than the window, its window shrunk by timm to 5, 3, 8, 6
CASES = [(160, 10), (96, 12), (256, 16), (192, 12)]


@pytest.fixture(scope="module")
def window7_file(tmp_path_factory):
    """A timm-layout file of random window-7 weights (the reduced Swin-T), saved with torch.save."""
    path = tmp_path_factory.mktemp("fg") / "v1_timm.pth"
    torch.save(random_state_dict(TIMM, **REDUCED), path)
    return path


def _logits(model: torch.nn.Module, size: int) -> torch.Tensor:
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model.eval()(x)


def _overlay(name: str, path, size: int, window: int) -> torch.nn.Module:
    return timm.create_model(
        name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), img_size=size, window_size=window, **REDUCED
    )


def _same_weights(ours: torch.nn.Module, reference: torch.nn.Module) -> None:
    want = reference.state_dict()
    got = ours.state_dict()
    for key, value in got.items():
        torch.testing.assert_close(value, want[key], rtol=0, atol=0, msg=key)


@pytest.mark.parametrize(("size", "window"), CASES)
def test_a_shrunk_stage_table_of_another_window_gives_timms_logits(window7_file, size, window):
    theirs = _overlay(TIMM, window7_file, size, window)
    with pytest.warns(UserWarning, match=r"as timm's Swin does to the window it shrinks their stage's to"):
        ours = _overlay(LITE, window7_file, size, window)
    torch.testing.assert_close(_logits(ours, size), _logits(theirs, size), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("size", "window"), CASES[:2])
def test_a_pretrained_tag_resizes_as_timm_does(offline_hub, size, window):
    offline_hub.add_timm(TIMM + TAG, **REDUCED)
    theirs = timm.create_model(TIMM + TAG, pretrained=True, img_size=size, window_size=window, **REDUCED)
    ours = timm.create_model(LITE + TAG, pretrained=True, img_size=size, window_size=window, **REDUCED)
    torch.testing.assert_close(_logits(ours, size), _logits(theirs, size), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("size", "window"), CASES[:2])
def test_every_route_loads_the_tables_the_timm_checked_one_does(window7_file, size, window):
    reference = _overlay(LITE, window7_file, size, window)
    kwargs = dict(img_size=size, window_size=window, **REDUCED)
    model = timm.create_model(LITE, **kwargs)
    load_checkpoint(model, str(window7_file))
    _same_weights(model, reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the checkpoint's output norms and classifier, absent or dropped
        fpn = build_fpn_backbone(LITE, checkpoint=str(window7_file), **kwargs)
        upernet = build_upernet(SegModelConfig(name=LITE, pretrained=str(window7_file)), 3, **kwargs)
    for swin in (fpn.body.model, next(m for m in upernet.modules() if isinstance(m, SwinTransformer))):
        tables = {k: v for k, v in swin.state_dict().items() if k.endswith("rel_pos.table")}
        want = reference.state_dict()
        for key, value in tables.items():
            torch.testing.assert_close(value, want[key], rtol=0, atol=0, msg=key)


def test_every_tasks_model_pretrained_fits_a_whole_window_table_as_timms_pretrained_loader(window7_file):
    """A window-7 file into a window-7 model at 112, where timm shrinks the last stage's window to 4x4: classification's
    model.pretrained (timm's pretrained loader) resized that stage's 13x13 table to 7x7, detection's and
    segmentation's kept the file's 13x13, so the same file and model.kwargs gave other weights by task. One rule:
    timm's loader's; a direct load keeps the file's table."""
    kwargs = dict(img_size=112, **REDUCED)
    path, key = str(window7_file), "layers.3.blocks.0.attn.rel_pos.table"
    want = _overlay(LITE, window7_file, 112, 7).state_dict()[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the resized tables; the checkpoint's output norms and classifier
        routes = {
            "classification": create_model(ModelConfig(name=LITE, pretrained=path, kwargs=kwargs)),
            "detection": build_detector(
                DetModelConfig(name=LITE, pretrained=path, kwargs=kwargs, fpn_channels=8, box_head_dim=8), 2, 112, 112
            ).backbone.body.model,
            "segmentation": build_upernet(SegModelConfig(name=LITE, pretrained=path, kwargs=kwargs), 3).backbone.model,
            "build_fpn_backbone": build_fpn_backbone(LITE, checkpoint=path, fpn_channels=8, **kwargs).body.model,
        }
    for route, model in routes.items():
        torch.testing.assert_close(model.state_dict()[key], want, rtol=0, atol=0, msg=route)
    model = timm.create_model(LITE, **kwargs)
    load_checkpoint(model, path)  # the file's table, whole: swinlite keeps the window
    file_table = torch.load(window7_file)["layers.3.blocks.0.attn.relative_position_bias_table"]
    torch.testing.assert_close(model.state_dict()[key], file_table, rtol=0, atol=0)


def test_a_tag_at_a_size_where_timm_shrinks_a_window_names_the_tables_it_resizes(offline_hub):
    """At 112 the last stage's 13x13 tables are resized to 7x7 (timm's, silently): the values change, so the warning
    the other resized tables get names them."""
    offline_hub.add_timm(TIMM + TAG, **REDUCED)
    with pytest.warns(UserWarning, match=r"resized 1 relative position bias tables .*stage 3 \(4, 4\).*layers\.3\."):
        timm.create_model(LITE + TAG, pretrained=True, img_size=112, **REDUCED)


@pytest.mark.parametrize("rows", [299, 100])
def test_a_table_of_no_square_window_is_named(window7_file, rows):
    state = torch.load(window7_file)
    key = "layers.1.blocks.0.attn.relative_position_bias_table"
    state[key] = torch.zeros(rows, state[key].shape[1])
    model = timm.create_model(LITE, **REDUCED)
    with pytest.raises(ValueError, match=rf"bias table layers\.1\.blocks\.0\.attn\.rel_pos\.table of {rows} rows"):
        load_checkpoint(model, state)
