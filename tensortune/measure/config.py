"""Measurement settings as one immutable, documented value."""
from __future__ import annotations

from dataclasses import dataclass

from ..target import default_threads


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are built, checked and timed.

    Timing is warm-cache: inputs stay resident between repeats (as in a real model where the
    operator's inputs were just produced), after one untimed warm-up call that also serves
    as the correctness check. Each repeat runs the kernel enough times to last at least
    `min_repeat_ms`; we keep every repeat, and report the median and the spread.
    """

    threads: int = default_threads()  # TVM thread pool size: the cores we time on
    build_workers: int = 2
    build_timeout_s: float = 30.0  # as MetaSchedule's default builder: one slower compile stalls a whole round
    run_timeout_s: float = 60.0
    min_run_timeout_s: float = 1.0  # the run limit never drops below this (see Measurer.measure)
    repeat: int = 5  # during search
    min_repeat_ms: int = 10
    final_repeat: int = 15  # re-timing of naive, hand and the best candidates
    final_min_repeat_ms: int = 50
    seed: int = 0  # for the random inputs of verification
    cluster: str | None = None  # a Ray cluster's address ("auto"): builds and timings there (measure/cluster.py)

    def timing(self, final: bool, cutoff_s: float = float("inf")) -> "Timing":
        """The careful final timing, or the search timing with its cutoff."""
        if final:
            return Timing(self.final_repeat, self.final_min_repeat_ms)
        return Timing(self.repeat, self.min_repeat_ms, cutoff_s=cutoff_s)


@dataclass(frozen=True)
class Timing:
    repeat: int
    min_repeat_ms: int
    budget_s: float = 10.0  # caps repeats for kernels too slow to repeat many times
    cutoff_s: float = float("inf")  # a warm-up call slower than this is the only timing taken
