"""Compile and check a schedule in-process: the shortest real path from point to verdict."""
import numpy as np
import tvm

from tensortune.measure.tasks import reduction_length, tolerance


def run_schedule(workload, schedule, target_spec, seed=0):
    rng = np.random.default_rng(seed)
    ins, (out_shape, out_dtype) = workload.io_specs()
    inputs = [rng.uniform(-1, 1, s).astype(d) for s, d in ins]
    lib = tvm.compile(schedule.mod, target=tvm.target.Target(target_spec))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in inputs] + [tvm.runtime.tensor(np.full(out_shape, np.nan, out_dtype), dev)]
    lib(*args)
    return inputs, args[-1].numpy()


def assert_correct(workload, schedule, target_spec, seed=0):
    inputs, got = run_schedule(workload, schedule, target_spec, seed)
    expected = workload.reference(*inputs)
    scale = max(float(np.abs(expected).max()), 1.0)
    limit = tolerance("float32", reduction_length(workload.prim_func()))
    assert np.abs(got - expected).max() / scale <= limit
