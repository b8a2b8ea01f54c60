"""tensortune vs TVM's MetaSchedule in MetaSchedule's own design space, several seeds each.

MetaSchedule runs natively (evolutionary search on its XGBoost cost model, 32 trials a round,
same thread count); every record it measured is then re-verified and re-timed by our
measurement, so all latencies below come from one yardstick (our search-time timing). Ours:
our strategies on the sketch space (MetaSchedule's design space, measured by our pipeline).

Printed per workload and configuration, over the seeds: the median best latency and its range
at 16/32/64/128/256 trials, with MetaSchedule's median over ours ('x', above 1: ours is
better); and the time to quality: wall seconds until a run first reaches MetaSchedule's median
best latency at its largest budget (the upper median over seeds, with how many reached it;
'never' where most do not; MetaSchedule's wall time is its tuning run, apportioned evenly over
its trials).

Workloads (default): six held out of the packaged cost model's training tasks (HELD_OUT): two
GEMM-like (a transformer's dense layer at 200 tokens, a length in no corpus table; a GPT
block's fused QKV projection, 128x768 by 768x2304), two convolutions (a ResNet-18 3x3, 128
channels at 28x28; a MobileNetV2 depthwise 3x3, 144 channels at 56x56), a 1D convolution at a
shape in no table, and a kernel of a model from the coverage corpus of `benchmarks/coverage.py`
(ConvNeXt's 7x7 depthwise convolution, 32 channels at 16x16).
A workload the packaged cost model was trained on is refused unless --seen is given (the
comparison would measure its recall, not the search), and each table's header says whether its
workload was seen.

Resumable: with --runs FILE.jsonl every (workload, configuration, seed) run is appended to the
file as it ends, with the machine, the code revision and the packaged cost model it ran with;
run the same command again and the runs already in the file for this machine kind (CPU model
and threads; for `model` and `bo-model` also the same packaged model) are skipped. The
tables pool only runs of this machine kind. A 256-trial MetaSchedule run takes 3-7 minutes on
a 2-core machine: the full race (6 workloads x 5 seeds x 3 configurations) takes several
sittings.

    .venv/bin/python benchmarks/vs_metaschedule.py --seeds 5 --trials 256 --runs FILE.jsonl [--out FILE]
        [--workloads gemm-1024 ...] [--our-trials 256]
        [--configs metaschedule@sketch model@sketch model:pretrained=0@sketch ...] [--seen]
"""
from __future__ import annotations

import argparse
import json
import statistics
import os
import tempfile
import time

from corpus import resolve, trained_on
from provenance import header, revision
from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig, tune

# kernel names as the importer names them now: a stale name stops the script before any run
HELD_OUT = ("gemm:M=200,N=768,K=768", "gpt_block:fused_matmul_add1",
            "resnet18:fused_conv2d3_subtract2_divide2_multiply2_add3_relu21",
            "mobilenet_v2:fused_conv2d7_subtract5_divide5_multiply5_add5_maximum3_minimum31",
            "conv1d:M=8192,N=96", "coverage.convnext:fused_conv2d1_add_transpose11")
CONFIGS = ("metaschedule@sketch", "model@sketch", "evolutionary@sketch")
# the strategies that start from the packaged cost model: a run of one is pooled only with runs
# made with the same packaged model (retrained, it is another tuner)
PRIMED = ("model", "bo-model")
BUDGETS = (16, 32, 64, 128, 256)


def run(name: str, config: str, trials: int, seed: int) -> dict:
    """One tuning run of a configuration, STRATEGY@SPACE or STRATEGY:KEY=VALUE,...@SPACE (the
    strategy's options): its latencies in measurement order and the wall seconds at each trial,
    with what it was and the machine and revision that measured it."""
    named, space = config.split("@")
    strategy, listed = strategy_of(config), named.partition(":")[2]
    options = tuple((k, v) for k, _, v in (pair.partition("=") for pair in listed.split(",") if pair))
    target = make_target("cpu", MeasureConfig().threads)
    wl = resolve(name, target)
    stamps = {}
    start = time.perf_counter()  # our wall time includes setting up the space and the workers

    def progress(done, total, best):
        stamps.setdefault(done, time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"{tmp}/bench.db")
        summary = tune(wl, target, db, TuneConfig(trials=trials, strategy=strategy, space=space, seed=seed,
                                                  options=options),
                       MeasureConfig(threads=target.threads), progress)
        latencies = [r.result.latency for r in db.records(summary.task)]  # a failure: inf
    if strategy == "metaschedule":  # its own tuning run, not split by trial
        walls = [summary.tuning_s * (i + 1) / len(latencies) for i in range(len(latencies))]
    else:
        walls = [min(t for done, t in stamps.items() if done > i) for i in range(len(latencies))]
    return {"workload": name, "config": config, "seed": seed, "trials": trials, "machine": machine_kind(),
            "revision": revision(), "prior": packaged_model(), "latencies": latencies, "walls": walls}


def strategy_of(config: str) -> str:
    """The strategy a configuration (STRATEGY[:OPTIONS]@SPACE) runs."""
    return config.split("@")[0].partition(":")[0]


def packaged_model() -> str:
    """Which packaged cost model a run started from: its file's digest."""
    import hashlib

    from tensortune.costmodel.model import pretrained_path

    path = pretrained_path("llvm")
    return hashlib.sha1(path.read_bytes()).hexdigest()[:12] if path.exists() else "none"


def machine_kind() -> str:
    """What runs are pooled by: the CPU model and the threads a run measures with."""
    from tensortune.target import cpu_model

    return f"{cpu_model()}, {MeasureConfig().threads} threads"


def load_runs(path: str | None) -> list[dict]:
    """The runs recorded in `path` (JSON lines), none if it does not exist yet."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def recorded(runs: list[dict], name: str, config: str, seed: int, trials: int) -> dict | None:
    """A run of `config` on `name` with `seed` and at least `trials` on this machine kind (and,
    for a strategy in PRIMED, with this packaged cost model), cut to `trials`; None if there is none."""
    kind = machine_kind()
    prior = packaged_model() if strategy_of(config) in PRIMED else None
    for r in runs:
        same_prior = prior is None or r.get("prior") == prior
        if (r["workload"], r["config"], r["seed"], r["machine"]) == (name, config, seed, kind) and same_prior \
                and r["trials"] >= trials:
            return {**r, "trials": trials, "latencies": r["latencies"][:trials], "walls": r["walls"][:trials]}
    return None


def best_at(run_: dict, budget: int) -> float | None:
    return min(run_["latencies"][:budget]) if len(run_["latencies"]) >= budget else None


def time_to(run_: dict, quality: float) -> float:
    """Wall seconds until the run's best first reaches `quality`; inf if it never does."""
    for latency, wall in zip(run_["latencies"], run_["walls"]):
        if latency <= quality:
            return wall
    return float("inf")


def summarise(runs: list[dict], quality: float) -> dict:
    """Median and range of best latency per budget, and the median time to `quality`."""
    times = [time_to(r, quality) for r in runs]  # the upper median: an even count never rounds down to a reach
    out = {"seeds": [r["seed"] for r in runs], "time_to_quality": statistics.median_high(times),
           "reached": sum(t < float("inf") for t in times)}
    for budget in BUDGETS:
        bests = [b for b in (best_at(r, budget) for r in runs) if b is not None]
        if len(bests) == len(runs):
            out[budget] = (statistics.median(bests), min(bests), max(bests))
    return out


def compare(name: str, configs: list[str], trials: dict, seeds: int, runs_file: str | None) -> dict:
    """Every configuration on one workload, each over `seeds` seeds, MetaSchedule first; a run
    already in `runs_file` on this machine kind is reused, each new one appended as it ends."""
    done = load_runs(runs_file)
    runs = {config: [] for config in configs}
    for seed in range(1, seeds + 1):  # seed by seed: a sitting stopped midway leaves whole comparisons
        for config in configs:
            found = recorded(done, name, config, seed, trials[config])
            if found is None:
                print(f"vs_metaschedule: {name}, {config}, seed {seed}: {trials[config]} trials", flush=True)
                found = run(name, config, trials[config], seed)
                if runs_file:
                    with open(runs_file, "a") as f:
                        f.write(json.dumps(found) + "\n")
            runs[config].append(found)
    peer = runs[configs[0]]
    most = max(b for b in BUDGETS if all(best_at(r, b) is not None for r in peer))
    quality = statistics.median(best_at(r, most) for r in peer)
    return {"workload": name, "quality": quality, "quality_budget": most, "runs": runs,
            "summary": {c: summarise(rs, quality) for c, rs in runs.items()}}


def table(result: dict, configs: list[str]) -> list[str]:
    peer = result["summary"][configs[0]]
    lines = [f"{result['workload']} (seeds {', '.join(map(str, peer['seeds']))}); quality: {configs[0]}'s median "
             f"best at {result['quality_budget']} trials, {result['quality'] * 1e3:.4f} ms",
             f"{'strategy @ space':22}" + "".join(f"{'best@' + str(b) + ' ms [range]':>29}{'x':>6}" for b in BUDGETS)
             + f"{'to quality s (reached)':>24}{'x':>7}"]
    for config in configs:
        s, cells = result["summary"][config], ""
        for b in BUDGETS:
            if b not in s:
                cells += f"{'-':>35}"
                continue
            median, low, high = s[b]
            cells += f"{median * 1e3:10.4f} [{low * 1e3:.4f}-{high * 1e3:.4f}]".rjust(29)
            cells += f"{peer[b][0] / median:6.2f}" if b in peer else f"{'-':>6}"
        ttq, peer_ttq, reached = s["time_to_quality"], peer["time_to_quality"], f"({s['reached']}/{len(s['seeds'])})"
        cells += f"{ttq:18.1f} {reached:>5}" if ttq < float("inf") else f"{'never':>18} {reached:>5}"
        cells += f"{peer_ttq / ttq:7.2f}" if max(ttq, peer_ttq) < float("inf") else f"{'-':>7}"
        lines.append(f"{config:22}{cells}")
    return lines


def held_out_check(workloads: list[str], allow_seen: bool) -> set[str]:
    """The workloads among `workloads` the packaged cost model learned from; an error naming
    them unless `allow_seen`."""
    target = make_target("cpu", MeasureConfig().threads)
    trained = trained_on(target)
    seen = {name for name in workloads if resolve(name, target).key in trained}
    if seen and not allow_seen:
        raise SystemExit(f"error: the packaged cost model was trained on {', '.join(sorted(seen))}: a comparison "
                         "there measures its recall; pick held-out workloads, or pass --seen to run them anyway")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="runs per configuration")
    parser.add_argument("--trials", type=int, default=max(BUDGETS), help="MetaSchedule's trials")
    parser.add_argument("--our-trials", type=int, help="trials for our configurations (default: --trials)")
    parser.add_argument("--workloads", nargs="+", default=list(HELD_OUT),
                        help="presets, FAMILY:SHAPE, or MODEL:KERNEL for a kernel of a zoo model or of "
                        "coverage.MODEL (benchmarks/coverage.py)")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS),
                        help="strategy@space, MetaSchedule first (the reference of the ratios)")
    parser.add_argument("--out", help="append the tables to this file")
    parser.add_argument("--runs", help="JSON lines: every run is appended as it ends, and those already there "
                        "for this machine kind are not run again (resume by running the same command)")
    parser.add_argument("--seen", action="store_true", help="also run workloads the packaged cost model was "
                        "trained on (refused otherwise: they measure its recall, not the search)")
    args = parser.parse_args()
    if not args.configs[0].startswith("metaschedule@"):
        raise SystemExit("error: the first --configs entry is the reference: make it metaschedule@SPACE")
    seen = held_out_check(args.workloads, args.seen)
    trials = {c: args.trials if c.startswith("metaschedule@") else args.our_trials or args.trials for c in args.configs}
    threads = MeasureConfig().threads
    for name in args.workloads:
        result = compare(name, args.configs, trials, args.seeds, args.runs)
        note = f"workload {name}, runs of {machine_kind()}: " + ("SEEN in the packaged cost model's training tasks (--seen)" if name in seen
                                        else "held out of the packaged cost model's training tasks")
        text = "\n".join([*header(threads), note, *table(result, args.configs)])
        print("\n" + text, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(text + "\n\n")


if __name__ == "__main__":
    main()
