"""The commands that read what is known: `strategies` and `list` (what can be tuned and how),
`show` and `report` (the records of an operator or a tuned model), `export` (its best kernel)."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import UserError
from ..result import Label
from ..search import STRATEGIES, metaschedule
from .common import DB, MCPU, SHAPE, TARGET, THREADS, app, ms, open_db, out, shorten, target_from, workload_named


@app.command()
def strategies() -> None:
    """The search strategies (for --strategy) and each one's options (for --option KEY=VALUE)."""
    grid = Table(title="strategies")
    for column in ("strategy", "what", "options (default): meaning"):
        grid.add_column(column)
    for name, cls in STRATEGIES.items():
        what = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        grid.add_row(name, what, "\n".join(f"{o.name} ({o.default:g}): {o.meaning}" for o in cls.options) or "-")
    grid.add_row(metaschedule.NAME, "TVM's own tuner, run natively; its records re-verified and re-timed by us", "-")
    out.print(grid)


@app.command("list")
def list_workloads() -> None:
    """Workload families (with their shape parameters) and presets."""
    from ..workloads import FAMILIES, PRESETS

    grid = Table(title="workloads")
    for column in ("name", "shape", "what"):
        grid.add_column(column)
    for name, fam in FAMILIES.items():
        grid.add_row(name, ",".join(fam.params), fam.doc.splitlines()[0] if fam.doc else "")
    for name, (family, shape, why) in PRESETS.items():
        grid.add_row(name, f"{family} " + ",".join(f"{p}={v}" for p, v in zip(FAMILIES[family].params, shape)), why)
    out.print(grid)


@app.command()
def show(workload: str = typer.Argument(...), shape: Optional[str] = SHAPE, db: str = DB) -> None:
    """Records and the best kernel for WORKLOAD (or, for a tuned model, each of its kernels), per target and hardware."""
    database = open_db(db, must_exist=True)
    kernels = database.model_kernels(workload.rpartition(":")[2])
    if kernels:
        _show_model(workload, kernels, database)
        return
    wl = workload_named(workload, shape, db)
    tasks = database.tasks(wl.key)
    if not tasks:
        raise UserError(f"no records for {wl.key} in {db}; run 'tensortune tune {workload}' first")
    for task in tasks:
        records = database.records(task)
        counts: dict[str, int] = {}
        for r in records:
            counts[r.result.status] = counts.get(r.result.status, 0) + 1
        best = database.best(task)
        out.print(f"[bold]{wl.key}[/] on {task.target} ({task.hardware}, space {task.space}): {len(records)} trials "
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if best:
            gflops = wl.flops / best.result.latency / 1e9
            out.print(f"  best {ms(best.result.latency)} ({gflops:.1f} GFLOP/s, spread {best.result.spread:.0%}, "
                      f"{best.result.threads} threads): {shorten(json.dumps(best.point))}")


def _show_model(name: str, kernels: list, database) -> None:
    """One line per kernel of the model: calls, trials, default and best per target and hardware;
    then the model's last end-to-end timing against torch eager."""
    from ..report.tables import end_to_end_line

    out.print(f"[bold]{name}[/]: {len(kernels)} kernels (function, calls, then each task: trials, default, best)")
    for function, key, calls, outputs in kernels:
        tasks = database.tasks(key)
        default = {(t.target, t.hardware): r.result.latency for t in tasks for r in database.records(t, (Label.DEFAULT,))}
        lines = []
        for task, trials in ((t, len(database.records(t))) for t in tasks):
            if not trials:
                continue
            best = database.best(task)
            lines.append(f"{task.space} on {task.target} ({task.hardware}): {trials} trials, "
                         f"default {ms(default.get((task.target, task.hardware), float('inf')))}, "
                         f"best {ms(best.result.latency) if best else '-'}")
        status = "not tunable (several outputs)" if outputs > 1 else "; ".join(lines) or "not tuned"
        out.print(f"  {function} x{calls}, kernel {key}: {status}", markup=False)
    for timing in database.model_timings(name):
        when = datetime.fromtimestamp(timing["measured"], timezone.utc)
        out.print(f"last timed {when:%Y-%m-%d %H:%M} UTC on {timing['target']} ({timing['hardware']}): "
                  + end_to_end_line(timing), markup=False, highlight=False)


@app.command()
def report(name: str = typer.Argument(..., help="an operator (preset, FAMILY with --shape, FILE.py:FUNCTION, a "
                                             "model kernel's key) or a tuned model's name"),
           shape: Optional[str] = SHAPE, db: str = DB,
           html_file: str = typer.Option(..., "--html", help="the HTML file to write (self-contained: open it anywhere)")) -> None:
    """Write an HTML report of NAME's tuning from the records: provenance, convergence, failures, roofline, knob
    importance, Pareto front, kernels; for a model, its kernels' times, trials and choices."""
    from ..report.page import model_page, operator_page

    database = open_db(db, must_exist=True)
    target_for = lambda task: task_target(database, task)  # noqa: E731
    kernels = database.model_kernels(name)
    if kernels:
        text = model_page(database, name, kernels, lambda key: workload_named(key, None, db), target_for)
    else:
        wl = workload_named(name, shape, db)
        tasks = database.tasks(wl.key)
        if not tasks:
            raise UserError(f"no records for {wl.key} in {db}; run 'tensortune tune {name}' first")
        text = operator_page(database, wl, tasks, target_for)
    try:
        Path(html_file).write_text(text)
    except OSError as error:
        raise UserError(f"cannot write '{html_file}': {error.strerror}", option="--html") from None
    out.print(f"wrote {html_file}", highlight=False)


def task_target(database, task):
    """The Target a task's records were made for, near enough to draw its roofline and rebuild
    its kernels here: its kind, its GPU architecture (from the fingerprint), the threads its
    kernels ran with."""
    from ..target import make_target

    threads = max([r.result.threads for r in database.records(task)] + [1])
    arch = task.hardware.split("-")[0] if task.hardware.startswith("sm_") else "sm_90"
    return make_target(task.target, threads, None, arch)


@app.command()
def export(workload: str = typer.Argument(...), shape: Optional[str] = SHAPE, db: str = DB,
           out_dir: str = typer.Option("tensortune-export", "--out", help="folder for kernel.so, kernel.py, record.json"),
           target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU) -> None:
    """Write the best kernel for WORKLOAD on this hardware: shared library, TVMScript, JSON record."""
    from ..deploy.exporter import export_best

    wl, tgt, database = workload_named(workload, shape, db), target_from(target, threads, mcpu), open_db(db, must_exist=True)
    paths = export_best(wl, tgt, database, Path(out_dir))
    out.print("wrote " + ", ".join(str(p) for p in paths))
