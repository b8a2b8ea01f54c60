"""Grow the cost model's corpus toward hundreds of kernels: every distinct kernel of the zoo's
models and of the coverage corpus's (benchmarks/coverage.py), and the operator families at
SHAPES, each with POINTS random points of
MetaSchedule's sketch space measured on this machine, kept as replay tables (corpus.py's format)
under benchmarks/corpus/grown/HARDWARE/, one folder per machine class, so that a table never
mixes machines.

Resumable and incremental: a kernel whose table here already holds POINTS points is skipped,
one with fewer gets the rest, and each table is written as soon as its kernel is done, so a run
stopped anywhere keeps what it measured. The workloads benchmarks/vs_metaschedule.py races on
(HELD_OUT) are never measured: they stay unseen. A kernel with fewer than two points in the
space has nothing to learn from and is skipped. `--minutes` stops starting kernels after that
long. The last line counts the kernels with POINTS points on this machine class, these tables
and the leaderboard's together.

Run alone on the machine:
    .venv/bin/python benchmarks/grow_corpus.py [--minutes 60] [--points 64] [--models resnet18 coverage.llama ...]
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import corpus
import coverage as coverage_corpus  # benchmarks/coverage.py: this folder comes first on the path
from vs_metaschedule import HELD_OUT

from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.model.zoo import ZOO
from tensortune.points import point_key
from tensortune.space import make_space
from tensortune.target import make_target

# the operator families at shapes no model above has: transformer GEMMs at other widths and
# sequence lengths, depthwise convolutions at other maps and kernels, 1D convolutions at other
# lengths and taps (HELD_OUT's shapes are skipped like any held-out key)
SHAPES = {
    "gemm": [f"M={m},N={n},K={k}" for m in (48, 96, 160, 320) for n, k in ((384, 384), (1536, 384), (384, 1536))],
    "dwconv2d": [f"B=1,C={c},H={h},W={h},K={k}" for c, h in ((48, 40), (96, 20), (192, 10), (384, 12)) for k in (3, 5)],
    "conv1d": [f"M={m},N={n}" for m in (512, 3000, 6000) for n in (33, 128)],
}
SOURCES = (*ZOO, *(corpus.COVERAGE + name for name in coverage_corpus.MODELS), *SHAPES)
BATCH = 16  # points measured together; the next batch's cutoff is CUTOFF x the best so far
CUTOFF = 3.0


def kernels(sources, target, skip: set[str]):
    """(task, workload) for each distinct kernel of these models (or operator families, at
    SHAPES), in order, but those whose key is in `skip`; a model that cannot be imported is said
    and passed over."""
    seen = set(skip)
    for source in sources:
        try:
            found = {shape: corpus.resolve(f"{source}:{shape}", target) for shape in SHAPES[source]} \
                if source in SHAPES else corpus.model_kernels(source, target)
        except (Exception, SystemExit) as err:  # a model TVM cannot take whole adds nothing here
            print(f"{source}: not imported ({type(err).__name__}: {str(err).splitlines()[0][:120]})", flush=True)
            continue
        for function, workload in found.items():
            if workload.key not in seen:
                seen.add(workload.key)
                yield corpus.grown_task(source, function), workload


def distinct_points(space, name: str, count: int, have: set[str]) -> list:
    """Up to `count` random points of `space` whose keys are not in `have`, drawn with a seed
    of the task's name (the same points on every machine)."""
    rng, points, keys = random.Random(name), [], set(have)
    for _ in range(count * 4):
        if len(points) == count:
            break
        point = space.sample(rng)
        if point_key(point) not in keys:
            keys.add(point_key(point))
            points.append(point)
    return points


def grow(task: corpus.CorpusTask, workload, target, measurer: Measurer, points: int, tables: Path) -> str | None:
    """The task's table brought to `points` points on this machine; a line saying what it
    measured, or None where there was nothing to do."""
    space = make_space(task.space, workload, target)
    table = corpus.load_table(task, tables) or corpus.Table(task.name, workload.key, task.space, target.hardware, {}, [])
    wanted = distinct_points(space, task.name, points - len(table.results), set(table.results))
    if len(table.results) + len(wanted) < 2 or not wanted:
        return None
    start = time.perf_counter()
    for i in range(0, len(wanted), BATCH):
        batch = wanted[i:i + BATCH]
        results = measurer.measure(space, batch, cutoff_s=CUTOFF * table.best)
        table.results.update(zip(map(point_key, batch), results))
    corpus.save_table(table, " ".join(["benchmarks/grow_corpus.py", *sys.argv[1:]]), len(wanted), tables)
    ok = sum(r.ok for r in table.results.values())
    return (f"{task.name}: +{len(wanted)} points, {ok} of {len(table.results)} ok, best {table.best * 1e3:.4f} ms, "
            f"{time.perf_counter() - start:.0f} s")


def complete(tables: Path, hardware: str, points: int) -> set[str]:
    """The kernels (workload keys) with at least `points` points measured on `hardware`, in
    these tables and the leaderboard's."""
    found = [corpus.load_table(corpus.CorpusTask(p.name.removesuffix(".json.gz"), "", "", ""), p.parent)
             for folder in (tables, corpus.TABLES) for p in sorted(folder.glob("*.json.gz"))]
    return {t.workload for t in found if t.hardware == hardware and len(t.results) >= points}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60, help="start no kernel after this long")
    parser.add_argument("--points", type=int, default=64, help="measured points per kernel")
    parser.add_argument("--models", nargs="+", default=list(SOURCES), choices=list(SOURCES), metavar="MODEL",
                        help="zoo models, coverage.NAME models and operator families (default: all)")
    args = parser.parse_args()
    target = make_target("cpu", MeasureConfig().threads)
    tables = corpus.GROWN / target.hardware
    skip = {corpus.resolve(name, target).key for name in HELD_OUT} | complete(tables, target.hardware, args.points)
    deadline = time.perf_counter() + 60 * args.minutes
    config = MeasureConfig(threads=target.threads, repeat=3, min_repeat_ms=5, min_run_timeout_s=0.25)
    with Measurer(target, config) as measurer:
        for task, workload in kernels(args.models, target, skip):
            if time.perf_counter() > deadline:
                print(f"--minutes {args.minutes:g} spent: stopped before {task.name}", flush=True)
                break
            try:
                line = grow(task, workload, target, measurer, args.points, tables)
            except Exception as err:  # a kernel MetaSchedule has no sketch for, say: said, the run goes on
                line = f"{task.name}: not measured ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
            if line:
                print(line, flush=True)
    print(f"corpus on {target.hardware}: {len(complete(tables, target.hardware, args.points))} kernels with at least "
          f"{args.points} points (benchmarks/corpus/grown/{target.hardware}/ and the leaderboard's tables)")


if __name__ == "__main__":
    main()
