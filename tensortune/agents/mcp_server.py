"""`tensortune mcp`: the workbench (workbench.py) as a Model Context Protocol server on stdio,
for an agent that writes and measures schedules itself. Each tool returns JSON; a mistake
the agent can correct (an unknown task, a spent budget, a malformed point) comes back as a
tool error with the reason, and a schedule that fails (does not apply, does not build, gives
wrong results) comes back as a measured result with its status and reason.
"""
from __future__ import annotations

import functools
from typing import Any

from ..errors import UserError
from .workbench import Workbench

INSTRUCTIONS = """Tune tensor kernels with TVM. list_tasks, then describe_task for a task's
TensorIR, knobs and example points; measure schedules (a knob point, a named point, a
MetaSchedule trace, or Python code defining schedule(sch)); every result is verified against
a reference, timed and recorded. history and best show what was measured."""


def make_server(bench: Workbench):
    """The MCP server whose tools call `bench`."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("tensortune", instructions=INSTRUCTIONS)
    for tool in _tools(bench):
        server.tool()(_reported(tool))
    return server


def _reported(tool):
    """The tool, with a UserError turned into a tool error the agent reads."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(tool)
    async def call(*args, **kwargs):
        try:
            return await tool(*args, **kwargs)
        except UserError as err:
            raise ToolError(str(err)) from None

    return call


def _tools(bench: Workbench) -> list:
    # async, so each runs on the server's own thread, where the database was opened (the SDK
    # runs plain functions on worker threads); a measurement holds the server as it holds the
    # machine: one at a time
    async def list_tasks(model: str | None = None) -> dict[str, Any]:
        """Operators (families with their shape parameters, presets) and zoo models; with
        `model`, that model's kernels, each a task named MODEL:KERNEL."""
        return bench.tasks(model)

    async def describe_task(task: str) -> dict[str, Any]:
        """A task (PRESET, FAMILY:P=V,... or MODEL:KERNEL): its TVMScript, FLOPs and bytes,
        each space's knobs with their allowed values, named example points, the baselines
        stored so far, and the budget left."""
        return bench.describe(task)

    async def measure(task: str, form: str, schedule: str | dict[str, Any] | list[Any], space: str | None = None) -> dict[str, Any]:
        """Build, verify, time and record one schedule. form: "point" (schedule = knob values,
        a JSON object, of `space`, default the task's first space), "named" (naive, hand,
        default), "trace" (MetaSchedule trace JSON, as text or as the list) or "function" (Python code defining
        schedule(sch) with TensorIR schedule primitives; run in an isolated worker with a time
        limit). Returns status (ok, invalid, wrong, build_error, run_crash, ...), the reason,
        latency, and diagnostics: scheduled TVMScript, vector width, parallel extent, roofline."""
        return bench.measure(task, form, schedule, space)

    async def history(task: str, space: str | None = None) -> dict[str, Any]:
        """Every recorded measurement of the task on this machine, oldest first, and the best."""
        return bench.history(task, space)

    async def best(task: str) -> dict[str, Any]:
        """The fastest correct kernel recorded for the task on this machine (null if none)."""
        found = bench.history(task)
        return {"task": task, "best": found["best"], "budget": found["budget"]}

    async def baselines(task: str) -> dict[str, Any]:
        """Measure the naive and hand schedules and time the vendor library (NumPy, torch)
        for the task, side by side; not counted against the trial budget."""
        return bench.baselines(task)

    return [list_tasks, describe_task, measure, history, best, baselines]


def serve(bench: Workbench) -> None:
    """Serve on stdin/stdout until the client closes them."""
    try:
        make_server(bench).run("stdio")
    finally:
        bench.close()
