r"""Draw a swinlite model: its relative position bias tables and the feature levels of one image (PNG).

Example:
    python scripts/visualize.py --model swinlite_tiny_patch4_window7_224 --checkpoint swin_t.pth \
        --image cat.jpg --output plots/

Writes plots/bias_stage{i}.png (per stage a grid of heat maps, blocks down, heads across; entry
(dy, dx) is the bias between tokens that far apart) and, with --image, plots/features.png (the
image and each level's channel mean).
"""

import argparse
from pathlib import Path

import timm
from PIL import Image

import swinlite  # noqa: F401  (registers the models)
from swinlite.convert import load_checkpoint
from swinlite.visualize import plot_bias_tables, plot_feature_means


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", required=True, help="registered swinlite model, e.g. swinlite_tiny_patch4_window7_224"
    )
    parser.add_argument("--checkpoint", help="weights in any layout swinlite.convert_state_dict reads")
    parser.add_argument("--image", type=Path, help="an image for the feature-level plot")
    parser.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), help="input size (default: the model's)")
    parser.add_argument("--output", required=True, type=Path, help="folder for the PNG files")
    args = parser.parse_args(argv)
    if args.model not in timm.list_models("swinlite_*"):
        parser.error(f"--model must be one of {', '.join(timm.list_models('swinlite_*'))}; got {args.model!r}")
    if args.image is not None and not args.image.is_file():
        parser.error(f"--image {str(args.image)!r} is not a file")
    return args


def main(argv: list[str] | None = None) -> list[Path]:
    args = parse_args(argv)
    model = timm.create_model(args.model)
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint)
    paths = plot_bias_tables(model, args.output)
    if args.image is not None:
        size = tuple(args.size) if args.size else tuple(model.pretrained_cfg["input_size"][1:])
        with Image.open(args.image) as image:
            paths.append(plot_feature_means(model, image, size, args.output / "features.png"))
    print("wrote " + ", ".join(str(p) for p in paths))
    return paths


if __name__ == "__main__":
    main()
