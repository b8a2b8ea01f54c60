"""`tensortune tune`: one operator (or a family at several shapes) searched, verified, timed and
stored; then naive, hand, tuned and vendor times side by side."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ..search import DEFAULT, check_options, metaschedule, strategy_class
from ..space import KIND, SPACES, check_fits, default_space
from .common import (ARCH, ASK_TELL, BATCH, CLUSTER, DB, MCPU, OPTION, SEED, SHAPE, TARGET, THREADS, app, device_classes,
                     err, ms, open_db, out, parse_options, progress_bar, target_from, workload_named)


WORKLOAD = typer.Argument(..., help="preset (gemm-1024), family (gemm, with --shape), or your operator: "
                                    "FILE.py:FUNCTION (with --shape)")
TRIALS = typer.Option(64, "--trials", min=1, help="search trials for this task, earlier runs' included")
STRATEGY = typer.Option(DEFAULT, "--strategy", help=f"{ASK_TELL} | {metaschedule.NAME} (TVM's own tuner, re-timed "
                        "by us); llm needs TENSORTUNE_LLM_URL, _MODEL, _KEY")
SPACE = typer.Option(None, "--space", help=" | ".join(SPACES) + " (default: the target's template, "
                     + ", ".join(f"{n} for {k}" for n, k in KIND.items())
                     + "; on cuda cuda-tensorcore for float16/bfloat16 matmuls, sketch for other float16 operators)")
BASELINES = typer.Option(True, help="also time numpy (and torch) on the same machine")
WARM_START = typer.Option(False, "--warm-start-family", help="also learn from records of other shapes of this operator")
OBJECTIVES = typer.Option(None, "--objectives", help="latency | latency,build_s: with two, the summary gives the "
                          "Pareto front of the task's correct kernels (default: the strategy's; mobo and nsga2 "
                          "search for that front)")
SHAPES = typer.Option(None, "--shapes", help="several shapes of a FAMILY, e.g. 'M=1,8,64,512;N=768;K=768': each "
                      "tuned (--trials each), then one schedule for all and a dispatch table (docs/shapes.md)")
TABLE = typer.Option(2, "--table", min=1, help="with --shapes: schedules in the dispatch table")
OUT_DIR = typer.Option(None, "--out", help="with --shapes: a folder for the dispatch table's kernels "
                       "(tensortune.load(folder) calls the right one by shape)")
AS_JSON = typer.Option(False, "--json", help="print the summary as one JSON object (one per line, one per device "
                       "class, with --cluster)")


@app.command()
def tune(workload: str = WORKLOAD, shape: Optional[str] = SHAPE, target: str = TARGET, trials: int = TRIALS,
         strategy: str = STRATEGY, option: Optional[list[str]] = OPTION, space: Optional[str] = SPACE,
         arch: str = ARCH, seed: int = SEED, db: str = DB, threads: Optional[int] = THREADS,
         mcpu: Optional[str] = MCPU, batch: int = BATCH, baselines: bool = BASELINES,
         warm_start_family: bool = WARM_START, objectives: Optional[str] = OBJECTIVES,
         cluster: Optional[str] = CLUSTER, shapes: Optional[str] = SHAPES, table: int = TABLE,
         out_dir: Optional[str] = OUT_DIR, as_json: bool = AS_JSON) -> None:
    """Tune WORKLOAD: search, verify, time, store; then report naive, hand, tuned and vendor times. With --cluster,
    once per device class of the cluster (each class its own task); with --shapes, a family at several shapes."""
    from ..measure.baselines import measure_baselines
    from ..report import tables as report
    from ..target import check_runnable
    from ..tuning.tuner import TuneConfig
    from ..workloads import check_memory

    options = parse_options(option)
    check_options(strategy, options)  # unknown names and bad values stop before any work starts
    # the space: as given, else a template for --shapes, else the workload's default (below, once it is known)
    config = TuneConfig(trials=trials, strategy=strategy, seed=seed, batch=batch, space=space or "cpu-template",
                        warm_start_family=warm_start_family, options=tuple(options.items()),
                        objectives=_objectives(strategy, objectives))
    if shapes is not None or out_dir is not None:
        _tune_shapes(workload, shape, shapes, table, out_dir, target_from(target, threads, mcpu, arch), config, db,
                     cluster, as_json)
        return
    wl, tgt = workload_named(workload, shape, db), target_from(target, threads, mcpu, arch)
    config = replace(config, space=space or default_space(wl, tgt))
    _check_space(config, tgt)
    targets = device_classes(tgt, cluster)
    check_runnable(targets[0])
    check_memory(wl)
    database = open_db(db)  # only once every check passed: a refused command leaves no database
    for tgt in targets:
        summary = _tuned(wl, tgt, database, config, cluster, as_json)
        if baselines and wl.family.source is None and tgt.name == "cpu" and not cluster:  # torch times here, not there
            summary.baselines = measure_baselines(wl.name, wl.shape, tgt.threads)
        if as_json:
            print(json.dumps(report.as_json(summary)))
        else:
            out.print(report.table(summary))


def _check_space(config, tgt) -> None:
    """The space runs on the target, and carries other shapes' records where asked to."""
    check_fits(config.space, tgt)
    if config.warm_start_family and config.space not in KIND:
        raise UserError(f"--warm-start-family needs a template space (cpu-template, cuda-template): the knobs of "
                        f"'{config.space}' differ from shape to shape, so other shapes' records do not carry over")


def _tuned(wl, tgt, database, config, cluster, as_json: bool):
    """The task tuned on `tgt` (one device class of the cluster, or this machine), with a progress bar."""
    from ..measure.config import MeasureConfig
    from ..tuning.tuner import tune as run_tuner

    with progress_bar(as_json) as bar:
        where = f" on {tgt.hardware}" if cluster else ""
        job = bar.add_task(f"tuning {wl.preset or wl.key}{where}", total=config.trials)
        update = lambda done, total, best: bar.update(  # noqa: E731
            job, completed=done, description=f"tuning {wl.preset or wl.key}{where}  best {ms(best)}")
        return run_tuner(wl, tgt, database, config, MeasureConfig(threads=tgt.threads, cluster=cluster), update)


def _tune_shapes(family: str, shape, shapes, table: int, out_dir, tgt, config, db: str, cluster, as_json: bool) -> None:
    """`tune FAMILY --shapes ...`: every shape tuned, then the one schedule and the table (tuning/shapes.py)."""
    from ..measure.config import MeasureConfig
    from ..report.tables import shapes_json, shapes_table
    from ..target import check_runnable
    from ..tuning.shapes import expand, tune_shapes

    if shapes is None:
        raise UserError("--out with tune needs --shapes (a single kernel is exported with 'tensortune export')",
                        option="--out")
    if shape is not None or cluster:
        raise UserError("--shapes takes the shapes itself and runs on this machine: drop --shape and --cluster",
                        option="--shapes")
    if config.space not in KIND:
        raise UserError(f"--shapes needs a template space (cpu-template, cuda-template): a schedule carries to "
                        f"another shape by its knobs, which '{config.space}' does not have", option="--space")
    check_fits(config.space, tgt)
    workloads = expand(family, shapes)
    check_runnable(tgt)
    summary = tune_shapes(workloads, tgt, open_db(db), config, MeasureConfig(threads=tgt.threads), k=table,
                          progress=lambda line: as_json or err.print(line, highlight=False))
    paths = []
    if out_dir:
        from ..deploy.exporter import export_dispatch

        paths = export_dispatch(summary, tgt, Path(out_dir))
    if as_json:
        print(json.dumps(shapes_json(summary, paths)))
    else:
        out.print(shapes_table(summary, paths))


def _objectives(strategy: str, text: str | None) -> tuple[str, ...]:
    """The run's objectives: --objectives, checked against what the strategy minimises."""
    from ..objectives import check

    cls = strategy_class(strategy)
    own = cls.objectives if cls else ("latency",)
    if text is None:
        return own
    goals = check(text)
    if len(own) > 1 and goals != own:
        raise UserError(f"--strategy {strategy} searches for the front of {','.join(own)}; give --objectives "
                        f"{','.join(own)} or another strategy", option="--objectives")
    return goals
