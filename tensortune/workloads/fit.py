"""Helpers for writing hand schedules that hold for any shape."""
from __future__ import annotations

import math

from ..space.knobs import divisors, padded


def fit(extent: int, *inner: int) -> tuple[int, ...]:
    """Split `extent` into (outer, *inner) with each inner factor the divisor nearest (in log
    scale) to the wanted one but at most 4x it, so a hand schedule written for 1024 still
    applies to 1000 or 997 without blowing up a register tile."""
    factors, rest = [], extent
    for want in reversed(inner):
        best = min((d for d in divisors(rest) if d <= 4 * want), key=lambda d: abs(math.log2(d) - math.log2(want)))
        factors.append(best)
        rest //= best
    return (rest, *reversed(factors))


def spatial(extent: int, *inner: int) -> tuple[int, ...]:
    """`fit` for a spatial axis: tiles of its `padded` extent, which every template allows."""
    return fit(padded(extent), *inner)
