"""Whole models: import, tune with one budget, build, check against torch, load back into torch."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from browser import colours, figures, open_page
from tensortune import load
from tensortune.db import Database, Task
from tensortune.errors import UserError
from tensortune.measure import cores
from tensortune.measure.config import MeasureConfig
from tensortune.model import build_model, export_model, import_model, tune_model
from tensortune.model import zoo
from tensortune.model.build import build_checked, compare, fresh_case, tolerance
from tensortune.model.end_to_end import measure_end_to_end
from tensortune.result import Result, Status
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig

FAST = MeasureConfig(threads=2, repeat=3, min_repeat_ms=1, final_repeat=3, final_min_repeat_ms=1)
BAD = Path(__file__).parent / "models" / "bad.py"


def _imported(name):
    module, inputs = zoo.ZOO[name]()
    return import_model(name, module, inputs, make_target("cpu", 2))


def test_a_tuned_convolution_reads_its_weight_packed_once_at_build():
    """A sketch point rewrites the convolution's weight into the order its loops read it: a
    block inside the kernel (measured alone, it is checked as any kernel is); the build runs
    that block once on the constant weight, and the model still matches torch."""
    import random

    from tensortune.model.build import with_schedules
    from tensortune.model.layout import prepack
    from tensortune.space import make_space

    model, target = _imported("conv_block"), make_target("cpu", 2)
    [conv] = [k for k in model.kernels if "conv2d" in k.name]
    inputs, _ = conv.workload.io_specs()
    assert [shape for shape, _ in inputs[:2]] == [(1, 8, 8, 3), (3, 3, 3, 8)]  # NHWC activations, HWIO weight: channels innermost
    assert list(conv.workload.prim_func().attrs["layout_free_buffers"])[0] == 1  # the weight, and the folded terms
    space = make_space("sketch", conv.workload, target)
    func = space.apply(space.sample(random.Random(0))).mod["main"]
    assert "layout_rewrite_preproc" in func.script()
    assert "layout_rewrite_preproc" not in prepack(with_schedules(model, target, {conv.name: func}), {conv.name}).script()
    built = build_checked(model, target, {conv.name: func}, {conv.name: 1e-3}, seed=0)
    assert built.error <= tolerance("float32") and not built.fell_back


@pytest.mark.parametrize("name,kernels", [("conv_block", 4), ("tiny_transformer", 17)])
def test_a_model_tunes_builds_matches_torch_and_loads_back(name, kernels, tmp_path):
    model = _imported(name)
    assert len(model.kernels) == kernels and all(k.calls >= 1 for k in model.kernels)
    target, db = make_target("cpu", 2), Database(str(tmp_path / "t.db"))
    summary = tune_model(model, target, db, TuneConfig(trials=8, batch=4, space="sketch"), FAST)
    assert summary.trials == 8 and sum(s.tuner.trials for s in summary.tasks if s.tuner) == 8
    assert all(s.default.ok for s in summary.tasks)  # every default measured and verified
    built = build_model(model, target, db)
    assert built.error <= tolerance("float32") and not built.fell_back
    assert set(built.tuned) <= {k.name for k in model.kernels if k.tunable}
    paths = export_model(built, target, tmp_path / "out", db)
    tuned = load(tmp_path / "out")
    x = torch.randn(model.example_inputs[0].shape)
    with torch.no_grad():
        expected = model.module(x)
    got = tuned(x)
    assert isinstance(got, torch.Tensor) and got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()
    misaligned = torch.randn(x.numel() + 1)[1:].reshape(x.shape)  # 4 bytes off: copied, not crashed
    assert torch.allclose(tuned(misaligned), tuned(misaligned.clone()))
    assert json.loads(paths[1].read_text())["key"] == model.key
    paths[1].write_text(paths[1].read_text()[:40])  # cut short, as a copy interrupted
    with pytest.raises(UserError, match="model.json' cannot be read .*JSONDecodeError"):
        load(tmp_path / "out")


def test_the_conv_kernel_gets_tuned_first_and_wins():
    """The scheduler spends rounds where calls x latency is largest: the convolution, not the reshape."""
    model = _imported("conv_block")
    db = Database(":memory:")
    summary = tune_model(model, make_target("cpu", 2), db, TuneConfig(trials=4, batch=4, space="sketch"), FAST)
    tuned = [s.kernel.name for s in summary.tasks if s.tuner and s.tuner.trials]
    assert tuned == [max(summary.tasks, key=lambda s: s.kernel.calls * s.default.latency).kernel.name]


class Stop(Exception):
    pass


def test_an_interrupted_model_tune_resumes_and_a_finished_one_measures_nothing(tmp_path):
    model = _imported("conv_block")
    target, path = make_target("cpu", 2), str(tmp_path / "t.db")
    config = TuneConfig(trials=12, batch=4, space="cpu-template", seed=3)
    rounds = []

    def stop_after_two(states, done, wanted):
        rounds.append(done)
        if len(rounds) > 2:
            raise Stop

    with pytest.raises(Stop):
        tune_model(model, target, Database(path), config, FAST, stop_after_two)
    again = tune_model(model, target, Database(path), config, FAST)
    assert again.trials == 12 and again.new_trials == 4  # two rounds of 4 had landed
    rows = Database(path).conn.execute("SELECT workload, point FROM records WHERE label='search'").fetchall()
    assert len(rows) == 12 and len(set(rows)) == 12
    count = "SELECT count(*) FROM records"
    before = Database(path).conn.execute(count).fetchone()[0]
    finished = tune_model(model, target, Database(path), config, FAST)
    assert finished.new_trials == 0 and Database(path).conn.execute(count).fetchone()[0] == before


def _writes_zeros(workload):
    """A test double for a wrong tuned kernel: the kernel's signature, an output of zeros."""
    from tvm import te

    ins, (shape, dtype) = workload.io_specs()
    placeholders = [te.placeholder(s, d, name=f"in{i}") for i, (s, d) in enumerate(ins)]
    out = te.compute(shape, lambda *_: te.const(0, dtype), name="out")
    return te.create_prim_func([*placeholders, out])


def test_a_wrong_kernel_in_the_model_is_named_and_falls_back(tmp_path):
    model = _imported("conv_block")
    conv = next(k for k in model.kernels if "conv2d" in k.name)
    built = build_checked(model, make_target("cpu", 2), {conv.name: _writes_zeros(conv.workload)},
                          {conv.name: 1e-6}, seed=1)
    assert conv.name in built.fell_back and not built.tuned and built.error <= tolerance("float32")


def test_an_exported_kernel_runs_as_a_custom_op_inside_torch_compile(tmp_path):
    from tensortune.deploy.exporter import export_best

    model = _imported("conv_block")
    target, db = make_target("cpu", 2), Database(str(tmp_path / "t.db"))
    tune_model(model, target, db, TuneConfig(trials=8, batch=8, space="cpu-template"), FAST)
    matmul = next(k for k in model.kernels if "matmul" in k.name)
    export_best(matmul.workload, target, db, tmp_path / "k")
    kernel = load(tmp_path / "k")
    op = kernel.as_custom_op("fc_test")
    args = [torch.randn(s["shape"]) for s in kernel.meta["inputs"]]

    @torch.compile(backend="eager")  # traces through the op's fake implementation
    def head(a, w, b):
        return torch.relu(op(a, w, b)) + 1

    expected = torch.relu(args[0] @ args[1] + args[2]) + 1
    assert torch.allclose(head(*args), expected, atol=1e-5)
    with pytest.raises(Exception, match="expected shape"):
        kernel(torch.randn(2, 2), *args[1:])


def test_kernels_are_keyed_by_structure_not_by_name():
    from tensortune.workloads.kernel import KernelWorkload

    model = _imported("conv_block")
    func = model.kernels[0].workload.prim_func()
    same = KernelWorkload.from_func("fused_conv2d7_add2", func)
    assert same.key.split("#")[1] == model.kernels[0].workload.key.split("#")[1]
    other = model.kernels[2].workload
    assert other.key != model.kernels[0].workload.key


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tensortune", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.mark.parametrize("factory,message", [
    ("raises", "raised RuntimeError: weights not found"),
    ("data_dependent", "torch.export cannot capture"),
    ("unsupported", "TVM's torch frontend cannot convert"),
    ("not_a_model", "must return (nn.Module, example inputs)"),
])
def test_a_model_that_cannot_come_in_is_one_line_and_exit_2(factory, message, tmp_path, in_process_cli):
    code, _, stderr = in_process_cli("tune-model", f"{BAD}:{factory}", "--trials", "4", "--db", "t.db", cwd=tmp_path)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], stderr
    assert not (tmp_path / "t.db").exists()


@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_tune_model_from_the_command_line_then_show_and_report(tmp_path, in_process_cli):
    done = cli("tune-model", "conv_block", "--trials", "4", "--batch", "4", "--space", "cpu-template", "--db", "t.db",
               "--out", "tuned", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # 4 kernels: the all-TVM build's (the input made NHWC, the convolution, the output back to NCHW
    # and flattened, the linear layer); the build calling oneDNN shares its two transposes
    assert summary["trials"] == 4 and summary["kernels"] == 4 and summary["checked_against_torch"] < 1e-3
    assert (tmp_path / "tuned" / "model.so").is_file()
    timing = summary["end_to_end"]
    assert timing["threads"] == 2 and timing["tuned_vs_eager"] == timing["eager_s"] / timing["tuned_s"]
    code, shown, stderr = in_process_cli("show", "conv_block", "--db", "t.db", cwd=tmp_path)
    assert code == 0 and "4 kernels" in shown and "4 trials" in shown, stderr
    assert f"torch eager {timing['eager_s'] * 1e3:.3f} ms" in shown and "last timed 20" in shown
    code, _, stderr = in_process_cli("report", "conv_block", "--db", "t.db", "--html", "conv_block.html", cwd=tmp_path)
    assert code == 0, stderr
    dom, console, shot = open_page(tmp_path / "conv_block.html", "report-model.png")
    assert console == [] and colours(shot) > 50
    assert set(figures(dom)) == {"kernel-times", "roofline", "statuses"} and all(figures(dom).values())
    assert all(f"<tr><td>{task['function']}<" in dom for task in summary["tasks"])  # every kernel
    assert f"torch eager {timing['eager_s'] * 1e3:.3f} ms" in dom and "tensortune tune-model conv_block" in dom


def test_the_library_call_does_what_tune_model_does(tmp_path):
    """tensortune.tune_model: tuned with one budget, built, checked, exported and loaded back;
    the database file appears only once the model is in, and a model TVM takes only in part is
    refused an export before any tuning."""
    import tensortune

    module, inputs = zoo.conv_block()
    db = tmp_path / "t.db"
    tuned = tensortune.tune_model(module, inputs, make_target("cpu", 2), db, TuneConfig(trials=4, batch=4),
                                  FAST, name="conv_block", out=tmp_path / "out", compare=False)
    assert not tuned.interrupted and tuned.summary.trials == 4 and tuned.timing is None and tuned.in_torch is None
    assert tuned.built.error <= tolerance("float32") and (tmp_path / "out" / "model.so") in tuned.paths
    assert db.is_file()
    with torch.no_grad():
        assert torch.allclose(load(tmp_path / "out")(*inputs), module(*inputs), atol=1e-4)
    partial = Path(__file__).parent / "models" / "partial.py"
    name, (split, split_inputs) = tensortune.load_factory(f"{partial}:with_erfinv")
    with pytest.raises(UserError, match="cannot be exported as one TVM library"):
        tensortune.tune_model(split, split_inputs, make_target("cpu", 2), tmp_path / "split.db", out=tmp_path / "x")
    assert not (tmp_path / "split.db").exists()


def test_transcendental_functions_become_vectorisable_approximations():
    """erf (GELU), tanh (GELU's tanh form) and exp (softmax) become TOPI's polynomial versions:
    no kernel calls the C library's scalar functions, and the model still matches torch."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.GELU(approximate="tanh"),
                                 torch.nn.Softmax(-1)).eval()
    target = make_target("cpu", 2)
    model = import_model("fast_math", module, (torch.randn(4, 16),), target)
    scripts = "".join(k.workload.prim_func().script() for k in model.kernels)
    assert not any(f"T.{name}(" in scripts for name in ("erf", "tanh", "exp"))
    assert build_model(model, target, Database(":memory:")).error <= 1e-5


class PowersWrittenOut(torch.nn.Module):
    """GPT-2's GELU as it writes it (`torch.pow(x, 3.0)`), a square, and a power by 2.5."""

    def forward(self, x):
        gelu = 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))
        return gelu + x ** 2 + torch.pow(x.abs(), 2.5)


def test_powers_by_two_and_three_become_products():
    """The powers by 3 and 2 become products (TVM lowers a power to the C library's scalar
    powf); the power by 2.5 stays one; the model still matches torch."""
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("powers", PowersWrittenOut().eval(), (torch.randn(4, 16),), target)
    scripts = "".join(k.workload.prim_func().script() for k in model.kernels)
    assert scripts.count("T.pow(") == 1
    assert build_model(model, target, Database(":memory:")).error <= 1e-5


class SlowEager(torch.nn.Module):
    """A test double: the model with 20 ms of Python in its forward, which torch.export does
    not capture, so only torch eager pays it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        time.sleep(0.02)
        return self.inner(x)


def test_the_end_to_end_figures_come_from_timing_each_build():
    module, inputs = zoo.conv_block()
    target = make_target("cpu", 2)
    model = import_model("slow_eager", SlowEager(module), inputs, target)
    built = build_model(model, target, Database(":memory:"))
    timing = measure_end_to_end(built, target)
    assert timing.eager_s >= 0.02 > 10 * max(timing.default_s, timing.tuned_s), timing
    assert timing.vs_eager > 10 and timing.threads == 2


def test_a_profile_names_each_kernel_of_the_build_with_its_share_of_the_time():
    from tensortune.model.profile import seconds_by_function, top_functions

    module, inputs = zoo.conv_block()
    target = make_target("cpu", 2)
    model = import_model("conv_block", module, inputs, target)
    built = build_checked(model, target, {}, {}, seed=1)
    case, _ = fresh_case(model, 0)
    seconds = seconds_by_function(built.executable, case, calls=3)
    assert {k.name for k in model.kernels} <= set(seconds) and all(s > 0 for s in seconds.values())
    top = top_functions(seconds, count=2)
    assert len(top) == 2 and top[0][1] >= top[1][1] and 0 < top[1][2] <= top[0][2] <= 1


@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_a_model_batch_built_here_runs_elsewhere_and_tune_model_resumes_from_it(tmp_path, in_process_cli):
    code, _, stderr = in_process_cli("batch", "export", "--model", "conv_block", "--space", "cpu-template",
                                     "--count", "2", "--out", "b", cwd=tmp_path)
    assert code == 0, stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    model = _imported("conv_block")
    defaults = [c["workload"] for c in manifest["candidates"] if c["label"] == "default"]
    assert sorted(defaults) == sorted(k.workload.key for k in model.kernels)  # every kernel's baseline
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", TVM_NUM_THREADS="2")  # the runner needs TVM's runtime only
    ran = subprocess.run([sys.executable, str(tmp_path / "b" / "runner.py"), str(tmp_path / "b")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    code, _, stderr = in_process_cli("batch", "import", "b", "--db", "t.db", cwd=tmp_path)
    assert code == 0, stderr
    searched = sum(c["label"] == "search" for c in manifest["candidates"] + manifest["failed"])
    code, shown, stderr = in_process_cli("show", "conv_block", "--db", "t.db", cwd=tmp_path)
    assert code == 0 and "4 kernels" in shown and shown.count("2 trials, default") == 4, shown + stderr

    db = Database(str(tmp_path / "t.db"))
    count = "SELECT count(*) FROM records"
    before = db.conn.execute(count).fetchone()[0]
    config = TuneConfig(trials=searched, batch=4, space="cpu-template")
    summary = tune_model(model, make_target("cpu", 2), db, config, FAST)
    # the batch's results are the model's records: no default measured again, no trial repeated
    assert summary.new_trials == 0 and db.conn.execute(count).fetchone()[0] == before
    built = build_model(model, make_target("cpu", 2), db)
    assert built.error <= tolerance("float32")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_a_model_builds_for_a_gpu_here(tmp_path):
    from tensortune.tuning.batch import export_model_batch
    from tensortune.model.build import compile_model

    target = make_target("cuda", 1)
    module, inputs = zoo.conv_block()
    model = import_model("conv_block", module, inputs, target)
    manifest = export_model_batch(model, target, tmp_path / "b", count=0, config=FAST)  # the defaults: every kernel
    defaults = {c["workload"] for c in manifest["candidates"] if c["label"] == "default"}
    assert defaults == {k.workload.key for k in model.kernels}  # DLight schedules every kernel for the GPU
    assert all((tmp_path / "b" / c["artifact"]).with_suffix(".fatbin").is_file() for c in manifest["candidates"])
    # the whole model, every kernel at its default, builds for the GPU (running it needs one)
    assert compile_model(model, target, {}) is not None


def test_tune_model_for_a_gpu_without_one_says_how_to_send_a_batch(tmp_path, in_process_cli):
    if make_target("cuda", 1).gpu:
        pytest.skip("this machine has a GPU")
    code, _, stderr = in_process_cli("tune-model", "conv_block", "--trials", "4", "--target", "cuda", "--db", "t.db",
                                     cwd=tmp_path)
    assert code == 2 and "batch export --model conv_block --target cuda" in stderr, stderr
    assert not (tmp_path / "t.db").exists()


class BigConv(torch.nn.Module):
    """A convolution large enough that TVM's untuned kernel loses to torch's by far."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def given_faster(build: str):
    """A test double for the end-to-end timings of a model's builds: `build` ("tvm" or "torch
    ops") takes 1 ms, eager 9, every other build 5 (which build wins is given, not raced)."""
    return lambda label, measure: {"eager": 9e-3, build: 1e-3}.get(label, 5e-3)


def test_the_build_calling_torch_is_kept_where_it_is_faster_end_to_end():
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    big = import_model("big_conv", BigConv().eval(), (torch.randn(1, 32, 28, 28),), target, torch_ops=True)
    assert big.with_torch_ops.torch_ops == 1
    assert not any("conv2d" in k.name for k in big.with_torch_ops.kernels)  # the convolution is torch's
    built = build_model(big, target, Database(":memory:"), timer=given_faster("torch ops"))
    assert built.torch_ops == 1 and built.kept == "torch ops" and built.error <= tolerance("float32")
    small = import_model("conv_block", *zoo.conv_block(), target, torch_ops=True)
    assert small.with_torch_ops.torch_ops == 2  # its convolution and its linear layer
    kept = build_model(small, target, Database(":memory:"), timer=given_faster("tvm"))
    assert kept.torch_ops == 0 and kept.kept == "tvm" and kept.error <= tolerance("float32")


def test_a_model_calling_torch_exports_and_loads_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("big_conv", BigConv().eval(), (torch.randn(1, 32, 28, 28),), target, torch_ops=True)
    db = Database(":memory:")
    built = build_model(model, target, db, timer=given_faster("torch ops"))
    assert built.torch_ops == 1
    export_model(built, target, tmp_path / "out", db)
    meta = json.loads((tmp_path / "out" / "model.json").read_text())
    assert meta["torch_ops"] == 1 and "torch" in meta["runtime_needs"] and meta["calls"]["onednn"] == 1
    x = torch.randn(1, 32, 28, 28)
    with torch.no_grad():
        torch.save({"x": x, "y": model.module(x)}, tmp_path / "case.pt")
    script = ("import os, sys, torch, tensortune\n"
              "case = torch.load(sys.argv[2])\n"
              "got = tensortune.load(sys.argv[1])(case['x'])\n"
              "print(float((got - case['y']).abs().max() / case['y'].abs().max()), os.environ.get(sys.argv[3]))\n")
    env = {k: v for k, v in os.environ.items() if k != cores.SPIN}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out"), str(tmp_path / "case.pt"), cores.SPIN],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    error, spin = done.stdout.split()
    assert float(error) <= tolerance("float32")
    assert spin == "0"  # TVM's threads leave the cores to torch's between kernels, as when it was timed


def test_kernels_of_the_build_far_behind_weigh_less_in_the_schedule(monkeypatch):
    """With two builds only the faster is kept: a kernel of the all-TVM build counts in
    proportion to how close that build is to the one calling torch. Timings injected (test
    doubles): the convolution 10 ms in TVM, the build calling torch 1 ms at its defaults."""
    from tensortune.model import scheduler
    from tensortune.model.scheduler import TaskState

    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("big_conv", BigConv().eval(), (torch.randn(1, 32, 28, 28),), target, torch_ops=True)
    torch_keys = {k.workload.key for k in model.with_torch_ops.kernels}
    states = [TaskState(k, Result(Status.OK, runs=(1e-2 if "conv2d" in k.name else 1e-5,)))
              for k in model.all_kernels()]
    monkeypatch.setattr(scheduler, "_torch_seconds", lambda build, target, by_key: 1e-3)
    scheduler._weigher(model, target, states)()
    weights = {s.kernel.name: (s.weight, s.kernel.workload.key in torch_keys) for s in states}
    conv = [w for name, (w, _) in weights.items() if "conv2d" in name]
    assert conv and 0.09 < conv[0] < 0.11, weights  # about 1 ms against 10 ms
    assert all(w == 1.0 for w, in_torch_build in weights.values() if in_torch_build), weights


class ConvThenLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def conv_linear_built(mixed_timings: list[float], db):
    """ConvThenLinear imported and built with injected end-to-end timings (a test double: which
    build wins is given): the build calling torch 5 ms, the all-TVM one 8, eager 9, and a build
    with an operation back in TVM ("mixed") each of `mixed_timings` in turn, then 7 ms."""
    timings = {"eager": 9e-3, "tvm": 8e-3, "torch ops": 5e-3, "kept": 5e-3}
    mixed = iter(mixed_timings)

    def injected(label, measure):
        return next(mixed, 7e-3) if label == "mixed" else timings[label]

    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("conv_linear", ConvThenLinear().eval(), (torch.randn(1, 32, 28, 28),), target,
                         torch_ops=True)
    return model, target, build_model(model, target, db, timer=injected)


@pytest.mark.parametrize("mixed_timings", [
    [3e-3, 3e-3, 6e-3],  # faster at the median, slower in one round: noise, not a win
    [3e-3] * 3 + [6e-3] * 3,  # wins its step, then loses the race against the build it started from
])
def test_an_operation_back_in_tvm_stays_only_where_it_wins_every_round_and_the_last_race(mixed_timings):
    _, _, built = conv_linear_built(mixed_timings, Database(":memory:"))
    assert built.kept == "torch ops" and built.torch_ops == 2 and not built.build.kept_in_tvm, built.timed


def test_an_operation_faster_in_tvm_goes_back_to_tvm_in_the_kept_build():
    # the first operation tried back in TVM (the smallest: the linear) wins in each of its three
    # rounds against the kept build, and again in the race of the build so made against the one
    # it started from (the other operation back too is the all-TVM build, not tried again)
    db = Database(":memory:")
    model, target, built = conv_linear_built([3e-3] * 6, db)
    assert built.torch_ops == 1 and built.build.kept_in_tvm == {1}, built.timed  # the linear layer back in TVM
    assert built.kept == "mixed" and built.timed["mixed"] == 3e-3 and built.error <= tolerance("float32")
    assert not built.slower_than_eager
    # built again from the same records (as the backend does after tune-model): the choice stored
    # is built alone, whatever the timings now say, and timed only against eager
    labels = []
    again = build_model(model, target, db, timer=lambda label, measure: labels.append(label) or 4e-3)
    assert (again.kept, again.build.kept_in_tvm, labels) == ("mixed", {1}, ["eager", "mixed"]), again.timed
    assert again.error <= tolerance("float32")
    # a record of one of its kernels stored since (tuned further; here a point that failed to
    # build, which changes no schedule): every candidate is timed again
    kernel = model.kernels[0]
    db.add(Task(kernel.workload.key, target.name, target.hardware, "sketch"), "search", [{"tile": 1}],
           [Result(Status.BUILD_ERROR, reason="a test double")])
    labels.clear()
    build_model(model, target, db, timer=lambda label, measure: labels.append(label) or 4e-3)
    assert "torch ops" in labels, labels


def test_untuned_the_all_tvm_build_is_not_built_where_torch_takes_long_per_operation():
    """Nothing tuned and no mixing (the backend on a fresh database): the build calling torch
    at 0.5 ms an operation is kept without building the all-TVM one (its serial default
    schedules cannot win there, and its code generation is the costliest part of a compile).
    Timings injected (a test double)."""
    labels = []
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("conv_linear", ConvThenLinear().eval(), (torch.randn(1, 32, 28, 28),), target,
                         torch_ops=True)
    built = build_model(model, target, Database(":memory:"), timer=lambda label, measure: labels.append(label) or 1e-3,
                        mix=False)
    assert (built.kept, labels) == ("torch ops", ["eager", "torch ops"]) and built.error <= tolerance("float32")


class LinearBlock(torch.nn.Module):
    """A transformer's MLP with its residual: linear + gelu, then linear + the input."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))) + x


@pytest.mark.parametrize("module,inputs,calls", [
    (lambda: zoo._Basic(8, 16, 2), (1, 8, 12, 12), {"conv2d": 2, "conv2d_add": 1}),  # projection: 3 convolutions
    # ReLU6, depthwise; a stem first, as in a network: its NHWC output is what the block adds back
    (lambda: torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), zoo._Inverted(8, 8, 1, 2)), (1, 8, 12, 12),
     {"conv2d": 3, "conv2d_add": 1}),
    (LinearBlock, (1, 6, 16), {"linear": 1, "linear_add": 1}),
])
def test_layers_with_their_epilogue_become_one_packed_onednn_call(module, inputs, calls):
    """Batch norm and bias fold into the weight, relu / gelu / the residual add become post-ops:
    no TVM kernel is left for them, the build matches torch, and each weight is packed once."""
    from tensortune.model import onednn
    from tensortune.model.torch_ops import FUSED, register
    from tensortune.model.vm import run

    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("block", module().eval(), (torch.randn(*inputs),), target, torch_ops=True)
    source = str(model.with_torch_ops.mod["main"])
    assert {name: source.count(f'"{FUSED[name]}"') for name in calls} == calls
    kernels = " ".join(k.name for k in model.with_torch_ops.kernels)
    assert not any(op in kernels for op in ("conv2d", "matmul", "gelu", "relu", "clip", "maximum", "divide", "add"))
    register()
    built = build_checked(model.with_torch_ops, target, {}, {}, seed=1)
    assert built.error <= tolerance("float32")
    case, _ = fresh_case(model, 2)
    packed = dict(onednn._packed)  # by the check's call
    run(built.executable, case)
    assert len(packed) >= sum(calls.values())
    assert all(onednn._packed[site] is weight for site, weight in packed.items())  # reused, not packed again


class Residuals(torch.nn.Module):
    """A stem, then three convolutions with a residual each: the stem's output, read again after
    the first; then the first's output, read nowhere after; then the model's input (in NHWC:
    a TVM kernel's output, in TVM's planned memory)."""

    def __init__(self):
        super().__init__()
        self.stem, self.a, self.b, self.c = (torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(4))

    def forward(self, x):
        s = self.stem(x)
        y = torch.relu(self.a(s) + s)
        return self.c(self.b(y) + s) + x


def test_a_residual_that_nothing_reads_after_is_added_in_place_and_no_other():
    """Only the second residual is a fused call's output that no later call reads: that
    convolution adds into it in place (oneDNN's sum post-op). The build matches torch on each
    call on the same input tensors, so no in-place add wrote over a tensor read later or over
    the input."""
    from tensortune.model.build import compile_model
    from tensortune.model.torch_ops import FUSED, in_place_residuals, register
    from tensortune.model.vm import run_on

    torch.manual_seed(0)
    target, module = make_target("cpu", 2), Residuals().eval()
    model = import_model("residuals", module, (torch.randn(1, 4, 6, 6),), target, torch_ops=True).with_torch_ops
    source = str(in_place_residuals(model.mod)["main"])
    assert [source.count(f'"{FUSED[name]}"') for name in ("conv2d_add", "conv2d_sum")] == [2, 1]
    register()
    executable = compile_model(model, target, {})
    case, expected = fresh_case(model, 1)
    call = run_on(executable, case)  # the same input tensors each call: one written over fails the second
    for _ in range(3):
        assert compare([o.numpy() for o in call()], expected) <= tolerance("float32")


class PoolsThenNorms(torch.nn.Module):
    """A convolution, then two max pools (NHWC after it, as the convolution is): one torch's
    kernel computes, one with ceil mode, which it computes otherwise; then a layer norm of each
    pool's output, one of 128 elements and one of 32."""

    def __init__(self):
        super().__init__()
        self.conv, self.big, self.small = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.LayerNorm(128), torch.nn.LayerNorm(32)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(self.conv(x), 3, 2, 1)
        return self.big(x.flatten(1)), self.small(torch.nn.functional.max_pool2d(x, 2, 2, ceil_mode=True).flatten(1))


def test_layer_norms_and_channels_last_max_pools_on_enough_elements_call_torchs_kernels(monkeypatch):
    """With torch's calls taken from 100 elements on (SMALL; a test's size), the pool torch
    computes the same way and the larger layer norm become calls of torch's operators; the
    pool with ceil mode and the smaller layer norm stay TVM kernels; the build matches torch."""
    from tensortune.model import torch_ops

    monkeypatch.setattr(torch_ops, "SMALL", 100)
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("pools", PoolsThenNorms().eval(), (torch.randn(1, 4, 7, 7),), target, torch_ops=True)
    source = str(model.with_torch_ops.mod["main"])
    assert [source.count(f'"{name}"') for name in (torch_ops.MAX_POOL2D, torch_ops.LAYER_NORM)] == [1, 1]
    kernels = " ".join(k.name for k in model.with_torch_ops.kernels)
    assert "pool" in kernels and "layer_norm" in kernels, kernels  # the ceil-mode pool, the small norm
    torch_ops.register()
    assert build_checked(model.with_torch_ops, target, {}, {}, seed=1).error <= tolerance("float32")


class AudioFront(torch.nn.Module):
    """Two strided 1-D convolutions with GELU, as wav2vec2's feature encoder begins: the first
    group-normed (groups of 2 channels), the second grouped and padded on both sides."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv1d(1, 8, 10, stride=5), torch.nn.Conv1d(8, 8, 3, stride=2, padding=1, groups=2)
        self.norm = torch.nn.GroupNorm(4, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.b(torch.nn.functional.gelu(self.norm(self.a(x)))))


def test_one_axis_convolutions_and_group_norms_call_torchs_and_match(monkeypatch):
    """Each conv1d becomes a call of torch's conv1d in the build calling torch (TVM's untuned
    conv1d kernels ran wav2vec2's encoder 10x slower than eager), and the group norm, on enough
    elements (SMALL: 100 for this test), a call of torch's group_norm; the GELUs stay TVM
    kernels; the build matches torch."""
    from tensortune.model import torch_ops

    monkeypatch.setattr(torch_ops, "SMALL", 100)
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("audio", AudioFront().eval(), (torch.randn(1, 1, 400),), target, torch_ops=True)
    source = str(model.with_torch_ops.mod["main"])
    assert [source.count(f'"{name}"') for name in (torch_ops.CONV1D, torch_ops.GROUP_NORM)] == [2, 1]
    kernels = " ".join(k.name for k in model.with_torch_ops.kernels)
    assert "erf" in kernels and "group_norm" not in kernels, kernels
    torch_ops.register()
    assert build_checked(model.with_torch_ops, target, {}, {}, seed=1).error <= tolerance("float32")


@pytest.mark.parametrize("attr,residual", [("none", False), ("relu", False), ("gelu", False), ("none", True)])
def test_every_way_to_run_a_linear_layer_computes_it(attr, residual):
    """The packed linear layer's candidates (oneDNN with its post-op, eager's addmm, MKL's packed
    product where torch has MKL, each then the activation or residual in place) all give
    F.linear's answer: whichever the first call's timing keeps, the layer is right."""
    from tensortune.model import onednn

    torch.manual_seed(0)
    x, w, b, other = torch.randn(24, 40), torch.randn(56, 40), torch.randn(56), torch.randn(24, 56)
    expected = torch.nn.functional.linear(x, w, b)
    expected = {"none": expected, "relu": expected.relu(), "gelu": torch.nn.functional.gelu(expected, approximate="tanh")}[attr]
    algorithm = "tanh" if attr == "gelu" else ""  # as the call site passes it
    candidates = onednn.linear_candidates(w, b, x, attr, algorithm, [], other.clone() if residual else None)
    assert len(candidates) == (3 if torch.backends.mkl.is_available() else 2)
    for layer in candidates:
        got = layer(x, other.clone()) if residual else layer(x)
        torch.testing.assert_close(got, expected + other if residual else expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attr,scalars,residual,in_place", [
    ("none", [], False, False), ("relu", [], False, False), ("swish", [], False, False),
    ("hardtanh", [0.0, 6.0], False, False), ("none", [], True, False), ("relu", [], True, True)])
def test_every_way_to_run_a_convolution_computes_it(attr, scalars, residual, in_place):
    """The convolution's candidates (oneDNN with the packed weight and its post-ops, eager's
    conv2d then the residual and activation in place) all give F.conv2d's answer on a
    channels-last input, grouped and strided: whichever the first call's timing keeps, the
    layer is right."""
    from tensortune.model import onednn

    torch.manual_seed(0)
    x = torch.randn(1, 8, 10, 10).contiguous(memory_format=torch.channels_last)
    w, b, other = torch.randn(12, 4, 3, 3), torch.randn(12), torch.randn(1, 12, 5, 5)
    expected = torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 2) + (other if residual else 0)
    expected = {"none": expected, "relu": expected.relu(), "swish": torch.nn.functional.silu(expected),
                "hardtanh": expected.clamp(0, 6)}[attr]
    other = other.contiguous(memory_format=torch.channels_last)
    candidates = onednn.conv_candidates(w, b, x, (2, 2, 1, 1, 1, 1, 2), attr, scalars, "",
                                        other if residual else None, in_place)
    assert len(candidates) == 2
    for layer in candidates:
        got = layer(x, other.clone()) if residual else layer(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_every_post_op_the_epilogue_fuses_has_eager_s_in_place_form():
    """Each unary post-op a fused layer can carry (model/epilogue.py) can also run after eager's
    product, so no layer is left with oneDNN's call as its only candidate."""
    from tensortune.model import onednn
    from tensortune.model.epilogue import UNARY

    assert {attr for attr, _ in UNARY.values()} | {"none", "hardtanh"} <= set(onednn._IN_PLACE)


def _built_as_one_attention_call(name: str, module, inputs: tuple):
    """`module` imported with torch's operators has exactly one call of torch's attention and no
    softmax kernel left in TVM; its build matches torch. The build."""
    from tensortune.model.torch_ops import ATTENTION, register

    target = make_target("cpu", 2)
    model = import_model(name, module, inputs, target, torch_ops=True)
    assert str(model.with_torch_ops.mod["main"]).count(f'"{ATTENTION}"') == 1
    assert not any("softmax" in k.name for k in model.with_torch_ops.kernels)
    register()
    built = build_checked(model.with_torch_ops, target, {}, {}, seed=1)
    assert built.error <= tolerance("float32")
    return built


@pytest.mark.parametrize("causal", [False, True])
def test_attention_becomes_one_call_of_torchs_fused_attention(causal, monkeypatch):
    """softmax(QK^T / sqrt(d) + mask) V, written by torch.export as broadcast 3-D matmuls, is one
    scaled_dot_product_attention call (a causal mask as an additive constant): no softmax kernel
    is left in TVM, nor a copy splitting the heads out of the merged Q, K, V projection or
    putting them back side by side (torch takes those as views, here from any size on), and the
    build matches torch."""
    from tensortune.model import torch_ops

    monkeypatch.setattr(torch_ops, "SMALL", 0)
    torch.manual_seed(0)
    built = _built_as_one_attention_call("block", zoo.DecoderBlock(32, 2, 8, causal=causal).eval(),
                                         (torch.randn(1, 8, 32),))
    assert not any(op in k.name for k in built.model.kernels for op in ("split", "transpose")), built.model.kernels


class _SlicedQKV(torch.nn.Module):
    """Attention whose Q, K and V are slices of one projection's output (BERT's in `transformers`
    after the projections are merged), heads made with view and transpose."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x):
        qkv = self.qkv(x)
        q, k, v = (qkv[:, :, i * 32:(i + 1) * 32].view(1, 8, 2, 16).transpose(1, 2) for i in range(3))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 8, 32)


@pytest.mark.parametrize("small", [0, 1000])
def test_attention_reads_slices_of_one_projection_as_views_unless_small(small, monkeypatch):
    """No slice, transpose or head-merging copy is left in TVM: one call reads the projection's
    output, and matches torch; unless the heads have fewer elements than SMALL (256 here), where
    TVM's copies stay."""
    from tensortune.model import torch_ops

    monkeypatch.setattr(torch_ops, "SMALL", small)
    torch.manual_seed(0)
    built = _built_as_one_attention_call("sliced", _SlicedQKV().eval(), (torch.randn(1, 8, 32),))
    copies = [k.name for k in built.model.kernels if "slice" in k.name or "transpose" in k.name]
    assert (copies != []) == (small > 8 * 32), copies


class _MaskedSelfAttention(torch.nn.Module):
    """Self-attention through torch's `scaled_dot_product_attention` with an additive mask given
    as an input: torch.export writes it with the scale on Q and on K^T and softmax's guard for
    rows masked whole (ViT's attention in `transformers`)."""

    def __init__(self, width: int = 32, heads: int = 2):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(width, width) for _ in range(3))
        self.heads = heads

    def forward(self, x, mask):
        b, n, width = x.shape
        q, k, v = (layer(x).reshape(b, n, self.heads, -1).transpose(1, 2) for layer in (self.q, self.k, self.v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, n, width)


def test_attention_with_softmaxs_guard_for_rows_masked_whole_is_one_call():
    """The guard (rows whose scores are all -inf give 0) is part of the attention found: one
    call of torch's attention, no softmax kernel, and a row masked whole still comes out 0."""
    from tensortune.model.vm import run

    torch.manual_seed(0)
    module, x, mask = _MaskedSelfAttention().eval(), torch.randn(1, 8, 32), torch.zeros(1, 1, 8, 8)
    built = _built_as_one_attention_call("masked", module, (x, mask))
    mask[..., 3, :] = float("-inf")
    out, = run(built.executable, [x.numpy(), mask.numpy()])
    with torch.no_grad():
        expected = module(x, mask).numpy()
    assert not expected[0, 3].any() and abs(out - expected).max() <= 1e-5


class _NeoAttention(torch.nn.Module):
    """GPT-Neo's attention: no scale, the causal mask as where(causal, scores, float32's min),
    then the caller's additive mask."""

    def __init__(self, width: int = 32, heads: int = 2, length: int = 8):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(width, width) for _ in range(3))
        self.heads = heads
        self.register_buffer("causal", torch.ones(length, length, dtype=torch.bool).tril())

    def forward(self, x, mask):
        b, n, width = x.shape
        q, k, v = (layer(x).reshape(b, n, self.heads, -1).transpose(1, 2) for layer in (self.q, self.k, self.v))
        scores = torch.where(self.causal, q @ k.transpose(-1, -2), torch.tensor(torch.finfo(torch.float32).min))
        out = torch.softmax(scores + mask, dim=-1) @ v
        return out.transpose(1, 2).reshape(b, n, width)


def test_attention_with_a_mask_kept_where_true_and_a_second_mask_is_one_call():
    """GPT-Neo's two masks (the causal one as where(cond, scores, min), then the caller's added)
    add up into the one call's mask: no softmax kernel, and the build matches torch with part
    of a row masked by the caller."""
    from tensortune.model.vm import run

    torch.manual_seed(0)
    module, x, mask = _NeoAttention().eval(), torch.randn(1, 8, 32), torch.zeros(1, 1, 8, 8)
    built = _built_as_one_attention_call("neo", module, (x, mask))
    mask[..., 5, :2] = torch.finfo(torch.float32).min
    out, = run(built.executable, [x.numpy(), mask.numpy()])
    with torch.no_grad():
        expected = module(x, mask).numpy()
    assert abs(out - expected).max() <= 1e-5


def test_linear_layers_side_by_side_are_one_vendor_call():
    """Q, K and V projections of one activation are one linear call (their weights side by side,
    the output sliced), and the build still matches torch; the all-TVM build keeps them apart."""
    from tensortune.model.layout import ONEDNN_WEIGHTS, channels_last
    from tensortune.model.parallel_linear import find_groups
    from tensortune.model.torch_ops import FUSED, register

    torch.manual_seed(0)
    target = make_target("cpu", 2)
    module, inputs = _MaskedSelfAttention().eval(), (torch.randn(1, 8, 32), torch.zeros(1, 1, 8, 8))
    model = import_model("qkv", module, inputs, target, torch_ops=True)
    [group] = find_groups(channels_last(model.source, ONEDNN_WEIGHTS)["main"])  # the weights folded
    assert len(group) == 3 and all(layer.bias is not None for layer in group)
    assert str(model.with_torch_ops.mod["main"]).count(f'"{FUSED["linear"]}"') == 1
    register()
    assert build_checked(model.with_torch_ops, target, {}, {}, seed=1).error <= tolerance("float32")


def test_tvm_kernels_run_on_torchs_openmp_threads_once_registered(tmp_path):
    """In a fresh process (the registration holds for modules loaded after it): a parallel TVM
    kernel computes the right thing and starts no thread of TVM's pool next to torch's."""
    script = textwrap.dedent("""
        import os, numpy as np, torch, tvm
        from tvm import te
        from tensortune.model.one_pool import use_torch_pool
        assert use_torch_pool() == "", use_torch_pool()
        torch.set_num_threads(2)
        torch.randn(256, 256) @ torch.randn(256, 256)  # torch's OpenMP pool started
        threads = len(os.listdir("/proc/self/task"))
        a = te.placeholder((4096,), name="a")
        b = te.compute((4096,), lambda i: a[i] * 2.0, name="b")
        sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
        outer, _ = sch.split(sch.get_loops(sch.get_sblock("b"))[0], [None, 64])
        sch.parallel(outer)
        kernel = tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm", "num-cores": 2}))
        x = np.arange(4096, dtype="float32")
        y = tvm.runtime.tensor(np.zeros(4096, "float32"))
        for _ in range(3):
            kernel(tvm.runtime.tensor(x), y)
        assert np.array_equal(y.numpy(), x * 2)
        print(threads, len(os.listdir("/proc/self/task")))
    """)
    env = {**os.environ, "TVM_NUM_THREADS": "2", "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(int, done.stdout.split())
    assert after == before  # TVM's pool would have added its worker


class ThreeByThree(torch.nn.Module):
    """Two 3x3 convolutions with batch norm, ReLU and a residual add, as in a ResNet block, on
    a 10x10 image: the Winograd tiles (4x4) overrun its edge."""

    def __init__(self, channels: int):
        super().__init__()
        self.a, self.b = (torch.nn.Conv2d(channels, channels, 3, padding=1) for _ in range(2))
        self.norm = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.norm(self.a(x)))) + x)


def test_3x3_convolutions_become_winograd_kernels_that_match_torch():
    """F(4x4, 3x3): each convolution becomes an input transform, a batch matmul with the weight
    transformed once at import, and an output transform the epilogue fuses into; the build
    matches torch within the expected error the transform's amplification gives, and one
    wrong coefficient of the transform is far outside it."""
    from tensortune.model import winograd

    torch.manual_seed(0)
    target, channels = make_target("cpu", 2), 16
    module, inputs = ThreeByThree(channels).eval(), (torch.randn(1, channels, 10, 10),)
    assert not any("winograd" in k.name for k in import_model("block", module, inputs, target).kernels)  # opt-in
    model = import_model("block", module, inputs, target, winograd=True)
    names = [k.name for k in model.kernels]
    assert not any("conv2d" in name for name in names), names
    assert sum(k.calls for k in model.kernels if k.name.startswith("winograd_input")) == 2
    assert any(name.startswith("fused_winograd_output") and "relu" in name for name in names), names
    bound = winograd.expected_error(4, channels)
    assert winograd.tile_for(channels) == 4 and bound <= tolerance("float32")
    assert build_checked(model, target, {}, {}, seed=1).error <= bound

    right = winograd.MATRICES[4]
    wrong = (right[0], right[1], right[2].copy())
    wrong[2][1, 3] = 3  # A^T's 2 read as 3: one output of each tile's row and column wrong
    try:
        winograd.MATRICES[4] = wrong
        with pytest.raises(UserError, match="differs from torch"):
            build_checked(import_model("block", module, inputs, target, winograd=True), target, {}, {}, seed=1)
    finally:
        winograd.MATRICES[4] = right


class TorchSemantics(torch.nn.Module):
    """Operations TVM's converter takes otherwise than torch: a cumulative sum over booleans
    (int64 in torch: GPT-2's position ids), squeezes by negative and by size-2 dimensions
    (DeBERTa's attention)."""

    def forward(self, x):
        counts = torch.cumsum(x > 0, dim=1) * 2 + torch.cumsum(x, dim=0).long()
        squeezed = torch.ops.aten.squeeze.dims(x[None, :, None, :], [-2, 1])
        return counts, squeezed * 3


def test_operations_tvm_converts_otherwise_come_out_as_torch_computes_them():
    torch.manual_seed(0)
    target = make_target("cpu", 2)
    model = import_model("semantics", TorchSemantics(), (torch.randn(3, 16),), target)
    built = build_model(model, target, Database(":memory:"), timer=lambda label, measure: 1.0)  # timings: a test double
    assert built.error == 0.0
