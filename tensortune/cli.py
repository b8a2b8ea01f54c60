"""The `tensortune` command: tune, tune-model, mcp, node, list, show, report, export, batch (export | run | import).

Bad input never ends in a traceback: it is a one-line `error:` message and exit code 2.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.exceptions import TyperException

from .errors import UserError
from .result import Label
from .search import DEFAULT, STRATEGIES, check_options, metaschedule, strategy_class
from .space import KIND, SPACES, check_fits, default_space

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Search schedules for tensor kernels; keep every result; hand back the fastest correct one.")
out = Console(soft_wrap=True)  # a long line stays one line when piped (no hard breaks inside names or JSON)
err = Console(stderr=True, soft_wrap=True)

SHAPE = typer.Option(None, "--shape", help="e.g. M=64,N=64,K=64 or 64,64,64 (needed for a family name)")
DB = typer.Option("tensortune.db", "--db", help="SQLite file of records")
TARGET = typer.Option("cpu", "--target", help="where kernels run: cpu | cuda")
ARCH = typer.Option("sm_90", "--arch", help="GPU architecture for --target cuda (sm_80, sm_90, ...)")
THREADS = typer.Option(None, "--threads", help="threads per kernel (default: the cores this process may use)")
MCPU = typer.Option(None, "--mcpu", help="LLVM CPU name (default: this machine's, e.g. znver4)")
CLUSTER = typer.Option(None, "--cluster", help="a Ray cluster's address (auto: the one this machine is in): builds "
                       "and timings on its nodes (docs/ray.md); without it, nothing of Ray is used")
# the lists in the help come from the registries (search/__init__.py, space/__init__.py)
ASK_TELL = " | ".join(STRATEGIES)
OPTION = typer.Option(None, "--option", help="a strategy's option, KEY=VALUE (repeatable; 'tensortune strategies' "
                      "lists each strategy's)")


def _options(pairs: list[str] | None) -> dict[str, str]:
    """--option KEY=VALUE pairs as a dict; a malformed pair is a UserError."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"an option is KEY=VALUE, got '{pair}'", option="--option")
        out[key.strip()] = value.strip()
    return out


@app.command()
def tune(workload: str = typer.Argument(..., help="preset (gemm-1024), family (gemm, with --shape), "
                                                   "or your operator: FILE.py:FUNCTION (with --shape)"),
         shape: Optional[str] = SHAPE, target: str = TARGET,
         trials: int = typer.Option(64, "--trials", min=1, help="search trials for this task, earlier runs' included"),
         strategy: str = typer.Option(DEFAULT, "--strategy", help=f"{ASK_TELL} | {metaschedule.NAME} (TVM's own "
                                      "tuner, re-timed by us); llm needs TENSORTUNE_LLM_URL, _MODEL, _KEY"),
         option: Optional[list[str]] = OPTION,
         space: Optional[str] = typer.Option(None, "--space", help=" | ".join(SPACES) + " (default: the target's "
                                             "template, " + ", ".join(f"{n} for {k}" for n, k in KIND.items())
                                             + "; on cuda cuda-tensorcore for float16/bfloat16 matmuls, sketch for other "
                                             "float16 operators)"),
         arch: str = ARCH,
         seed: int = typer.Option(0, "--seed"), db: str = DB, threads: Optional[int] = THREADS,
         mcpu: Optional[str] = MCPU, batch: int = typer.Option(16, "--batch", min=1, help="candidates per round"),
         baselines: bool = typer.Option(True, help="also time numpy (and torch) on the same machine"),
         warm_start_family: bool = typer.Option(False, "--warm-start-family",
                                                help="also learn from records of other shapes of this operator"),
         objectives: Optional[str] = typer.Option(None, "--objectives", help="latency | latency,build_s: with two, the "
                                                  "summary gives the Pareto front of the task's correct kernels (default: "
                                                  "the strategy's; mobo and nsga2 search for that front)"),
         cluster: Optional[str] = CLUSTER,
         shapes: Optional[str] = typer.Option(None, "--shapes", help="several shapes of a FAMILY, e.g. "
                                              "'M=1,8,64,512;N=768;K=768': each tuned (--trials each), then one schedule "
                                              "for all and a dispatch table (docs/shapes.md)"),
         table: int = typer.Option(2, "--table", min=1, help="with --shapes: schedules in the dispatch table"),
         out_dir: Optional[str] = typer.Option(None, "--out", help="with --shapes: a folder for the dispatch table's "
                                               "kernels (tensortune.load(folder) calls the right one by shape)"),
         as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object (one per line, "
                                      "one per device class, with --cluster)")) -> None:
    """Tune WORKLOAD: search, verify, time, store; then report naive, hand, tuned and vendor times. With --cluster,
    once per device class of the cluster (each class its own task); with --shapes, a family at several shapes."""
    from .report import tables as report
    from .measure.baselines import measure_baselines
    from .measure.config import MeasureConfig
    from .target import check_runnable
    from .tuning.tuner import TuneConfig
    from .tuning.tuner import tune as run_tuner
    from .workloads import check_memory

    options = _options(option)
    check_options(strategy, options)  # unknown names and bad values stop before any work starts
    goals = _objectives(strategy, objectives)
    if shapes is not None or out_dir is not None:
        config = TuneConfig(trials=trials, strategy=strategy, seed=seed, batch=batch, space=space or "cpu-template",
                            options=tuple(options.items()), objectives=goals)
        _tune_shapes(workload, shape, shapes, table, out_dir, _target(target, threads, mcpu, arch), config, db,
                     cluster, as_json)
        return
    wl, tgt = _workload(workload, shape, db), _target(target, threads, mcpu, arch)
    space = space or default_space(wl, tgt.spec)
    check_fits(space, tgt.spec)
    if warm_start_family and space not in KIND:
        raise UserError(f"--warm-start-family needs a template space (cpu-template, cuda-template): the knobs of "
                        f"'{space}' differ from shape to shape, so other shapes' records do not carry over")
    targets = _device_classes(tgt, cluster)
    check_runnable(targets[0])
    check_memory(wl)
    database = _open_db(db)  # only once every check passed: a refused command leaves no database
    config = TuneConfig(trials=trials, strategy=strategy, seed=seed, batch=batch, space=space,
                        warm_start_family=warm_start_family, options=tuple(options.items()), objectives=goals)
    for tgt in targets:
        with _progress(as_json) as bar:
            where = f" on {tgt.hardware}" if cluster else ""
            job = bar.add_task(f"tuning {wl.preset or wl.key}{where}", total=trials)
            update = lambda done, total, best: bar.update(  # noqa: E731
                job, completed=done, description=f"tuning {wl.preset or wl.key}{where}  best {_ms(best)}")
            summary = run_tuner(wl, tgt, database, config, MeasureConfig(threads=tgt.threads, cluster=cluster), update)
        if baselines and wl.family.source is None and tgt.name == "cpu" and not cluster:  # torch times here, not there
            summary.baselines = measure_baselines(wl.name, wl.shape, tgt.threads)
        if as_json:
            print(json.dumps(report.as_json(summary)))
        else:
            out.print(report.table(summary))


def _tune_shapes(family: str, shape, shapes, table: int, out_dir, tgt, config, db: str, cluster, as_json: bool) -> None:
    """`tune FAMILY --shapes ...`: every shape tuned, then the one schedule and the table (tuning/shapes.py)."""
    from .measure.config import MeasureConfig
    from .report.tables import shapes_json, shapes_table
    from .target import check_runnable
    from .tuning.shapes import expand, tune_shapes

    if shapes is None:
        raise UserError("--out with tune needs --shapes (a single kernel is exported with 'tensortune export')",
                        option="--out")
    if shape is not None or cluster:
        raise UserError("--shapes takes the shapes itself and runs on this machine: drop --shape and --cluster",
                        option="--shapes")
    if config.space not in KIND:
        raise UserError(f"--shapes needs a template space (cpu-template, cuda-template): a schedule carries to "
                        f"another shape by its knobs, which '{config.space}' does not have", option="--space")
    check_fits(config.space, tgt.spec)
    workloads = expand(family, shapes)
    check_runnable(tgt)
    summary = tune_shapes(workloads, tgt, _open_db(db), config, MeasureConfig(threads=tgt.threads), k=table,
                          progress=lambda line: as_json or err.print(line, highlight=False))
    paths = []
    if out_dir:
        from .deploy.exporter import export_dispatch

        paths = export_dispatch(summary, tgt, Path(out_dir))
    if as_json:
        print(json.dumps(shapes_json(summary, paths)))
    else:
        out.print(shapes_table(summary, paths))


def _objectives(strategy: str, text: str | None) -> tuple[str, ...]:
    """The run's objectives: --objectives, checked against what the strategy minimises."""
    from .objectives import check

    cls = strategy_class(strategy)
    own = cls.objectives if cls else ("latency",)
    if text is None:
        return own
    goals = check(text)
    if len(own) > 1 and goals != own:
        raise UserError(f"--strategy {strategy} searches for the front of {','.join(own)}; give --objectives "
                        f"{','.join(own)} or another strategy", option="--objectives")
    return goals


def _device_classes(tgt, cluster: str | None, one: bool = False) -> list:
    """The target once per device class of the Ray cluster at `cluster` (its records keyed by
    the class), or as it is without a cluster; `one`: the command takes a single class."""
    if not cluster:
        return [tgt]
    from .measure.cluster import device_classes, node_command

    classes = device_classes(cluster)
    if not classes:
        raise UserError(f"the Ray cluster has no device node; start one on each machine that times kernels with: "
                        f"{node_command(tgt.hardware)}", option="--cluster")
    if one and len(classes) > 1:
        raise UserError(f"the Ray cluster has {len(classes)} device classes ({', '.join(sorted(classes))}); this "
                        "command times on one: tune each class with 'tensortune tune --cluster', or use a cluster of "
                        "one class", option="--cluster")
    return [replace(tgt, device_class=name) for name in sorted(classes)]


@app.command("tune-model")
def tune_model(model: str = typer.Argument(..., help="FILE.py:FACTORY (returns the module and example inputs) "
                                                 "or a zoo model: resnet18, mobilenet_v2, bert_layer, gpt_block, ..."),
               trials: Optional[int] = typer.Option(None, "--trials", min=1, help="search trials for the whole model, earlier "
                                                    "runs' included (default: 32 per tunable kernel)"),
               strategy: str = typer.Option(DEFAULT, "--strategy", help=ASK_TELL),
               option: Optional[list[str]] = OPTION,
               space: str = typer.Option("sketch", "--space", help=" | ".join(SPACES) + " (sketch fits any kernel)"),
               target: str = TARGET, arch: str = ARCH,
               out_dir: Optional[str] = typer.Option(None, "--out", help="folder for the tuned model (model.so, "
                                                     "model.json): tensortune.load(folder) calls it from torch"),
               seed: int = typer.Option(0, "--seed"), db: str = DB, threads: Optional[int] = THREADS,
               mcpu: Optional[str] = MCPU, batch: int = typer.Option(16, "--batch", min=1, help="candidates per round"),
               torch_ops: bool = typer.Option(True, help="also build the model calling torch for the operations it "
                                              "implements (convolution, matmul; CPU) and keep it where faster"),
               compare: bool = typer.Option(True, help="time torch eager, TVM's default build and the tuned model "
                                            "end to end (CPU targets)"),
               cluster: Optional[str] = CLUSTER,
               as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object")) -> None:
    """Tune every kernel of a PyTorch model with one budget; build it, check it against torch, time it against torch
    eager, export it."""
    from .deploy.split_model import build_split, combined, end_to_end, import_split, in_torch_line
    from .errors import NotConvertible
    from .model import build_model, export_model, import_model, load_factory
    from .model.end_to_end import measure_end_to_end
    from .report.tables import model_json, model_table
    from .target import check_runnable
    from .tuning.tuner import TuneConfig

    if strategy_class(strategy) is None:
        raise UserError(f"--strategy {strategy} tunes single operators; for a model use one of {', '.join(STRATEGIES)}")
    options = _options(option)
    check_options(strategy, options)
    [tgt] = _device_classes(_target(target, threads, mcpu, arch), cluster, one=True)
    check_runnable(tgt, model)
    os.environ["TVM_NUM_THREADS"] = str(tgt.threads)  # the model is checked and timed in this process too
    check_fits(space, tgt.spec)
    name, (module, inputs) = load_factory(model)
    config = TuneConfig(trials=trials or 0, strategy=strategy, seed=seed, batch=batch, space=space,
                        options=tuple(options.items()))
    split, database, builds = None, None, None
    try:
        imported = import_model(name, module, inputs, tgt.spec, torch_ops=torch_ops)
        database = _open_db(db)  # only once the model is in: a model that cannot come in leaves no database
        summary = _tune_imported(imported, tgt, database, config, as_json, cluster)
    except NotConvertible as why:  # the partitioner takes what TVM can; the rest stays in PyTorch
        if out_dir:
            raise UserError(f"{why}: a model that runs partly in PyTorch cannot be exported as one TVM library; "
                            "drop --out and run it with torch.compile(model, backend=tensortune.backend(db=...)), "
                            "which builds it from this run's records", option="--out") from None
        split = import_split(name, module, inputs, tgt.spec, str(why))
        if not as_json:
            err.print(f"{why}: tuning the parts TVM takes; {in_torch_line(split, None)}", highlight=False)
        imported, database = split.as_one(), database or _open_db(db)
        summary = _tune_imported(imported, tgt, database, config, as_json, cluster)
    if split is not None:
        graph, builds = build_split(split, tgt, database)
        built, paths = combined(split, builds), []
    else:
        built = build_model(imported, tgt, database, progress=lambda line: as_json or err.print(line, highlight=False))
        paths = export_model(built, tgt, Path(out_dir), database) if out_dir else []
        if built.slower_than_eager and not as_json:
            err.print(f"warning: the tuned build is slower than torch eager ({built.against_eager()}): keep running "
                      "the model in PyTorch, or tune it longer", highlight=False)
    if summary is None:
        out.print("wrote " + ", ".join(map(str, paths)) if paths else "run the same command again to resume")
        sys.exit(130)
    timing, share = None, None
    if compare and tgt.name == "cpu" and not cluster:  # end to end here; with a cluster, kernels were timed there
        if not as_json:
            err.print("timing torch eager, TVM's default build and the tuned model end to end ...")
        timing, share = end_to_end(split, tgt, database) if split else (measure_end_to_end(built, tgt), None)
        database.add_model_timing(imported.key, tgt.name, tgt.hardware, timing.as_dict())
    in_torch = split and {"operators": split.parts.in_torch, "share_of_eager_time": share,
                          "line": in_torch_line(split, share, builds)}
    if as_json:
        print(json.dumps(model_json(summary, built, paths, timing, in_torch)))
    else:
        out.print(model_table(summary, built, paths, timing, in_torch))


def _tune_imported(imported, tgt, database, config, as_json: bool, cluster: str | None):
    """The model's kernels tuned with one budget (config.trials; 0: the default for the
    model), with a progress display; None if interrupted (every finished round is stored)."""
    from .measure.config import MeasureConfig
    from .model import default_trials, tune_model as run_model

    if not config.trials:
        config = replace(config, trials=default_trials(imported))
        if not as_json:
            err.print(f"--trials not given: {config.trials} for {imported.name} "
                      f"({sum(k.tunable for k in imported.kernels)} tunable kernels x 32)", highlight=False)
    with _progress(as_json) as bar:
        rows: dict = {}
        total = bar.add_task(f"{imported.name}: {len(imported.kernels)} kernels", total=config.trials)

        def update(states, done, wanted):
            bar.update(total, completed=done)
            for state in states:
                if state.tuner and state.tuner.trials:
                    label = f"  {state.kernel.name[:48]:48} x{state.kernel.calls}  {_ms(state.latency)}"
                    if state.kernel.name not in rows:
                        rows[state.kernel.name] = bar.add_task(label, total=None)
                    bar.update(rows[state.kernel.name], description=label, completed=state.tuner.trials)
        try:
            return run_model(imported, tgt, database, config, MeasureConfig(threads=tgt.threads, cluster=cluster), update)
        except KeyboardInterrupt:
            err.print("interrupted: every finished round is stored; building the best-so-far model")
            return None


@app.command()
def mcp(db: str = DB, target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU,
        arch: str = ARCH, cluster: Optional[str] = CLUSTER,
        trials: int = typer.Option(256, "--trials", min=1, help="measurements the session may make, all tasks together"),
        seconds: float = typer.Option(3600.0, "--seconds", min=1, help="wall time the session may measure for")) -> None:
    """Serve the tuning loop to an agent: a Model Context Protocol server on stdin/stdout (see docs/agents.md)."""
    from .measure.config import MeasureConfig
    from .agents.mcp_server import serve
    from .target import check_runnable
    from .agents.workbench import Budget, Workbench

    if importlib.util.find_spec("mcp") is None:
        raise UserError("the MCP server needs the mcp package: pip install -e '.[agents]'")
    [tgt] = _device_classes(_target(target, threads, mcpu, arch), cluster, one=True)
    check_runnable(tgt)
    serve(Workbench(_open_db(db), tgt, MeasureConfig(threads=tgt.threads, cluster=cluster), Budget(trials, seconds)))


@app.command()
def node(cluster: str = typer.Option("HEAD:6379", "--cluster", help="the Ray head's address"),
         target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU, arch: str = ARCH) -> None:
    """Print this machine's device class and the command that joins it to a Ray cluster as a device node."""
    from .measure.cluster import node_command

    tgt = _target(target, threads, mcpu, arch)
    out.print(f"device class: {tgt.hardware}\n{node_command(tgt.hardware, cluster)}", highlight=False)


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
    from .workloads import FAMILIES, PRESETS

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
    database = _open_db(db, must_exist=True)
    kernels = database.model_kernels(workload.rpartition(":")[2])
    if kernels:
        _show_model(workload, kernels, database)
        return
    wl = _workload(workload, shape, db)
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
            out.print(f"  best {_ms(best.result.latency)} ({gflops:.1f} GFLOP/s, spread {best.result.spread:.0%}, "
                      f"{best.result.threads} threads): {_shorten(json.dumps(best.point))}")


def _show_model(name: str, kernels: list, database) -> None:
    """One line per kernel of the model: calls, trials, default and best per target and hardware;
    then the model's last end-to-end timing against torch eager."""
    from .report.tables import end_to_end_line

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
                         f"default {_ms(default.get((task.target, task.hardware), float('inf')))}, "
                         f"best {_ms(best.result.latency) if best else '-'}")
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
    from .report.page import model_page, operator_page

    database = _open_db(db, must_exist=True)
    target_for = lambda task: _task_target(database, task)  # noqa: E731
    kernels = database.model_kernels(name)
    if kernels:
        text = model_page(database, name, kernels, lambda key: _workload(key, None, db), target_for)
    else:
        wl = _workload(name, shape, db)
        tasks = database.tasks(wl.key)
        if not tasks:
            raise UserError(f"no records for {wl.key} in {db}; run 'tensortune tune {name}' first")
        text = operator_page(database, wl, tasks, target_for)
    try:
        Path(html_file).write_text(text)
    except OSError as error:
        raise UserError(f"cannot write '{html_file}': {error.strerror}", option="--html") from None
    out.print(f"wrote {html_file}", highlight=False)


def _task_target(database, task):
    """The Target a task's records were made for, near enough to draw its roofline and rebuild
    its kernels here: its kind, its GPU architecture (from the fingerprint), the threads its
    kernels ran with."""
    from .target import make_target

    threads = max([r.result.threads for r in database.records(task)] + [1])
    arch = task.hardware.split("-")[0] if task.hardware.startswith("sm_") else "sm_90"
    return make_target(task.target, threads, None, arch)


@app.command()
def export(workload: str = typer.Argument(...), shape: Optional[str] = SHAPE, db: str = DB,
           out_dir: str = typer.Option("tensortune-export", "--out", help="folder for kernel.so, kernel.py, record.json"),
           target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU) -> None:
    """Write the best kernel for WORKLOAD on this hardware: shared library, TVMScript, JSON record."""
    from .deploy.exporter import export_best

    wl, tgt, database = _workload(workload, shape, db), _target(target, threads, mcpu), _open_db(db, must_exist=True)
    paths = export_best(wl, tgt, database, Path(out_dir))
    out.print("wrote " + ", ".join(str(p) for p in paths))


def _target(name: str, threads: int | None, mcpu: str | None, arch: str = "sm_90"):
    from .measure.config import default_threads
    from .target import make_target

    if threads is not None and threads < 1:
        raise UserError(f"--threads must be at least 1, got {threads}")
    return make_target(name, threads or default_threads(), mcpu, arch)


def _workload(name: str, shape: str | None, db: str):
    """A workload by name (see get_workload), or a model's kernel by its key (name#digest)."""
    from .workloads import get_workload
    from .workloads.kernel import KernelWorkload

    if "#" not in name:
        return get_workload(name, shape)
    found = _open_db(db, must_exist=True).kernel_source(name)
    if found is None:
        raise UserError(f"no kernel '{name}' in {db}; 'tensortune show MODEL' lists a model's kernels")
    return KernelWorkload.from_source(*found)


batch_app = typer.Typer(no_args_is_help=True, help="Kernels built here, run on another machine (a GPU host "
                                                  "without compiler or network), results imported back.")
app.add_typer(batch_app, name="batch")


@batch_app.command("export")
def batch_export(workloads: Optional[list[str]] = typer.Argument(None, help="presets (gemm-1024 ...) or FAMILY:SHAPE (gemm:M=64,N=64,K=64)"),
                 model: Optional[str] = typer.Option(None, "--model", help="a model's kernels instead: FILE.py:FACTORY or a zoo model"),
                 space: Optional[str] = typer.Option(None, "--space", help="the target's template (default for "
                                                     "workloads; on cuda, the tensor-core space of each half-precision one) | sketch (default for --model)"),
                 target: str = TARGET, arch: str = ARCH,
                 count: int = typer.Option(256, "--count", min=0, help="candidates per workload besides naive and hand"),
                 seed: int = typer.Option(0, "--seed"), threads: Optional[int] = THREADS,
                 mcpu: Optional[str] = MCPU, out_dir: str = typer.Option(..., "--out", help="a new folder for the batch")) -> None:
    """Build naive, hand and COUNT candidates per workload (or per kernel of a model) into a batch folder to carry to the machine that runs them."""
    from .tuning.batch import export_batch, export_model_batch
    from .workloads import get_workload

    if bool(workloads) == bool(model):
        raise UserError("name the workloads to export, or --model MODEL, not both")
    tgt = _target(target, threads, mcpu, arch)
    space = space or ("sketch" if model else None)  # None: each workload's default_space
    if space:
        check_fits(space, tgt.spec)
    report = lambda wl, n: err.print(f"built {n} candidates of {wl.preset or wl.key}")  # noqa: E731
    if model:
        from .model import import_model, load_factory

        name, (module, inputs) = load_factory(model)
        imported = import_model(name, module, inputs, tgt.spec)
        manifest = export_model_batch(imported, tgt, Path(out_dir), count, seed, space, progress=report)
    else:
        wls = [get_workload(*w.split(":", 1)) if ":" in w and ".py:" not in w else get_workload(w) for w in workloads]
        manifest = export_batch(wls, tgt, Path(out_dir), count, seed, progress=report, space=space)
    out.print(f"wrote {out_dir}: {len(manifest['candidates'])} kernels ({len(manifest['failed'])} failed to build); "
              f"run it with: python {out_dir}/runner.py {out_dir}")


@batch_app.command("run")
def batch_run(batch: str = typer.Argument(...), timeout: float = typer.Option(60.0, "--timeout", help="seconds one kernel may take"),
              threads: Optional[int] = THREADS) -> None:
    """Run a batch here (what the GPU host does): verify and time every kernel, then the vendor baselines."""
    from .measure.batch import run_here
    from .measure.config import default_threads

    run_here(Path(batch), timeout, threads or default_threads())


@batch_app.command("import")
def batch_import(batch: str = typer.Argument(...), db: str = DB) -> None:
    """Store a batch's results as records, and print best vs naive, hand and torch per workload."""
    from .tuning.batch import import_batch
    from .report.tables import batch_table

    summaries = import_batch(Path(batch), _open_db(db))
    print(batch_table(summaries, batch))


def _open_db(path: str, must_exist: bool = False):
    from .db import Database

    if must_exist and not Path(path).is_file():
        raise UserError(f"database '{path}' does not exist; run 'tensortune tune' first or pass --db")
    return Database(path)


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, disable=quiet, transient=False)


def _shorten(text: str, limit: int = 400) -> str:
    """Points of the knob spaces are short; MetaSchedule traces are not ('export' has all)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _ms(seconds: float) -> str:
    return "-" if seconds == float("inf") else f"{seconds * 1e3:.4f} ms"


def main() -> None:
    """The console entry point: a user's mistake exits 2, a fault of ours 1, each with one
    `error:` line; `--debug` (anywhere on the line) shows the traceback instead."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    # torch.fx's deep copies trip typing_extensions' deprecation of a torch pytree idiom: torch's
    # business, not the user's, and it would read as a failure of ours on standard error
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
    try:
        code = app(standalone_mode=False)  # click's usage errors come here, to be one line too
    except TyperException as error:  # click's usage errors (typer carries its own click)
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare command: typer has printed its help
            sys.exit(0)
        command = getattr(getattr(error, "ctx", None), "command_path", "tensortune")
        err.print(f"error: {error.format_message()} (see '{command} --help')", highlight=False, markup=False)
        sys.exit(2)
    except typer.Abort:
        err.print("interrupted: every finished batch is stored; run the same command again to resume")
        sys.exit(130)
    except UserError as error:
        if debug:
            raise
        where = f" ({error.option})" if error.option else ""
        err.print(f"error: {error}{where}", highlight=False, markup=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted: every finished batch is stored; run the same command again to resume")
        sys.exit(130)
    except Exception as error:  # a bug of ours, not the user's: say so, and how to see more
        if debug:
            raise
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        err.print(f"error: internal error, {type(error).__name__}: {message} (run again with --debug for the "
                  "traceback, and please report it)", highlight=False, markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
