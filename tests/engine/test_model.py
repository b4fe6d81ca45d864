"""model.kwargs: any keyword of the model's constructor, checked before any data is read, in every task; a window-7
tag fine-tuned with 12x12 windows at 384 loads the tag's weights with its bias tables resized; pretrained weights
that cannot be had are one line at once; a ``model.pretrained`` file is read by its content, and the model settings
it records are warned of where ``model.kwargs`` leaves them out."""

import json
import re
import time
import warnings
from pathlib import Path

import pytest
import timm
import torch
from enginekit import TASKS, overrides, script_config, script_main, tiny_config
from pico import PICO
from timm.layers import resize_rel_pos_bias_table

from swinlite import hub
from swinlite.detection.models import build_detector
from swinlite.engine import run
from swinlite.engine.model import check_pretrained, create_model
from swinlite.engine.preflight import check_run
from swinlite.engine.sections import ModelConfig
from swinlite.io import save_safetensors
from swinlite.segmentation.models import build_upernet


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ("model.kwargs.windw_size=2", "model.kwargs.windw_size: swinlite_pico_patch2_window4_32 takes no such keyword; "
                                      "did you mean 'window_size'?"),
        ("model.kwargs.num_heads=[1,2,3,5]", "model.kwargs {'num_heads': [1, 2, 3, 5]} do not fit"),
        ("model.kwargs.num_classes=3", "model.kwargs.num_classes: set by the task"),
        ("model.kwargs.in_chans=1", "model.kwargs.in_chans: set by the task (its loaders give RGB images: 3 channels)"),
        ("model.kwargs.pretrained=true", "model.kwargs.pretrained: set by model.pretrained"),
        # timm.is_model takes any tag: the build's "Invalid pretrained tag" was blamed on model.kwargs {}
        ("model.name=swinlite_pico_patch2_window4_32.ms_in1k", "model.name 'swinlite_pico_patch2_window4_32.ms_in1k': "
         "swinlite_pico_patch2_window4_32 has no pretrained tag 'ms_in1k'; it has none: drop the tag"),
        ("model.name=swinlite_v2_tiny_window8_256.ms_in22k", "swinlite_v2_tiny_window8_256 has no pretrained tag "
                                                            "'ms_in22k'; its tags: ms_in1k"),
        # timm.create_model's name of a save_for_hf folder: "is not a timm model", and no way named
        ("model.name=hf-hub:me/shared", "model.name 'hf-hub:me/shared': a run takes timm's registered model names, "
                                        "not hf-hub: ones; for the weights of a folder that timm.models.save_for_hf "
                                        "wrote, set model.name to the architecture its config.json records"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("task", list(TASKS))
def test_kwargs_checked_against_the_model_before_any_data_is_read(task: str, kwargs: str, message: str, tmp_path):
    cfg = tiny_config(task, tmp_path / "no_data_here", tmp_path / "out", **dict([kwargs.split("=")]))
    with pytest.raises(ValueError, match=re.escape(message)):
        run(TASKS[task], cfg)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("task", "kwargs", "reason"),
    [
        ("classification", "model.kwargs.num_classes=3", "the task (one output per class folder of the training "
                                                         "split)"),
        ("detection", "model.kwargs.num_classes=3", "the task (the detector's classes are the training annotations' "
                                                    "categories)"),
        ("detection", "model.kwargs.out_indices=[1,2,3]", "model.min_level (the FPN takes the Swin levels "
                      "min_level..3; unset, 0 for fasterrcnn and maskrcnn, 1 for retinanet and fcos)"),
        ("detection", "model.kwargs.features_only=true", "the detector's FPN backbone (swinlite.fpn.build_fpn_backbone "
                                                         "takes the Swin's levels as NCHW maps)"),
        ("detection", "model.kwargs.output_fmt=NHWC", "the detector's FPN backbone"),
        ("segmentation", "model.kwargs.num_classes=3", "the task (UperNet's classes are the data's)"),
        ("segmentation", "model.kwargs.out_indices=[3]", "the task (UperNet takes every Swin level, as NCHW maps: "
                                                         "models.build_upernet)"),
        ("segmentation", "model.kwargs.features_only=true", "the task (UperNet takes every Swin level"),
        ("segmentation", "model.kwargs.output_fmt=NHWC", "the task (UperNet takes every Swin level"),
        # "got multiple values for keyword argument 'pretrained_cfg_overlay'" with model.pretrained=PATH; offline
        # with model.pretrained=true, "not in the local cache" though a file was given
        ("classification", "model.kwargs.pretrained_cfg_overlay={file: w.pth}", "model.pretrained (model.pretrained="
                           "PATH loads a local weights file of any layout)"),
        ("detection", "model.kwargs.checkpoint_path=w.pth", "model.pretrained (model.pretrained=PATH"),
        ("segmentation", "model.kwargs.pretrained_cfg={}", "model.pretrained (model.pretrained=PATH"),
        ("classification", "model.kwargs.cache_dir=/tmp/w", "model.pretrained (model.pretrained=PATH"),
    ],
)  # fmt: skip
def test_a_reserved_kwarg_is_refused_naming_who_sets_it_in_its_task(task: str, kwargs: str, reason: str, tmp_path):
    """Every reserved key but in_chans was "set by the task (from the data)": detection's out_indices come from
    model.min_level, its features_only and output_fmt from the FPN backbone, segmentation's from UperNet."""
    key, value = kwargs.split("=")
    cfg = tiny_config(task, tmp_path / "no_data_here", tmp_path / "out", **{key: value})
    with pytest.raises(ValueError, match="^" + re.escape(f"{key}: set by {reason}")):
        check_run(TASKS[task], cfg)


@pytest.mark.parametrize("task", list(TASKS))
def test_kwargs_reach_the_model_in_every_task(task: str, tmp_path: Path, stub_inputs):
    cfg = tiny_config(task, tmp_path / "data", tmp_path, **{"model.kwargs": "{window_size: 2, mlp_ratio: 2.0}"})
    stub_inputs(TASKS[task], cfg)
    check_run(TASKS[task], cfg)
    if task == "classification":
        state = create_model(cfg.model, num_classes=3).state_dict()
    else:
        if task == "detection":
            swin = build_detector(cfg.model, 2, 48, 96).backbone.body.model
        else:
            swin = build_upernet(cfg.model, 3).backbone.model
        assert isinstance(swin.out_norms[1], torch.nn.LayerNorm)  # the dense tasks' default out_norm=true stays
        state = swin.state_dict()
    assert state["layers.0.blocks.0.attn.rel_pos.table"].shape[0] == 3 * 3  # 2x2 windows: 3x3 offsets
    assert state["layers.0.blocks.0.mlp.fc1.weight"].shape[0] == 2 * 32  # mlp_ratio 2 of pico's 32 channels


def test_window_7_tag_fine_tuned_with_12x12_windows_at_384(offline_hub, tmp_path: Path):
    cfg = tiny_config("classification", tmp_path, tmp_path, **{
        "model.name": "swinlite_tiny_patch4_window7_224.ms_in1k", "model.pretrained": "true",
        "model.kwargs": "{window_size: 12, img_size: 384}"})  # fmt: skip
    source = offline_hub.add_timm("swin_tiny_patch4_window7_224.ms_in1k")
    check_run(TASKS["classification"], cfg)
    with pytest.warns(UserWarning):  # the classifier of 1000 classes starts fresh; the tables are resized
        model = create_model(cfg.model, num_classes=3)
    state = model.state_dict()
    tables = [k for k in state if k.endswith("rel_pos.table")]
    assert len(tables) == 12 and all(state[k].shape[0] == 23 * 23 for k in tables)
    for key in tables:  # timm's own resize of the tag's 13x13 table (its Swin's checkpoint_filter_fn)
        timm_key = key.replace("attn.rel_pos.table", "attn.relative_position_bias_table")
        heads = source[timm_key].shape[1]
        expected = resize_rel_pos_bias_table(source[timm_key], (12, 12), (23 * 23, heads))
        torch.testing.assert_close(state[key], expected)
    qkv = "layers.2.blocks.3.attn.qkv.weight"
    assert torch.equal(state[qkv], source[qkv]) and model.head.fc.out_features == 3


def test_the_pretrained_check_looks_for_the_cached_weights_once(offline_hub, monkeypatch):
    """check_pretrained looked the cached file up twice: in swinlite.hub.pretrained_kwargs (which needs it only to
    say whether weights not cached can be downloaded), then for its check of a cut download."""
    offline_hub.add_timm("swin_tiny_patch4_window7_224.ms_in1k")
    looked, lookup = [], hub.try_to_load_from_cache
    monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **kw: looked.append((a, kw)) or lookup(*a, **kw))
    check_pretrained(ModelConfig(name="swinlite_tiny_patch4_window7_224.ms_in1k", pretrained=True))
    assert looked == [(("timm/swin_tiny_patch4_window7_224.ms_in1k", "model.safetensors"), {"revision": None})]


@pytest.mark.parametrize("task", list(TASKS))
def test_unreachable_hub_is_one_line_naming_the_scripts_options_before_any_data(
    task, no_network, tmp_path, capsys, stub_inputs
):
    """Without HF_HUB_OFFLINE and without network, ~20 retry lines over about a minute came before a message. The
    data's files exist (checked first), empty: the weights' error comes before any is read."""
    name = "swinlite_tiny_patch4_window7_224.ms_in22k"  # not in the module's cache
    argv = overrides(task, tmp_path / "data", tmp_path / "out", **{"model.name": name})
    stub_inputs(TASKS[task], tiny_config(task, tmp_path / "data", tmp_path / "out", **{"model.name": name}))
    start = time.monotonic()
    assert script_main(task, ["--config", str(script_config(task, tmp_path)), *argv, "model.pretrained=true"]) == 2
    assert time.monotonic() - start < 30  # one quick reachability check, no retries
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: model.pretrained=true: the pretrained weights of {name}")
    assert "hub repo timm/swin_tiny_patch4_window7_224.ms_in22k" in lines[0]
    assert "127.0.0.1:9 did not answer" in lines[0]
    assert "model.pretrained=PATH" in lines[0] and "model.pretrained=false" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("task", "record"),
    [
        ("classification", {"task": "classification", "model": PICO, "classes": ["a", "b"],
                            "model_args": {"mask_padding": False, "drop_path_rate": 0.3, "num_classes": 2}}),
        ("detection", {"task": "detection", "detector": {"name": PICO, "kwargs": {"mask_padding": False,
                                                                                  "drop_path_rate": 0.3}}}),
        ("segmentation", {"task": "segmentation", "segmenter": {"name": PICO, "kwargs": {"mask_padding": False,
                                                                                         "drop_path_rate": 0.3}}}),
    ],
)  # fmt: skip
def test_model_settings_a_pretrained_file_records_are_warned_of_where_model_kwargs_lack_them(task, record, tmp_path):
    """A run's file trained with model.kwargs.mask_padding=false started a run without it silently, in every task:
    every weight loads, into a model that computes something else (logits 0.05 off). A training setting
    (drop_path_rate) is not named; kept, or given another value, the setting is not warned of."""
    path = tmp_path / "best.safetensors"  # the check reads the record alone: one tensor will do
    save_safetensors(path, {"w": torch.zeros(1)}, record)
    cfg = tiny_config(task, tmp_path / "data", tmp_path / "out", **{"model.pretrained": str(path)})
    with pytest.warns(UserWarning) as caught:
        check_pretrained(cfg.model)
    assert [str(w.message) for w in caught] == [
        f"model.pretrained {path} records its {PICO} built with mask_padding=false, which model.kwargs leaves out: its "
        "weights load into a model that computes something else than theirs; keep it with "
        "model.kwargs.mask_padding=false"
    ]
    for value in ("false", "true"):
        kept = tiny_config(task, tmp_path / "data", tmp_path / "out",
                           **{"model.pretrained": str(path), "model.kwargs.mask_padding": value})  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_pretrained(kept.model)
    # a record this swinlite cannot build (another version's argument) stopped the run before the data: no warning,
    # the load names what matters
    settings = record.get("detector", record.get("segmenter"))
    (settings["kwargs"] if settings else record["model_args"])["removed_argument"] = 1
    save_safetensors(path, {"w": torch.zeros(1)}, record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_pretrained(cfg.model)


def test_model_settings_the_config_json_of_timms_save_for_hf_records_are_warned_of(tmp_path):
    """model.pretrained=FOLDER/model.safetensors of a folder timm.models.save_for_hf wrote started a run of the
    variant's defaults silently: its config.json, not the file, records the model's settings."""
    path = tmp_path / "model.safetensors"  # the check reads the record alone: one tensor will do
    save_safetensors(path, {"w": torch.zeros(1)})
    config = {"architecture": PICO, "model_args": {"mask_padding": False, "num_classes": 2}, "pretrained_cfg": {}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = tiny_config("classification", tmp_path / "data", tmp_path / "out", **{"model.pretrained": str(path)})
    with pytest.warns(UserWarning, match=f"{path} records its {PICO} built with mask_padding=false, which"):
        check_pretrained(cfg.model)


@pytest.mark.parametrize("name", ["w.bin", "w.safetensors"])
@pytest.mark.parametrize("safetensors", [True, False])
def test_a_pretrained_file_is_read_by_its_content_whatever_its_suffix(name, safetensors, tmp_path, monkeypatch):
    """timm's loader read a file by its suffix: a safetensors file named w.bin was "weights_only=True blocked loading
    ... retry with weights_only=False" (a traceback advising unsafe loading of a file that is no pickle), as the other
    tasks read it (swinlite.io.read_state_dict). A torch file named .safetensors, which torch.load hands to the
    safetensors reader by its suffix ("header too large"), is read as the torch file it is. A safetensors file so
    named goes to timm's loader as a file: a state dict handed to timm's builder is deep-copied (dataclasses.asdict),
    a second copy of the weights in memory (Swin-S: max RSS 1099 -> 1301 MB)."""
    source, path = timm.create_model(PICO), tmp_path / name
    if safetensors:
        save_safetensors(path, source.state_dict())
    else:
        torch.save(source.state_dict(), path)
    cfg = ModelConfig(name=PICO, pretrained=str(path))
    check_pretrained(cfg)
    copies = []
    deepcopy = torch.Tensor.__deepcopy__
    monkeypatch.setattr(torch.Tensor, "__deepcopy__", lambda t, memo: copies.append(t.shape) or deepcopy(t, memo))
    model = create_model(cfg, num_classes=10)
    assert not copies or not (safetensors and name.endswith(".safetensors"))
    pairs = zip(model.state_dict().values(), source.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert "state_dict" not in model.pretrained_cfg  # timm's copy of the file's weights is not kept


def test_a_timm_training_checkpoint_gives_its_ema_weights_with_the_warning_of_every_task(tmp_path):
    """Classification took the EMA weights of timm's train.py checkpoint silently; detection and segmentation warn
    (swinlite.io.unwrap_checkpoint), and so does it now."""
    raw, ema = timm.create_model(PICO).state_dict(), timm.create_model(PICO).state_dict()
    torch.save({"epoch": 3, "state_dict": raw, "state_dict_ema": ema}, tmp_path / "model_best.pth.tar")
    cfg = ModelConfig(name=PICO, pretrained=str(tmp_path / "model_best.pth.tar"))
    check_pretrained(cfg)
    with pytest.warns(UserWarning, match=re.escape("the checkpoint holds EMA weights (state_dict_ema) and raw ones")):
        model = create_model(cfg, num_classes=10)
    qkv = "layers.1.blocks.0.attn.qkv.weight"
    assert torch.equal(model.state_dict()[qkv], ema[qkv]) and not torch.equal(raw[qkv], ema[qkv])
