"""The benchmark's model sizes, models, tasks, precisions, input sizes and runs: torch-free, for ``--help``."""

from __future__ import annotations

# size -> (swinlite model, timm model, torchvision builder)
SIZES: dict[str, tuple[str, str, str]] = {
    "tiny": ("swinlite_tiny_patch4_window7_224", "swin_tiny_patch4_window7_224", "swin_t"),
    "small": ("swinlite_small_patch4_window7_224", "swin_small_patch4_window7_224", "swin_s"),
    "base": ("swinlite_base_patch4_window7_224", "swin_base_patch4_window7_224", "swin_b"),
    "v2_tiny": ("swinlite_v2_tiny_window8_256", "swinv2_tiny_window8_256", "swin_v2_t"),
}
# square input size of each size's models when --img-size is not given
IMG_SIZES: dict[str, int] = {"tiny": 224, "small": 224, "base": 224, "v2_tiny": 256}
MIN_IMG_SIZE = 32  # the smallest input side benchmarked: one token in the last stage
PATCH = 4  # the patch side of every size's models
MODELS = ("swinlite", "timm", "torchvision")
TASKS = ("inference", "train")
PRECISIONS = ("fp32", "bf16")

# The runs of scripts/benchmark.py, by the option that chooses one ("": none, the side-by-side benchmark), and the
# options each one reads beyond EVERY_RUN's; any other option given with it is an error (it would be ignored).
SWIN_OPTIONS = ("size", "batch", "img_size", "device", "models")
RUN_OPTIONS: dict[str, tuple[str, ...]] = {
    "": (*SWIN_OPTIONS, "tasks", "precisions", "no_memory", "profile"),
    "compile": (*SWIN_OPTIONS, "no_warm_start"),  # fp32 inference only
    "compile_train": (*SWIN_OPTIONS, "precisions", "no_memory"),  # the train step only
    "contended": (*SWIN_OPTIONS, "tasks", "precisions", "seed"),  # no peak memory, no profile
    "sizes": ("size", "batch", "device", "tasks", "no_memory"),  # swinlite and timm, fp32, always profiled
    "rel_pos_1d": (),  # its own layer and shapes, CPU
    "deploy": (),  # Swin-T on the CPU, its own batches and sizes
}
EVERY_RUN = ("threads", "warmup", "repeats", "json")


def option(name: str) -> str:
    """``"no_warm_start"`` -> ``"--no-warm-start"``."""
    return "--" + name.replace("_", "-")


def run_name(run: str) -> str:
    """How messages name a run: its option, or the side-by-side run's description."""
    return option(run) if run else "the side-by-side run (no run option)"


def options_of(run: str) -> str:
    """The options ``run`` takes, as ``--help`` and the error messages list them."""
    return ", ".join(option(name) for name in (*RUN_OPTIONS[run], *EVERY_RUN))


# (H, W): square classification sizes, a 640×480 photo, a detection input (short side 800, long side 1333)
DEFAULT_SIZES: tuple[tuple[int, int], ...] = ((224, 224), (384, 384), (512, 512), (480, 640), (800, 1333))


def parse_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """``"224,800x1333"`` -> ((224, 224), (800, 1333)); a single number is a square, ``HxW`` is height × width. A
    size given twice (``224,224x224``) counts once, where it first appears: it was timed twice, in two rows."""
    sizes = []
    for item in (t.strip().lower().replace("×", "x") for t in text.split(",") if t.strip()):
        parts = item.split("x")
        if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts):
            raise ValueError(f"expected sizes as N or HxW separated by commas, e.g. 224,800x1333; got {text!r}")
        h, w = int(parts[0]), int(parts[-1])
        sizes.append((h, w))
    return tuple(dict.fromkeys(sizes))


def unpadded_sizes_error(size: str, sizes: tuple[tuple[int, int], ...]) -> str | None:
    """Why ``--sizes`` cannot time timm's model of ``size`` at ``sizes``, or None: timm's Swin V2 takes no patch
    embedding that pads (``swinbench.sizes.build_timm`` gives the V1 models one), so its sides must be patch
    multiples."""
    timm_name = SIZES[size][1]
    bad = [(h, w) for h, w in sizes if h % PATCH or w % PATCH]
    if not timm_name.startswith("swinv2") or not bad:
        return None
    rounded = ", ".join(f"{-(-h // PATCH) * PATCH}x{-(-w // PATCH) * PATCH}" for h, w in bad)
    return (
        f"--size {size}: timm's {timm_name} does not pad its input to whole {PATCH}-px patches, so every --sizes side "
        f"must be a multiple of {PATCH}; got {', '.join(f'{h}x{w}' for h, w in bad)} (e.g. {rounded} instead)"
    )


def parse_modes(text: str, modes: tuple[str, ...]) -> list[str]:
    """``"a,b"`` -> ["a", "b"], each one of ``modes`` (a check script's ``--modes``)."""
    chosen = text.split(",")
    if unknown := [m for m in chosen if m not in modes]:
        raise ValueError(f"unknown --modes {', '.join(unknown)}; expected some of {', '.join(modes)}")
    return chosen
