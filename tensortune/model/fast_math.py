"""Vectorisable approximations of a model's transcendental functions, before lowering.

TVM lowers erf, tanh and exp to the C library's scalar calls, which LLVM cannot vectorise, so
a GELU or softmax kernel stays slow whatever its schedule, where torch's are vectorised. TVM's own `FastMathTransform`
replaces softmax, exp, erf and tanh with TOPI's polynomial versions (float32 error about 1e-7
relative, far inside the model's end-to-end tolerance); GELU, a single Relax operator, is
first written out in erf or tanh so that it gets them too. A power by a constant 2 or 3 (the
tanh GELU that GPT-2 and ALBERT write out, `pow(x, 3.0)`) becomes products: TVM lowers it to
the C library's scalar `powf`, and GPT-2's GELU kernel took a third of its block's time so.
"""
from __future__ import annotations

import math


def fast_math(mod):
    """`mod` (Relax, before legalisation) with GELU and small powers written out and TVM's
    fast math applied."""
    from tvm import relax

    return relax.transform.FastMathTransform()(_written_out(mod))


def _written_out(mod):
    from tvm import relax

    @relax.expr_functor.mutator
    class WriteOut(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.nn.gelu":
                return self.builder_.normalize(_erf_gelu(call.args[0]))
            if name == "relax.nn.gelu_tanh":
                return self.builder_.normalize(_tanh_gelu(call.args[0]))
            exponent = _small_exponent(call) if name == "relax.power" else None
            if exponent:
                x = call.args[0]
                return self.builder_.normalize(relax.op.multiply(x, x) if exponent == 2 else
                                               relax.op.multiply(x, relax.op.multiply(x, x)))
            return call

    mutator = WriteOut(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def _small_exponent(call) -> int | None:
    """2 or 3 where `call` (a power) raises a tensor to that constant scalar, else None."""
    import numpy as np
    import tvm

    base, exponent = call.args
    if not isinstance(exponent, tvm.ir.expr.Constant):
        return None
    values = np.asarray(exponent.value.numpy() if hasattr(exponent.value, "numpy") else exponent.value)
    if values.size != 1:
        return None
    value = float(values.reshape(()))
    same = getattr(call.ty, "shape", None) is not None and getattr(base.ty, "shape", None) is not None \
        and [str(d) for d in call.ty.shape] == [str(d) for d in base.ty.shape]
    return int(value) if value in (2.0, 3.0) and same and base.ty.dtype == call.ty.dtype else None


def _const(value: float, like):
    from tvm import relax

    return relax.const(value, like.ty.dtype)


def _erf_gelu(x):
    """x/2 (1 + erf(x / sqrt 2)), as torch's exact GELU."""
    from tvm.relax import op

    inner = op.erf(op.multiply(x, _const(1 / math.sqrt(2), x)))
    return op.multiply(op.multiply(x, _const(0.5, x)), op.add(inner, _const(1.0, x)))


def _tanh_gelu(x):
    """x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch's GELU(approximate='tanh')."""
    from tvm.relax import op

    cubic = op.add(x, op.multiply(_const(0.044715, x), op.multiply(x, op.multiply(x, x))))
    inner = op.tanh(op.multiply(_const(math.sqrt(2 / math.pi), x), cubic))
    return op.multiply(op.multiply(x, _const(0.5, x)), op.add(inner, _const(1.0, x)))
