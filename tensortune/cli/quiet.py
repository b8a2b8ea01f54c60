"""Quiet by default: TVM's C++ log lines ("[12:00:00] /path/file.cc:42: Warning: ..."), which
TVM writes to standard error from this process and from every worker process it starts, are
dropped unless the command runs with --verbose. They are TVM's notes on what it compiles (a
pow with a large exponent, a gather in fast mode, a builder torn down), read like a crash, and
tell the user nothing to do; a candidate that fails is recorded with its reason either way.
"""
from __future__ import annotations

import atexit
import io
import os
import re
import sys
import threading

TVM_LOG_LINE = re.compile(rb"^\[\d\d:\d\d:\d\d\] \S+:\d+: ")


def drop_tvm_log() -> None:
    """From now on, standard error's file descriptor (what C++ and child processes write to)
    goes through a thread that drops TVM's log lines and passes the rest on; Python's own
    `sys.stderr` writes to the terminal directly, so that progress bars still see one. Only
    where `sys.stderr` is the process's own (a test capturing it keeps it as it is)."""
    if sys.stderr is not sys.__stderr__ or sys.stderr is None:
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    sys.stderr = io.TextIOWrapper(io.FileIO(terminal, "w", closefd=False), encoding=sys.__stderr__.encoding,
                                  errors="backslashreplace", line_buffering=True)
    passing = threading.Thread(target=_pass_on, args=(read, terminal), daemon=True)
    passing.start()
    atexit.register(_drain, terminal, passing)


def quiet_metaschedule() -> None:
    """MetaSchedule's task tables (its INFO log lines) left to the log files in its work
    directory: on the console they are pages of progress the tuner already shows."""
    import logging

    from ..search import metaschedule

    metaschedule.CONSOLE_LEVEL = logging.WARNING


def _pass_on(read: int, terminal: int) -> None:
    with io.FileIO(read, "r") as pipe:
        for line in io.BufferedReader(pipe):
            if not TVM_LOG_LINE.match(line):
                os.write(terminal, line)


def _drain(terminal: int, passing: threading.Thread) -> None:
    """At exit: this process's end of the pipe closed, what is in it passed on (a worker
    still holding its end is not waited for long)."""
    sys.stderr.flush()
    os.dup2(terminal, 2)
    passing.join(timeout=1.0)
