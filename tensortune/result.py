"""The record of one measured candidate: every outcome, success or failure, with its reason.

Free of TVM: the records (db.py) and the strategies read results without loading a compiler.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """How a candidate ended; only OK carries times. A StrEnum: stored and printed as its text."""

    OK = "ok"
    INVALID = "invalid"  # the space cannot schedule the point (the reason says which rule)
    BUILD_ERROR = "build_error"
    BUILD_CRASH = "build_crash"
    BUILD_TIMEOUT = "build_timeout"
    WRONG = "wrong"  # failed a check: never timed
    RUN_ERROR = "run_error"
    RUN_CRASH = "run_crash"
    RUN_TIMEOUT = "run_timeout"
    IMPLAUSIBLE = "implausible"  # timed below the roofline floor, even when re-checked


FAILURES = tuple(s for s in Status if s is not Status.OK)


class Label(StrEnum):
    """Why a record was measured."""

    SEARCH = "search"  # a strategy's (or an agent's) candidate
    FINAL = "final"  # a search result re-timed carefully at the end
    NAIVE = "naive"  # the template space's baselines, re-timed with the finals
    HAND = "hand"
    DEFAULT = "default"  # TVM's own schedule of a model's kernel


BASELINES = (Label.NAIVE, Label.HAND)


@dataclass(frozen=True)
class Result:
    """How one candidate ended: its status, why (for a failure), its timing repeats (seconds per
    call) and the threads it ran with, and how long it took to build."""

    status: Status
    reason: str = ""
    runs: tuple[float, ...] = ()  # seconds per call, one per timing repeat
    threads: int = 0
    build_s: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "status", Status(self.status))  # a stored or JSON status comes back typed

    @classmethod
    def from_run(cls, run: dict, build_s: float, threads: int) -> "Result":
        """The result of a runner's answer (runner.run_kernel: status, runs, error, note;
        plain JSON, as a batch host writes it)."""
        if run["status"] != Status.OK:
            return cls(run["status"], run.get("reason", ""), build_s=build_s)
        reason = "; ".join(filter(None, [f"max relative error {run['error']:.1e}", run.get("note")]))
        return cls(Status.OK, reason, tuple(run["runs"]), threads, build_s)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def latency(self) -> float:
        """Median seconds per call; infinity for a failed candidate, so it never wins."""
        return statistics.median(self.runs) if self.ok else float("inf")

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: how far to trust the median."""
        return (max(self.runs) - min(self.runs)) / self.latency if self.ok else 0.0
