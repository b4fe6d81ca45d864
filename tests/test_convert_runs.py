"""A swinlite detection or segmentation run's weights as a backbone checkpoint: its Swin (behind
``backbone.body.model.`` / ``backbone.model.``) loads wherever a Swin checkpoint of any layout does, its FPN and heads
left out; a Swin of another model is still refused, naming the file, what of it was read and both models."""

import dataclasses
import runpy
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import timm
import torch
from pico import PICO
from safetensors.torch import load_file
from scriptkit import SCRIPTS  # importing it puts scripts/ on sys.path, where the scripts find _cli

import swinlite
from swinlite.detection.config import DetModelConfig
from swinlite.detection.models import build_detector
from swinlite.engine.checkpoint import save_weights
from swinlite.engine.model import create_model
from swinlite.engine.sections import ModelConfig
from swinlite.export import run_backbone
from swinlite.fpn import build_fpn_backbone
from swinlite.io import read_metadata, read_state_dict
from swinlite.metadata import read_info
from swinlite.segmentation.config import SegModelConfig
from swinlite.segmentation.models import build_upernet
from swinlite.weights import pretrained_checked

NANO = "swinlite_nano_patch2_window4_64"
DET = dict(detector="fasterrcnn", fpn_channels=16, box_head_dim=16)
SEG = dict(head_channels=8, aux_channels=8, pool_scales=(1, 2))
LAYOUT = {"detection": "swinlite-detection", "segmentation": "swinlite-segmentation"}
PREFIX = {"detection": "backbone.body.model.", "segmentation": "backbone.model."}  # where each run's model has its Swin
NORMALIZATION = {"mean": [0.3, 0.4, 0.5], "std": [0.1, 0.2, 0.3]}  # what each run's file records it normalized with


def _randomized(state: dict[str, torch.Tensor], seed: int = 0) -> dict[str, torch.Tensor]:
    """Every floating tensor drawn anew (BatchNorm's integer counts kept): a weight loaded from elsewhere, or left at
    its initial value, shows."""
    generator = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=generator) if v.is_floating_point() else v for k, v in state.items()}


def _convert(capsys, monkeypatch, *args: str) -> tuple[int, str]:
    """``python scripts/convert_checkpoint.py ARGS`` in this process: (exit code, stdout and stderr)."""
    script = SCRIPTS / "convert_checkpoint.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    try:
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def _run_file(tmp_path: Path, task: str, name: str = PICO, **kwargs: object) -> Path:
    """The weights file a ``task`` run on the Swin ``name`` writes (``best.safetensors``: its model's whole state
    dict, randomized, and the metadata the run records that the loaders read: its mean and std NORMALIZATION, where
    each task records them)."""
    path = tmp_path / f"{task}-{name}.safetensors"
    if task == "detection":
        cfg = DetModelConfig(name=name, kwargs=dict(kwargs), **DET)
        model, meta = build_detector(cfg, 2, 32, 32), {"detector": dataclasses.asdict(cfg), "classes": ["a", "b"]}
        meta["data"] = {"test_size": 32, "max_size": 32, **NORMALIZATION}
    else:
        cfg = SegModelConfig(name=name, kwargs=dict(kwargs), **SEG)
        model, meta = build_upernet(cfg, 3), {"segmenter": dataclasses.asdict(cfg), "classes": ["x", "y", "z"]}
        meta["preprocessing"] = {**NORMALIZATION, "crop_size": [32, 32]}
    save_weights(path, _randomized(model.state_dict()), {"task": task, **meta})
    return path


@pytest.fixture(scope="module")
def run_file(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``run_file(task, name=PICO, **kwargs)``: ``_run_file``'s file of those arguments, written once per module (each
    in a folder of its own) and shared by the tests, which only read it."""
    root = tmp_path_factory.mktemp("run_files")
    files: dict[tuple, Path] = {}

    def written(task: str, name: str = PICO, **kwargs: object) -> Path:
        key = (task, name, tuple(sorted(kwargs.items())))
        if key not in files:
            folder = root / str(len(files))
            folder.mkdir()
            files[key] = _run_file(folder, task, name, **kwargs)
        return files[key]

    return written


def _swin_in(path: Path, task: str) -> dict[str, torch.Tensor]:
    """The Swin a run's file holds, as a classifier-less Swin's state dict: its features-only Swin has no final norm,
    the last level's output norm stands for it."""
    prefix = PREFIX[task]
    swin = {k.removeprefix(prefix): v for k, v in read_state_dict(path).items() if k.startswith(prefix)}
    return swin | {"norm.weight": swin["out_norms.3.weight"], "norm.bias": swin["out_norms.3.bias"]}


def _task_model(task: str, path: Path, name: str = PICO, **kwargs: object) -> torch.nn.Module:
    """The detector / UperNet on the Swin ``name`` (``model.kwargs``: ``kwargs``) a ``task`` run builds from
    ``model.pretrained=path``."""
    if task == "detection":
        return build_detector(DetModelConfig(name=name, pretrained=str(path), kwargs=kwargs, **DET), 2, 32, 32)
    return build_upernet(SegModelConfig(name=name, pretrained=str(path), kwargs=kwargs, **SEG), 3)


def _loaded(route: str, path: Path, tmp_path: Path, capsys, monkeypatch, name: str = PICO) -> dict[str, torch.Tensor]:
    """The Swin weights a model of ``name`` holds after loading ``path`` by ``route``."""
    if route in LAYOUT:
        return _task_model(route, path, name).get_submodule(PREFIX[route].removesuffix(".")).state_dict()
    if route == "timm_overlay":
        overlay = dict(file=str(path))
        return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, out_norm=True,
                                 num_classes=0).state_dict()  # fmt: skip
    if route == "load_state_dict":  # a swinlite model converts any layout as it loads (convert_when_loaded)
        model = timm.create_model(name, out_norm=True, num_classes=0)
        model.load_state_dict(read_state_dict(path))
        return model.state_dict()
    out = tmp_path / "backbone.safetensors"
    flags = ["--model", name] if route == "convert_checkpoint_model" else []
    code, printed = _convert(capsys, monkeypatch, str(path), str(out), *flags)
    if code:
        raise ValueError(printed)
    assert f"from the Swin of a swinlite {read_metadata(path)['task']} run's weights" in printed
    assert "task" not in read_metadata(out)  # a backbone: the run's metadata describes the whole detector / UperNet
    model = timm.create_model(name, out_norm=not flags, num_classes=0)  # --model: a plain variant, no output norms
    model.load_state_dict(load_file(out))  # strict: every key, none left over
    return model.state_dict()


ROUTES = [
    "segmentation",
    "detection",
    "timm_overlay",
    "load_state_dict",
    "convert_checkpoint",
    "convert_checkpoint_model",
]
CASES = [(task, route) for task in LAYOUT for route in ROUTES if route != task]  # a run's own task loads it whole


@pytest.mark.parametrize(("task", "route"), CASES)
def test_a_runs_swin_loads_as_a_backbone_checkpoint(run_file, tmp_path, capsys, monkeypatch, task, route):
    """A detection run's best.safetensors as a segmentation run's model.pretrained failed ("112 checkpoint keys did
    not map onto SwinTransformer: backbone.body.model.layers.0..."), a segmentation run's as a detector's (and through
    timm, convert_checkpoint.py) on its BatchNorm counts ("weights that are not floating point"), and
    convert_checkpoint.py copied a detector's whole as "the swinlite layout": its Swin loads now, bit for bit."""
    path = run_file(task)
    assert swinlite.detect_layout(read_state_dict(path)) == LAYOUT[task]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = _loaded(route, path, tmp_path, capsys, monkeypatch)
    # no note on a classifier neither model has; --model's plain variant has no output norms, which it drops
    dropped = (  # the last level's norm, the run's final norm, loads as the model's: it was listed as dropped
        "dropping per-level output norms of levels [0, 1, 2] (level 3's loads as the final norm): build the model "
        "with out_norm=True to use them"
    )
    assert [str(w.message) for w in caught] == ([dropped] if route == "convert_checkpoint_model" else [])
    want = _swin_in(path, task)
    blocks = {k for k in want if k.startswith(("patch_embed.", "layers."))}
    assert blocks <= loaded.keys() and all(torch.equal(v, want[k]) for k, v in loaded.items()), route


@pytest.mark.parametrize("wrapper", ["module.", "_orig_mod."])
@pytest.mark.parametrize("task", LAYOUT)
def test_a_runs_weights_saved_from_a_wrapper_load_whole(run_file, tmp_path, task, wrapper):
    """A detector's or UperNet's state dict saved from a DDP or torch.compile wrapper (module. / _orig_mod. before
    every key) was taken for a Swin checkpoint: its Swin loaded, its FPN and heads started fresh, with no warning.
    It loads whole now, as the file without the prefix does."""
    state = read_state_dict(run_file(task))
    path = tmp_path / "wrapped.pth"
    torch.save({wrapper + k: v for k, v in state.items()}, path)
    loaded = _task_model(task, path).state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], v) for k, v in state.items())


@pytest.mark.parametrize("task", LAYOUT)
def test_a_backbone_without_output_norms_names_every_level_it_drops(run_file, task):
    """A backbone built with model.kwargs.out_norm=false from another run's file was told "levels [0, 1, 2] (level 3's
    loads as the final norm)", but its features-only Swin has no final norm: level 3's is dropped too. (A model with a
    final norm takes level 3's as it: test_a_runs_swin_loads_as_a_backbone_checkpoint.)"""
    target = next(other for other in LAYOUT if other != task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _task_model(target, run_file(task), out_norm=False)
    dropped = "dropping per-level output norms of levels [0, 1, 2, 3]: build the model with out_norm=True to use them"
    assert [str(w.message) for w in caught] == [dropped]


# routes that convert the layout alone (no model to fit): the model's strict load_state_dict refuses what does not fit
CONVERTED_AS_IS = ("load_state_dict", "convert_checkpoint")


@pytest.mark.filterwarnings("ignore:dropping per-level output norms")  # --model's variant has none (tested above)
@pytest.mark.parametrize("other", ["depth", "model"])
@pytest.mark.parametrize(("task", "route"), CASES)
def test_a_runs_swin_of_another_model_is_refused(run_file, tmp_path, capsys, monkeypatch, task, route, other):
    """Nothing loads half: a run's Swin of another depth (model.kwargs) or another model is an error naming the file,
    what of it was read and, where the file records it, its model beside the model's; never a half-loaded backbone."""
    path = run_file(task, depths=(1, 1, 1, 1)) if other == "depth" else run_file(task, NANO)
    with pytest.raises(RuntimeError if route in CONVERTED_AS_IS else ValueError) as error:
        _loaded(route, path, tmp_path, capsys, monkeypatch)
    message = " ".join(str(error.value).split())
    assert ("layers.2.blocks.1." if other == "depth" else "layers.0.blocks.1.") in message  # the keys that differ
    if route in CONVERTED_AS_IS:
        return
    read = f"the file was read as the Swin of a swinlite {task} run's weights ({PREFIX[task]}*"
    assert read in message
    if route in ("segmentation", "detection"):
        assert message.startswith(f"model.pretrained {path}: "), message
    if route == "convert_checkpoint_model":
        assert f"error: {path}: " in message and not (tmp_path / "backbone.safetensors").exists()
    recorded = f"it records model {NANO}, the model is {PICO}"
    assert (recorded in message) == (other == "model" and route != "timm_overlay"), message


@pytest.mark.parametrize("task", LAYOUT)
def test_convert_checkpoint_writes_a_runs_swin_without_the_runs_metadata(run_file, tmp_path, capsys, monkeypatch, task):
    """The output is the Swin alone: its FPN and heads left out, and the run's metadata, which describes them (with it
    detect.py and segment.py took the backbone for a whole detector / UperNet), but for the Swin's model, which it
    records as a backbone's file does (no classifier), and the run's mean and std: without them load_model (so
    export_onnx.py, extract_features.py) and model.pretrained gave ImageNet's, not those the Swin was trained with."""
    path, out = run_file(task), tmp_path / "out.safetensors"
    code, printed = _convert(capsys, monkeypatch, str(path), str(out))
    assert code == 0, printed
    kept = (f"a {PICO} backbone; its model recorded (built by default); its normalization kept (mean=[0.3, 0.4, 0.5], "
            "std=[0.1, 0.2, 0.3]); the rest of the run's metadata, which describes")  # fmt: skip
    assert kept in printed
    meta = read_metadata(out)
    assert meta.pop("source") == str(path)
    assert meta == {"layout": LAYOUT[task], "swinlite": swinlite.__version__, "model": PICO,
                    "model_args": {"num_classes": 0}, "preprocessing": NORMALIZATION}  # fmt: skip
    assert load_file(out).keys() == _swin_in(path, task).keys()
    assert read_info(out) is None  # no classifier's record: plain weights to the classifier's scripts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the output norms load_model's model drops
        config = timm.data.resolve_model_data_config(swinlite.load_model(out))
    assert (config["mean"], config["std"]) == ((0.3, 0.4, 0.5), (0.1, 0.2, 0.3))


V2 = "swinlite_v2_pico_patch2_window4_32"
WINDOWS = {"window_size": 8, "pretrained_window_sizes": (4, 4, 4, 2)}  # a V2's: its weights do not hold them
SHOWN = "window_size=8, pretrained_window_sizes=[4, 4, 4, 2]"


def _v2_run(run_file: Callable[..., Path]) -> Path:
    """A detection run's file on a V2 Swin trained with WINDOWS (and a training setting)."""
    return run_file("detection", V2, drop_path_rate=0.1, **WINDOWS)


def _unkept(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings of ``caught`` that name a V2 file's windows the model was built without, from this file's line."""
    said = [w for w in caught if "records its" in str(w.message)]
    assert all(f"records its {V2} built with {SHOWN}" in str(w.message) and w.filename == __file__ for w in said)
    return [str(w.message) for w in said]


@pytest.mark.filterwarnings("ignore:dropping per-level output norms")
def test_convert_checkpoint_keeps_the_swin_settings_of_a_run(run_file, tmp_path, capsys, monkeypatch):
    """A V2 run trained with model.kwargs.window_size=8 gave a backbone that recorded nothing (its position-bias
    coordinates are no weights): model.pretrained=out.safetensors built the default window, computing something else,
    without a word; an EMA file's read as raw. It records the Swin's model and settings now, but training ones, and the
    kind of its weights: load_model rebuilds that Swin, load_checkpoint warns of the windows a model lacks."""
    path, out = tmp_path / "ema.safetensors", tmp_path / "out.safetensors"
    run = _v2_run(run_file)
    save_weights(path, read_state_dict(run), read_metadata(run) | {"weights": "ema"})
    code, printed = _convert(capsys, monkeypatch, str(path), str(out))
    assert code == 0, printed
    kept = f"a {V2} backbone; its model recorded (built with {SHOWN}, ema weights); its normalization kept (mean="
    assert kept in printed
    meta = read_metadata(out)
    assert meta["model"] == V2 and meta["weights"] == "ema"
    assert meta["model_args"] == {"window_size": 8, "pretrained_window_sizes": [4, 4, 4, 2], "num_classes": 0}
    model = swinlite.load_model(out)  # rebuilt as recorded
    assert model.layers[0].blocks[0].window == (8, 8) and model.num_classes == 0
    with pytest.raises(ValueError, match=f"^--model {PICO} contradicts {out}, which holds a {V2}; drop --model$"):
        swinlite.load_model(out, PICO)
    for kwargs in ({}, WINDOWS):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            swinlite.load_checkpoint(timm.create_model(V2, num_classes=0, out_norm=True, **kwargs), out)
        assert len(_unkept(caught)) == (not kwargs)


@pytest.mark.filterwarnings("ignore:dropping per-level output norms")
@pytest.mark.filterwarnings("ignore:.*its FPN weights")  # the test's FPN is of another width
@pytest.mark.parametrize("route", ["load_checkpoint", "fpn", "timm_overlay", "segmentation", "detection"])
def test_a_v2_runs_windows_a_model_leaves_out_are_warned_of(run_file, route):
    """A V2 detection run's file loaded its Swin into a model of the default window without a word on these routes
    (model.pretrained of a run warns): it computed something else. Warned of now, naming the windows; within a run
    not again (its checks said it before the data was read)."""
    path = _v2_run(run_file)

    def load() -> None:
        if route == "load_checkpoint":
            swinlite.load_checkpoint(timm.create_model(V2, num_classes=0, out_norm=True), path)
        elif route == "fpn":
            build_fpn_backbone(V2, checkpoint=path, fpn_channels=8)
        elif route == "timm_overlay":  # a classification run's model.pretrained takes this route
            timm.create_model(V2, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), num_classes=0)
        else:
            _task_model(route, path, V2)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load()
        if route not in ("load_checkpoint", "fpn"):  # a run's routes
            with pretrained_checked():
                load()
    assert len(_unkept(caught)) == 1


@pytest.mark.parametrize("task", LAYOUT)
def test_a_classification_run_names_a_file_that_does_not_fit(run_file, task):
    """Classification's model.pretrained goes through timm's loader, whose error named neither the file nor the
    model it records, where detection's and segmentation's name both."""
    path = run_file(task, NANO)
    with pytest.raises(ValueError) as error:
        create_model(ModelConfig(name=PICO, pretrained=str(path)), num_classes=3)
    message = " ".join(str(error.value).split())
    assert message.startswith(f"model.pretrained {path}: "), message
    assert f"it records model {NANO}, the model is {PICO}" in message


def _swin_without_norms(path: Path, task: str) -> dict[str, torch.Tensor]:
    """The Swin a run trained with ``model.kwargs.out_norm=false`` holds: no output norms, so no final norm either."""
    swin = {k.removeprefix(PREFIX[task]): v for k, v in read_state_dict(path).items() if k.startswith(PREFIX[task])}
    assert not any(k.startswith(("norm.", "out_norms.")) for k in swin)
    return swin


# (the run's task, the task its weights start, whether through convert_checkpoint.py's backbone file)
BACKBONE_CASES = [(task, target, False) for task in LAYOUT for target in LAYOUT if target != task]
BACKBONE_CASES += [(task, target, True) for task in LAYOUT for target in LAYOUT]


@pytest.mark.parametrize(("task", "target", "converted"), BACKBONE_CASES)
def test_a_run_without_output_norms_starts_a_detection_or_segmentation_backbone(
    run_file, tmp_path, capsys, monkeypatch, task, target, converted
):
    """A run trained with model.kwargs.out_norm=false has a Swin without a final norm (no last level's output norm
    stands for it): another run's model.pretrained refused it ("2 model weights missing from it: norm.weight,
    norm.bias"), though its features-only backbone prunes the final norm, and convert_checkpoint.py wrote a backbone
    of it that no loader took. Both load now: every weight the backbone uses from the file, bit for bit; the output
    norms the file lacks (the backbone's are on) start fresh, named in a warning."""
    path = run_file(task, out_norm=False)
    want = _swin_without_norms(path, task)
    if converted:
        backbone = tmp_path / "backbone.safetensors"
        code, printed = _convert(capsys, monkeypatch, str(path), str(backbone))
        assert code == 0, printed
        cause = "the run that wrote it trained with model.kwargs.out_norm=false, and its Swin has none"
        assert f"; it has no final norm: {cause}; it starts a detection or segmentation run" in printed
        path = backbone
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = _loaded(target, path, tmp_path, capsys, monkeypatch)
    fresh = ", ".join(f"out_norms.{i}.{p}" for i in range(4) for p in ("weight", "bias"))
    assert [str(w.message) for w in caught] == [f"not in the checkpoint, left at their initial values: {fresh}"]
    assert {k for k in loaded if not k.startswith("out_norms.")} == want.keys()
    assert all(torch.equal(loaded[k], v) for k, v in want.items())


@pytest.mark.parametrize("route", ["classification", "timm_overlay", "convert_checkpoint_model", "load_model"])
@pytest.mark.parametrize("task", LAYOUT)
def test_a_model_that_uses_the_final_norm_refuses_a_run_without_it_saying_why(
    run_file, tmp_path, capsys, monkeypatch, task, route
):
    """A classifier needs the final norm a run trained with model.kwargs.out_norm=false lacks: still refused, as
    nothing loads half, but with the cause, not a bare "2 model weights missing from it: norm.weight, norm.bias"."""
    path = run_file(task, out_norm=False)
    with pytest.raises(ValueError) as error:
        if route == "classification":
            create_model(ModelConfig(name=PICO, pretrained=str(path)), num_classes=3)
        elif route == "load_model":  # convert_checkpoint.py's backbone file, read by predict.py --model and the others
            out = tmp_path / "backbone.safetensors"
            assert _convert(capsys, monkeypatch, str(path), str(out))[0] == 0
            swinlite.load_model(out, PICO)
        else:
            _loaded(route, path, tmp_path, capsys, monkeypatch)
    message = " ".join(str(error.value).split())
    assert "it has no final norm (norm.*), which the model uses: " in message, message
    # the converted file's metadata records the run's layout
    assert "the run that wrote it trained with model.kwargs.out_norm=false, and its Swin has none" in message, message
    assert (
        "it starts a detection or segmentation backbone (which does not use the final norm), not this model" in message
    )
    assert "norm.weight, norm.bias" in message  # the keys, named after their cause


@pytest.mark.parametrize("task", LAYOUT)
def test_the_swin_of_a_run_without_output_norms_is_read_for_its_levels(run_file, task):
    """export_onnx.py --features, extract_features.py and visualize.py read a run's Swin through
    swinlite.export.run_backbone, which refused one trained with model.kwargs.out_norm=false ("it has no final norm
    (norm.*), which the model uses"), with or without --no-out-norm: it is that Swin, its levels the raw ones."""
    path = run_file(task, out_norm=False)
    want = _swin_without_norms(path, task)
    for out_norm in (None, False):  # the run's own choice (none), and --no-out-norm
        got = run_backbone(path, out_norm).state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], v) for k, v in want.items())


def test_a_runs_loading_option_is_no_setting_of_its_converted_model():
    """A run's ``model.kwargs.pretrained_strict`` (how its file loaded) was recorded as a setting of the converted
    backbone's model and printed as one ("built with pretrained_strict=false")."""
    script = runpy.run_path(str(SCRIPTS / "convert_checkpoint.py"))
    run = {"detector": {"name": PICO, "kwargs": {"pretrained_strict": False, "mask_padding": False}}}
    recorded = script["model_record"](Path("run.safetensors"), run, None, {})
    assert recorded == {"model": PICO, "model_args": {"mask_padding": False, "num_classes": 0}}
    assert "pretrained_strict" not in script["model_note"](run, recorded, None)


def test_a_save_for_hf_folders_swinlite_weights_need_no_conversion(tmp_path, capsys, monkeypatch):
    """Converted, they recorded nothing of the config.json beside them (model, settings, preprocessing, classes): a V2
    of window 2 loaded at the variant's window 4, 0.6 off. A timm Swin's folder converts as any timm file."""
    timm.models.save_for_hf(timm.create_model(PICO), tmp_path / "lite", safe_serialization=True)
    code, printed = _convert(
        capsys, monkeypatch, str(tmp_path / "lite" / "model.safetensors"), str(tmp_path / "o.safetensors")
    )
    assert code == 2 and "needs no conversion: it is the weights of a folder timm's save_for_hf wrote" in printed
    reference = timm.create_model("swin_tiny_patch4_window7_224", depths=(1, 1, 1, 1), embed_dim=16, num_heads=(1,) * 4)
    timm.models.save_for_hf(reference, tmp_path / "timm", safe_serialization=True)
    weights, out = str(tmp_path / "timm" / "model.safetensors"), str(tmp_path / "converted.safetensors")
    assert _convert(capsys, monkeypatch, weights, out)[0] == 0
