"""Arithmetic several chapters' lessons share."""
from __future__ import annotations

from ..frozen import np


def cdiv(a: int, b: int) -> int:
    """a / b rounded up: the blocks of size b that cover a."""
    return -(-a // b)


def f64(*arrays) -> list:
    """The arrays in float64, where the expected values are worked out."""
    return [np.asarray(a, np.float64) for a in arrays]
