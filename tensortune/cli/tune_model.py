"""`tensortune tune-model`: the options parsed, the library's pipeline called
(deploy/pipeline.py: import, tune with one budget, build, check, time against eager, export),
its result printed."""
from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from ..errors import UserError
from ..search import DEFAULT, STRATEGIES, check_options, strategy_class
from ..space import SPACES, check_fits
from .common import (ARCH, ASK_TELL, BATCH, CLUSTER, DB, MCPU, OPTION, SEED, TARGET, THREADS, app, device_classes, err,
                     ms, out, parse_options, progress_bar, target_from)


MODEL = typer.Argument(..., help="FILE.py:FACTORY (returns the module and example inputs) or a zoo model: "
                                 "resnet18, mobilenet_v2, bert_layer, gpt_block, ...")
TRIALS = typer.Option(None, "--trials", min=1, help="search trials for the whole model, earlier runs' included "
                      "(default: 32 per tunable kernel)")
STRATEGY = typer.Option(DEFAULT, "--strategy", help=ASK_TELL)
SPACE = typer.Option("sketch", "--space", help=" | ".join(SPACES) + " (sketch fits any kernel)")
OUT_DIR = typer.Option(None, "--out", help="folder for the tuned model (model.so, model.json): tensortune.load(folder) "
                       "calls it from torch")
TORCH_OPS = typer.Option(True, help="also build the model calling torch for the operations it implements "
                         "(convolution, matmul; CPU) and keep it where faster")
COMPARE = typer.Option(True, help="time torch eager, TVM's default build and the tuned model end to end (CPU targets)")
AS_JSON = typer.Option(False, "--json", help="print the summary as one JSON object")


@app.command("tune-model")
def tune_model(model: str = MODEL, trials: Optional[int] = TRIALS, strategy: str = STRATEGY,
               option: Optional[list[str]] = OPTION, space: str = SPACE, target: str = TARGET, arch: str = ARCH,
               out_dir: Optional[str] = OUT_DIR, seed: int = SEED, db: str = DB, threads: Optional[int] = THREADS,
               mcpu: Optional[str] = MCPU, batch: int = BATCH, torch_ops: bool = TORCH_OPS, compare: bool = COMPARE,
               cluster: Optional[str] = CLUSTER, as_json: bool = AS_JSON) -> None:
    """Tune every kernel of a PyTorch model with one budget; build it, check it against torch, time it against torch
    eager, export it."""
    from ..deploy.pipeline import tune_model as run_pipeline
    from ..measure.config import MeasureConfig
    from ..model import load_factory
    from ..target import check_runnable
    from ..tuning.tuner import TuneConfig

    if strategy_class(strategy) is None:
        raise UserError(f"--strategy {strategy} tunes single operators; for a model use one of {', '.join(STRATEGIES)}")
    options = parse_options(option)
    check_options(strategy, options)
    [tgt] = device_classes(target_from(target, threads, mcpu, arch), cluster, one=True)
    check_runnable(tgt, model)
    check_fits(space, tgt)
    name, (module, inputs) = load_factory(model)
    config = TuneConfig(trials=trials or 0, strategy=strategy, seed=seed, batch=batch, space=space,
                        options=tuple(options.items()))
    say = (lambda line: None) if as_json else (lambda line: err.print(line, highlight=False))
    bar = progress_bar(as_json)  # shown from the first round on: a refused model prints nothing but its error
    try:
        tuned = run_pipeline(module, inputs, tgt, db, config, MeasureConfig(threads=tgt.threads, cluster=cluster),
                             name=name, out=out_dir, torch_ops=torch_ops, compare=compare, say=say,
                             progress=_rounds(bar, name))
    finally:
        if bar.live.is_started:
            bar.stop()
    _print_result(tuned, as_json)


def _print_result(tuned, as_json: bool) -> None:
    """The tuned model's table (or JSON); where interrupted, what was written, and exit 130."""
    from ..report.tables import model_json, model_table

    if tuned.interrupted:
        out.print("wrote " + ", ".join(map(str, tuned.paths)) if tuned.paths else "run the same command again to resume")
        sys.exit(130)
    parts = (tuned.summary, tuned.built, tuned.paths, tuned.timing, tuned.in_torch)
    if as_json:
        print(json.dumps(model_json(*parts)))
    else:
        out.print(model_table(*parts))


def _rounds(bar, name: str):
    """The pipeline's progress callback: the model's trials, and a line per kernel being tuned
    (its calls and best latency so far)."""
    rows: dict = {}
    total = None

    def update(states, done, wanted):
        nonlocal total
        if total is None:
            bar.start()
            total = bar.add_task(f"{name}: {len(states)} kernels", total=wanted)
        bar.update(total, completed=done)
        for state in states:
            if state.tuner and state.tuner.trials:
                label = f"  {state.kernel.name[:48]:48} x{state.kernel.calls}  {ms(state.latency)}"
                if state.kernel.name not in rows:
                    rows[state.kernel.name] = bar.add_task(label, total=None)
                bar.update(rows[state.kernel.name], description=label, completed=state.tuner.trials)
    return update
