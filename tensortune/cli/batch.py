"""`tensortune batch`: kernels built here, run on another machine (a GPU host without compiler or
network), results imported back."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from ..space import check_fits
from .common import ARCH, DB, MCPU, TARGET, THREADS, app, err, open_db, out, target_from

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
    from ..tuning.batch import export_batch, export_model_batch
    from ..workloads import get_workload

    if bool(workloads) == bool(model):
        raise UserError("name the workloads to export, or --model MODEL, not both")
    tgt = target_from(target, threads, mcpu, arch)
    space = space or ("sketch" if model else None)  # None: each workload's default_space
    if space:
        check_fits(space, tgt)
    report = lambda wl, n: err.print(f"built {n} candidates of {wl.preset or wl.key}")  # noqa: E731
    if model:
        from ..model import import_model, load_factory

        name, (module, inputs) = load_factory(model)
        imported = import_model(name, module, inputs, tgt)
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
    from ..measure.batch import run_here
    from ..target import default_threads

    run_here(Path(batch), timeout, threads or default_threads())


@batch_app.command("import")
def batch_import(batch: str = typer.Argument(...), db: str = DB) -> None:
    """Store a batch's results as records, and print best vs naive, hand and torch per workload."""
    from ..tuning.batch import import_batch
    from ..report.tables import batch_table

    summaries = import_batch(Path(batch), open_db(db))
    print(batch_table(summaries, batch))
