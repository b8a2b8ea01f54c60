"""One GEMM for several batch sizes: each M tuned on its own (per-shape tuning), then the one
schedule with the best worst case and a dispatch table of 2 schedules (tuning/shapes.py),
shape by shape against per-shape tuning, all re-timed together in one sitting per shape.

    .venv/bin/python benchmarks/shapes.py [--shapes 'M=1,8,64,512;N=768;K=768'] [--trials 64] [--table 2] \
        [--db shapes.db] [--out benchmarks/results/shapes.txt]

A re-run on the same --db resumes the per-shape tuning from its records and times the
candidates again.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from provenance import header
from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.target import make_target
from tensortune.tuning.shapes import expand, tune_shapes
from tensortune.tuning.tuner import TuneConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="gemm")
    parser.add_argument("--shapes", default="M=1,8,64,512;N=768;K=768")
    parser.add_argument("--trials", type=int, default=64, help="per shape")
    parser.add_argument("--table", type=int, default=2)
    parser.add_argument("--db", default="shapes.db", help="records (a re-run resumes from them)")
    parser.add_argument("--out", help="also write the table here")
    args = parser.parse_args()
    measure = MeasureConfig()
    target = make_target("cpu", measure.threads)
    start = time.perf_counter()
    summary = tune_shapes(expand(args.family, args.shapes), target, Database(args.db),
                          TuneConfig(trials=args.trials), measure, k=args.table, progress=print)
    lines = [*header(target.threads),
             f"{args.family} at {args.shapes}, cpu-template space, evolutionary, {args.trials} trials per shape, "
             f"table of {args.table}; {time.perf_counter() - start:.0f} s in all", "",
             "best ms: the fastest candidate at the shape (its own tuning's 4 best and the other shapes' 4 best each, "
             "all timed together carefully); own tuning ms: the fastest of its own tuning's 4 alone", "",
             f"{'shape':24}{'own tuning ms':>14}{'best ms':>10}{'one schedule':>14}{'x':>7}{'table':>10}{'x':>7}"
             "  table entry (tuned for)"]
    for s, wl in enumerate(summary.workloads):
        final = summary.final[s]
        own = min(summary.latency[c][s] for c, (origin, _) in enumerate(summary.candidates) if origin == s)
        lines.append(f"{','.join(f'{k}={v}' for k, v in wl.kwargs.items()):24}{own * 1e3:14.4f}"
                     f"{final['own'][1].latency * 1e3:10.4f}"
                     f"{final['single'][1].latency * 1e3:14.4f}{summary.ratio(s, 'single'):7.2f}"
                     f"{final['table'][1].latency * 1e3:10.4f}{summary.ratio(s, 'table'):7.2f}  "
                     f"{_origin(summary, summary.serves[s])}")
    worst = max(range(len(summary.workloads)), key=lambda s: summary.ratio(s, "single"))
    lines += ["", f"one schedule (tuned for {_origin(summary, summary.single)}): worst at "
                  f"{_origin_shape(summary, worst)}, {summary.ratio(worst, 'single'):.2f}x the best there",
              f"table of {len(summary.table)}: worst {max(summary.ratio(s, 'table') for s in range(len(summary.workloads))):.2f}x "
              "the best (the target: within 1.15x of per-shape tuning at every shape)"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def _origin(summary, candidate: int) -> str:
    return _origin_shape(summary, summary.candidates[candidate][0])


def _origin_shape(summary, shape: int) -> str:
    return ",".join(f"{k}={v}" for k, v in summary.workloads[shape].kwargs.items())


if __name__ == "__main__":
    main()
