"""Typed knobs: the coordinates of a schedule point.

A `Split` divides a loop extent into factors whose product is the extent (perfect tiling)
or, where the template allows it, the `padded` extent (the overhang guarded); a `Choice`
picks one of a few options. Each knob samples, mutates locally, and encodes to
numbers (split factors on a log2 scale, choices one-hot) for learning-based strategies.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..workloads.fit import divisors


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _factorisations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d, *rest) for d in divisors(n) for rest in _factorisations(n // d, parts - 1)]


@dataclass(frozen=True)
class Split:
    """Factors (outer .. inner) of `extent`, or of `cover` (a larger extent whose overhang
    the kernel guards) where one is given; the innermost is capped at `max_inner`."""

    name: str
    extent: int
    parts: int
    max_inner: int = 1 << 30
    cover: int = 0

    @property
    def totals(self) -> tuple[int, ...]:
        """What the factors may multiply to."""
        return (self.extent, self.cover) if self.cover > self.extent else (self.extent,)

    def valid(self, value: Any) -> str | None:
        if not isinstance(value, (list, tuple)) or len(value) != self.parts:
            return f"{self.name}: expected {self.parts} factors, got {value!r}"
        if any(not isinstance(v, int) or v < 1 for v in value) or math.prod(value) not in self.totals:
            return f"{self.name}: factors {list(value)} must be positive and multiply to " \
                   + " or ".join(map(str, self.totals))
        if value[-1] > self.max_inner:
            return f"{self.name}: innermost factor {value[-1]} exceeds {self.max_inner}"
        return None

    def sample(self, rng: random.Random) -> tuple[int, ...]:
        while True:
            # one total draws nothing, so seeded runs in spaces without a cover stay as they were
            rest, inner = self.totals[0] if len(self.totals) == 1 else rng.choice(self.totals), []
            for _ in range(self.parts - 1):
                d = rng.choice(divisors(rest))
                inner.append(d)
                rest //= d
            value = (rest, *reversed(inner))
            if value[-1] <= self.max_inner:
                return value

    def mutate(self, value: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
        """Move one prime factor from one level to another: a local step in tile space. With
        a cover, one step in four swaps to the nearest tiling of the other total instead."""
        others = [t for t in self.totals if t != math.prod(value)]
        if others and rng.random() < 0.25:
            return self._nearest(value, others[0])
        for _ in range(16):
            src, dst = rng.sample(range(self.parts), 2)
            if value[src] == 1:
                continue
            p = rng.choice(prime_factors(value[src]))
            new = list(value)
            new[src] //= p
            new[dst] *= p
            if new[-1] <= self.max_inner:
                return tuple(new)
        return self.sample(rng)

    def encode(self, value: tuple[int, ...]) -> list[float]:
        """log2 of the inner factors (the outer one follows from them), scaled to [0, 1]."""
        top = math.log2(self.extent) or 1.0
        return [math.log2(v) / top for v in value[1:]]

    def values(self) -> list[tuple[int, ...]]:
        """Every valid value (for strategies that need the list, such as TPE)."""
        return [v for t in self.totals for v in _factorisations(t, self.parts) if v[-1] <= self.max_inner]

    def project(self, value) -> tuple[int, ...]:
        """The nearest valid value to a split of another extent (of the larger total, which
        tiles well)."""
        return self._nearest(value, self.totals[-1])

    def _nearest(self, value, total: int) -> tuple[int, ...]:
        """Factors of `total` nearest to `value`: inner factors kept where they divide, else
        the nearest divisor (in log scale) that fits."""
        factors, rest = [], total
        for want in reversed(list(value)[1:]):
            fits = [d for d in divisors(rest) if d <= self.max_inner or factors]
            best = min(fits, key=lambda d: abs(math.log2(d) - math.log2(want)))
            factors.append(best)
            rest //= best
        return (rest, *reversed(factors))

    def trivial(self) -> tuple[int, ...]:
        return (self.extent,) + (1,) * (self.parts - 1)

    def describe(self) -> dict:
        """The knob's allowed values in words and numbers (for an agent, as JSON)."""
        limit = {"innermost_at_most": self.max_inner} if self.max_inner < 1 << 30 else {}
        return {"name": self.name, "kind": "split", "factors": self.parts, "multiply_to": list(self.totals),
                **limit, "rule": f"{self.parts} positive integers, outer to inner, whose product is one of {list(self.totals)}"}


class PerfectTile(Split):
    """A split drawn as MetaSchedule draws its perfect tiles (the sketch space's): the
    innermost factor uniform among the divisors up to `max_inner`, then, for each prime of
    the rest, its power spread over the outer parts uniformly among all ways to split the
    exponent. Balanced tiles come up more often than with `Split`'s divisor-by-divisor draw,
    which favours extremes; the sketch space's random points are then MetaSchedule's."""

    def sample(self, rng: random.Random) -> tuple[int, ...]:
        inner = rng.choice([d for d in divisors(self.extent) if d <= self.max_inner])
        outer, slots = [1] * (self.parts - 1), self.parts - 2
        for prime, exponent in sorted(Counter(prime_factors(self.extent // inner)).items()):
            bars = sorted(rng.sample(range(exponent + slots), slots))  # stars and bars
            for i, (low, high) in enumerate(zip([-1, *bars], [*bars, exponent + slots])):
                outer[i] *= prime ** (high - low - 1)
        return (*outer, inner)


@dataclass(frozen=True)
class Choice:
    name: str
    options: tuple

    def valid(self, value: Any) -> str | None:
        return None if value in self.options else f"{self.name}: {value!r} is not one of {list(self.options)}"

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.options)

    def mutate(self, value: Any, rng: random.Random) -> Any:
        others = [o for o in self.options if o != value]
        return rng.choice(others) if others else value

    def encode(self, value: Any) -> list[float]:
        """Ordered numeric options (unroll depths, counts) as one position in [0, 1]; two
        options as 0/1; anything else one-hot. Fewer dimensions help learned models."""
        index = self.options.index(value)
        if len(self.options) <= 2:
            return [float(index)]
        if all(isinstance(o, int) for o in self.options):
            return [index / (len(self.options) - 1)]
        return [1.0 if i == index else 0.0 for i in range(len(self.options))]

    def values(self) -> list:
        return list(self.options)

    def describe(self) -> dict:
        """The knob's allowed values (for an agent, as JSON)."""
        return {"name": self.name, "kind": "choice", "options": [list(o) if isinstance(o, tuple) else o for o in self.options]}

    def project(self, value: Any) -> Any:
        return value if value in self.options else self.options[0]


Knob = Split | Choice  # PerfectTile is a Split
