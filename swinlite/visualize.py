"""Pictures of a Swin: relative position bias as heat maps, and the feature levels of one image.

Every picture is drawn into PNG bytes first and the files are written last (:func:`write_pngs`), so a model or an
image the drawing refuses leaves nothing behind, and a kill mid-write never leaves a truncated PNG under its name.
"""

import io
import textwrap
from collections.abc import Mapping
from pathlib import Path

import torch
from PIL import Image
from torch import nn
from torchvision.transforms import functional as TF

from .files import atomic_write_bytes, remove_interrupted_writes
from .inference import eval_mode
from .models.swin import ContinuousPositionBias, SwinTransformer
from .script import extra_error

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # drawn on the Agg canvas: no pyplot, no display
    from matplotlib.text import Text
except ModuleNotFoundError as e:  # the [train] extra's, named to a Python user as the scripts name it
    raise extra_error(e, "swinlite.visualize") from None


def offset_grid(rel_pos: nn.Module) -> torch.Tensor:
    """A bias module's bias by offset, as images [heads, 2*Wh-1, 2*Ww-1].

    Read from the module's own (heads, N, N) bias, so Swin's learned table and Swin-V2's continuous position bias
    (16·sigmoid(MLP(offset)), in (0, 16)) come out alike: entry (dy + Wh-1, dx + Ww-1) is the bias added when the
    query sits (dy, dx) below/right of the key.
    """
    with torch.no_grad():
        bias = rel_pos().float()  # (heads, N, N)
    wh, ww = rel_pos.window
    grid = bias.new_empty(bias.shape[0], (2 * wh - 1) * (2 * ww - 1))  # (heads, offsets)
    grid[:, rel_pos.index.flatten()] = bias.flatten(1)  # every offset occurs in the window; its pairs share one value
    return grid.view(-1, 2 * wh - 1, 2 * ww - 1)


def bias_tables(model: SwinTransformer) -> list[torch.Tensor]:
    """Per stage, every block's :func:`offset_grid` [blocks, heads, 2*Wh-1, 2*Ww-1]."""
    return [torch.stack([offset_grid(block.attn.rel_pos) for block in stage.blocks]) for stage in model.layers]


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (written by :func:`write_pngs` once every picture is drawn)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def fitted_suptitle(fig: Figure, text: str, fontsize: float) -> Text:
    """``fig.suptitle(text)`` wrapped (textwrap, at spaces) into as few lines as fit the figure's width; the figure
    grows by the lines added, so the plots keep their size (its constrained layout keeps them below the title).

    A one-head stage's figure is narrower than the title on one line.
    """
    FigureCanvasAgg(fig)  # a renderer to measure the text with (a bare Figure has none)
    renderer = fig.canvas.get_renderer()
    room = 0.96 * fig.bbox.width
    title = fig.suptitle(text, fontsize=fontsize)
    columns = len(text)
    while title.get_window_extent(renderer).width > room and columns > 1:
        columns = min(columns - 1, int(columns * room / title.get_window_extent(renderer).width))
        title.set_text(textwrap.fill(text, max(columns, 1), break_long_words=False))
    added = title.get_text().count("\n")
    fig.set_figheight(fig.get_figheight() + added * 1.2 * fontsize / 72)
    return title


def bias_figure(tables: torch.Tensor, stage: int, continuous: bool) -> Figure:
    """A grid of heat maps of one stage's ``tables`` [blocks, heads, ., .], blocks down, heads across.

    Swin's table is signed (colours centred on 0); Swin-V2's continuous bias is in (0, 16) (colours from its least
    to its largest value in the stage).
    """
    blocks, heads = tables.shape[:2]
    fig = Figure(figsize=(1.6 * heads + 1, 1.6 * blocks + 0.6), layout="constrained")
    axes = fig.subplots(blocks, heads, squeeze=False)
    vmax = float(tables.abs().max()) or 1.0
    colours = dict(cmap="viridis") if continuous else dict(cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    for b in range(blocks):
        for h in range(heads):
            ax = axes[b][h]
            image = ax.imshow(tables[b, h].numpy(), **colours)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"block {b} head {h}", fontsize=7)
    what = "continuous position bias 16·sigmoid(MLP)" if continuous else "relative position bias"
    fig.colorbar(image, ax=axes, shrink=0.8)
    fitted_suptitle(fig, f"stage {stage}: {what} (row: dy, column: dx)", fontsize=9)
    return fig


def bias_pngs(model: SwinTransformer) -> dict[str, bytes]:
    """``bias_stage{i}.png`` for each stage: its :func:`bias_figure`, as PNG bytes."""
    pngs = {}
    for i, (stage, tables) in enumerate(zip(model.layers, bias_tables(model), strict=True)):
        continuous = isinstance(stage.blocks[0].attn.rel_pos, ContinuousPositionBias)
        pngs[f"bias_stage{i}.png"] = png_bytes(bias_figure(tables, i, continuous))
    return pngs


def model_input(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """``image`` in RGB, resized (bicubic) to ``size`` (H, W): what the model sees."""
    return image.convert("RGB").resize((size[1], size[0]), Image.Resampling.BICUBIC)


def feature_means(model: SwinTransformer, image: Image.Image, levels: list[int] | None = None) -> list[torch.Tensor]:
    """Channel mean of each feature level [H_i, W_i] of ``levels`` (None: every level) for ``image`` as it is
    (:func:`model_input`'s), by the model in eval mode (:func:`swinlite.inference.eval_mode`: its modules' modes as
    they were after)."""
    cfg = model.pretrained_cfg
    x = TF.normalize(TF.to_tensor(image), cfg["mean"], cfg["std"])[None]  # (1, 3, H, W)
    with torch.no_grad(), eval_mode(model):
        maps = model.forward_intermediates(x, levels, intermediates_only=True)
    return [level[0].mean(dim=0) for level in maps]


def features_png(
    model: SwinTransformer, image: Image.Image, size: tuple[int, int], levels: list[int] | None = None
) -> bytes:
    """``image`` resized to ``size`` (H, W), as the model sees it, and the channel mean of each feature level side
    by side (``levels``; None: every level), as PNG bytes."""
    seen = model_input(image, size)
    levels = list(range(len(model.feature_info))) if levels is None else levels
    means = feature_means(model, seen, levels)
    fig = Figure(figsize=(3 * (len(means) + 1), 3.2), layout="tight")
    axes = fig.subplots(1, len(means) + 1)
    axes[0].imshow(seen)
    original = "" if seen.size == image.size else f" (from {image.height}x{image.width})"
    axes[0].set_title(f"input {seen.height}x{seen.width}{original}", fontsize=9)
    for ax, mean, info in zip(axes[1:], means, [model.feature_info[i] for i in levels], strict=True):
        ax.imshow(mean.numpy(), cmap="viridis")
        ax.set_title(f"{info['module']}: stride {info['reduction']}, {info['num_chs']} ch", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    return png_bytes(fig)


def write_pngs(pngs: Mapping[str, bytes], folder: Path, made: bool) -> list[Path]:
    """Write each PNG (name -> bytes) into ``folder`` atomically; returns their paths.

    ``made``: the folder was made for this run (the script's output lock made it, and removes it again when empty). A
    write that fails (a full disk) into such a folder removes the files written, so a failed run does not look like one
    that drew something; into a folder that was there, the files written so far stay (each whole: they may have
    replaced an earlier run's, which removing them would not bring back). The temporary files of writes of these
    names a kill broke off (:func:`swinlite.files.remove_interrupted_writes`) are removed first.
    """
    for name in pngs:
        remove_interrupted_writes(folder / name)
    paths: list[Path] = []
    try:
        for name, data in pngs.items():
            paths.append(folder / name)
            atomic_write_bytes(paths[-1], data)
    except BaseException:
        if made:
            for path in paths:
                path.unlink(missing_ok=True)
        raise
    return paths
