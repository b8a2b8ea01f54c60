"""Factories that must fail with one clear line (tests/test_model.py)."""
import torch


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on a value: torch.export cannot capture it
            return x * 2
        return x - 1


class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.inv(x)  # no converter in TVM's torch frontend


def raises():
    raise RuntimeError("weights not found")


def data_dependent():
    return DataDependent(), (torch.randn(4),)


def unsupported():
    return Unsupported(), (torch.randn(3, 3),)


def not_a_model():
    return 42
