"""One operator over several shapes: a kernel tuned for one shape can be several times slower
at another, and a transformer serves many sequence lengths and batch sizes.

Each shape is tuned as its own task (its records, resumable, as `tune` does). Then the best
few schedules of every shape are carried to every other shape (each knob projected to the
nearest valid value there: `KnobSpace.project`) and measured there through the round, so
every candidate has a latency at every shape. From that matrix come:

- the one schedule with the best worst case: the least, over candidates, of the largest ratio
  to each shape's best;
- a dispatch table of at most k schedules, each shape served by the one of them fastest there,
  chosen (exhaustively: the candidates are few) for the best worst case again.

Every candidate is timed at each shape in one careful sitting (final timing, stored as the
shape's final records), and the choices and the ratios come from those timings.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..db import Database, Task
from ..errors import UserError
from ..measure import make_evaluator
from ..measure.config import MeasureConfig
from ..result import Label, Result
from ..measure.roofline import floor_s
from ..points import Point, point_key
from ..space import make_space
from ..target import Target
from ..workloads import Workload, get_workload
from .round import record
from .tuner import TuneConfig, tune

MAX_SHAPES = 16


def expand(family: str, text: str) -> list[Workload]:
    """'M=1,8,64,512;N=768;K=768' -> the workloads of every combination, in that order."""
    from ..workloads.registry import FAMILIES

    if family not in FAMILIES:
        raise UserError(f"--shapes takes an operator family ({', '.join(sorted(FAMILIES))}), got '{family}'")
    params = FAMILIES[family].params
    values: dict[str, list[str]] = {}
    for part in (p.strip() for p in text.split(";") if p.strip()):
        name, sep, listed = part.partition("=")
        if not sep or name.strip() not in params or not listed.strip():
            raise UserError(f"bad --shapes part '{part}': write NAME=V1,V2,... for each of {', '.join(params)}, "
                            f"separated by ';' (e.g. {params[0]}=1,8,64;" + ";".join(f"{p}=64" for p in params[1:]) + ")",
                            option="--shapes")
        values[name.strip()] = [v.strip() for v in listed.split(",") if v.strip()]
    missing = [p for p in params if p not in values]
    if missing:
        raise UserError(f"--shapes gives no value for {', '.join(missing)}", option="--shapes")
    combos = list(itertools.product(*(values[p] for p in params)))
    if len(combos) > MAX_SHAPES:
        raise UserError(f"--shapes makes {len(combos)} shapes; at most {MAX_SHAPES}", option="--shapes")
    return [get_workload(family, ",".join(f"{p}={v}" for p, v in zip(params, combo))) for combo in combos]


@dataclass
class ShapesSummary:
    """`latency[c][s]`: candidate c's seconds at shape s, timed carefully with the shape's
    other candidates (inf where it failed there); `final`, per shape: its own best, the single
    schedule's and the table's (point there, result) from that sitting."""
    workloads: list[Workload]
    tasks: list[Task]
    candidates: list[tuple[int, Point]]  # (the shape it was tuned for, its point there)
    latency: list[list[float]]
    single: int
    table: list[int]
    serves: list[int]  # per shape: the table's candidate that serves it
    final: list[dict[str, tuple[Point, Result]]]  # per shape: "own", "single", "table" -> (point there, result)

    def ratio(self, shape: int, which: str) -> float:
        """Seconds of the single schedule or the table at a shape over the shape's best, timed together."""
        own, theirs = self.final[shape]["own"][1], self.final[shape][which][1]
        return theirs.latency / own.latency if own.ok and theirs.ok else math.inf


def tune_shapes(workloads: list[Workload], target: Target, db: Database, config: TuneConfig, measure: MeasureConfig,
                k: int = 2, top: int = 4, progress=lambda line: None) -> ShapesSummary:
    """Tune every shape (config.trials each), time each shape's `top` best schedules at every
    shape together, and choose from those times the single schedule and a table of at most `k`."""
    tasks = []
    spaces = [make_space(config.space, wl, target) for wl in workloads]
    with make_evaluator(target, measure) as evaluator:  # one set of workers for every shape
        for n, wl in enumerate(workloads, 1):
            progress(f"shape {n} of {len(workloads)}, {wl.key}: tuning ({config.trials} trials)")
            summary = tune(wl, target, db, config, measure, evaluator=evaluator)
            tasks.append(summary.task)
            progress(f"{wl.key}: tuned, best {summary.best.latency * 1e3:.4f} ms" if summary.best else f"{wl.key}: tuned")
        candidates = _candidates(db, tasks, top)
        cells = _cross(evaluator, db, tasks, spaces, candidates, target, progress)
    latency = [[r.latency if r.ok else math.inf for _, r in row] for row in cells]
    best = [min(row[s] for row in latency) for s in range(len(workloads))]
    single = min(range(len(candidates)), key=lambda c: _worst([latency[c]], best))
    table = min((list(t) for n in range(1, k + 1) for t in itertools.combinations(range(len(candidates)), n)),
                key=lambda t: (_worst([latency[c] for c in t], best), len(t)))
    serves = [min(table, key=lambda c: latency[c][s]) for s in range(len(workloads))]
    final = [{"own": cells[min(range(len(cells)), key=lambda c: latency[c][s])][s], "single": cells[single][s],
              "table": cells[serves[s]][s]} for s in range(len(workloads))]
    return ShapesSummary(workloads, tasks, candidates, latency, single, table, serves, final)


def _candidates(db: Database, tasks: list[Task], top: int) -> list[tuple[int, Point]]:
    """Each shape's `top` fastest distinct correct search points."""
    out = []
    for s, task in enumerate(tasks):
        ok = sorted((r for r in db.records(task) if r.result.ok), key=lambda r: r.result.latency)
        out += [(s, p) for p in _distinct([r.point for r in ok])[:top]]
    return out


def _distinct(points: list[Point]) -> list[Point]:
    """The points without repeats, in their order."""
    first: dict[str, Point] = {}
    for point in points:
        first.setdefault(point_key(point), point)
    return list(first.values())


def _cross(evaluator, db, tasks, spaces, candidates, target, progress) -> list[list[tuple[Point, Result]]]:
    """Every candidate at every shape, as (its point there, its result): each shape's distinct
    points timed carefully in one sitting (the search's quicker timings are too noisy to pick
    between schedules a few percent apart), stored as that shape's final records."""
    cells: list[list[tuple[Point, Result]]] = [[] for _ in candidates]
    for task, space in zip(tasks, spaces):
        there = [space.project(point) for _, point in candidates]
        points = _distinct(there)
        results = record(evaluator, db, task, space, Label.FINAL, points, floor=floor_s(space.workload, target), final=True)
        timed = dict(zip(map(point_key, points), results))
        progress(f"{space.workload.key}: {len(points)} schedules timed together")
        for c, point in enumerate(there):
            cells[c].append((point, timed[point_key(point)]))
    return cells


def _worst(rows: list[list[float]], best: list[float]) -> float:
    """The largest, over shapes, of the fastest of `rows` there over the shape's best."""
    return max(min(row[s] for row in rows) / best[s] for s in range(len(best)))
