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
import random
import statistics
import time
from collections.abc import Callable

import timm
import torch
import torch._inductor.config
import torch.nn.functional as F
from torch import nn

from swinlite.models.swin import ContinuousPositionBias, RelativePositionBias

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


def compiled_step(model: nn.Module, x: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """Inference through ``torch.compile`` with freezing, compiled by the first call (made here)."""
    compiled = torch.compile(model, dynamic=False)

    def step() -> None:
        with torch._inductor.config.patch(freezing=True), torch.inference_mode():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                compiled(x)

    start = time.perf_counter()
    step()
    print(f"  compiled {type(model).__name__} in {time.perf_counter() - start:.0f} s", flush=True)
    return step


def eager_step(model: nn.Module, x: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """Inference in eager mode (swinlite's row blocks), under bf16 autocast or in fp32."""

    @torch.inference_mode()
    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(x)

    return step


def train_step(model: nn.Module, x: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """One forward + cross-entropy + backward, under bf16 autocast or in fp32."""
    target = torch.zeros(x.shape[0], dtype=torch.long)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), target)
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def shuffled_rounds(steps: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Median seconds of each step over ``rounds`` rounds, each round in a random order."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--model", choices=tuple(PAIRS), default="v1", help="Swin-T (v1) or Swin-V2-T (v2)")
    args = parser.parse_args()
    lite_name, timm_name, size = PAIRS[args.model]
    torch.manual_seed(0)
    lite = timm.create_model(lite_name, drop_path_rate=0.0)
    models = {"contiguous": lite, "strided": strided_copy(lite), "timm": timm.create_model(timm_name)}
    x = torch.randn(BATCH, 3, size, size)
    for mode in args.modes.split(","):
        kind, precision = mode.split("-")
        bf16 = precision == "bf16"
        build = {"compiled": compiled_step, "eager": eager_step, "train": train_step}[kind]
        steps = {name: build(model.train(kind == "train"), x, bf16) for name, model in models.items()}
        for step in steps.values():  # warm-up
            step()
        ms = {name: 1e3 * s for name, s in shuffled_rounds(steps, ROUNDS).items()}
        figures = ", ".join(f"{name} {t:.0f} ms ({ms['timm'] / t:.2f}x timm)" for name, t in ms.items())
        print(
            f"{mode}, {lite_name} batch {BATCH} at {size}x{size}, {torch.get_num_threads()} threads, "
            f"median of {ROUNDS}: "
            f"{figures}; contiguous {ms['strided'] / ms['contiguous']:.2f}x strided",
            flush=True,
        )


if __name__ == "__main__":
    main()
