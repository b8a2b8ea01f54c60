"""Helpers for writing hand schedules that hold for any shape."""
from __future__ import annotations

import math
from functools import lru_cache


def padded(extent: int) -> int:
    """The next multiple of 8 (extents up to 8 as they are). An extent with few divisors
    (conv1d-1024's 2047 = 23 x 89 outputs) leaves only lumpy, unvectorisable tilings; tiles
    of the padded extent, the overhang guarded, tile it well (the template spaces' rule)."""
    return extent if extent <= 8 or extent % 8 == 0 else -(-extent // 8) * 8


@lru_cache(maxsize=4096)
def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
