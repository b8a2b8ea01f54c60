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

Workloads: the three seed workloads and three zoo kernels the packaged cost model was not
trained on (a ResNet-18 3x3 convolution, 128 channels at 28x28; a BERT dense layer, 128x768
by 768x768; a MobileNetV2 depthwise convolution, 144 channels at 56x56; at most 3 seeds
each). A workload the packaged cost model was trained on is refused unless --seen is given (the
comparison would measure its recall, not the search), and each table's header says whether its
workload was seen. A 256-trial MetaSchedule run takes ~7 minutes on a 2-core machine: run one
workload at a time and append.

    .venv/bin/python benchmarks/vs_metaschedule.py --seeds 5 [--workloads gemm-1024 ...] [--trials 256]
        [--our-trials 256] [--configs metaschedule@sketch model@sketch model:pretrained=0@sketch ...]
        [--out FILE --json FILE] [--seen]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from corpus import resolve, trained_on
from provenance import header
from tensortune.db import Database
from tensortune.measure.config import MeasureConfig
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig, tune

SEED_WORKLOADS = ("conv1d-1024", "dwconv2d-seed", "gemm-1024")
ZOO_KERNELS = ("resnet18:fused_conv2d3_subtract2_divide2_multiply2_add5_relu2", "bert_layer:fused_matmul3_add1",
               "mobilenet_v2:fused_conv2d7_subtract5_divide5_multiply5_add10_tir_clip3")
ZOO_SEEDS = 3  # at most, for the zoo kernels
CONFIGS = ("metaschedule@sketch", "model@sketch", "evolutionary@sketch")
BUDGETS = (16, 32, 64, 128, 256)


def run(name: str, config: str, trials: int, seed: int) -> dict:
    """One tuning run of a configuration, STRATEGY@SPACE or STRATEGY:KEY=VALUE,...@SPACE (the
    strategy's options): its latencies in measurement order and the wall seconds at each trial."""
    named, space = config.split("@")
    strategy, _, listed = named.partition(":")
    options = tuple((k, v) for k, _, v in (pair.partition("=") for pair in listed.split(",") if pair))
    target = make_target("cpu", MeasureConfig().threads)
    wl = resolve(name, target.spec)
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
    return {"seed": seed, "latencies": latencies, "walls": walls}


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


def compare(name: str, configs: list[str], trials: dict, seeds: int) -> dict:
    """Every configuration on one workload, each over `seeds` seeds; MetaSchedule first."""
    runs = {c: [run(name, c, trials[c], seed) for seed in range(1, seeds + 1)] for c in configs}
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
    spec = make_target("cpu", MeasureConfig().threads).spec
    trained = trained_on(spec)
    seen = {name for name in workloads if resolve(name, spec).key in trained}
    if seen and not allow_seen:
        raise SystemExit(f"error: the packaged cost model was trained on {', '.join(sorted(seen))}: a comparison "
                         "there measures its recall; pick held-out workloads, or pass --seen to run them anyway")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help=f"runs per configuration (the zoo kernels: at most {ZOO_SEEDS})")
    parser.add_argument("--trials", type=int, default=max(BUDGETS), help="MetaSchedule's trials")
    parser.add_argument("--our-trials", type=int, help="trials for our configurations (default: --trials)")
    parser.add_argument("--workloads", nargs="+", default=[*SEED_WORKLOADS, *ZOO_KERNELS],
                        help="presets, FAMILY:SHAPE, or MODEL:KERNEL for a zoo model's kernel")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS),
                        help="strategy@space, MetaSchedule first (the reference of the ratios)")
    parser.add_argument("--out", help="append the tables to this file")
    parser.add_argument("--json", help="append every run (latencies and wall times) to this file, one line a workload")
    parser.add_argument("--seen", action="store_true", help="also run workloads the packaged cost model was "
                        "trained on (refused otherwise: they measure its recall, not the search)")
    args = parser.parse_args()
    if not args.configs[0].startswith("metaschedule@"):
        raise SystemExit("error: the first --configs entry is the reference: make it metaschedule@SPACE")
    seen = held_out_check(args.workloads, args.seen)
    trials = {c: args.trials if c.startswith("metaschedule@") else args.our_trials or args.trials for c in args.configs}
    threads = MeasureConfig().threads
    for name in args.workloads:
        seeds = min(args.seeds, ZOO_SEEDS) if name in ZOO_KERNELS else args.seeds
        result = compare(name, args.configs, trials, seeds)
        note = f"workload {name}: " + ("SEEN in the packaged cost model's training tasks (--seen)" if name in seen
                                        else "held out of the packaged cost model's training tasks")
        text = "\n".join([*header(threads), note, *table(result, args.configs)])
        print("\n" + text, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(text + "\n\n")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"header": header(threads), **result}) + "\n")


if __name__ == "__main__":
    main()
