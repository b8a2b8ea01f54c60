"""The report's figures, drawn by matplotlib as SVG text that the page holds inline: the file
needs no network and no plotting library to open (its text stays text: searchable, sharp)."""
from __future__ import annotations

import io
import math

from ..errors import UserError
from ..objectives import NAMES
from .history import Curve


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise UserError("the HTML report draws with matplotlib: pip install -e '.[report]'") from None
    matplotlib.use("Agg")  # no display: the figures only become SVG text
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                                "svg.hashsalt": "tensortune"})  # the same records draw the same file
    import matplotlib.pyplot as plt

    return plt


def _svg(figure) -> str:
    plt = _pyplot()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # no XML prolog inside HTML


def convergence(curves: list[Curve]) -> str:
    """Best latency so far against trials and against wall time, a line per run."""
    plt = _pyplot()
    figure, (by_trial, by_time) = plt.subplots(1, 2, figsize=(10, 3.4))
    for curve in curves:
        shown = [(t, s, b * 1e3) for t, s, b in zip(curve.trials, curve.elapsed_s, curve.best_s) if math.isfinite(b)]
        if not shown:
            continue
        trials, seconds, best = zip(*shown)
        by_trial.step(trials, best, where="post", label=curve.name)
        by_time.step(seconds, best, where="post", label=curve.name)
    for axes, label in ((by_trial, "trials"), (by_time, "seconds since the run started")):
        axes.set_xlabel(label)
        axes.set_ylabel("best latency so far (ms)")
        axes.set_yscale("log")
    by_trial.legend(fontsize=7)
    return _svg(figure)


def statuses(counts: dict[str, int]) -> str:
    """Trials per status, a bar each."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 0.5 + 0.32 * len(counts)))
    names = list(counts)[::-1]
    axes.barh(names, [counts[n] for n in names], color=["#2a7" if n == "ok" else "#c44" for n in names])
    axes.set_xlabel("trials")
    return _svg(figure)


def roofline(points: list[tuple[str, float, float]], ceilings: tuple[float, float], title: str) -> str:
    """Correct kernels as (name, arithmetic intensity in FLOP/byte, GFLOP/s) under the two
    ceilings (operations per second, bytes per second) of measure/roofline.py."""
    plt = _pyplot()
    flops_s, bytes_s = ceilings
    figure, axes = plt.subplots(figsize=(6.5, 4))
    intensities = [i for _, i, _ in points] or [1.0]
    low, high = min(intensities) / 10, max(intensities) * 10
    grid = [low * (high / low) ** (k / 60) for k in range(61)]
    axes.plot(grid, [min(flops_s, i * bytes_s) / 1e9 for i in grid], color="#555", label="ceiling (roofline.py)")
    names = list(dict.fromkeys(name for name, _, _ in points))
    for name in names:
        mine = [(i, g) for n, i, g in points if n == name]
        axes.scatter(*zip(*mine), s=12, alpha=0.6, label=name)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("GFLOP/s")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7)
    return _svg(figure)


def importance(shares: list[tuple[str, float]]) -> str:
    """Each knob's share of the variance of log latency, a bar each."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 0.5 + 0.3 * len(shares)))
    names = [k for k, _ in shares][::-1]
    axes.barh(names, [v for _, v in shares][::-1], color="#47a")
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of the variance of log latency explained alone")
    return _svg(figure)


def front(all_points: list[tuple[float, float]], front_points: list[tuple[float, float]],
          objectives: tuple[str, str]) -> str:
    """Every correct kernel by two objectives, the non-dominated ones joined."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    scale = [1e3 if o == "latency" else 1.0 for o in objectives]  # latency in ms
    axes.scatter([a * scale[0] for a, _ in all_points], [b * scale[1] for _, b in all_points], s=10, alpha=0.4,
                 color="#999", label="correct kernels")
    axes.step([a * scale[0] for a, _ in front_points], [b * scale[1] for _, b in front_points], where="post",
              marker="o", color="#c40", label="Pareto front")
    axes.set_xlabel(NAMES[objectives[0]].replace("(s)", "(ms)") if scale[0] == 1e3 else NAMES[objectives[0]])
    axes.set_ylabel(NAMES[objectives[1]])
    axes.set_xscale("log")
    axes.legend(fontsize=7)
    return _svg(figure)


def kernel_times(rows: list[tuple[str, float, float]]) -> str:
    """A model's kernels: calls x latency at TVM's default and tuned (ms), a pair of bars each."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 0.6 + 0.28 * len(rows)))
    names = [name for name, _, _ in rows][::-1]
    positions = range(len(names))
    axes.barh([p + 0.2 for p in positions], [d for _, d, _ in rows][::-1], height=0.4, color="#bbb", label="default")
    axes.barh([p - 0.2 for p in positions], [t for _, _, t in rows][::-1], height=0.4, color="#2a7", label="tuned")
    axes.set_yticks(list(positions), names, fontsize=7)
    axes.set_xlabel("calls x latency (ms)")
    axes.legend(fontsize=7)
    return _svg(figure)
