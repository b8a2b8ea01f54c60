"""Padded tiles vs exact splits only: does letting tiles cover an awkward extent padded to
a multiple of 8 help the search? conv1d-1024 has 2047 = 23 x 89 outputs, so exact splits
leave seven lumpy tilings, none vectorisable; the CPU template also allows tiles of 2048,
the overhang guarded.

Random, evolutionary and bo, several seeds each, run in both spaces, each space with its own
replay table (each distinct point measured once; the fastest re-timed carefully at the end).
Prints the median best latency after 16, 32, 64 and 128 trials as a ratio to the best either
space found, and exact / template at each budget (over 1: the padded tiles found faster
kernels).

    .venv/bin/python benchmarks/padding.py [--seeds 10] [--trials 128] [--db padding-replay.db]
"""
from __future__ import annotations

import argparse
import statistics
import time

from curves import at
from strategies import replay_runs

from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.space.cpu_template import MAX_VECTOR_TILE, CpuTemplateSpace
from tensortune.space.knobs import Split
from tensortune.target import make_target
from tensortune.workloads import get_workload

CHECKPOINTS = (16, 32, 64, 128)


class ExactSplits(CpuTemplateSpace):
    """The CPU template without padded tiles: spatial splits multiply to the extent. It has no
    hand schedule: the operators' hands are for "cpu-template" and tile padded extents."""
    name = "cpu-template-exact"

    def _knobs(self) -> list:
        exact = {f"tile.{axis}": extent for axis, extent in self.nest.spatial}
        return [Split(k.name, exact[k.name], 3, MAX_VECTOR_TILE) if k.name in exact else k for k in super()._knobs()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="conv1d-1024")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=["random", "evolutionary", "bo"])
    parser.add_argument("--db", default="padding-replay.db", help="the replay tables (reused when re-run)")
    parser.add_argument("--refine", type=int, default=16, help="fastest points of each table re-timed at the end")
    args = parser.parse_args()
    target = make_target("cpu", MeasureConfig().threads)
    wl, db = get_workload(args.workload), Database(args.db)
    curves = {}
    for space in (ExactSplits(wl), CpuTemplateSpace(wl)):
        start = time.perf_counter()
        runs, replay = replay_runs(space, db, target, args)
        curves[space.name] = {s: [r["curve"] for r in rs] for s, rs in runs.items()}
        print(f"[{space.name}: {replay.measured} new points measured, {len(replay.table)} in the table, "
              f"best {replay.best() * 1e3:.4f} ms, {time.perf_counter() - start:.0f} s]")
    best = min(min(c) for per_space in curves.values() for cs in per_space.values() for c in cs)
    print(f"\n{wl.key}: median best over {args.seeds} seeds / best either space found ({best * 1e3:.4f} ms)")
    print(f"{'strategy':13}{'space':20}" + "".join(f"{'@' + str(c):>8}" for c in CHECKPOINTS))
    medians = {}
    for space_name, per_space in curves.items():
        for strategy, cs in per_space.items():
            medians[space_name, strategy] = [statistics.median(at(c, n) for c in cs) for n in CHECKPOINTS]
            print(f"{strategy:13}{space_name:20}" + "".join(f"{m / best:7.2f}x" for m in medians[space_name, strategy]))
    print("\nexact / template (over 1: with padded tiles the search found faster kernels at that budget)")
    for strategy in args.strategies:
        exact, template = medians[ExactSplits.name, strategy], medians[CpuTemplateSpace.name, strategy]
        print(f"{strategy:13}{'':20}" + "".join(f"{e / t:7.2f}x" for e, t in zip(exact, template)))


if __name__ == "__main__":
    main()
