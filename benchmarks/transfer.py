"""Does the packaged cost model transfer to kernels it has not seen? Offline, from the corpus
tables (benchmarks/corpus.py, the leaderboard's tasks and the training-only ones): no kernel
is measured, only the tables are read.

Each held-out unit (a zoo model's kernels together: leave-one-model-out, the realistic case of
a new model whose kernels resemble ones seen; an operator family's shapes together:
leave-family-out, the hard case) gets a model trained on every other task's table. It ranks
every correct point of each held-out task's table; printed per task, as a ratio to the table's
best (1.00: the best anyone found there): the best of the model's top 8 picks, and the median
over draws of the best of 8 random picks. Three feature sets side by side: 'absolute' (the
kernel's per-store features, summed and maxed: what the packaged model learns from,
corpus.FEATURES), 'change' (their difference from the unscheduled kernel's: what the schedule
changed, which moves less with problem size) and 'both'. With --grown, the kernels
benchmarks/grow_corpus.py measured on this machine class join the tasks, each held out with
its model.

    .venv/bin/python benchmarks/transfer.py [--grown] [--features absolute ...] [--out benchmarks/results/transfer.txt]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402
from provenance import header  # noqa: E402

from tensortune.costmodel import CostModel  # noqa: E402
from tensortune.costmodel.features import FEATURE_SETS  # noqa: E402
from tensortune.measure.config import MeasureConfig  # noqa: E402
from tensortune.target import make_target  # noqa: E402

PICKS = 8
DRAWS = 500
THREADS = len(os.sched_getaffinity(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/transfer.txt"))
    parser.add_argument("--grown", action="store_true", help="also grow_corpus.py's tables of this machine class")
    parser.add_argument("--features", nargs="+", default=list(FEATURE_SETS), choices=list(FEATURE_SETS))
    args = parser.parse_args()
    target = make_target("cpu", MeasureConfig().threads)
    tasks = [t for t in corpus.TRAINING if corpus.load_table(t) is not None]
    grown = corpus.grown_tasks(target.hardware) if args.grown else []
    start, stale = time.perf_counter(), []
    groups = {t.name: _group(t, target, corpus.TABLES, stale) for t in tasks}
    groups |= {t.name: _group(t, target, corpus.GROWN / target.hardware, stale) for t in grown}
    tasks = [t for t in [*tasks, *grown] if groups[t.name] is not None]
    seconds = time.perf_counter() - start
    lines = header(target.threads) + [f"# {len(tasks)} tasks ({len(grown)} grown); features of every table point: "
                                      f"{seconds:.0f} s"]
    lines += [f"# left out, their kernel no longer imported as measured: {', '.join(stale)}"] if stale else []
    lines.append("")
    models = tuple(dict.fromkeys(t.family for t in tasks if t.space == "sketch"))
    for split, units in (("leave-one-model-out", models), ("leave-family-out", corpus.OPERATOR_FAMILIES)):
        lines += held_out(split, units, tasks, groups, args.features)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _group(task, target, tables: Path, stale: list[str]):
    """The task's (features, relevance), or None, with its name added to `stale`, where the
    kernel its table measured is no longer what the importer gives (renamed or changed)."""
    try:
        return corpus.group(task, target, tables)
    except SystemExit:
        stale.append(task.name)
        return None


def held_out(split: str, units: tuple[str, ...], tasks, groups, feature_sets: list[str]) -> list[str]:
    """Per held-out task, the top-8 and random-8 ratios of each feature set; then a summary."""
    rows, wins = [], {name: [] for name in feature_sets}
    for unit in units:
        kept = [t for t in tasks if t.family != unit]
        held = [t for t in tasks if t.family == unit]
        for name in feature_sets:
            model = CostModel.train([groups[t.name] for t in kept], {}, threads=THREADS, features=name)
            for task in held:
                features, labels = groups[task.name]
                top, rand = top_and_random(model.score(features), labels)
                rows.append((task.name, name, top, rand))
                wins[name].append(top > rand)  # relevance: higher is faster
    lines = [f"## {split}: best of {PICKS} picks / table's best (lower is better)",
             f"{'task':34}" + "".join(f"{name + ' top-8':>16}" for name in feature_sets) + f"{'random 8':>12}"]
    by_task = {}
    for task, name, top, rand in rows:
        by_task.setdefault(task, {})[name] = top
        by_task[task]["random"] = rand
    for task, got in by_task.items():
        lines.append(f"{task:34}" + "".join(f"{1 / got[name]:>16.2f}" for name in feature_sets) + f"{1 / got['random']:>12.2f}")
    for name, won in wins.items():
        median = statistics.median(1 / got[name] for got in by_task.values())
        lines.append(f"{name}: top-8 beats the median of random 8 on {sum(won)} of {len(won)} held-out tasks; "
                     f"median over tasks {median:.2f}")
    lines.append(f"random 8: median over tasks {statistics.median(1 / got['random'] for got in by_task.values()):.2f}")
    return lines + [""]


def top_and_random(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(the best relevance among the top-scored PICKS, the median over DRAWS of the best among
    PICKS drawn at random), over the points that ran correctly."""
    ok = labels > 0
    scores, labels = scores[ok], labels[ok]
    top = labels[np.argsort(-scores)[:PICKS]].max()
    rng = np.random.default_rng(0)
    rand = statistics.median(labels[rng.choice(len(labels), PICKS, replace=False)].max() for _ in range(DRAWS))
    return float(top), float(rand)


if __name__ == "__main__":
    main()
