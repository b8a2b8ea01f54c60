"""The summary of a tuning run as a table (for people) or one JSON object (for scripts)."""
from __future__ import annotations

import math

from rich.table import Table

from ..tuning.tuner import Summary


def rows(summary: Summary) -> list[tuple[str, float | None]]:
    """(name, seconds) for naive, hand, tuned and the vendor baselines."""
    base = summary.baselines
    out = [("naive", _seconds(summary.naive)), ("hand", _seconds(summary.hand)), ("tuned", _seconds(summary.best))]
    return out + [(f"vendor:{name}", base[name]) for name in ("numpy", "torch") if name in base]


def as_json(summary: Summary) -> dict:
    wl = summary.workload
    times = dict(rows(summary))
    ratio = lambda a, b: (times[a] / times[b]) if times.get(a) and times.get(b) else None  # noqa: E731
    return {
        "workload": wl.key, "preset": wl.preset, "target": summary.task.target,
        "hardware": summary.task.hardware, "threads": summary.threads,
        "vendor_threads": summary.baselines.get("threads"), "flops": wl.flops,
        "ms": {k: None if v is None else v * 1e3 for k, v in times.items()},
        "gflops": {k: _gflops(wl.flops, v) for k, v in times.items()},
        "speedup_over_naive": ratio("naive", "tuned"), "speedup_over_hand": ratio("hand", "tuned"),
        "speedup_over_numpy": ratio("vendor:numpy", "tuned"), "space": summary.task.space,
        "verified_against": _verified_against(summary),
        "spread": summary.best.spread if summary.best else None, "not_timed": _not_timed(summary),
        "best_point": summary.best_point, "trials": summary.trials, "new_trials": summary.new_trials,
        "tuning_s": summary.tuning_s, "trials_per_min": summary.trials_per_min, "failures": summary.failures,
        "proposals": summary.proposals, "objectives": list(summary.objectives),
        "front": [{"point": p, "ms": r.latency * 1e3, "build_s": r.build_s} for p, r in summary.front] or None,
    }


def table(summary: Summary) -> Table:
    wl = summary.workload
    times = dict(rows(summary))
    title = (f"{wl.preset or wl.key} on {summary.task.target} ({summary.task.hardware}, {summary.threads} threads): "
             f"{summary.trials} trials, {summary.new_trials} new at {summary.trials_per_min:.0f}/min")
    grid = Table(title=title)
    for column in ("schedule", "ms", "GFLOP/s", "tuned is x faster"):
        grid.add_column(column, justify="left" if column == "schedule" else "right")
    for name, seconds in times.items():
        speedup = times["tuned"] / seconds if seconds and times["tuned"] and name != "tuned" else None
        grid.add_row(name, _fmt(seconds and seconds * 1e3, ".4f"), _fmt(_gflops(wl.flops, seconds), ".1f"),
                     _fmt(speedup and 1 / speedup, ".2f"))
    notes = [f"space {summary.task.space}; every kernel checked against the {_verified_against(summary)}"]
    notes += _not_timed(summary)
    if summary.failures:
        notes.append("failed candidates: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.failures.items())))
    if summary.proposals:
        notes.append("proposals: " + ", ".join(f"{k} {v}" for k, v in summary.proposals.items()))
    if summary.front:
        notes.append(f"Pareto front of {' and '.join(summary.objectives)} ({len(summary.front)} correct kernels, fastest "
                     "first): " + "; ".join(f"{r.latency * 1e3:.4g} ms built in {r.build_s:.3f} s" for _, r in summary.front)
                     + " ('tensortune report --html' draws it)")
    grid.caption = "\n".join(notes)
    return grid


def _not_timed(summary: Summary) -> list[str]:
    """Why a baseline row has no time: never a silent '-'."""
    notes = [f"{name}: {result.status}: {result.reason}" for name, result in
             (("naive", summary.naive), ("hand", summary.hand)) if result is not None and not result.ok]
    if "error" in summary.baselines:
        notes.append(f"vendor baselines failed: {summary.baselines['error']}")
    return notes


def _verified_against(summary: Summary) -> str:
    if summary.workload.family.reference is None:
        return "unscheduled kernel's output (no NumPy reference given)"
    return "NumPy reference"


def _seconds(result) -> float | None:
    return result.latency if result is not None and result.ok else None


def _gflops(flops: int, seconds: float | None) -> float | None:
    return flops / seconds / 1e9 if seconds and flops else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or math.isinf(value) else format(value, spec)


def batch_table(summaries: list[dict], device: str) -> str:
    """One line per workload of an imported batch: best found vs naive, hand and torch."""
    times = ("naive", "hand", "best", "torch")
    head = f"{'workload':36}" + "".join(f"{t + ' ms':>11}" for t in times) + \
        "".join(f"{'/' + t:>9}" for t in times if t != "best") + f"{'GFLOP/s':>9}{'correct':>10}"
    lines = [f"on {device}", head]
    for s in summaries:
        best = s["best"]
        ratios = [s[t] / best if math.isfinite(best) else None for t in times if t != "best"]
        lines.append(f"{s['workload'][:35]:36}" + "".join(f"{_fmt(s[t] * 1e3, '.4f'):>11}" for t in times)
                     + "".join(f"{_fmt(r, '.2f') + ('x' if r and math.isfinite(r) else ''):>9}" for r in ratios)
                     + f"{_fmt(_gflops(s['flops'], best if math.isfinite(best) else None), '.1f'):>9}"
                     + f"{s['correct']:>6}/{s['candidates']}")
    return "\n".join(lines)


def model_rows(summary, built) -> list[dict]:
    """Per kernel of a tuned model: calls, default and best seconds, trials, status."""
    rows = []
    for state in summary.tasks:
        name = state.kernel.name
        status = ("not in the build kept" if state.kernel not in built.build.kernels else
                  "not tunable (several outputs)" if not state.kernel.tunable else
                  f"fell back: {built.fell_back[name]}" if name in built.fell_back else
                  "tuned" if name in built.tuned else "default kept")
        rows.append({"function": name, "kernel": state.kernel.workload.key, "calls": state.kernel.calls,
                     "default_ms": _ms(state.default.latency), "best_ms": _ms(state.latency),
                     "trials": state.tuner.trials if state.tuner else 0, "status": status})
    return rows


def model_json(summary, built, paths, timing=None, in_torch: dict | None = None) -> dict:
    """The tuned model as JSON; `timing` (model.end_to_end.EndToEnd) adds the end-to-end seconds,
    `in_torch` what runs in PyTorch (None: nothing)."""
    default, tuned = summary.estimate
    return {"model": summary.model.name, "key": summary.model.key, "kernels": len(summary.tasks),
            "trials": summary.trials, "new_trials": summary.new_trials, "tuning_s": summary.tuning_s,
            "estimate_ms": {"default": default * 1e3, "tuned": tuned * 1e3},
            "end_to_end": timing.as_dict() if timing else None, "torch_ops": built.torch_ops,
            "builds_ms": {name: seconds * 1e3 for name, seconds in built.timed.items()},
            "torch_ops_refused": built.refused or None, "slower_than_eager": built.slower_than_eager, "checked_against_torch": built.error, "tasks": model_rows(summary, built),
            "exported": [str(p) for p in paths], "in_torch": in_torch}


def model_table(summary, built, paths, timing=None, in_torch: dict | None = None) -> Table:
    """The tuned model's kernels, its end-to-end timing, and (`in_torch`, for a model TVM takes
    in part: deploy/split_model.py) what runs in PyTorch."""
    default, tuned = summary.estimate
    grid = Table(title=f"{summary.model.name}: {len(summary.tasks)} kernels, {summary.trials} trials "
                       f"({summary.new_trials} new) in {summary.tuning_s:.0f} s")
    for column in ("kernel", "calls", "default ms", "best ms", "trials", "status"):
        grid.add_column(column, justify="left" if column in ("kernel", "status") else "right")
    for row in model_rows(summary, built):
        grid.add_row(row["function"], str(row["calls"]), _fmt(row["default_ms"], ".4f"), _fmt(row["best_ms"], ".4f"),
                     str(row["trials"]), row["status"])
    grid.caption = ((end_to_end_line(timing.as_dict()) + "\n" if timing else "") + _builds_line(built)
                    + (in_torch["line"] + "\n" if in_torch else "")
                    + f"sum over kernels of calls x latency: default {default * 1e3:.3f} ms, tuned {tuned * 1e3:.3f} ms "
                    f"({default / tuned:.2f}x{_untimed(summary)}); the built model matches torch eager within {built.error:.1e}"
                    + (f"; wrote {', '.join(map(str, paths))}" if paths else ""))
    return grid


def _untimed(summary) -> str:
    untimed = summary.untimed
    return f"; {len(untimed)} kernels not timed at their default, left out: {', '.join(untimed)}" if untimed else ""


def _builds_line(built) -> str:
    """Which build was kept: all kernels in TVM, or torch's operators called for some."""
    refused = f"; the build calling torch's operators was refused ({built.refused})" if built.refused else ""
    if not built.timed:
        return refused.removeprefix("; ") + ("\n" if refused else "")
    kept = f"calling torch for {built.torch_ops} operations" if built.torch_ops else "all in TVM"
    slower = "; SLOWER than torch eager: PyTorch runs it faster as it is" if built.slower_than_eager else ""
    return ("kept the build " + kept + " (end to end: " + ", ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds
                                                                   in built.timed.items()) + f"){slower}{refused}\n")


def end_to_end_line(timing: dict) -> str:
    """One line of a model's end-to-end timing (EndToEnd.as_dict, or as the records keep it)."""
    eager, default, tuned = timing["eager_s"], timing["default_s"], timing["tuned_s"]
    verdict = "faster than" if tuned < eager else "SLOWER than" if tuned > eager else "as fast as"
    return (f"end to end ({timing['threads']} threads, median of warm calls): torch eager {eager * 1e3:.3f} ms, "
            f"TVM default {default * 1e3:.3f} ms, tuned {tuned * 1e3:.3f} ms: tuned is {eager / tuned:.2f}x eager "
            f"({verdict} torch eager), {default / tuned:.2f}x TVM default")


def _ms(seconds: float) -> float | None:
    return seconds * 1e3 if math.isfinite(seconds) else None


def shapes_rows(summary) -> list[dict]:
    """Per shape of a --shapes run: its own best, the single schedule's and the table's
    milliseconds (re-timed together) and their ratios to the own best."""
    rows = []
    for s, wl in enumerate(summary.workloads):
        final = summary.final[s]
        rows.append({"shape": wl.kwargs, "own_ms": _ms(_seconds(final["own"][1]) or math.inf),
                     "single_ms": _ms(_seconds(final["single"][1]) or math.inf), "single_ratio": summary.ratio(s, "single"),
                     "table_ms": _ms(_seconds(final["table"][1]) or math.inf), "table_ratio": summary.ratio(s, "table"),
                     "table_schedule": summary.table.index(summary.serves[s])})
    return rows


def _origin(summary, candidate: int) -> str:
    """Which shape a candidate schedule was tuned for."""
    return ",".join(f"{k}={v}" for k, v in summary.workloads[summary.candidates[candidate][0]].kwargs.items())


def shapes_json(summary, paths: list) -> dict:
    return {"family": summary.workloads[0].name, "shapes": shapes_rows(summary),
            "single_tuned_for": _origin(summary, summary.single),
            "table_tuned_for": [_origin(summary, c) for c in summary.table], "exported": [str(p) for p in paths]}


def shapes_table(summary, paths: list) -> Table:
    rows = shapes_rows(summary)
    grid = Table(title=f"{summary.workloads[0].name} at {len(rows)} shapes: each shape's best, one schedule for all, "
                       f"and a table of {len(summary.table)}")
    for column in ("shape", "own best ms", "one schedule ms", "x own", "table ms", "x own", "table entry"):
        grid.add_column(column, justify="left" if column == "shape" else "right")
    varying = [k for k in rows[0]["shape"] if len({row["shape"][k] for row in rows}) > 1] or list(rows[0]["shape"])
    for row in rows:
        grid.add_row(",".join(f"{k}={row['shape'][k]}" for k in varying), _fmt(row["own_ms"], ".4f"),
                     _fmt(row["single_ms"], ".4f"), _fmt(row["single_ratio"], ".2f"), _fmt(row["table_ms"], ".4f"),
                     _fmt(row["table_ratio"], ".2f"), str(row["table_schedule"]))
    worst = max(range(len(rows)), key=lambda i: rows[i]["single_ratio"])
    worst_table = max(row["table_ratio"] for row in rows)
    grid.caption = (f"one schedule (tuned for {_origin(summary, summary.single)}): worst at "
                    f"{','.join(f'{k}={v}' for k, v in rows[worst]['shape'].items())}, {rows[worst]['single_ratio']:.2f}x "
                    f"its best; the table (schedules tuned for {'; '.join(_origin(summary, c) for c in summary.table)}): "
                    f"worst {worst_table:.2f}x; all re-timed together per shape"
                    + (f"\nwrote {paths[-1].parent} (tensortune.load it: one callable, picks by shape)" if paths else ""))
    return grid
