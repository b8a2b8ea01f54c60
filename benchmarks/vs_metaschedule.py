"""tensortune vs TVM's MetaSchedule on the seed CPU workloads, same budgets, one run.

MetaSchedule runs natively (evolutionary search + XGBoost cost model, 32 trials a round,
same thread count); every record it measured is then re-verified and re-timed by our
measurement, so all best latencies below come from one yardstick (our search-time timing).
Ours: evolutionary on the knob space, and on the sketch space (MetaSchedule's own design
space, searched by our strategy and measured by our pipeline). Best latency and wall time are read at 64 and
256 trials of each run; ratios are MetaSchedule / ours (above 1: ours is better).

    .venv/bin/python benchmarks/vs_metaschedule.py [--trials 256] [--our-trials 64] [--workloads ...] [--configs ...]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig, tune
from tensortune.workloads import get_workload

WORKLOADS = ("conv1d-1024", "dwconv2d-seed", "gemm-1024")
CONFIGS = (("metaschedule", "sketch"), ("evolutionary", "cpu-template"), ("evolutionary", "sketch"))
BUDGETS = (64, 256)


def run(name: str, strategy: str, space: str, trials: int, seed: int) -> dict:
    wl = get_workload(name)
    target = make_target("cpu", MeasureConfig().threads)
    stamps = {}
    start = time.perf_counter()  # our wall time includes setting up the space and the workers

    def progress(done, total, best):
        stamps.setdefault(done, time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"{tmp}/bench.db")
        summary = tune(wl, target, db, TuneConfig(trials=trials, strategy=strategy, space=space, seed=seed),
                       MeasureConfig(threads=target.threads), progress)
        latencies = [r.result.latency for r in db.records(summary.task)]
    out = {"strategy": strategy, "space": summary.task.space, "trials": len(latencies)}
    for budget in BUDGETS:
        if budget <= len(latencies):
            out[f"best@{budget}"] = min(latencies[:budget])
            # MetaSchedule's wall time is its own tuning run; it is not split by trial
            out[f"wall@{budget}"] = (summary.tuning_s * budget / len(latencies) if strategy == "metaschedule"
                                     else min(t for d, t in stamps.items() if d >= budget))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=max(BUDGETS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--configs", nargs="+", default=[f"{s}@{sp}" for s, sp in CONFIGS],
                        help="strategy@space, MetaSchedule first (the ratios' reference)")
    parser.add_argument("--our-trials", type=int, help="trials for our configurations (default --trials): 64 "
                        "suffices to ask whether ours reach MetaSchedule's 256-trial latency within 64")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    configs = [c.split("@") for c in args.configs]
    trials = lambda strategy: args.trials if strategy == "metaschedule" else args.our_trials or args.trials  # noqa: E731
    results = {name: [run(name, s, sp, trials(s), args.seed) for s, sp in configs] for name in args.workloads}
    print("\nbest latency (ms, our timing) and wall time per trial (s) at each budget; "
          "'x' columns: MetaSchedule / ours")
    for name, rows in results.items():
        peer = rows[0]
        print(f"\n{name}")
        print(f"{'strategy @ space':34}" + "".join(f"{'best@' + str(b):>11}{'x':>7}{'s/trial':>9}{'x':>7}"
                                                   for b in BUDGETS) + f"{'trials/min':>11}")
        for r in rows:
            cells = ""
            for b in BUDGETS:
                if f"best@{b}" not in r:
                    cells += f"{'-':>34}"
                    continue
                per_trial = r[f"wall@{b}"] / b
                cells += (f"{r[f'best@{b}'] * 1e3:11.4f}{peer[f'best@{b}'] / r[f'best@{b}']:7.2f}"
                          f"{per_trial:9.3f}{peer[f'wall@{b}'] / b / per_trial:7.2f}")
            b = max(k for k in BUDGETS if f"wall@{k}" in r)
            print(f"{r['strategy'] + ' @ ' + r['space']:34}{cells}{60 * b / r[f'wall@{b}']:11.0f}")
        print(*_reaches(peer, rows[1:]), sep="\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def _reaches(peer: dict, rows: list[dict]) -> list[str]:
    """Does ours at 64 trials reach MetaSchedule's latency at its largest budget?"""
    most = max((b for b in BUDGETS if f"best@{b}" in peer), default=None)
    if most is None:
        return []
    return [f"  {r['strategy']} @ {r['space']} at 64 trials vs MetaSchedule at {most}: "
            f"{peer[f'best@{most}'] / r['best@64']:.2f}x ({'reaches it' if r['best@64'] <= peer[f'best@{most}'] else 'does not'})"
            for r in rows if "best@64" in r]


if __name__ == "__main__":
    main()
