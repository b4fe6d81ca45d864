"""The lowest torch and timm swinlite runs with (pyproject.toml's floors: the versions its test suite passed with).

An older one is refused at ``import swinlite`` with one ImportError naming it, instead of failing later inside torch
(torch 2.6 cannot even register swinlite's custom ops) or computing otherwise (older timm's eval transforms)."""

import timm
import torch
from torch.torch_version import TorchVersion

LOWEST: dict[str, tuple[int, ...]] = {"torch": (2, 11), "timm": (1, 0, 31)}


def check_versions(found: dict[str, str]) -> None:
    """Raise ImportError naming every package of ``found`` (name -> version string) older than :data:`LOWEST`."""
    old = [
        f"{name} {version} (needs >= {'.'.join(map(str, LOWEST[name]))})"
        for name, version in found.items()
        if TorchVersion(version) < LOWEST[name]
    ]
    if old:
        raise ImportError(f"swinlite needs newer packages: {', '.join(old)}; upgrade them (pip install -U torch timm)")


check_versions({"torch": torch.__version__, "timm": timm.__version__})
