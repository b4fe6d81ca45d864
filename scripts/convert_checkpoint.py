"""Convert a Swin checkpoint (swinlite, timm, Microsoft, torchvision, mmdet, Hugging Face) to swinlite safetensors.

Examples:
    python scripts/convert_checkpoint.py swin_tiny_patch4_window7_224.pth swin_t.safetensors
    python scripts/convert_checkpoint.py swin_b_224.pth swin_b_384.safetensors --model swinlite_base_patch4_window12_384
"""

from __future__ import annotations

import sys
from pathlib import Path

from _cli import Parser, run


def parse_args(argv: list[str] | None = None):
    parser = Parser(__doc__)
    parser.add_argument("input", type=Path, help="checkpoint to convert (.pth/.pt/.bin torch file or .safetensors)")
    parser.add_argument("output", type=Path, help="where to write swinlite weights (.safetensors)")
    parser.add_argument(
        "--model",
        help="swinlite model name to fit the weights to (resizes bias tables to its window, drops a classifier of "
        "another size, checks every key); without it the layout is converted as is",
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
    import timm

    import swinlite
    from swinlite.convert import convert_state_dict, detect_layout
    from swinlite.io import check_output, read_state_dict, save_safetensors
    from swinlite.weights import check_model_name

    check_output(args.output, [args.input], option="output")
    model = None
    if args.model:
        check_model_name(args.model, "swinlite_*")
        kwargs = {} if args.num_classes is None else {"num_classes": args.num_classes}
        model = timm.create_model(args.model, device="meta", **kwargs)
    checkpoint = read_state_dict(args.input)
    try:  # with --model: every model weight but a new classifier / detection norms must come from the file
        layout = detect_layout(checkpoint)
        state_dict = convert_state_dict(checkpoint, model)
    except ValueError as e:
        raise ValueError(f"{args.input}: {e}") from None
    save_safetensors(
        args.output, state_dict, {"source": str(args.input), "layout": layout, "swinlite": swinlite.__version__}
    )
    print(f"converted {len(state_dict)} tensors from the {layout} layout -> {args.output}")


if __name__ == "__main__":
    sys.exit(run(main))
