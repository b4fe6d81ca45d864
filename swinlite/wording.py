"""How messages count things: ``1 step``, ``2 steps``."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural (``noun + "s"`` unless given) unless ``count`` is 1."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
