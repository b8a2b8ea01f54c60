"""Worker processes that survive what they run.

A task that crashes its worker (a segfault in TVM or in a kernel) or runs past its deadline
costs that task only: the worker is replaced and the task comes back as a failed Outcome
with the reason. Workers come from a forkserver that has imported TVM but never run a
kernel: forking the caller instead would copy a TVM thread pool whose threads do not exist
in the child (a process that has run a parallel kernel then spins forever in the next one),
and spawning would pay a fresh `import tvm` (seconds) per replacement. Workers stay alive
across rounds. As with any multiprocessing code, a script using the pool needs the
`if __name__ == "__main__":` guard.

A task's time limit counts from when its work starts, never from when it was sent: a worker
that was just (re)started may spend seconds importing before it takes the task, and a
handler may prepare (load inputs, a library) before the part that can hang. The worker says
when the clock starts: on taking the task or, in a pool made with `self_timed=True`, when
the handler calls `start_clock()` (until then, only STARTUP_LIMIT_S applies). A handler
whose task has several phases (a kernel checked on several draws, then timed) calls it at
the start of each: every phase gets the whole limit.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

STARTUP_LIMIT_S = 600.0  # a worker that has not taken its task after this long is stuck
_CLOCK = "clock"  # a worker's message: the task's time limit starts now
_connection = None  # in a worker process: the pipe to the pool


def start_clock() -> None:
    """Called by a handler, in a worker, when the part of its task that the time limit
    covers begins (after its own set-up), or a next phase of it: the limit starts again.
    A no-op outside a worker."""
    if _connection is not None:
        _connection.send(_CLOCK)

@dataclass(frozen=True)
class Outcome:
    ok: bool
    value: Any = None  # the handler's result when ok
    kind: str = ""  # "error" | "crash" | "timeout" when not ok
    reason: str = ""


def _serve(conn, handler: Callable[[Any], Any], env: dict[str, str], self_timed: bool) -> None:
    global _connection
    os.environ.update(env)  # before TVM's runtime reads it (e.g. TVM_NUM_THREADS)
    _connection = conn
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if not self_timed:
            conn.send(_CLOCK)
        try:
            conn.send(Outcome(True, handler(task)))
        except Exception as err:  # a failure is data: send the reason back
            conn.send(Outcome(False, kind="error", reason=f"{type(err).__name__}: {err}".splitlines()[0][:500]))


class _Worker:
    def __init__(self, ctx, handler, env, self_timed):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, handler, env, self_timed), daemon=True)
        self.process.start()
        child.close()

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    def __init__(self, size: int, handler: Callable[[Any], Any], env: dict[str, str] | None = None,
                 self_timed: bool = False):
        """`self_timed`: the handler calls start_clock() when its set-up is done."""
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["tvm"])
        self.handler, self.env, self.self_timed = handler, env or {}, self_timed
        self.workers = [self._start() for _ in range(size)]

    def _start(self) -> _Worker:
        return _Worker(self.ctx, self.handler, self.env, self.self_timed)

    def map(self, tasks: list, timeout_s: float) -> list[Outcome]:
        """Run every task on some worker; results in task order."""
        results: list[Outcome | None] = [None] * len(tasks)
        pending = list(enumerate(tasks))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # worker slot -> (task index, deadline)
        while pending or busy:
            for slot in range(len(self.workers)):
                if slot not in busy and pending:
                    index, task = pending.pop()
                    self.workers[slot].conn.send(task)
                    busy[slot] = (index, time.monotonic() + STARTUP_LIMIT_S)
            self._collect(busy, results, timeout_s)
        return results  # type: ignore[return-value]

    def _collect(self, busy: dict, results: list, timeout_s: float) -> None:
        wait_s = max(0.0, min(deadline for _, deadline in busy.values()) - time.monotonic())
        ready = wait([self.workers[s].conn for s in busy], timeout=wait_s)
        for slot in list(busy):
            index, deadline = busy[slot]
            worker = self.workers[slot]
            if worker.conn in ready:
                try:
                    message = worker.conn.recv()
                except (EOFError, ConnectionError):
                    worker.process.join()
                    message = Outcome(False, kind="crash", reason=f"worker died (exit code {worker.process.exitcode})")
                    self._replace(slot)
                if message == _CLOCK:
                    busy[slot] = (index, time.monotonic() + timeout_s)
                    continue
                results[index] = message
                del busy[slot]
            elif time.monotonic() >= deadline:
                results[index] = Outcome(False, kind="timeout", reason=f"no result after {timeout_s:g} s")
                self._replace(slot)
                del busy[slot]

    def _replace(self, slot: int) -> None:
        self.workers[slot].stop()
        self.workers[slot] = self._start()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
