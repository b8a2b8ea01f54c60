"""`tensortune mcp` (the tuning loop served to an agent) and `tensortune node` (a machine joining
a Ray cluster as a device node)."""
from __future__ import annotations

import importlib.util
from typing import Optional

import typer

from ..errors import UserError
from .common import ARCH, CLUSTER, DB, MCPU, TARGET, THREADS, app, device_classes, open_db, out, target_from


@app.command()
def mcp(db: str = DB, target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU,
        arch: str = ARCH, cluster: Optional[str] = CLUSTER,
        trials: int = typer.Option(256, "--trials", min=1, help="measurements the session may make, all tasks together"),
        seconds: float = typer.Option(3600.0, "--seconds", min=1, help="wall time the session may measure for")) -> None:
    """Serve the tuning loop to an agent: a Model Context Protocol server on stdin/stdout (see docs/agents.md)."""
    from ..measure.config import MeasureConfig
    from ..agents.mcp_server import serve
    from ..target import check_runnable
    from ..agents.workbench import Budget, Workbench

    if importlib.util.find_spec("mcp") is None:
        raise UserError("the MCP server needs the mcp package: pip install -e '.[agents]'")
    [tgt] = device_classes(target_from(target, threads, mcpu, arch), cluster, one=True)
    check_runnable(tgt)
    serve(Workbench(open_db(db), tgt, MeasureConfig(threads=tgt.threads, cluster=cluster), Budget(trials, seconds)))


@app.command()
def node(cluster: str = typer.Option("HEAD:6379", "--cluster", help="the Ray head's address"),
         target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU, arch: str = ARCH) -> None:
    """Print this machine's device class and the command that joins it to a Ray cluster as a device node."""
    from ..measure.cluster import node_command

    tgt = target_from(target, threads, mcpu, arch)
    out.print(f"device class: {tgt.hardware}\n{node_command(tgt.hardware, cluster)}", highlight=False)
