"""A strategy's run over a replay table and the best-so-far curve made from it, shared by the
strategy benchmark (strategies.py, padding.py) and the leaderboard."""
from __future__ import annotations

import math
import time

from tensortune.measure.replay import ReplayTable
from tensortune.space import point_key


def trace(strategy, replay: ReplayTable, trials: int, batch: int) -> dict:
    """Ask and tell until `trials` points (or the strategy runs dry): the points' keys in
    order, how many failed, and the strategy's own time (ask + tell)."""
    keys, failed, own_s = [], 0, 0.0
    while len(keys) < trials:
        start = time.perf_counter()
        points = strategy.ask(min(batch, trials - len(keys)))
        own_s += time.perf_counter() - start
        if not points:
            break
        results = replay.measure(points)
        start = time.perf_counter()
        strategy.tell(points, results)
        own_s += time.perf_counter() - start
        keys += [point_key(p) for p in points]
        failed += sum(not r.ok for r in results)
    return {"keys": keys, "failed": failed, "own_s": own_s}


def best_so_far(keys: list[str], results: dict, scale: float = 1.0) -> list[float]:
    """The best latency after each trial, divided by `scale` (inf until a correct one)."""
    low, curve = math.inf, []
    for key in keys:
        low = min(low, results[key].latency)
        curve.append(low / scale)
    return curve


def at(curve: list[float], trials: int) -> float:
    """Best so far after `trials` trials (the last value if the run stopped earlier)."""
    return curve[min(trials, len(curve)) - 1] if curve else math.inf


def trials_to(curve: list[float], limit: float) -> float:
    """Trials until the curve is at or below `limit`; inf if it never gets there."""
    return next((i + 1 for i, v in enumerate(curve) if v <= limit), math.inf)
