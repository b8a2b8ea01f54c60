"""What a worker process receives instead of a workload: its `ident`, a tuple of plain values
(a family and shape, or a kernel's TensorIR as JSON), and the workload rebuilt from it."""
from __future__ import annotations

from .kernel import KERNEL, KernelWorkload
from .registry import FAMILIES, Workload, load_user_family


def resolve(ident: tuple) -> Workload:
    """The workload a worker process receives as `Workload.ident`."""
    if ident[0] == KERNEL:
        return KernelWorkload.from_source(*ident[1:])
    family, shape, source = ident
    if family not in FAMILIES and source:
        load_user_family(f"{source}:{family.rsplit('.', 1)[-1]}")
    return Workload(FAMILIES[family], tuple(shape))
