"""A PyTorch model made faster in one call: what `tensortune tune-model` does, as a library.

`tune_model(module, example_inputs, ...)` imports the model (where TVM's frontend cannot take it
whole, it is partitioned and the parts TVM takes are tuned: split_model.py), tunes every kernel
with one budget (model/scheduler.py), builds it with each kernel's best verified schedule and
checks it against torch eager (model/build.py: the faster of the all-TVM build and the one
calling torch is kept, and a build slower than eager says so), times it end to end against
eager and TVM's default build, and exports it for `tensortune.load`. The command parses its
options, calls this and prints the result.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..db import Database
from ..errors import NotConvertible, UserError
from ..measure.config import MeasureConfig
from ..model import BuiltModel, ModelSummary, build_model, default_trials, export_model, import_model
from ..model import tune_model as tune_kernels
from ..model.end_to_end import EndToEnd, measure_end_to_end
from ..target import Target, check_runnable, size_tvm_pool
from ..tuning.tuner import TuneConfig
from .split_model import SplitModel, build_split, combined, end_to_end, import_split, in_torch_line

TIMING = "timing torch eager, TVM's default build and the tuned model end to end ..."


@dataclass
class TuneModelResult:
    """What `tune_model` hands back: the tuning summary (None where it was interrupted: every
    finished round is stored, and `built` is the best so far), the kept build, the files
    exported, the end-to-end timing (None where not asked, or not on this machine's CPU), and
    what runs in PyTorch (None where TVM takes the whole model)."""

    summary: ModelSummary | None
    built: BuiltModel
    paths: list[Path]
    timing: EndToEnd | None = None
    in_torch: dict | None = None

    @property
    def interrupted(self) -> bool:
        return self.summary is None


def tune_model(module, example_inputs: tuple, target: Target, db: Database | str | Path,
               config: TuneConfig = TuneConfig(),
               measure: MeasureConfig | None = None, name: str = "model", out: Path | str | None = None,
               torch_ops: bool = True, compare: bool = True, say: Callable[[str], None] = lambda line: None,
               progress: Callable = lambda *_: None) -> TuneModelResult:
    """Tune, build, check, time and export `module` (a torch.nn.Module in eval mode) for
    `example_inputs` on `target`, its records in `db` (a Database, or the path of its SQLite
    file, opened only once the model is in: a model that cannot come in leaves no file behind;
    earlier runs' records count toward the budget and resume it). `config.trials` 0: 32 per tunable
    kernel. `out`: a folder for model.so and model.json (`tensortune.load(out)`); a model that
    runs partly in PyTorch cannot be exported (a UserError says to use the backend). `say`
    receives one line per stage, `progress(states, done, wanted)` each tuning round."""
    measure = measure or MeasureConfig(threads=target.threads)
    check_runnable(target)
    size_tvm_pool(target.threads)  # the model is checked and timed in this process too
    imported, split = _imported(module, example_inputs, target, name, out, torch_ops, say)
    db = db if isinstance(db, Database) else Database(str(db))
    summary = _tune(imported, target, db, config, measure, say, progress)
    # end to end on this CPU; with a cluster, kernels were timed there, not here
    time_here = summary is not None and compare and target.name == "cpu" and not measure.cluster
    if split is not None:
        return _split_result(split, imported, summary, target, db, time_here, say)
    return _whole_result(imported, summary, target, db, out, time_here, say)


def _imported(module, example_inputs: tuple, target: Target, name: str, out, torch_ops: bool,
              say) -> tuple[object, SplitModel | None]:
    """The model as TVM takes it, whole, or (where it cannot) split into the parts it takes,
    those parts as one model; and the split, if any."""
    try:
        return import_model(name, module, example_inputs, target, torch_ops=torch_ops), None
    except NotConvertible as why:  # the partitioner takes what TVM can; the rest stays in PyTorch
        if out:
            raise UserError(f"{why}: a model that runs partly in PyTorch cannot be exported as one TVM library; "
                            "run it with torch.compile(model, backend=tensortune.backend(db=...)), which builds it "
                            "from this run's records", option="--out") from None
        split = import_split(name, module, example_inputs, target, str(why))
        say(f"{why}: tuning the parts TVM takes; {in_torch_line(split, None)}")
        return split.as_one(), split


def _whole_result(imported, summary, target: Target, db: Database, out, time_here: bool, say) -> TuneModelResult:
    """A model TVM takes whole: built, exported where asked, timed end to end where `time_here`."""
    built = build_model(imported, target, db, progress=say)
    paths = export_model(built, target, Path(out), db) if out else []
    if built.slower_than_eager:
        say(f"warning: the tuned build is slower than torch eager ({built.against_eager()}): keep running the "
            "model in PyTorch, or tune it longer")
    timing = None
    if time_here:
        say(TIMING)
        timing = measure_end_to_end(built, target)
        db.add_model_timing(imported.key, target.name, target.hardware, timing.as_dict())
    return TuneModelResult(summary, built, paths, timing)


def _tune(imported, target: Target, db: Database, config: TuneConfig, measure: MeasureConfig, say,
          progress) -> ModelSummary | None:
    """The model's kernels tuned with one budget; None if interrupted."""
    if not config.trials:
        config = replace(config, trials=default_trials(imported))
        say(f"trials not given: {config.trials} for {imported.name} "
            f"({sum(k.tunable for k in imported.kernels)} tunable kernels x 32)")
    try:
        return tune_kernels(imported, target, db, config, measure, progress)
    except KeyboardInterrupt:
        say("interrupted: every finished round is stored; building the best-so-far model")
        return None


def _split_result(split: SplitModel, imported, summary, target: Target, db: Database,
                  time_here: bool, say) -> TuneModelResult:
    """A partitioned model's regions built, the whole timed against eager where `time_here`."""
    _, builds = build_split(split, target, db)
    timing, share = None, None
    if time_here:
        say(TIMING)
        timing, share = end_to_end(split, target, db)
        db.add_model_timing(imported.key, target.name, target.hardware, timing.as_dict())
    in_torch = {"operators": split.parts.in_torch, "share_of_eager_time": share,
                "line": in_torch_line(split, share, builds)}
    return TuneModelResult(summary, combined(split, builds), [], timing, in_torch)
