"""The record of one measured candidate: every outcome, success or failure, with its reason."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

# Statuses; only OK carries times.
OK = "ok"
FAILURES = ("invalid", "build_error", "build_crash", "build_timeout", "wrong", "run_error", "run_crash",
            "run_timeout", "implausible")  # implausible: timed below the roofline floor, even when re-checked


@dataclass(frozen=True)
class Result:
    status: str
    reason: str = ""
    runs: tuple[float, ...] = ()  # seconds per call, one per timing repeat
    threads: int = 0
    build_s: float = 0.0

    @classmethod
    def from_run(cls, run: dict, build_s: float, threads: int) -> "Result":
        """The result of a runner's answer (runner.run_kernel: status, runs, error, note)."""
        if run["status"] != OK:
            return cls(run["status"], run.get("reason", ""), build_s=build_s)
        reason = "; ".join(filter(None, [f"max relative error {run['error']:.1e}", run.get("note")]))
        return cls(OK, reason, tuple(run["runs"]), threads, build_s)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def latency(self) -> float:
        """Median seconds per call; infinity for a failed candidate, so it never wins."""
        return statistics.median(self.runs) if self.ok else float("inf")

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: how far to trust the median."""
        return (max(self.runs) - min(self.runs)) / self.latency if self.ok else 0.0
