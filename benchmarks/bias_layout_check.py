"""The relative position bias's memory layout, contiguous (heads, N, N) against the (N, N, heads) memory a permuted
view of the gathered table has, on the same Swin-T weights and against timm, timed alternately in random order.

The layout reaches every kernel that adds the bias to the logits. In a graph compiled with inductor's freezing the
bias is a constant and keeps its layout; with the heads innermost, the fused bias + softmax kernels read it at a
stride and inductor emits them as scalar loops. Figures: benchmarks/kernels.md, "The relative position bias's layout".

    python benchmarks/bias_layout_check.py                        # compiled and eager inference, train steps
    python benchmarks/bias_layout_check.py --modes compiled-bf16
    python benchmarks/bias_layout_check.py --model v2 --modes compiled-bf16,eager-bf16   # Swin-V2-T at 256²
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import timm
import torch
from torch import nn

from swinlite.models.swin import ContinuousPositionBias, RelativePositionBias

sys.path.insert(0, str(Path(__file__).parent))
from swinbench.choices import parse_modes  # noqa: E402
from swinbench.compiled import frozen_compiled_step  # noqa: E402
from swinbench.swin import make_step  # noqa: E402
from swinbench.timing import shuffled_seconds  # noqa: E402

BATCH, ROUNDS = 8, 11
PAIRS = {  # --model: swinlite's, timm's, input size
    "v1": ("swinlite_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224", 224),
    "v2": ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256", 256),
}
MODES = ("compiled-bf16", "compiled-fp32", "eager-bf16", "eager-fp32", "train-bf16", "train-fp32")


class StridedBias(RelativePositionBias):
    """The bias as a permuted view of the gathered table: (heads, N, N) over (N, N, heads) memory."""

    def forward(self) -> torch.Tensor:
        bias = self.table[self.index.view(-1)]  # (N*N, heads)
        return bias.view(self.num_tokens, self.num_tokens, self.num_heads).permute(2, 0, 1)


class StridedCpb(ContinuousPositionBias):
    """Swin-V2's bias, 16·sigmoid of the gathered table, as a permuted view: (heads, N, N) over (N, N, heads)."""

    def forward(self) -> torch.Tensor:
        table = self.mlp(self.coords)  # (rows, heads)
        bias = table[self.index.view(-1)].view(self.num_tokens, self.num_tokens, self.num_heads)
        return 16 * torch.sigmoid(bias.permute(2, 0, 1))


def strided_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose relative position biases keep the strided layout (a per-instance class swap, so a
    compiled graph of either model traces its own)."""
    strided = copy.deepcopy(model)
    strided_class = {RelativePositionBias: StridedBias, ContinuousPositionBias: StridedCpb}
    for module in strided.modules():
        if type(module) in strided_class:
            module.__class__ = strided_class[type(module)]
    return strided


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--model", choices=tuple(PAIRS), default="v1", help="Swin-T (v1) or Swin-V2-T (v2)")
    args = parser.parse_args()
    try:
        modes = parse_modes(args.modes, MODES)
    except ValueError as e:
        parser.error(str(e))
    lite_name, timm_name, size = PAIRS[args.model]
    torch.manual_seed(0)
    lite = timm.create_model(lite_name, drop_path_rate=0.0)
    models = {"contiguous": lite, "strided": strided_copy(lite), "timm": timm.create_model(timm_name)}
    x = torch.randn(BATCH, 3, size, size)
    for mode in modes:
        kind, precision = mode.split("-")
        if kind == "compiled":
            steps = {
                name: frozen_compiled_step(name, model.eval(), x, bf16=precision == "bf16")
                for name, model in models.items()
            }
        else:  # eager inference (swinlite's row blocks) or a train step without an optimizer
            task = "inference" if kind == "eager" else "train"
            steps = {name: make_step(model, x, task, precision, optimizer=False) for name, model in models.items()}
        times = shuffled_seconds(steps, lambda name: None, warmup=1, repeats=ROUNDS)
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        figures = ", ".join(f"{name} {t:.0f} ms ({ms['timm'] / t:.2f}x timm)" for name, t in ms.items())
        print(
            f"{mode}, {lite_name} batch {BATCH} at {size}x{size}, {torch.get_num_threads()} threads, "
            f"median of {ROUNDS}: "
            f"{figures}; contiguous {ms['strided'] / ms['contiguous']:.2f}x strided",
            flush=True,
        )


if __name__ == "__main__":
    main()
