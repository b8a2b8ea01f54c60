"""The console entry point: every command's errors as one line."""
from __future__ import annotations

import sys
import warnings

import typer
from typer.exceptions import TyperException

from ..errors import UserError
from .common import app, err
from .quiet import drop_tvm_log, quiet_metaschedule


def main() -> None:
    """The console entry point: a user's mistake exits 2, a fault of ours 1, each with one
    `error:` line; `--debug` (anywhere on the line) shows the traceback instead, `--verbose`
    TVM's own log lines."""
    debug, verbose = ("--debug" in sys.argv), ("--verbose" in sys.argv)
    sys.argv = [arg for arg in sys.argv if arg not in ("--debug", "--verbose")]
    if not verbose:  # TVM's log lines, ours and our workers', shown only when asked for (cli/quiet.py)
        drop_tvm_log()
        quiet_metaschedule()
    # torch.fx's deep copies trip typing_extensions' deprecation of a torch pytree idiom: torch's
    # business, not the user's, and it would read as a failure of ours on standard error
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
    try:
        code = app(standalone_mode=False)  # click's usage errors come here, to be one line too
    except TyperException as error:  # click's usage errors (typer carries its own click)
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare command: typer has printed its help
            sys.exit(0)
        command = getattr(getattr(error, "ctx", None), "command_path", "tensortune")
        err.print(f"error: {error.format_message()} (see '{command} --help')", highlight=False, markup=False)
        sys.exit(2)
    except typer.Abort:
        err.print("interrupted: every finished batch is stored; run the same command again to resume")
        sys.exit(130)
    except UserError as error:
        if debug:
            raise
        where = f" ({error.option})" if error.option else ""
        err.print(f"error: {error}{where}", highlight=False, markup=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted: every finished batch is stored; run the same command again to resume")
        sys.exit(130)
    except Exception as error:  # a bug of ours, not the user's: say so, and how to see more
        if debug:
            raise
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        err.print(f"error: internal error, {type(error).__name__}: {message} (run again with --debug for the "
                  "traceback, and please report it)", highlight=False, markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
