"""The one interface every measurement backend offers, and what it promises.

MetaSchedule splits measuring into a builder and a runner and Kernel Tuner has runners; ours
is one call, because every backend must give the same guarantees whatever it does inside:

    evaluator.measure(space, points, cutoff_s, final) -> list[Result]

- one Result per point, in the order given (a point given twice gets two answers);
- a point the space cannot schedule is `invalid`, with the space's reason, never built;
- a kernel is `ok` only after every check layer passed (measure/checks.py: the timed draw,
  the distinct, large and small draws, the exact-integer draws, every output element written,
  no byte outside it, the inputs unchanged); a failed check is `wrong` and never timed;
- a kernel whose first call takes longer than `cutoff_s` is timed by that call alone;
- `final` asks for the careful timing (more, longer repeats) on a fresh draw of inputs.

Backends: the local `Measurer` (measurer.py), a `ReplayTable` that answers each point from a
table once measured (replay.py), and a `BatchEvaluator` that carries the kernels in a batch
folder to the runtime-only runner, the path a GPU host takes (batch.py). The tuning round
(tuning/round.py) is their one caller in the tuning loop; tests/test_evaluators.py holds each
to the list above.
"""
from __future__ import annotations

from typing import Protocol

from ..points import Point
from ..result import Result


class Evaluator(Protocol):
    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        """Build, check and time `points` of `space` (see the module's list of promises)."""
