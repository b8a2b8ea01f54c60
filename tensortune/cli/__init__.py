"""The `tensortune` command: tune, tune-model, mcp, node, strategies, list, show, report, export,
batch (export | run | import). One module per group of commands: each parses its options, calls
the library and prints; `main` turns every error into one line.

Bad input never ends in a traceback: it is a one-line `error:` message and exit code 2.
"""
# each registers its commands on `app`, in this order in the help
from . import tune, tune_model, serve, records, batch  # noqa: F401,I001
from .common import app
from .main import main

__all__ = ["app", "main"]
