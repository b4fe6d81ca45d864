"""Convert a Swin checkpoint (swinlite, timm, Microsoft, torchvision, mmdet, Hugging Face) to swinlite safetensors.

Examples:
    python scripts/convert_checkpoint.py swin_tiny_patch4_window7_224.pth swin_t.safetensors
    python scripts/convert_checkpoint.py swin_b_224.pth swin_b_384.safetensors --model swinlite_base_patch4_window12_384

Keys saved behind a DistributedDataParallel / DataParallel wrapper's "module." are read without it. A timm training
checkpoint holding EMA weights (state_dict_ema) gives them, as timm's loader does, and the output records
"weights": "ema". A file fitted to
--model (a timm, Microsoft or torchvision checkpoint) records that model: model, and model_args with num_classes, the
output's classifier's outputs (0 where it holds none), so predict.py, evaluate.py, export_onnx.py, extract_features.py
and swinlite.load_model read it without --model (its classes unnamed, as the input's). A classifier's weights file
written by swinlite's training (best.safetensors, last.safetensors, ema.safetensors, best_ema.safetensors) keeps its
metadata (model, classes, preprocessing), so predict.py, export_onnx.py and the other scripts read the output as they
read the input; its weights are checked against the model it records, which --model and --num-classes must not
contradict. A detection or segmentation run's file gives its Swin, a backbone (its FPN and heads left out, and the run's
metadata, which describes them; trained with model.kwargs.out_norm=false, it has no final norm, and starts detection and
segmentation runs alone, whose backbones do not use one): the output records that Swin's model and its model.kwargs but
for training settings (as model and model_args, a V2's window_size and pretrained_window_sizes, which its weights do not
hold, among them; with --model, that model as built by default), ema where the run's file holds EMA weights, and the
mean and std the run normalized its input with (its backbone was trained on them: model.pretrained takes them, and
swinlite.load_model gives them in the model's pretrained_cfg), for model.pretrained, swinlite.load_model and
swinlite.load_checkpoint to build or check the model. A run's file of a task swinlite does not ship (a
swinlite.engine.Task of your own) keeps its metadata whole, its task too, so the scripts and swinlite.load_model refuse
the output as they refuse the input ("a <task> checkpoint"): read it with the task's own code, or its Swin (at the top
level of its model) through swinlite.load_checkpoint, timm.create_model(..., pretrained_cfg_overlay=dict(file=...))
or model.pretrained. resume.pt is a
resume state that records no metadata: its conversion holds its raw weights only (a warning says so where it also
holds their EMA); convert best.safetensors, last.safetensors or ema.safetensors instead. The weights of a swinlite
model's folder that timm's save_for_hf wrote need no conversion, and are refused: the scripts read them as they are,
with their config.json (a timm Swin's folder converts as any timm file).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _cli import Parser, check_model_file, run, user_path

# what a Swin file without its final norm is for (a classifier refuses it)
BACKBONE_ONLY = (
    "it starts a detection or segmentation run (model.pretrained), whose backbone does not use one, not a classifier"
)

if TYPE_CHECKING:
    import torch
    from torch import nn


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument(
        "input",
        type=user_path("a checkpoint file"),
        help="checkpoint to convert (.pth/.pt/.bin torch file or .safetensors)",
    )
    parser.add_argument(
        "output", type=user_path("a .safetensors file"), help="where to write swinlite weights (.safetensors)"
    )
    parser.add_argument(
        "--model",
        help="swinlite model name to fit the weights to (resizes bias tables to its window, checks every key and "
        "shape, the first conv's channels too; keeps the checkpoint's classifier, dropped only where --num-classes "
        "asks for another size), and records it in the output, for the scripts to read without --model; without it "
        "the layout is converted as is",
    )
    parser.add_argument("--num-classes", type=int, help="classifier size of --model (default: the checkpoint's)")
    args = parser.parse_args(argv)
    if args.output.suffix != ".safetensors":
        parser.error(f"output must end in .safetensors, got {args.output}")
    if args.num_classes is not None and args.model is None:
        parser.error("--num-classes sizes the classifier of --model; pass --model too")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_model_file(args.input, "checkpoint")  # before torch loads; read and checked again later
    import swinlite
    from swinlite.convert import (
        RUN_SWIN_PREFIXES,
        convert_state_dict,
        describe_layout,
        detect_layout,
        implied_v2_windows,
        misfit_note,
        no_final_norm_cause,
    )
    from swinlite.files import remove_interrupted_writes
    from swinlite.io import check_output, read_metadata, read_state_dict, save_safetensors, weights_kind
    from swinlite.metadata import is_model_record
    from swinlite.weights import warn_if_resume_with_ema

    check_output(args.output, [args.input], option="output")
    check_not_shared(args.input)
    checkpoint = read_state_dict(args.input)
    try:
        layout = detect_layout(checkpoint)
    except ValueError as e:
        raise ValueError(f"{args.input}: {e}") from None
    # a detection or segmentation run's file gives its Swin (a backbone), which the run's metadata does not describe;
    # such a file's conversion, or one fitted to --model, records its model alone (swinlite.metadata.is_model_record)
    metadata = read_metadata(args.input)
    bare = layout in RUN_SWIN_PREFIXES or is_model_record(metadata)
    described = {} if bare else described_model(metadata)
    model = fitting_model(args, described, checkpoint)
    try:  # with a model: every model weight but a new classifier / detection norms must come from the file
        state_dict = convert_state_dict(checkpoint, model)
    except ValueError as e:
        note = misfit_note(metadata, args.model) if args.model else ""  # a run's file records its Swin
        raise ValueError(f"{args.input}: {e}{note}") from None
    if model is not None:
        check_first_conv(args.input, state_dict, model)
    recorded = described or (model_record(args.input, metadata, args.model, state_dict) if bare or args.model else {})
    if weights_kind(args.input) == "ema":  # a timm training checkpoint's EMA weights, which it converts: said so
        recorded |= {"weights": "ema"}
    written = recorded | {"source": str(args.input), "layout": layout, "swinlite": swinlite.__version__}
    remove_interrupted_writes(args.output)  # of a killed run's write (save_safetensors writes atomically)
    save_safetensors(args.output, state_dict, written)
    warn_if_resume_with_ema(args.input)
    if "model" in recorded and not described:
        outputs = recorded["model_args"]["num_classes"]
        what = "backbone" if outputs == 0 else f"classifier of {outputs} unnamed classes"
        kept = f": a {recorded['model']} {what}{model_note(metadata, recorded, args.model)}"
    elif bare or layout == "timm-features":
        kept = ": a Swin backbone"
    else:
        kept = (
            f", its metadata kept ({described.get('model') or described.get('task') or 'its classes'})"
            if described
            else ""
        )
    coords = implied_v2_windows(checkpoint) if model is None else None
    if coords is not None:  # fitted to --model, they were compared with its own (a warning where they differ)
        kept += (
            f"; its Swin-V2 coordinates (relative_coords_table: {coords}) are not kept: load it into a model of "
            "those windows and pretrained_window_sizes"
        )
    if "norm.weight" not in state_dict:  # without --model only: the fit to its model needs the final norm
        kept += f"; it has no final norm: {no_final_norm_cause(layout)}; {BACKBONE_ONLY}"
    print(f"converted {len(state_dict)} tensors from {describe_layout(layout)} -> {args.output}{kept}")


def check_not_shared(source: Path) -> None:
    """ValueError for the weights of a swinlite model's folder that ``timm.models.save_for_hf`` wrote: already in
    swinlite's layout, read as they are (:func:`swinlite.load_model`, every script's --checkpoint) with the model,
    settings, preprocessing and class names of its config.json, which a converted file would not keep (its conversion
    recorded none of them: a V2 of other windows loaded at the variant's). A timm model's folder (a hub snapshot of
    timm's Swin) converts as any timm file."""
    from swinlite.weights import timm_config

    config = timm_config(source)
    if config is not None and config[0].startswith("swinlite_"):
        raise ValueError(
            f"{source} needs no conversion: it is the weights of a folder timm's save_for_hf wrote, which "
            "swinlite.load_model and every script's --checkpoint read as they are, with its config.json's model "
            f"({config[0]}), settings, preprocessing and class names (a converted file would keep none of them)"
        )


def check_first_conv(source: Path, state_dict: dict[str, torch.Tensor], model: nn.Module) -> None:
    """ValueError unless the converted first conv takes the channels of ``model`` (the one the weights are fitted to):
    convert_state_dict passes one of another channel count on, for timm's loader to adapt to ``in_chans``, and the
    output would not load into the model. Refused rather than adapted: this script has no in_chans to adapt it to, and
    3 channels summed from 1 would be weights of another model than the file's."""
    from swinlite.convert import FIRST_CONV, shape_mismatch

    shape, want = state_dict[FIRST_CONV].shape, model.get_parameter(FIRST_CONV).shape
    if shape[1] != want[1]:
        raise ValueError(
            f"{source}: {shape_mismatch(FIRST_CONV, shape, want)}: its first conv takes {shape[1]}-channel images, the "
            f"model {want[1]}; convert it without --model and load it into a model of in_chans={shape[1]} "
            f"(swinlite.load_model(path, model, in_chans={shape[1]}))"
        )


def model_record(
    source: Path, metadata: dict[str, Any], fitted_to: str | None, state_dict: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """What an output that records its model alone (:func:`swinlite.metadata.is_model_record`) records of it:
    ``fitted_to`` (--model) as built by default, else the Swin the input (``source``, whose metadata is ``metadata``:
    a detection or segmentation run's file, another model record) records, with its constructor arguments but for
    training settings (a V2's windows, which its weights do not hold); ``num_classes``, the outputs of the classifier
    ``state_dict`` (the output's) holds (0: none, a backbone's); the kind of its weights (``ema``: a run's
    ema.safetensors); and as ``preprocessing`` the mean and std the input records (a run's, which its backbone was
    trained on inputs normalized with: :func:`swinlite.metadata.recorded_preprocessing`). {} where neither names a
    model (a run's state dict saved bare).

    Raises:
        ValueError: a recorded mean or std that is no list of numbers.
    """
    from swinlite.convert import recorded_swin, recorded_swin_kwargs
    from swinlite.metadata import KINDS, recorded_preprocessing

    name = fitted_to or recorded_swin(metadata)
    if name is None:
        return {}
    kwargs = {} if fitted_to else recorded_swin_kwargs(metadata) or {}
    classifier = state_dict.get("head.fc.weight")  # [num_classes, C]
    outputs = 0 if classifier is None else int(classifier.shape[0])
    model_args = model_settings(kwargs)
    kind, normalization = metadata.get("weights"), recorded_preprocessing(metadata, source)
    record = {"model": name, "model_args": model_args | {"num_classes": outputs}}
    record |= {"weights": kind} if kind in KINDS else {}
    return record | ({"preprocessing": normalization} if normalization else {})


def model_settings(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments of ``kwargs`` (a model's, as a file records them) that set what the model computes: not
    a training setting, nor how a file loads into it, nor its classifier's size (the converted file's own)."""
    from swinlite.weights import LOADING_ONLY, TRAINING_ONLY

    return {k: v for k, v in kwargs.items() if k not in (*TRAINING_ONLY, *LOADING_ONLY, "num_classes")}


def model_note(metadata: dict[str, Any], recorded: dict[str, Any], fitted_to: str | None) -> str:
    """What an output that records its model alone keeps of the input's metadata (``recorded``:
    :func:`model_record`'s), for the line the script prints: the settings its model is recorded with, those of the
    run's that --model (``fitted_to``) leaves out, the mean and std it keeps, and that the rest of the run's metadata,
    which describes its whole model, is not kept."""
    from swinlite.convert import recorded_swin_kwargs
    from swinlite.engine.config import flow_yaml

    def shown(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={flow_yaml(v)}" for k, v in values.items())

    settings = shown(model_settings(recorded["model_args"]))
    note = f"; its model recorded ({'built with ' + settings if settings else 'built by default'}"
    note += f", {recorded['weights']} weights)" if "weights" in recorded else ")"
    unkept = shown(model_settings(recorded_swin_kwargs(metadata) or {})) if fitted_to else ""
    if unkept:
        note += f"; fitted to --model as built by default, without the input's {unkept}"
    if "preprocessing" in recorded:
        note += f"; its normalization kept ({shown(recorded['preprocessing'])})"
    if "task" in metadata:  # a run's file (a backbone's records its model alone)
        note += "; the rest of the run's metadata, which describes its whole model, is not kept"
    return note


def described_model(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` (a file's) if it describes its model as the scripts read it, else {} (a torch file's, another code
    base's such as Hugging Face's {"format": "pt"}): a classifier's model or classes (swinlite.metadata.read_info),
    or another task's (the detection and segmentation loaders). The output keeps it, for predict.py, export_onnx.py
    and the other scripts to read."""
    classifier = metadata.get("task") in (None, "classification")  # null: no task recorded, as read_info reads it
    return metadata if not classifier or "model" in metadata or "classes" in metadata else {}


def fitting_model(args, recorded: dict[str, Any], checkpoint: dict[str, torch.Tensor]) -> nn.Module | None:
    """The model the weights are fitted to, on the meta device: the classifier ``recorded`` describes (its metadata
    kept in the output describes that model only, so --model and --num-classes must agree with it), else --model's
    with --num-classes outputs (default: as many as ``checkpoint``'s classifier, none without one), else None (the
    layout converted as it is).

    Raises:
        ValueError: metadata predict.py would refuse, a flag that contradicts it, a model that cannot be built.
    """
    import torch

    from swinlite.metadata import parse_info
    from swinlite.weights import check_agrees, check_model_name, classifier_size, create_for_file

    if recorded and recorded.get("task") in (None, "classification"):
        info = parse_info(recorded, str(args.input))
        check_agrees(args.input, info, args.model, args.num_classes, {})  # the kept metadata describes its model
        name, kwargs = info.model, info.model_args
    elif args.model is not None:
        name, kwargs = args.model, None
    else:
        return None
    try:
        check_model_name(name, "swinlite_*")
    except ValueError as e:
        raise ValueError(f"--model {name}: {e}" if kwargs is None else f"{args.input} records {name}: {e}") from None
    if kwargs is None:  # --model: the checkpoint's classifier is kept unless --num-classes asks for another size
        try:
            found = classifier_size(name, checkpoint)
        except ValueError as e:
            raise ValueError(f"{args.input}: {e}") from None
        # a classifier the output cannot hold (it was warned "left at initial values", the output holding none)
        if found == 0 and args.num_classes:
            raise ValueError(
                f"{args.input} holds no classifier: --num-classes {args.num_classes} sizes one the output cannot hold "
                f"(it holds the file's weights); drop --num-classes: a model built with num_classes="
                f"{args.num_classes} starts its classifier fresh when it loads the output"
            )
        kwargs = {"num_classes": found if args.num_classes is None else args.num_classes}
    with torch.device("meta"):
        return create_for_file(args.input, name, **kwargs)


if __name__ == "__main__":
    sys.exit(run(main, one_process=True))
