"""The interface every search space offers: sample, mutate, encode, apply."""
from __future__ import annotations

import random

from ..points import InvalidPoint, Point
from .knobs import Knob


def first_line(err: Exception) -> str:
    """The message of a TVM error, without its traceback lines (TVM reports schedule errors
    as assorted exception types, with the message last)."""
    lines = [l.strip() for l in str(err).splitlines() if l.strip() and not l.strip().startswith(("File", "^", "#"))]
    return (lines[-1] if lines else type(err).__name__)[:300]


class KnobSpace:
    """A space made of typed knobs; subclasses implement `schedule` (point -> TVM schedule)."""

    name = "knobs"
    max_sample_tries = 200

    def __init__(self, knobs: list[Knob]):
        self.knobs = knobs

    def check(self, point: Point) -> str | None:
        """None when the point is valid, else the reason."""
        try:
            self.apply(point)
        except InvalidPoint as err:
            return str(err)
        return None

    def validate(self, point: Point) -> None:
        """Knob by knob; TVM itself would silently 'repair' a split whose product is wrong."""
        if set(point) != {k.name for k in self.knobs}:
            raise InvalidPoint(f"point knobs {sorted(point)} differ from the space's {sorted(k.name for k in self.knobs)}")
        for knob in self.knobs:
            reason = knob.valid(point[knob.name])
            if reason:
                raise InvalidPoint(reason)

    def sample(self, rng: random.Random, checked: bool = True) -> Point:
        """A random point; `checked` also makes sure it schedules (costs an apply)."""
        for _ in range(self.max_sample_tries):
            point = self.canonical({k.name: k.sample(rng) for k in self.knobs})
            if not checked or self.check(point) is None:
                return point
        raise RuntimeError(f"{self.name}: no valid point in {self.max_sample_tries} samples")

    def mutate(self, point: Point, rng: random.Random, steps: int = 1, checked: bool = True) -> Point:
        for _ in range(self.max_sample_tries):
            new = dict(point)
            for knob in self.mutable(point, rng, steps):
                new[knob.name] = knob.mutate(new[knob.name], rng)
            new = self.canonical(new)
            if not checked or self.check(new) is None:
                return new
        return self.sample(rng, checked)

    def mutable(self, point: Point, rng: random.Random, steps: int) -> list[Knob]:
        """The knobs one mutation changes: `steps` of them, any alike."""
        return rng.sample(self.knobs, min(steps, len(self.knobs)))

    def crossover(self, a: Point, b: Point, rng: random.Random, checked: bool = True) -> Point:
        """Each knob from either parent; an invalid child falls back to parent `a`."""
        child = self.canonical({k.name: (a if rng.random() < 0.5 else b)[k.name] for k in self.knobs})
        return child if not checked or self.check(child) is None else dict(a)

    def canonical(self, point: Point) -> Point:
        """One representative of points that schedule identically (knobs that play no part
        reset), so de-duplication sees them as equal."""
        return point

    def encode(self, point: Point) -> list[float]:
        """Numbers in [0, 1]: split factors on a log2 scale, choices one-hot."""
        return [x for k in self.knobs for x in k.encode(point[k.name])]

    def project(self, point: Point) -> Point:
        """The nearest point of this space to a point of a sibling space (another shape of
        the same operator): used to warm-start from other shapes' records."""
        naive = self.named("naive")
        return {k.name: k.project(point[k.name]) if k.name in point else naive[k.name] for k in self.knobs}

    def apply(self, point: Point):
        """The TVM schedule for a point; raises InvalidPoint with the reason."""
        self.validate(point)
        return self.schedule(point)

    def schedule(self, point: Point):
        """The TVM schedule for a point whose knobs are each valid."""
        raise NotImplementedError

    def named(self, name: str) -> Point:
        raise NotImplementedError
