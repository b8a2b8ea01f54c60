"""Build a batch of candidates in parallel, then run them one at a time.

Compiling and timing never overlap: the run worker starts timing only after every build of
the batch has finished, so builds cannot steal the cores a timing runs on.
"""
from __future__ import annotations

import os
import tempfile

from ..space import point_key
from . import tasks
from .config import MeasureConfig, Timing
from .pool import Outcome, WorkerPool
from .result import Result


class Measurer:
    def __init__(self, workload, space_name: str, target: dict, config: MeasureConfig):
        self.workload = (workload.name, workload.shape)
        self.space_name, self.target, self.config = space_name, target, config
        self.tmp = tempfile.TemporaryDirectory(prefix="tensortune-")
        self.builders = WorkerPool(config.build_workers, tasks.build)
        self.runner = WorkerPool(1, tasks.run, env={"TVM_NUM_THREADS": str(config.threads)})

    def measure(self, points: list[dict], final: bool = False, cutoff_s: float = float("inf")) -> list[Result]:
        """Build, verify and time. `final` uses the careful final timing settings; a kernel
        whose first call exceeds `cutoff_s` is timed by that call alone."""
        cfg = self.config
        paths = [os.path.join(self.tmp.name, f"{abs(hash(point_key(p)))}.so") for p in points]
        builds = self.builders.map([tasks.BuildTask(self.workload, self.space_name, p, self.target, path)
                                    for p, path in zip(points, paths)], cfg.build_timeout_s)
        timing = (Timing(cfg.final_repeat, cfg.final_min_repeat_ms) if final
                  else Timing(cfg.repeat, cfg.min_repeat_ms, cutoff_s=cutoff_s))
        built = [i for i, b in enumerate(builds) if b.ok]
        runs = self.runner.map([tasks.RunTask(self.workload, paths[i], timing, cfg.seed) for i in built],
                               cfg.run_timeout_s)
        results = [_build_failure(b) for b in builds]
        for i, outcome in zip(built, runs):
            results[i] = _run_result(outcome, builds[i].value)
            os.remove(paths[i])
        return results

    def close(self) -> None:
        self.builders.close()
        self.runner.close()
        self.tmp.cleanup()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _build_failure(outcome: Outcome) -> Result | None:
    if outcome.ok:
        return None
    if outcome.kind == "error" and outcome.reason.startswith("InvalidPoint"):
        return Result("invalid", outcome.reason.removeprefix("InvalidPoint: "))
    return Result(f"build_{outcome.kind}", outcome.reason)


def _run_result(outcome: Outcome, build_s: float) -> Result:
    if not outcome.ok:
        return Result(f"run_{outcome.kind}", outcome.reason, build_s=build_s)
    value = outcome.value
    if value["status"] != "ok":
        return Result(value["status"], value["reason"], build_s=build_s)
    reason = "; ".join(filter(None, [f"max relative error {value['error']:.1e}", value.get("note")]))
    return Result("ok", reason, tuple(value["runs"]), value["threads"], build_s)
