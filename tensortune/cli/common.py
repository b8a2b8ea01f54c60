"""What the commands share: the app, the consoles, the common options, and the helpers that turn
options into targets, workloads and databases."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import UserError
from ..search import STRATEGIES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Search schedules for tensor kernels; keep every result; hand back the fastest correct one.")
out = Console(soft_wrap=True)  # a long line stays one line when piped (no hard breaks inside names or JSON)
err = Console(stderr=True, soft_wrap=True)

SHAPE = typer.Option(None, "--shape", help="e.g. M=64,N=64,K=64 or 64,64,64 (needed for a family name)")
DB = typer.Option("tensortune.db", "--db", help="SQLite file of records")
TARGET = typer.Option("cpu", "--target", help="where kernels run: cpu | cuda")
ARCH = typer.Option("sm_90", "--arch", help="GPU architecture for --target cuda (sm_80, sm_90, ...)")
THREADS = typer.Option(None, "--threads", help="threads per kernel (default: the cores this process may use)")
SEED = typer.Option(0, "--seed")
BATCH = typer.Option(16, "--batch", min=1, help="candidates per round")
MCPU = typer.Option(None, "--mcpu", help="LLVM CPU name (default: this machine's, e.g. znver4)")
CLUSTER = typer.Option(None, "--cluster", help="a Ray cluster's address (auto: the one this machine is in): builds "
                       "and timings on its nodes (docs/ray.md); without it, nothing of Ray is used")
# the lists in the help come from the registries (search/__init__.py, space/__init__.py)
ASK_TELL = " | ".join(STRATEGIES)
OPTION = typer.Option(None, "--option", help="a strategy's option, KEY=VALUE (repeatable; 'tensortune strategies' "
                      "lists each strategy's)")


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """--option KEY=VALUE pairs as a dict; a malformed pair is a UserError."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"an option is KEY=VALUE, got '{pair}'", option="--option")
        options[key.strip()] = value.strip()
    return options


def device_classes(tgt, cluster: str | None, one: bool = False) -> list:
    """The target once per device class of the Ray cluster at `cluster` (its records keyed by
    the class), or as it is without a cluster; `one`: the command takes a single class."""
    if not cluster:
        return [tgt]
    from ..measure.cluster import device_classes as classes_of, node_command

    classes = classes_of(cluster)
    if not classes:
        raise UserError(f"the Ray cluster has no device node; start one on each machine that times kernels with: "
                        f"{node_command(tgt.hardware)}", option="--cluster")
    if one and len(classes) > 1:
        raise UserError(f"the Ray cluster has {len(classes)} device classes ({', '.join(sorted(classes))}); this "
                        "command times on one: tune each class with 'tensortune tune --cluster', or use a cluster of "
                        "one class", option="--cluster")
    return [replace(tgt, device_class=name) for name in sorted(classes)]


def target_from(name: str, threads: int | None, mcpu: str | None, arch: str = "sm_90"):
    """The Target the options --target, --threads, --mcpu and --arch name."""
    from ..target import make_target

    if threads is not None and threads < 1:
        raise UserError(f"--threads must be at least 1, got {threads}")
    return make_target(name, threads, mcpu, arch)


def workload_named(name: str, shape: str | None, db: str):
    """A workload by name (see get_workload), or a model's kernel by its key (name#digest)."""
    from ..workloads import get_workload
    from ..workloads.kernel import KernelWorkload

    if "#" not in name:
        return get_workload(name, shape)
    found = open_db(db, must_exist=True).kernel_source(name)
    if found is None:
        raise UserError(f"no kernel '{name}' in {db}; 'tensortune show MODEL' lists a model's kernels")
    return KernelWorkload.from_source(*found)


def open_db(path: str, must_exist: bool = False):
    """The records at `path` (--db); `must_exist`: for commands that only read them."""
    from ..db import Database

    if must_exist and not Path(path).is_file():
        raise UserError(f"database '{path}' does not exist; run 'tensortune tune' first or pass --db")
    return Database(path)


def progress_bar(quiet: bool) -> Progress:
    """Progress on standard error (none with `quiet`: --json prints one object and nothing else)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, disable=quiet, transient=False)


def shorten(text: str, limit: int = 400) -> str:
    """Points of the knob spaces are short; MetaSchedule traces are not ('export' has all)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def ms(seconds: float) -> str:
    """Seconds as milliseconds for a table ('-' for none)."""
    return "-" if seconds == float("inf") else f"{seconds * 1e3:.4f} ms"


