"""How well bo's surrogate ranks schedules it has not measured, after n observations.

For each workload and n, it tells the bo strategy n points drawn at random from a replay table
filled by benchmarks/strategies.py. It then fits the strategy's own models and scores every
other correct point of the table. No kernel is measured: the script only reads the table.

Printed per n, as the median over repeats:
- the rank correlation (Spearman) between predicted and measured speed;
- the latency of the best of the model's top 8 picks, as a ratio to the table's best;
- the same ratio for the best of 8 random picks.

The table holds what the strategies visited, which leans towards good regions, so these
held-out points are easier to rank than uniform samples would be.

    .venv/bin/python benchmarks/surrogate_quality.py --db strategies-replay.db [--repeats 10]
"""
from __future__ import annotations

import argparse
import random
import statistics

from tensortune.db import Database, Task
from tensortune.measure.config import MeasureConfig
from tensortune.measure.replay import ReplayTable
from tensortune.search import make_strategy
from tensortune.space import make_space
from tensortune.points import point_from_json
from tensortune.target import make_target
from tensortune.workloads import get_workload

WORKLOADS = ("conv1d-1024", "dwconv2d-seed", "gemm-1024")
SIZES = (16, 32, 48, 96)
PICKS = 8


def rank_correlation(a, b) -> float:
    import torch

    ranks = torch.stack([a.argsort().argsort().double(), b.argsort().argsort().double()])
    return float(torch.corrcoef(ranks)[0, 1])


def one_split(space, table: dict, best: float, n: int, seed: int) -> tuple[float, float, float]:
    """(Spearman, model's best-of-8 ratio, random best-of-8 ratio) for one random split."""
    import torch

    rng = random.Random(seed)
    keys = sorted(table)
    rng.shuffle(keys)
    train, test = keys[:n], [k for k in keys[n:] if table[k].ok]
    strategy = make_strategy("bo", space, seed)
    strategy.tell([point_from_json(k) for k in train], [table[k] for k in train])
    objective, _, _ = strategy.models()
    X = torch.tensor([space.encode(point_from_json(k)) for k in test], dtype=torch.double)
    with torch.no_grad():
        predicted = objective.posterior(X).mean.squeeze(-1)
    speed = torch.tensor([-table[k].latency for k in test], dtype=torch.double)
    model_pick = min(table[test[i]].latency for i in predicted.topk(PICKS).indices.tolist())
    random_pick = min(table[k].latency for k in rng.sample(test, PICKS))
    return rank_correlation(predicted, speed), model_pick / best, random_pick / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="strategies-replay.db", help="replay tables from benchmarks/strategies.py")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    target = make_target("cpu", MeasureConfig().threads)
    db = Database(args.db)
    for name in args.workloads:
        wl = get_workload(name)
        space = make_space("cpu-template", wl)
        replay = ReplayTable(db, Task(wl.key, target.name, target.hardware, "cpu-template"))
        table, best = replay.table, replay.best()
        if len(table) < 2 * max(SIZES):
            raise SystemExit(f"{name}: {len(table)} points in {args.db}; run benchmarks/strategies.py first")
        print(f"\n{name}: {len(table)} points in the table; median over {args.repeats} random splits")
        print(f"{'n':>4}{'spearman':>10}{'model top-8':>13}{'random 8':>10}{'random/model':>14}")
        for n in SIZES:
            rho, model, rand = zip(*(one_split(space, table, best, n, seed) for seed in range(args.repeats)))
            print(f"{n:4d}{statistics.median(rho):10.2f}{statistics.median(model):12.2f}x"
                  f"{statistics.median(rand):9.2f}x{statistics.median(rand) / statistics.median(model):13.2f}x")


if __name__ == "__main__":
    main()
