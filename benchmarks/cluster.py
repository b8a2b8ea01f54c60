"""Tuning over a Ray cluster on this machine: builds per second and trials per minute against
the number of build workers (1 and 2), and a model (stated as one, not measured) of how a run
scales with N build nodes and D devices, from the build and run times measured here.

Run alone, as root, in a network namespace of its own (Ray then binds loopback only):
    unshare -n sh -c 'ip link set lo up && .venv/bin/python benchmarks/cluster.py \
        [--workload conv1d-1024] [--trials 48] [--out benchmarks/results/cluster.txt]'

Each configuration is a fresh local cluster (ray.cluster_utils.Cluster): a head node with that
many CPUs (the builder actors) that is also the device node (resource tensortune-device:bench).
The same random points (one seed) are measured in rounds of 16 by the RayEvaluator, after one
warm-up round that starts the actors' workers. On one machine builds and timings take turns
on its cores (a device times alone: measure/cores.py), so the evaluator's overlap of builds
and runs cannot speed it up here; "run s" is the seconds a device held the cores per kernel,
"device busy" their share of the wall time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))


def run(workers: int, args) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from tensortune.measure.cluster import DEVICE, RayEvaluator
    from tensortune.measure.config import MeasureConfig
    from tensortune.search import make_strategy
    from tensortune.space import make_space
    from tensortune.target import make_target
    from tensortune.workloads import get_workload

    target = make_target("cpu", THREADS)
    wl = get_workload(args.workload)
    space = make_space("cpu-template", wl, target)
    points = make_strategy("random", space, seed=0).ask(args.trials + 16)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": workers, "resources": {DEVICE + "bench": 1}})
    try:
        with RayEvaluator(target, MeasureConfig(threads=THREADS, cluster=cluster.address), "bench") as evaluator:
            evaluator.measure(space, points[:16])  # warm-up: the actors' worker processes start
            evaluator.spans.clear()
            start = time.perf_counter()
            results = [r for i in range(16, len(points), 16) for r in evaluator.measure(space, points[i:i + 16])]
            wall = time.perf_counter() - start
            spans = list(evaluator.spans)
    finally:
        ray.shutdown()
        cluster.shutdown()
    built = [r.build_s for r in results if r.build_s]
    runs = [held for method, _, _, held in spans if method == "run"]
    return {"workers": workers, "trials": len(results), "ok": sum(r.ok for r in results),
            "builds_per_s": sum(method == "build" for method, _, _, _ in spans) / wall,
            "trials_per_min": 60 * len(results) / wall, "build_s": statistics.median(built),
            "run_s": statistics.mean(runs), "device_busy": sum(runs) / wall}


def model_lines(base: dict) -> list[str]:
    """Trials per minute with B build workers and D devices, from one configuration's times on
    machines of their own: builds and runs overlap (a device times a kernel while the next
    ones compile), so the slower stage sets the pace, max(build_s / B, run_s / D) a trial."""
    c, r = base["build_s"], base["run_s"]
    lines = [f"model (not measured): a trial costs max(build_s/B, run_s/D) with build_s {c:.3f} s (median compile "
             f"here) and run_s {r:.3f} s (check + time, per kernel, here)"]
    for b, d in ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (16, 4)):
        lines.append(f"  B={b:2d} build workers, D={d} devices: {60 / max(c / b, r / d):7.0f} trials/min")
    lines.append(f"so about build_s/run_s = {c / r:.1f} build workers keep one device of this kind busy (a GPU: its own "
                 "compile and run times, which this machine cannot measure)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="conv1d-1024")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    rows = [run(workers, args) for workers in (1, 2)]
    lines = [*header(THREADS), f"workload {args.workload}, cpu-template space, random points (seed 0), rounds of 16", "",
             f"{'build workers':>13}{'trials':>8}{'correct':>8}{'builds/s':>10}{'trials/min':>11}{'build s':>9}"
             f"{'run s':>8}{'device busy':>12}{'speedup':>9}"]
    for row in rows:
        lines.append(f"{row['workers']:13d}{row['trials']:8d}{row['ok']:8d}{row['builds_per_s']:10.2f}"
                     f"{row['trials_per_min']:11.0f}{row['build_s']:9.3f}{row['run_s']:8.3f}{row['device_busy']:11.0%}"
                     f"{row['trials_per_min'] / rows[0]['trials_per_min']:8.2f}x")
    lines += ["", *model_lines(rows[-1])]
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
