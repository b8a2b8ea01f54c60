"""Multi-objective search: the front of latency and build time that mobo (BoTorch's qLogNEHVI),
nsga2 (Optuna's NSGA-II) and random search find in the same number of trials, several seeds
each, all drawing on one replay table (each distinct point built and timed once, so every
strategy sees identical measurements: its latency and its build seconds).

Quality of a front: its hypervolume in log10 space (log10 latency in ms, log10 build seconds),
up to one reference point for all runs: the worst value of each objective any run's correct
kernels reached, plus 0.05 decades. Prints per strategy the median [min-max] hypervolume at
16, 32 and 64 trials, its ratio to random search's median, and the front's size at the end;
the fronts of the seeds are saved as JSON.

    .venv/bin/python benchmarks/multi_objective.py [--workload conv1d-1024] [--seeds 5] [--trials 64] \
        [--db multi-objective-replay.db] [--out benchmarks/results/multi_objective.txt]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from curves import trace
from provenance import header
from tensortune.db import Database, Task
from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.measure.replay import ReplayTable
from tensortune.measure.roofline import floor_s
from tensortune.objectives import hypervolume, pareto_front
from tensortune.search import make_strategy
from tensortune.space import make_space
from tensortune.target import make_target
from tensortune.workloads import get_workload

STRATEGIES = ("mobo", "nsga2", "random")
CHECKPOINTS = (16, 32, 64)
NAMES = ("latency", "build_s")


def runs(args, target) -> tuple[dict[str, list[list[str]]], ReplayTable]:
    """{strategy: the keys each seed measured, in order}, and the replay table."""
    space = make_space("cpu-template", get_workload(args.workload), target)
    db = Database(args.db)
    task = Task(space.workload.key, target.name, target.hardware, space.name)
    config = MeasureConfig(threads=target.threads, repeat=3, min_repeat_ms=5, min_run_timeout_s=0.25)
    with Measurer(target, config) as measurer:
        replay = ReplayTable(db, task, measurer, cutoff=3.0)
        found = {}
        for name in args.strategies:
            found[name] = []
            for seed in range(args.seeds):
                start = time.perf_counter()
                found[name].append(trace(make_strategy(name, space, seed), replay, args.trials, args.batch,
                                         floor_s(space.workload, target))["keys"])
                print(f"[{name} seed {seed}: {time.perf_counter() - start:.0f} s, table {len(replay.table)} points]",
                      flush=True)
    return found, replay


def log_point(result) -> tuple[float, float]:
    return math.log10(result.latency * 1e3), math.log10(result.build_s)


def front_of(keys: list[str], table: dict) -> list[tuple[float, float]]:
    """The log10 (latency ms, build s) of the non-dominated correct kernels among `keys`."""
    return [log_point(r) for _, r in pareto_front([(k, table[k]) for k in keys], NAMES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="conv1d-1024")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--db", default="multi-objective-replay.db", help="the replay table (reused when re-run)")
    parser.add_argument("--out", help="also write the table here (and the fronts beside it, as JSON)")
    args = parser.parse_args()
    target = make_target("cpu", MeasureConfig().threads)
    found, replay = runs(args, target)
    table = replay.table
    every = [log_point(table[k]) for keys in found.values() for ks in keys for k in ks
             if table[k].ok and table[k].build_s > 0]
    reference = (max(x for x, _ in every) + 0.05, max(y for _, y in every) + 0.05)
    volumes = {name: {n: [hypervolume(front_of(keys[:n], table), reference) for keys in seeds] for n in CHECKPOINTS}
               for name, seeds in found.items()}
    base = volumes.get("random")
    lines = [*header(target.threads),
             f"workload {args.workload}, cpu-template space, {args.seeds} seeds x {args.trials} trials, batches of "
             f"{args.batch}, one replay table ({len(table)} points); hypervolume of log10(latency ms) x "
             f"log10(build s) up to ({reference[0]:.3f}, {reference[1]:.3f}); higher is better", "",
             f"{'strategy':10}" + "".join(f"{'HV@' + str(n) + ' median [range]':>28}" for n in CHECKPOINTS)
             + "".join(f"{'/random@' + str(n):>11}" for n in CHECKPOINTS) + f"{'front size':>12}"]
    for name, by_n in volumes.items():
        sizes = [len(front_of(keys, table)) for keys in found[name]]
        lines.append(f"{name:10}" + "".join(f"{statistics.median(v):12.4f} [{min(v):.4f}-{max(v):.4f}]"
                                            for v in by_n.values())
                     + "".join(f"{statistics.median(by_n[n]) / statistics.median(base[n]):10.2f}x" if base else
                               f"{'-':>11}" for n in CHECKPOINTS)
                     + f"{statistics.median(sizes):8.0f} [{min(sizes)}-{max(sizes)}]")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {name: [front_of(keys, table) for keys in seeds] for name, seeds in found.items()}))


if __name__ == "__main__":
    main()
