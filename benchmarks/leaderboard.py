"""The strategy leaderboard: every strategy replayed over the corpus (benchmarks/corpus.py),
several seeds each, from the replay tables kept in the repository.

Per strategy, the median over tasks of: the best found after 16, 32 and 64 trials relative
to the table's best (1.00 is the best any strategy ever found there), the trials needed to
get within 10% and 20% of it (">N" when the median run never does), the share of proposed
candidates that failed (build error, wrong result, crash, timeout), and the strategy's own
time per trial (ask + tell). The cost-model strategy (`model`) is evaluated only on tasks it
was not trained on: for each family, a model trained on the other families' tables.

The other strategies run first, over every corpus task; each held-out model is then trained
on the points that random, evolutionary, bo, tpe and lfbo (TEACHERS, replayed whatever
--strategies says) proposed there: not on the whole table, which `model`'s own runs grow, so a
re-run trains the same models and proposes the same points.

A point no table holds yet (a changed strategy, a new seed) is measured here, on the table's
hardware class only, and added to the table; the run says how many. A point's entry never
changes once made (no careful re-timing of the best, as strategies.py does): a strategy told
another latency would take another path, and a re-run would measure again. With the tables as
committed and the code unchanged, a run measures nothing.

    .venv/bin/python benchmarks/leaderboard.py [--seeds 3] [--trials 64] [--strategies ...] [--tasks ...]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402  (the benchmark's own modules, beside this script)
from curves import at, best_so_far, trace, trials_to  # noqa: E402

from tensortune.db import Database, Task  # noqa: E402
from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer  # noqa: E402
from tensortune.measure.replay import ReplayTable  # noqa: E402
from tensortune.measure.roofline import floor_s  # noqa: E402
from tensortune.search import REPLAYABLE, STRATEGIES, make_strategy  # noqa: E402
from tensortune.points import point_from_json  # noqa: E402
from tensortune.target import make_target  # noqa: E402

CHECKPOINTS = (16, 32, 64)
# the strategies whose proposals the held-out cost models learn from: fixed, so that adding a
# strategy to the leaderboard (or running fewer) changes neither those models nor model's runs
TEACHERS = ["random", "evolutionary", "bo", "tpe", "lfbo"]
WITHIN = (10, 20)


class LazyMeasurer:
    """Starts a Measurer (build and run workers) only when a point is missing from a table."""

    def __init__(self, space, target, allowed: bool, why: str):
        self.space, self.target, self.allowed, self.why = space, target, allowed, why
        self.measurer: Measurer | None = None
        self.seconds = 0.0  # spent measuring (starting the workers included)

    def measure(self, space, points, **kwargs):
        if not self.allowed:
            raise SystemExit(f"error: {len(points)} points are not in {self.space.workload.key}'s table, and {self.why}")
        start = time.perf_counter()
        if self.measurer is None:
            # as strategies.py: the table only ranks points; kernels far off the best are cut short
            config = MeasureConfig(threads=self.target.threads, repeat=3, min_repeat_ms=5, min_run_timeout_s=0.25)
            self.measurer = Measurer(self.target, config).__enter__()
        try:
            return self.measurer.measure(space, points, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def close(self):
        if self.measurer is not None:
            self.measurer.__exit__(None, None, None)


def replay_task(task: corpus.CorpusTask, target, args, strategies: list[str], make) -> dict:
    """These strategies, every seed, on one task: the points each run proposed (keys, in
    order); the table grows by what was missing."""
    space = corpus.space_of(task, target)
    table = corpus.load_table(task, args.tables) or corpus.Table(task.name, space.workload.key, task.space, target.hardware, {}, [])
    if table.workload != space.workload.key:
        raise SystemExit(f"error: {task.name}'s table is for {table.workload}, this TVM and corpus give "
                         f"{space.workload.key}: measure a new table with --tables NEW_DIR")
    same = table.hardware == target.hardware
    measurer = LazyMeasurer(space, target, same, f"the table was measured on {table.hardware}, this machine is "
                                                  f"{target.hardware}: run the leaderboard there, or measure "
                                                  f"tables for this machine with --tables NEW_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(os.path.join(tmp, "replay.db"))
        db_task = Task(table.workload, target.name, table.hardware, task.space)
        db.add(db_task, "search", [point_from_json(k) for k in table.results], list(table.results.values()))
        replay = ReplayTable(db, db_task, measurer, cutoff=3.0)
        try:
            floor = floor_s(space.workload, target)
            runs = {s: [trace(make(s, space, seed, task), replay, args.trials, args.batch, floor)
                        for seed in range(args.seeds)]
                    for s in strategies}
        finally:
            measurer.close()
            db.close()
    if replay.measured:
        table.results = replay.table
        corpus.save_table(table, " ".join(["benchmarks/leaderboard.py", *sys.argv[1:]]), replay.measured, args.tables)
    return {"runs": runs, "measured": replay.measured, "measure_s": measurer.seconds}


def add_curves(task: corpus.CorpusTask, result: dict, tables: Path) -> None:
    """Each run's best so far relative to the table's best, once every strategy has run."""
    table = corpus.load_table(task, tables)
    result["points"] = len(table.results)
    for runs in result["runs"].values():
        for run in runs:
            run["curve"] = best_so_far(run.pop("keys"), table.results, table.best)


def trials_to_within(curve: list[float], percent: float) -> float:
    return trials_to(curve, 1 + percent / 100)


def summary(results: dict[str, dict], strategies: list[str], trials: int) -> list[str]:
    """The leaderboard's lines: per strategy, medians over tasks of the medians over seeds."""
    head = (f"{'strategy':13}" + "".join(f"{'@' + str(c):>8}" for c in CHECKPOINTS)
            + "".join(f"{f'to {w}%':>9}" for w in WITHIN) + f"{'failed':>9}{'ms/trial':>10}")
    lines = [head]
    for s in strategies:
        per_task = [r["runs"][s] for r in results.values()]
        cells = [f"{_median_over_tasks(per_task, lambda run: at(run['curve'], c)):8.2f}" for c in CHECKPOINTS]
        cells += [f"{_trials(_median_over_tasks(per_task, lambda run: trials_to_within(run['curve'], w)), trials):>9}"
                  for w in WITHIN]
        proposed = sum(len(run["curve"]) for rs in per_task for run in rs)
        failed = sum(run["failed"] for rs in per_task for run in rs)
        own = statistics.median(run["own_s"] / max(1, len(run["curve"])) for rs in per_task for run in rs)
        lines.append(f"{s:13}" + "".join(cells) + f"{100 * failed / max(1, proposed):8.1f}%{own * 1e3:10.1f}")
    return lines


def verdict(results: dict[str, dict], strategies: list[str], trials: int) -> list[str]:
    """The issue's bar: a learning strategy needs at most half of evolutionary's trials to get
    within 10% (medians over tasks). Where evolutionary never gets there in `trials`, half of
    its need is over trials/2, so reaching it in trials/2 suffices."""
    if "evolutionary" not in strategies:
        return []
    need = {s: _median_over_tasks([r["runs"][s] for r in results.values()], lambda run: trials_to_within(run["curve"], WITHIN[0]))
            for s in strategies}
    half = need["evolutionary"] / 2 if not math.isinf(need["evolutionary"]) else trials / 2
    return [f"{s}: {_trials(need[s], trials)} trials to within {WITHIN[0]}% against evolutionary's "
            f"{_trials(need['evolutionary'], trials)}: {'at most half' if need[s] <= half else 'more than half'}"
            for s in ("lfbo", "model") if s in strategies]


def per_task_lines(results: dict[str, dict], strategies: list[str], trials: int) -> list[str]:
    """Trials to within 10% per task and strategy (median over seeds)."""
    lines = [f"{'task':24}{'points':>8}" + "".join(f"{s:>13}" for s in strategies)]
    for name, r in results.items():
        cells = [_trials(statistics.median(trials_to_within(run["curve"], WITHIN[0]) for run in r["runs"][s]), trials)
                 for s in strategies]
        lines.append(f"{name:24}{r['points']:>8}" + "".join(f"{c:>13}" for c in cells))
    return lines


def _median_over_tasks(per_task: list[list[dict]], metric) -> float:
    return statistics.median(statistics.median(metric(run) for run in runs) for runs in per_task)


def _trials(value: float, trials: int) -> str:
    return f">{trials}" if math.isinf(value) else f"{value:g}"


def plot(results: dict[str, dict], strategies: list[str], path: Path) -> None:
    """Median over tasks (of the median over seeds) of the best so far, per trial."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s in strategies:
        per_task = [r["runs"][s] for r in results.values()]
        n = min(len(run["curve"]) for runs in per_task for run in runs)
        ax.plot(range(1, n + 1), [_median_over_tasks(per_task, lambda run: run["curve"][i]) for i in range(n)], label=s)
    for w in WITHIN:
        ax.axhline(1 + w / 100, color="grey", linestyle=":")
    ax.set(xlabel="trials", ylabel="best so far / table's best (median over tasks)", yscale="log",
           title=f"leaderboard: {len(results)} corpus tasks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def held_out_models(families, proposed: dict[str, set], target, tables: Path) -> dict:
    """Per family, the cost model trained on the other families' tasks, on the points the
    other strategies proposed there."""
    models = {}
    for family in families:
        print(f"[training the cost model without {family}]", flush=True)
        models[family] = corpus.train_cost_model([t for t in corpus.CORPUS if t.family != family], target, tables, proposed)
    return models


def make_strategy_for(held_out: dict):
    """How each run's strategy is made: by name, except `model`, which gets the cost model
    trained without the task's family."""

    def make(name: str, space, seed: int, task: corpus.CorpusTask):
        if name == "model":
            return STRATEGIES["model"](space, seed, cost_model=held_out[task.family])
        return make_strategy(name, space, seed)

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--strategies", nargs="+", default=[s for s in REPLAYABLE if STRATEGIES[s].objectives == ("latency",)],
                        help="default: all that minimise latency alone, but llm (a remote model)")
    parser.add_argument("--tasks", nargs="+", default=[t.name for t in corpus.CORPUS])
    parser.add_argument("--out", default="benchmarks/results/leaderboard")
    parser.add_argument("--tables", type=Path, default=corpus.TABLES, help="the replay tables (read, and grown)")
    args = parser.parse_args()
    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown:
        raise SystemExit(f"error: unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    tasks = [corpus.get_task(n) for n in args.tasks]
    target = make_target("cpu", MeasureConfig().threads)
    start = time.perf_counter()
    others = [s for s in args.strategies if s != "model"]
    if "model" not in args.strategies:
        results = {t.name: run_logged(t, target, args, others, make_strategy_for({})) for t in tasks}
    else:  # the held-out models learn from every corpus task outside the family, reported or not
        first = list(dict.fromkeys(TEACHERS + others))
        results = {t.name: run_logged(t, target, args, first, make_strategy_for({})) for t in corpus.CORPUS}
        proposed = {name: {k for s in TEACHERS for run in r["runs"][s] for k in run["keys"]} for name, r in results.items()}
        make = make_strategy_for(held_out_models(dict.fromkeys(t.family for t in tasks), proposed, target, args.tables))
        for task in tasks:
            merge(results[task.name], run_logged(task, target, args, ["model"], make))
            results[task.name]["runs"] = {s: results[task.name]["runs"][s] for s in args.strategies}
    results = {t.name: results[t.name] for t in tasks}
    for task in tasks:
        add_curves(task, results[task.name], args.tables)
    write(results, args, target, time.perf_counter() - start)


def run_logged(task: corpus.CorpusTask, target, args, strategies: list[str], make) -> dict:
    began = time.perf_counter()
    result = replay_task(task, target, args, strategies, make)
    print(f"[{task.name}: {', '.join(strategies)}: {result['measured']} points measured, "
          f"{time.perf_counter() - began:.0f} s]", flush=True)
    return result


def merge(result: dict, more: dict) -> None:
    result["runs"].update(more["runs"])
    result["measured"] += more["measured"]
    result["measure_s"] += more["measure_s"]


def write(results: dict, args, target, wall_s: float) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measured = sum(r["measured"] for r in results.values())
    measure_min = sum(r["measure_s"] for r in results.values()) / 60
    header = [f"# .venv/bin/python benchmarks/leaderboard.py {' '.join(sys.argv[1:])}".rstrip(),
              f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}, {corpus.machine()}, hardware {target.hardware}",
              f"# {len(results)} tasks x {args.seeds} seeds x {args.trials} trials; {measured} points not in the "
              f"tables measured in this run; {wall_s / 60:.1f} min, {measure_min:.1f} of them measuring",
              "# @N: best after N trials / table's best; to N%: trials to within N% of it; failed: share of "
              "proposed candidates; ms/trial: the strategy's own time",
              "# model: evaluated with a cost model trained without the task's family (held out)"]
    text = "\n".join(header + [""] + summary(results, args.strategies, args.trials) + [""]
                     + verdict(results, args.strategies, args.trials) + ["", "trials to within 10%, "
                     "median over seeds"] + per_task_lines(results, args.strategies, args.trials)) + "\n"
    print("\n" + text)
    (out / "leaderboard.txt").write_text(text)
    (out / "leaderboard.json").write_text(json.dumps(results))
    plot(results, args.strategies, out / "leaderboard.png")


if __name__ == "__main__":
    main()
