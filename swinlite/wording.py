"""How messages count and list things: ``1 step``, ``2 steps``; ``a; b; and 3 more``."""

from __future__ import annotations

from collections.abc import Sequence


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural (``noun + "s"`` unless given) unless ``count`` is 1."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def listed(items: Sequence[str], shown: int) -> str:
    """The first ``shown`` of ``items`` joined by ``"; "``, then ``"; and N more"`` for the rest."""
    more = f"; and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more
