"""The one exception type that reaches users as a one-line message (exit code 2), and the
warning that part of a model runs in PyTorch instead of TVM."""


class UserError(Exception):
    """Bad input or environment: the message says what to do, in the library's terms; where a
    command-line option sets what was wrong, `option` names it and the CLI adds it to the line
    (an agent over MCP sees the message alone)."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


class NotConvertible(UserError):
    """TVM cannot take the whole model: its torch frontend does not convert an operator, or a
    kernel does not compile even at its default schedule. The partitioner
    (model/partition.py) can still take the rest, leaving such operators to PyTorch."""


class TensortuneWarning(UserWarning):
    """Part of a model runs in PyTorch instead of TVM (the torch.compile backend), and why."""
