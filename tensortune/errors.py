"""The one exception type that reaches users as a one-line message (exit code 2)."""


class UserError(Exception):
    """Bad input or environment: the message says what to do; the CLI prints it without a traceback."""
