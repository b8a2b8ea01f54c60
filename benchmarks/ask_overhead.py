"""The strategies' own cost: seconds for one ask(16) after 256 observations.

Observations are real: the first 256 records of a replay table filled by
benchmarks/strategies.py (default: conv1d-1024). Run alone:
    .venv/bin/python benchmarks/ask_overhead.py [--db strategies-replay.db] [--workload conv1d-1024]
"""
from __future__ import annotations

import argparse
import time

from tensortune.db import Database, Task
from tensortune.measure.config import MeasureConfig
from tensortune.search import REPLAYABLE, make_strategy
from tensortune.space import make_space
from tensortune.target import make_target
from tensortune.workloads import get_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="strategies-replay.db")
    parser.add_argument("--workload", default="conv1d-1024")
    parser.add_argument("--observations", type=int, default=256)
    args = parser.parse_args()
    wl = get_workload(args.workload)
    target = make_target("cpu", MeasureConfig().threads)
    records = Database(args.db).records(Task(wl.key, target.name, target.hardware, "cpu-template"))
    records = records[: args.observations]
    if len(records) < args.observations:
        raise SystemExit(f"only {len(records)} records for {wl.key} in {args.db}: run benchmarks/strategies.py first")
    space = make_space("cpu-template", wl)
    print(f"{wl.key}: one ask(16) after {len(records)} real observations")
    for name in REPLAYABLE:
        strategy = make_strategy(name, space, seed=0)
        strategy.tell([r.point for r in records], [r.result for r in records])
        start = time.perf_counter()
        points = strategy.ask(16)
        print(f"  {name:13} {time.perf_counter() - start:6.2f} s  ({len(points)} points)")


if __name__ == "__main__":
    main()
