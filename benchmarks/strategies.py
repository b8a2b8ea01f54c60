"""Strategy benchmark: random, evolutionary, bo, tpe and lfbo on the seed CPU workloads, several
seeds each, all drawing from one replay table per workload (each distinct point measured
once), so strategies are compared on identical measurements. At the end the fastest points
of the table are re-timed carefully, and the curves use those times, so that the "best
found" is not one lucky timing.

Prints, per workload and strategy, the median [min-max] best latency after 16, 32, 64 and
128 trials, and the trials needed to get within 5%, 20% and 50% (--within) of the best
latency any strategy found;
saves a convergence plot per workload (PNG) and the best-so-far traces (JSON).

    .venv/bin/python benchmarks/strategies.py [--seeds 10] [--trials 128] [--within 5 20 50] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from curves import at, best_so_far, trace, trials_to
from tensortune.db import Database, Task
from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.measure.replay import ReplayTable
from tensortune.measure.roofline import floor_s
from tensortune.search import make_strategy
from tensortune.space import make_space
from tensortune.target import make_target
from tensortune.workloads import get_workload

WORKLOADS = ("conv1d-1024", "dwconv2d-seed", "gemm-1024")
STRATEGIES = ("random", "evolutionary", "bo", "tpe", "lfbo")
CHECKPOINTS = (16, 32, 64, 128)
SPACE = "cpu-template"


def replay_runs(space, db: Database, target, args) -> tuple[dict[str, list[dict]], ReplayTable]:
    """Every strategy in args.strategies over args.seeds seeds (args.trials trials in batches
    of args.batch), all drawing on the space's replay table; then the table's args.refine
    fastest points are re-timed and each run gets its best-so-far "curve". Returns
    ({strategy: [run per seed]}, the table)."""
    # quicker timing than a tuning run: the table only has to rank points. Kernels over 3x the
    # table's best are timed by one call, and stopped (recorded as run_timeout) after 8x that.
    config = MeasureConfig(threads=target.threads, repeat=3, min_repeat_ms=5, min_run_timeout_s=0.25)
    task = Task(space.workload.key, target.name, target.hardware, space.name)
    floor = floor_s(space.workload, target)
    with Measurer(target, config) as measurer:
        replay = ReplayTable(db, task, measurer, cutoff=3.0)
        runs = {s: [trace(make_strategy(s, space, seed), replay, args.trials, args.batch, floor)
                    for seed in range(args.seeds)]
                for s in args.strategies}
        replay.refine(space, args.refine)
    for rs in runs.values():
        for r in rs:
            r["curve"] = best_so_far(r["keys"], replay.table)
    return runs, replay


def summarise(name: str, runs: dict[str, list[dict]], within: list[float], out: Path) -> None:
    best_any = min(min(r["curve"]) for rs in runs.values() for r in rs)
    print(f"\n{name}: best latency any strategy found {best_any * 1e3:.4f} ms; "
          f"median [min-max] best ms over {len(next(iter(runs.values())))} seeds")
    print(f"{'strategy':13}" + "".join(f"{'@' + str(c):>26}" for c in CHECKPOINTS)
          + "".join(f"{f'to within {p:g}%':>17}" for p in within) + f"{'own s':>8}")
    for strategy, rs in runs.items():
        cells = []
        for c in CHECKPOINTS:
            values = [at(r["curve"], c) * 1e3 for r in rs]
            cells.append(f"{statistics.median(values):9.4f} [{min(values):.4f}-{max(values):.4f}]")
        reach = [_reach(rs, best_any * (1 + p / 100)) for p in within]
        print(f"{strategy:13}" + "".join(f"{c:>26}" for c in cells) + "".join(f"{c:>17}" for c in reach)
              + f"{statistics.median(r['own_s'] for r in rs):8.1f}")
    _plot(name, runs, best_any, within[0], out / f"strategies-{name}.png")


def _reach(rs: list[dict], target: float) -> str:
    """Median trials to reach `target` over seeds ('never' if most seeds never do), and how
    many seeds reached it at all."""
    reach = [trials_to(r["curve"], target) for r in rs]
    median_reach = statistics.median(reach)
    return f"{'never' if math.isinf(median_reach) else f'{median_reach:g}'} ({sum(not math.isinf(x) for x in reach)}/{len(reach)})"


def _plot(name: str, runs: dict[str, list[dict]], best_any: float, within: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for strategy, rs in runs.items():
        n = min(len(r["curve"]) for r in rs)
        per_trial = [[r["curve"][i] * 1e3 for r in rs] for i in range(n)]
        x = range(1, n + 1)
        ax.plot(x, [statistics.median(v) for v in per_trial], label=strategy)
        ax.fill_between(x, [min(v) for v in per_trial], [max(v) for v in per_trial], alpha=0.15)
    ax.axhline(best_any * (1 + within / 100) * 1e3, color="grey", linestyle=":", label=f"within {within:g}% of best found")
    ax.set(xlabel="trials", ylabel="best latency so far (ms)", title=f"{name}: median and range over seeds",
           yscale="log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="5-seed medians flip between runs here")
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--db", default="strategies-replay.db", help="the replay tables (reused when re-run)")
    parser.add_argument("--within", type=float, nargs="+", default=[5.0, 20.0, 50.0],
                        help="percentages above the best found; a 'trials to reach' column for each")
    parser.add_argument("--refine", type=int, default=32, help="fastest points re-timed carefully at the end")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = make_target("cpu", MeasureConfig().threads)
    db = Database(args.db)
    all_runs = {}
    for name in args.workloads:
        start = time.perf_counter()
        runs, replay = replay_runs(make_space(SPACE, get_workload(name)), db, target, args)
        print(f"[{name}: {replay.measured} new points measured, {len(replay.table)} in the table, "
              f"{time.perf_counter() - start:.0f} s]")
        summarise(name, runs, args.within, out)
        all_runs[name] = runs
    (out / "strategies.json").write_text(json.dumps(all_runs))


if __name__ == "__main__":
    main()
