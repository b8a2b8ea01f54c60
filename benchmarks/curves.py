"""A strategy's run over a replay table and the best-so-far curve made from it, shared by the
strategy benchmark (strategies.py, padding.py) and the leaderboard."""
from __future__ import annotations

import math
import time

from tensortune.db import Database
from tensortune.measure.replay import ReplayTable
from tensortune.points import point_key
from tensortune.tuning.round import TaskTuner, run_round


def trace(strategy, replay: ReplayTable, trials: int, batch: int, floor: float = 0.0) -> dict:
    """Tuning rounds (tuning/round.py, as `tune` runs them, the implausible re-check included;
    records in a throwaway in-memory database) until `trials` points or the strategy runs
    dry: the points' keys in order, how many failed, and the strategy's own time (the
    rounds' time less the table's)."""
    tuner = TaskTuner(replay.task, strategy.space, strategy, Database(":memory:"), floor=floor)
    keys, failed, start, answering = [], 0, time.perf_counter(), replay.seconds
    while len(keys) < trials:
        measured = run_round(tuner, replay, min(batch, trials - len(keys)))
        if not measured:
            break
        keys += [point_key(p) for p, _ in measured]
        failed += sum(not r.ok for _, r in measured)
    own_s = time.perf_counter() - start - (replay.seconds - answering)
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
