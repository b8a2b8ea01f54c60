"""Seed CPU benchmark: tune gemm-1024, conv1d-1024 and dwconv2d-seed and compare, in one run,
against naive, hand and the vendor libraries (NumPy, torch) on this machine.

Run alone on the machine (any other process distorts timings):
    .venv/bin/python benchmarks/seed_cpu.py [--trials 128] [--seed 0] [--strategy evolutionary]
"""
from __future__ import annotations

import argparse
import json
import tempfile

from tensortune.report import tables as report
from tensortune.measure.baselines import measure_baselines
from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.search import DEFAULT
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig, tune
from tensortune.workloads import get_workload

WORKLOADS = ("gemm-1024", "conv1d-1024", "dwconv2d-seed")


def run(name: str, args, db: Database) -> dict:
    wl = get_workload(name)
    target = make_target("cpu", MeasureConfig().threads)
    config = TuneConfig(trials=args.trials, strategy=args.strategy, seed=args.seed)
    summary = tune(wl, target, db, config, MeasureConfig(threads=target.threads))
    summary.baselines = measure_baselines(wl.name, wl.shape, target.threads)
    return report.as_json(summary)


def ratio(a, b) -> str:
    return f"{a / b:6.2f}x" if a and b else "   -   "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default=DEFAULT)
    parser.add_argument("--json", help="also write all summaries to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"{tmp}/bench.db")  # a fresh database: every trial is measured in this run
        results = [run(name, args, db) for name in WORKLOADS]
    print(f"\nstrategy {args.strategy}, {args.trials} trials, seed {args.seed}; times in ms (median); "
          f"ratios are speedups of tuned over the column")
    print(f"{'workload':14} {'naive':>9} {'hand':>9} {'tuned':>9} {'numpy':>9} {'torch':>9} "
          f"{'/naive':>8} {'/hand':>8} {'/numpy':>8} {'/torch':>8} {'%numpyGF':>9} {'tune s':>7} {'trials/min':>10}"
          f"  threads (ours; vendor)")
    for r in results:
        ms = r["ms"]
        numpy_gf = r["gflops"].get("vendor:numpy")
        print(f"{r['preset']:14} {ms['naive']:9.4f} {ms['hand']:9.4f} {ms['tuned']:9.4f} "
              f"{ms.get('vendor:numpy') or 0:9.4f} {ms.get('vendor:torch') or 0:9.4f} "
              f"{ratio(ms['naive'], ms['tuned']):>8} {ratio(ms['hand'], ms['tuned']):>8} "
              f"{ratio(ms.get('vendor:numpy'), ms['tuned']):>8} {ratio(ms.get('vendor:torch'), ms['tuned']):>8} "
              f"{100 * r['gflops']['tuned'] / numpy_gf if numpy_gf else 0:8.0f}% {r['tuning_s']:7.1f} "
              f"{r['trials_per_min']:10.0f}  {r['threads']}; {json.dumps(r['vendor_threads'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
