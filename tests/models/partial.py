"""A model TVM's torch frontend takes only in part (tests/test_backend.py)."""
import torch
from torch import nn


class WithErfinv(nn.Module):
    """linear -> erfinv (no TVM converter) -> linear."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.erfinv(torch.tanh(self.a(x)) * 0.5)).relu()


def with_erfinv():
    torch.manual_seed(0)
    return WithErfinv().eval(), (torch.randn(4, 16),)
