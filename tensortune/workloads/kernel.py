"""Kernels given as TensorIR functions (the fused kernels of a model) rather than TE families.

A kernel's key is its name, cleaned of the numbering TVM's legalisation adds
(`fused_conv2d3_add5_relu2` -> `fused_conv2d_add_relu`), and a digest of its structure and the
TVM version: the same kernel in two models shares records, a changed kernel (or a TVM that
lowers it differently) never does. Worker processes rebuild it from its JSON text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .registry import Family, Workload

KERNEL = "kernel"  # the first element of a kernel workload's `ident`


def _no_compute(**_):
    raise TypeError("a kernel workload is defined by its TensorIR function, not by TE")


@dataclass(frozen=True)
class KernelWorkload(Workload):
    """A PrimFunc as a workload: checked against its own unscheduled output (no reference)."""

    source: str = ""  # tvm.ir.save_json of the PrimFunc

    @classmethod
    def from_func(cls, name: str, func) -> "KernelWorkload":
        import tvm

        from tvm.s_tir.analysis import estimate_tir_flops

        func = func.with_attr("global_symbol", "main")  # built alone, it is the library's entry point
        flops = int(estimate_tir_flops(tvm.IRModule({"main": func})))
        family = Family(clean_name(name), (), _no_compute, None, lambda: flops, doc=f"kernel {name}")
        workload = cls(family, (), source=tvm.ir.save_json(func))
        workload._cache["func"] = func
        return workload

    @classmethod
    def from_source(cls, name: str, source: str) -> "KernelWorkload":
        import tvm

        return cls.from_func(name, tvm.ir.load_json(source))

    @property
    def key(self) -> str:
        return f"{self.name}#{self.digest}"

    @property
    def ident(self) -> tuple:
        return (KERNEL, self.name, self.source)

    def prim_func(self):
        if "func" not in self._cache:
            import tvm

            self._cache["func"] = tvm.ir.load_json(self.source)
        return self._cache["func"]

    def io_specs(self):
        specs = [(tuple(int(d) for d in p.shape), str(p.dtype)) for p in self.prim_func().params]
        return specs[:-1], specs[-1]


def clean_name(name: str) -> str:
    """TVM numbers each legalised operator; the numbers say nothing about the kernel."""
    return re.sub(r"(?<=[a-z])\d+(?=_|$)", "", name)
