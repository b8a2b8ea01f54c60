"""`tensortune mcp` (the tuning loop served to an agent) and `tensortune node` (a machine joining
a Ray cluster as a device node)."""
from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
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
def node(cluster: Optional[str] = typer.Option(None, "--cluster", help="join the Ray head at this HOST:PORT"),
         head: bool = typer.Option(False, "--head", help="start a Ray head here (this machine its first device node)"),
         print_only: bool = typer.Option(False, "--print", help="print the ray start command, run nothing"),
         target: str = TARGET, threads: Optional[int] = THREADS, mcpu: Optional[str] = MCPU, arch: str = ARCH) -> None:
    """Make this machine a device node of its class in a Ray cluster: start the cluster here (--head) or join one
    (--cluster HOST:PORT). Then `tune ... --cluster auto` sends builds to every node, timing to device nodes."""
    from ..measure.cluster import node_argv

    if head == (cluster is not None):
        raise UserError("give --head (start a cluster on this machine) or --cluster HOST:PORT (join one)",
                        option="--cluster")
    tgt = target_from(target, threads, mcpu, arch)
    argv = node_argv(tgt.hardware, None if head else cluster)
    out.print(f"device class: {tgt.hardware}\n{shlex.join(argv)}", highlight=False)
    if print_only:
        return
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        raise UserError("Ray is not installed: pip install -e '.[cluster]'")
    if subprocess.run([ray, *argv[1:]]).returncode:
        raise UserError("ray start failed (its output is above)")
    out.print("this machine is a device node: tensortune tune WORKLOAD --cluster auto", highlight=False)
