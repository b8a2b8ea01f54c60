"""Build a batch of candidates in parallel, then run them one at a time.

Compiling and timing never overlap: the run worker starts timing only after every build of
the batch has finished, so builds cannot steal the cores a timing runs on; nor do another
tensortune process's builds or timing (see cores.py).
"""
from __future__ import annotations

import glob
import itertools
import os
import tempfile

from ..points import InvalidPoint, Point, point_key
from . import cores, tasks
from .config import MeasureConfig
from .pool import Outcome, WorkerPool
from ..result import Result, Status
from ..target import Target


class Measurer:
    """The local evaluator (see evaluator.py): worker processes on this machine. One serves
    every task of a run (a model's kernels share it); close it, or use it as a context."""

    def __init__(self, target: Target, config: MeasureConfig):
        self.target, self.config = target, config
        self.tmp = tempfile.TemporaryDirectory(prefix="tensortune-")
        self.serial = itertools.count()
        self.draws = DrawSeeds(config.seed)
        # libraries of kernels that ran correctly, kept until close: a point measured again
        # (the final re-timing of the best, a re-check) is not compiled again
        self.built: dict[tuple, tuple[str, float]] = {}  # (workload, space, point) -> (path, build seconds)
        self.builders = WorkerPool(config.build_workers, tasks.build)
        self.runner = WorkerPool(1, tasks.run, env={"TVM_NUM_THREADS": str(config.threads), cores.SPIN: cores.KERNEL_SPIN},
                                 self_timed=True)

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        """Build, verify and time points of `space` (of any workload). `final` uses the
        careful final timing settings; a kernel whose first call exceeds `cutoff_s` is timed
        by that call alone."""
        cfg = self.config
        keys = [(space.workload.ident, space.name, point_key(p)) for p in points]
        paths, builds = self._build_once(space, points, keys)
        timing = cfg.timing(final, cutoff_s)
        built = [i for i, b in enumerate(builds) if b.ok]
        # a kernel past the cutoff is only timed once, so it may run 8x the cutoff at most
        # (enough for the careful timing of one just under it); slower ones are stopped
        run_timeout = min(cfg.run_timeout_s, max(cfg.min_run_timeout_s, 8 * cutoff_s))
        device = "cuda" if self.target.kind == "cuda" else "cpu"
        seed = self.draws.seed(space.workload, final)
        with cores.turn(alone=True):  # no other tensortune process builds or times meanwhile
            runs = self.runner.map([tasks.RunTask(space.workload.ident, paths[i], timing, seed, device)
                                    for i in built], run_timeout)
        results = [build_failure(b) for b in builds]
        for i, outcome in zip(built, runs):
            results[i] = run_result(outcome, builds[i].value)
            if results[i].ok:
                self.built[keys[i]] = (paths[i], builds[i].value)
            else:
                for leftover in glob.glob(os.path.splitext(paths[i])[0] + ".*"):
                    os.remove(leftover)
        return results

    def _build_once(self, space, points: list[Point], keys: list[tuple]) -> tuple[list[str], list[Outcome]]:
        """(library paths, build outcomes) of the points, compiling only those not built before."""
        # a fresh name per build: the run worker would get an earlier library back from the
        # loader's cache for a name it has loaded before (another task's kernel, say)
        paths = [self.built[k][0] if k in self.built else os.path.join(self.tmp.name, f"{next(self.serial)}.so")
                 for k in keys]
        builds = [Outcome(True, self.built[k][1]) if k in self.built else None for k in keys]
        todo = [i for i, b in enumerate(builds) if b is None]
        for i, outcome in zip(todo, self.build(space, [points[i] for i in todo], [paths[i] for i in todo])):
            builds[i] = outcome
        return paths, builds

    def build(self, space, points: list[Point], paths: list[str]) -> list[Outcome]:
        """Schedule here, compile in the workers; an invalid point never reaches a worker.
        Also used alone, for a batch that another machine runs."""
        outcomes = [schedule(space, p) for p in points]
        todo = [i for i, o in enumerate(outcomes) if o.ok]
        jobs = [tasks.BuildTask(outcomes[i].value, self.target.spec, paths[i]) for i in todo]
        with cores.turn(alone=False):  # alongside other processes' builds, never their timing
            built = self.builders.map(jobs, self.config.build_timeout_s)
        for i, outcome in zip(todo, built):
            outcomes[i] = outcome
        return outcomes

    def close(self) -> None:
        self.builders.close()
        self.runner.close()
        self.tmp.cleanup()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DrawSeeds:
    """The seed of each round's input draws."""

    def __init__(self, seed: int):
        self.base = seed
        self.rounds = itertools.count()

    def seed(self, workload, final: bool) -> int:
        """A workload with a NumPy reference gets fresh draws every round (its expected
        outputs are cheap to recompute), so no kernel is accepted because it suits one fixed
        draw; one checked against its own unscheduled kernel (a model's) keeps one seed for
        search, as recomputing costs a slow reference run per draw, and its winners are
        re-checked on a second seed (`final`)."""
        if workload.family.reference is not None:
            return self.base + 2 + next(self.rounds)
        return self.base + 1 if final else self.base


def schedule(space, point: dict) -> Outcome:
    """The scheduled module as JSON for a builder, or the reason the point is invalid."""
    import tvm

    try:
        return Outcome(True, tvm.ir.save_json(space.apply(point).mod))
    except InvalidPoint as err:
        return Outcome(False, kind=Status.INVALID, reason=str(err))


def build_failure(outcome: Outcome) -> Result | None:
    """The result of a candidate that did not build (or was invalid); None if it built."""
    if outcome.ok:
        return None
    if outcome.kind == Status.INVALID:
        return Result(Status.INVALID, outcome.reason)
    return Result(Status(f"build_{outcome.kind}"), outcome.reason)


def run_result(outcome: Outcome, build_s: float) -> Result:
    """The result of a candidate that built, from its run worker's outcome."""
    if not outcome.ok:
        return Result(Status(f"run_{outcome.kind}"), outcome.reason, build_s=build_s)
    return Result.from_run(outcome.value, build_s, outcome.value.get("threads", 0))
