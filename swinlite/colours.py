"""Class colours for drawings, by PASCAL VOC's colour map: a segmenter's palette where its data has no colour table
(:func:`color_map`), and the masks ``detect.py`` draws, each in its class's colour (:func:`label_colour`), by
PyTorch and by ONNX Runtime alike. Imports no torch (the ONNX Runtime paths draw with it)."""

from __future__ import annotations


def label_colour(label: int) -> tuple[int, int, int]:
    """PASCAL VOC's colour of ``label``: its bits spread over the high bits of R, G and B, three at a time (0 is black,
    every other label is not), so neighbouring labels get distinct colours. Defined for any label (it repeats after
    2^24)."""
    r = g = b = 0
    code = label
    for bit in range(7, -1, -1):
        r |= (code & 1) << bit
        g |= ((code >> 1) & 1) << bit
        b |= ((code >> 2) & 1) << bit
        code >>= 3
    return r, g, b


def color_map(count: int) -> list[tuple[int, int, int]]:
    """The colours of labels ``0..count - 1`` (:func:`label_colour`; label 0, black, is a segmenter's first class)."""
    return [label_colour(label) for label in range(count)]
