"""The ask/tell interface every strategy implements.

`ask(n)` proposes up to n points never proposed before; `tell(points, results)` reports
what they measured. Points measured in an earlier run are told before the first ask, which
is how a resumed run continues where it stopped without re-measuring. `warm_start` hands
over evidence that is not a trial of this task (records of other shapes, projected into
this space): strategies learn from it but may still measure those points.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UserError
from ..result import Result
from ..points import Point, point_key

if TYPE_CHECKING:  # the space's type only: strategies and features load no TVM until they schedule
    from ..space import KnobSpace


@dataclass(frozen=True)
class Option:
    """One setting of a strategy, declared once: it validates what a user passes and documents
    itself (`tensortune strategies` lists every strategy's)."""

    name: str
    default: int | float
    meaning: str
    low: float = 0  # the smallest value that makes sense
    high: float = float("inf")

    def parse(self, value) -> int | float:
        kind = type(self.default)
        try:
            parsed = kind(value) if not isinstance(value, str) or kind is float else int(value, 10)
        except (TypeError, ValueError):
            raise UserError(f"option {self.name} takes {'an integer' if kind is int else 'a number'}, "
                            f"got {value!r}", option="--option") from None
        if not self.low <= parsed <= self.high:
            raise UserError(f"option {self.name} must lie in [{self.low:g}, {self.high:g}], got {parsed}",
                            option="--option")
        return parsed


class Strategy:
    """A search strategy behind ask/tell: `propose` points, `tell` their results; the tuning round
    (tuning/round.py) drives every one alike."""
    name = "base"
    requires: tuple[str, ...] = ()  # optional packages the strategy imports lazily
    replayable = True  # its proposals follow from the seed and the results alone (not a remote model's)
    options: tuple[Option, ...] = ()  # its settings; each becomes an attribute of the same name
    objectives: tuple[str, ...] = ("latency",)  # what it minimises (objectives.py): several, it seeks their front

    @classmethod
    def parse_options(cls, options: dict) -> dict:
        """Every declared option's value: those given, checked and converted, the rest their
        defaults. An unknown name or a bad value is a UserError."""
        declared = {o.name: o for o in cls.options}
        unknown = sorted(set(options) - set(declared))
        if unknown:
            raise UserError(f"strategy '{cls.name}' has no option {', '.join(unknown)}; its options: "
                            f"{', '.join(declared) or 'none'}", option="--option")
        return {o.name: o.parse(options.get(o.name, o.default)) for o in cls.options}

    @classmethod
    def preflight(cls) -> None:
        """Raise a UserError if the strategy cannot run here (say, its endpoint is not
        configured), before any work starts."""

    def __init__(self, space: KnobSpace, seed: int = 0, **options):
        """`options`: values for some of the strategy's declared options (the rest keep their
        defaults); an unknown name or a bad value is a UserError."""
        for name, value in self.parse_options(options).items():
            setattr(self, name, value)
        self.space = space
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.history: list[tuple[Point, Result]] = []
        self.prior: list[tuple[Point, Result]] = []

    def ask(self, n: int) -> list[Point]:
        points: list[Point] = []
        for _ in range(n * 50):  # spaces can be small: give up rather than loop forever
            if len(points) == n:
                break
            point = self.propose()
            key = point_key(point)
            if key not in self.seen:
                self.seen.add(key)
                points.append(point)
        return points

    def tell(self, points: list[Point], results: list[Result]) -> None:
        for point, result in zip(points, results):
            self.seen.add(point_key(point))
            self.history.append((point, result))

    def warm_start(self, points: list[Point], results: list[Result]) -> None:
        self.prior.extend(zip(points, results))

    def propose(self) -> Point:
        """One candidate; `ask` filters out repeats."""
        raise NotImplementedError

    def proposals(self) -> dict[str, int]:
        """Where the proposals came from, where that is worth reporting (e.g. how many a
        language model made and how many replaced its invalid ones); {} by default."""
        return {}

    def ranked(self, with_prior: bool = False) -> list[tuple[Point, Result]]:
        """Correct measurements (and warm-start evidence, if asked), fastest first."""
        return fastest_first(self.prior + self.history if with_prior else self.history)


def fastest_first(history: list[tuple[Point, Result]]) -> list[tuple[Point, Result]]:
    """The correct measurements of a history, fastest first."""
    return sorted((h for h in history if h[1].ok), key=lambda h: h[1].latency)
