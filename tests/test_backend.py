"""The torch.compile backend: real torch (dynamo), real TVM kernels, a real SQLite file.

Small models with an operator TVM's frontend has no converter for (erfinv), a graph break,
records written by one process and used by another, and regions that fail."""
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import tensortune
import tensortune.deploy.backend
from tensortune.errors import TensortuneWarning, UserError


PARTIAL = Path(__file__).parent / "models" / "partial.py"


def with_erfinv():
    """linear -> erfinv (no TVM converter) -> linear, and an input."""
    from tensortune.model.importer import load_factory

    model, (x,) = load_factory(f"{PARTIAL}:with_erfinv")[1]
    return model, x


class WithBreak(nn.Module):
    """Two linear layers with a graph break between them: two graphs for the backend."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        x = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(x).sigmoid()


def eager_never_faster(label, measure):
    """A test double for the build-time timing of eager: it never wins, so these small models'
    regions stay in TVM whatever the machine's timings (the builds are timed for real)."""
    return float("inf") if label == "eager" else measure()


@pytest.fixture(autouse=True)
def regions_stay_in_tvm(monkeypatch):
    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(eager_never_faster))


def compiled(module, **options):
    torch._dynamo.reset()
    backend = tensortune.backend(**options)
    return torch.compile(module.eval(), backend=backend, dynamic=False), backend


def test_an_operator_tvm_lacks_runs_in_torch_and_the_rest_in_tvm(tmp_path):
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        got, expected = fast(x), model(x)
    assert torch.allclose(got, expected, atol=1e-5)
    assert len(backend.regions) == 2 and all(r.checked and not r.in_torch for r in backend.regions)
    assert backend.in_torch == [{"aten.erfinv.default": 1}]


def test_a_graph_break_compiles_both_graphs_each_of_one_region_raced_with_eager_once(tmp_path, monkeypatch):
    """Each graph is one region: it is timed against eager as a whole graph, not a second time
    as a region (two races of the same thing, each able to throw it away on noise)."""
    labels = []

    def recorded(label, measure):  # eager_never_faster, noting what is timed
        labels.append(label)
        return eager_never_faster(label, measure)

    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(recorded))
    torch.manual_seed(0)
    model, x = WithBreak(), torch.randn(3, 16)
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)
    assert len(backend.in_torch) == 2 and len(backend.regions) == 2
    assert "region" not in labels and labels.count("graph") >= 2 * 3  # ROUNDS timings of each graph


def test_parameters_are_guarded_by_their_modules_tags_in_the_frames_it_compiles_only(tmp_path, monkeypatch):
    """Dynamo builds the guards of the frame the backend compiled with parameters checked by
    their modules' dictionary tags (one check a module, not one a tensor); the user's setting is
    back by the first call, so a frame another backend compiles after it gets the user's. The
    weights are frozen into the build: one replaced after the compile is not seen."""
    import torch._dynamo.config as dynamo
    from torch._dynamo.guards import GuardManagerWrapper

    tagged = []
    find = GuardManagerWrapper.find_tag_safe_roots
    monkeypatch.setattr(GuardManagerWrapper, "find_tag_safe_roots", lambda self: tagged.append(1) or find(self))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x)
        assert torch.allclose(fast(x), expected, atol=1e-5) and len(backend.regions) == 1
        assert tagged == [1] and dynamo.use_recursive_dict_tags_for_guards is False
        torch.compile(nn.Linear(16, 2), backend="eager")(x)
        assert tagged == [1]
        model[2].weight = nn.Parameter(torch.randn(4, 16))
        assert torch.allclose(fast(x), expected, atol=1e-5) and len(backend.regions) == 1


def test_a_graph_autograd_records_runs_in_pytorch_says_so_and_gradients_flow(tmp_path):
    """TVM's kernels have no gradients: with autograd on, the graph is PyTorch's own."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    x = torch.randn(2, 16)
    with pytest.warns(TensortuneWarning, match="autograd records"):
        fast(x).sum().backward()
    assert model[0].weight.grad is not None and not backend.regions
    expected = model[0].weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    assert torch.allclose(model[0].weight.grad, expected)


def test_named_operators_stay_in_torch(tmp_path):
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"), torch_ops=("tanh",))
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)
    assert backend.in_torch[0].get("aten.tanh.default") == 1


def test_a_region_that_fails_its_first_call_check_falls_back_with_a_warning(tmp_path):
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        fast(x)  # compiles and checks each region on its first call
    region = backend.regions[0]
    region.checked = False
    region._tvm = lambda inputs: [torch.zeros(4, 32)]  # a test double: TVM computing the wrong thing
    with torch.no_grad(), pytest.warns(TensortuneWarning, match="differs from eager"):
        got = fast(x)
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5) and region.in_torch


def test_a_region_whose_build_fails_runs_in_torch_with_a_warning(tmp_path, monkeypatch):
    import tensortune.model as model_layer

    def failing_build(*args, **kwargs):  # a test double: TVM's build failing
        raise RuntimeError("no build today")

    monkeypatch.setattr(model_layer, "build_model", failing_build)
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad(), pytest.warns(TensortuneWarning, match="no build today"):
        got = fast(x)
    with torch.no_grad():
        assert torch.allclose(got, model(x)) and backend.regions == []


def test_a_region_slower_than_eager_runs_in_torch_and_says_so(tmp_path, monkeypatch):
    def eager_fastest(label, measure):  # a test double for the build-time timings: eager wins
        return 1e-3 if label == "eager" else 2e-3

    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(eager_fastest))
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad(), pytest.warns(TensortuneWarning, match="TVM took 2.000 ms a call against eager's 1.000 ms"):
        got = fast(x)
    with torch.no_grad():
        assert torch.allclose(got, model(x)) and backend.regions == []
    assert len(backend.in_eager) == 2 and all("against eager" in why for why in backend.in_eager.values())


def test_a_convolution_region_keeps_the_build_calling_torch_checked_on_its_own_inputs(tmp_path, monkeypatch):
    """The build calling torch's convolution is checked on the region's inputs, as the all-TVM
    build is (drawn afresh, a region's frozen batch norm gave NaN and that build was refused)."""
    from tensortune.model import zoo

    def torch_ops_fastest(label, measure):  # a test double for the build-time timings
        return {"eager": 2e-3, "torch ops": 1e-3, "region": 1e-3, "graph": 1e-3}.get(label, 3e-3)

    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(torch_ops_fastest))
    torch.manual_seed(0)
    model = nn.Sequential(zoo._Basic(8, 8, 1)).eval()
    x = torch.randn(1, 8, 12, 12)
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)
    [region] = backend.regions
    assert region.built.kept == "torch ops" and not region.built.refused and region.built.torch_ops == 2


def test_bad_options_fail_at_compile_time(tmp_path):
    with pytest.raises(UserError, match="unknown mode"):
        tensortune.backend(mode="fastest")
    with pytest.raises(UserError, match="no option"):
        tensortune.backend(dbb="x.db")
    with pytest.raises(UserError, match="unknown target"):
        tensortune.backend(target="tpu")
    with pytest.raises(UserError, match="unknown space"):
        tensortune.backend(space="best")
    with pytest.raises(UserError):
        tensortune.backend(db=str(tmp_path / "missing" / "folder" / "t.db"))


@pytest.mark.slow
def test_records_tuned_in_one_process_are_reused_by_another(tmp_path):
    """mode="tune" tunes the regions' kernels; a second process, tuning again with the same
    budget, measures nothing, finds the same tuned schedules, and builds with them wherever it
    keeps the all-TVM build. (Each process times that build against the one calling torch's
    matmul and keeps the faster: close for this Linear, so which one is kept is a timing race.)"""
    db = tmp_path / "t.db"
    script = textwrap.dedent(f"""
        import sqlite3, torch, tensortune
        from torch import nn
        from tensortune.measure.config import MeasureConfig
        from tensortune.model import build
        from tensortune.model.build import best_schedules
        from tensortune.target import make_target
        build.MIX_TRIES = 0  # no per-operation mixed builds: the reuse is what is tested here
        from tensortune.deploy.backend import Backend  # a test double for eager's timing at build: it never wins
        Backend.timer = staticmethod(lambda label, measure: float("inf") if label == "eager" else measure())
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU()).eval()
        backend = tensortune.backend(db={str(db)!r}, mode="tune", trials=8, progress=False)
        fast = torch.compile(model, backend=backend, dynamic=False)
        x = torch.randn(32, 64)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x), atol=1e-4)
        database = tensortune.Database({str(db)!r})
        target = make_target("cpu", MeasureConfig().threads)
        rows = sqlite3.connect({str(db)!r}).execute("select count(*) from records").fetchone()[0]
        for r in backend.regions:
            best = sorted(best_schedules(r.built.model, target, database))
            print(rows, ",".join(best) or "-", ",".join(sorted(r.built.tuned)) or "-", r.built.torch_ops)
    """)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    first, second = [[line.split() for line in r.stdout.splitlines()] for r in runs]
    assert len(first) == len(second) == 1
    (first_rows, first_best, *_), (second_rows, second_best, *_) = first[0], second[0]
    assert int(first_rows) > 0 and second_rows == first_rows
    assert second_best == first_best
    for _, best, tuned, torch_ops in (first[0], second[0]):
        if torch_ops == "0":  # the all-TVM build kept: every tuned schedule in it
            assert tuned == best


def test_the_backend_runs_tvms_kernels_on_every_core_in_a_users_process(tmp_path):
    """In a process that never set TVM_NUM_THREADS, TVM would size its pool at half the logical
    CPUs (one thread on a 2-vCPU machine, where the kernels were tuned with two); the backend
    sizes it with its threads before the first kernel runs."""
    script = textwrap.dedent(f"""
        import torch, tensortune, tvm_ffi
        from tensortune.measure.config import MeasureConfig
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
        fast = torch.compile(model, backend=tensortune.backend(db={str(tmp_path / "t.db")!r}, progress=False))
        with torch.no_grad():
            fast(torch.randn(4, 8))
        print(tvm_ffi.get_global_func("runtime.NumThreads")(), MeasureConfig().threads)
    """)
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    pool, cores = run.stdout.split()
    assert pool == cores


@pytest.mark.parametrize("name", ["conv_block", "tiny_transformer"])
def test_small_zoo_models_run_through_the_backend(name, tmp_path):
    from tensortune.model.zoo import ZOO

    model, inputs = ZOO[name]()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(*inputs), model(*inputs), atol=1e-4)
    assert backend.regions and backend.in_torch == [{}]


@pytest.mark.slow
def test_gpt2_from_transformers_runs_in_tvm_whole(tmp_path, monkeypatch):
    """GPT-2 built from its config: its attention mask's cumsum over booleans, which TVM's own
    converter leaves boolean (and LLVM refuses to add booleans), converts as torch computes it
    (int64): one region, nothing left in PyTorch, and the logits match eager. (Without the
    per-operation mixed builds, 8 more builds of a region, 16 s here: test_model tests that
    choice.)"""
    from tensortune.model import build
    from tensortune.model.zoo import hf_gpt2_tiny

    monkeypatch.setattr(build, "MIX_TRIES", 0)

    model, (ids,) = hf_gpt2_tiny(layers=1)  # one layer has every operator of two
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TensortuneWarning)  # no region falls back
        assert torch.allclose(fast(ids), model(ids), atol=1e-4)
    assert len(backend.regions) == 1 and backend.share_in_tvm == 1.0, backend.in_torch


def test_the_backend_is_found_by_name_with_its_options(tmp_path):
    """backend="tensortune" (the package's entry point), options through torch.compile."""
    model, x = with_erfinv()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="tensortune", dynamic=False, options={"db": str(tmp_path / "t.db")})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TensortuneWarning)
        assert torch.allclose(fast(x), model(x), atol=1e-5)
    assert (tmp_path / "t.db").is_file()


def test_a_node_whose_conversion_fails_is_found_by_halving_and_left_to_torch():
    """A test double stands in for TVM's import: it raises (a plain RuntimeError, as TVM's
    lowering does) for any region holding a tanh. The halving finds the tanh, the graph is
    partitioned again around it, and what is left converts."""
    from tensortune.model.partition import capture, partition
    from tensortune.target import make_target

    def converts(module, inputs):  # a test double of TVM's import
        if any(str(n.target) == "aten.tanh.default" for n in module.graph.nodes):
            raise RuntimeError("tanh does not lower today")

    model, x = with_erfinv()
    parts = partition(capture(model, (x,)), (x,), make_target("cpu", 2), converts=converts)
    assert parts.in_torch == {"aten.tanh.default": 1, "aten.erfinv.default": 1}
    assert "tanh does not lower today" in parts.refused["aten.tanh.default"]
    assert len(parts.regions) >= 2 and 0 < parts.share_in_tvm < 1
    with torch.no_grad():
        assert torch.allclose(parts.graph(x), model(x))


class TwoWays(nn.Module):
    """A linear layer returning a tuple of two tensors, or a dict of them."""

    def __init__(self, as_dict: bool):
        super().__init__()
        self.linear, self.as_dict = nn.Linear(8, 8), as_dict

    def forward(self, x):
        y = self.linear(x)
        return {"y": y, "z": y.relu()} if self.as_dict else (y, y.relu())


@pytest.mark.parametrize("as_dict", [False, True])
def test_the_captured_graph_runs_without_exports_guards_and_hooks(as_dict):
    """capture() drops torch.export's input guards and hooks, and its pytree flattening where
    inputs and outputs are flat tuples; a dict output keeps its structure. Outputs unchanged."""
    from tensortune.model.partition import capture

    model, x = TwoWays(as_dict).eval(), torch.randn(2, 8)
    graph = capture(model, (x,))
    assert not hasattr(graph, "_guards_fn") and not graph._forward_pre_hooks and not graph._forward_hooks
    assert ("pytree" in graph.code) == as_dict
    with torch.no_grad():
        got, expected = graph(x), model(x)
    if as_dict:
        assert set(got) == {"y", "z"} and all(torch.equal(got[k], expected[k]) for k in got)
    else:
        assert isinstance(got, tuple) and all(torch.equal(a, b) for a, b in zip(got, expected))


def test_tune_model_tunes_what_tvm_takes_and_leaves_the_rest_to_torch(tmp_path, in_process_cli, capsys):
    """tune-model on a model TVM's frontend does not fully convert: the partitioner's regions
    are tuned with one budget, built, checked and timed; the report says what stayed in
    PyTorch and what share of the graph's eager time it costs. The backend then builds the
    same kernels (same keys) from those records."""
    code, out, err = in_process_cli("tune-model", f"{PARTIAL}:with_erfinv", "--trials", "4", "--batch", "4",
                                    "--db", "t.db", "--json", cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["in_torch"]["operators"] == {"aten.erfinv.default": 1}
    assert 0 < summary["in_torch"]["share_of_eager_time"] < 1
    assert summary["trials"] == 4 and summary["checked_against_torch"] < 1e-3 and summary["end_to_end"]["tuned_s"] > 0
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)
    built = {k.workload.key for r in backend.regions for k in r.built.model.kernels}
    assert built == {task["kernel"] for task in summary["tasks"]}
    capsys.readouterr()  # the backend's progress lines (a slow build prints them), not the command's
    code, _, err = in_process_cli("tune-model", f"{PARTIAL}:with_erfinv", "--out", "here", "--db", "t.db", cwd=tmp_path)
    assert code == 2 and err.startswith("error:") and "cannot be exported" in err and len(err.strip().splitlines()) == 1


def test_each_kind_of_node_is_tried_alone_once_and_a_pair_failing_together_is_still_split():
    """A test double stands in for TVM's import: it counts what it is asked to convert, and
    fails a graph only where a tanh and a sigmoid are in it together. Every node is tried alone
    once per signature (none fails alone: the probe of all four side by side fails, and its
    halves are tried down to single nodes); the region holding both fails, and the halving
    splits it at a node; a second partition of the same graph tries nothing alone again."""
    from tensortune.model.partition import capture, partition
    from tensortune.target import make_target

    class Converts:  # a test double of partition.Compiles
        def __init__(self):
            self.probes, self.calls = {}, []

        def __call__(self, module, inputs):
            names = {str(n.target) for n in module.graph.nodes if n.op == "call_function"}
            self.calls.append(len(names))
            if {"aten.tanh.default", "aten.sigmoid.default"} <= names:
                raise RuntimeError("tanh and sigmoid together do not lower")

    class TwoLayers(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return self.c(self.b(self.a(x).tanh()).sigmoid())

    torch.manual_seed(0)
    model, x = TwoLayers().eval(), torch.randn(2, 8)
    converts, target = Converts(), make_target("cpu", 2)
    graph = capture(model, (x,))
    parts = partition(graph, (x,), target, converts=converts)
    assert len(converts.probes) == 4  # permute, addmm (the three linear layers alike), tanh, sigmoid
    assert parts.in_torch and all("together do not lower" in why for why in parts.refused.values())
    assert not any({"aten.tanh.default", "aten.sigmoid.default"} <= {str(n.target) for n in r.module.graph.nodes}
                   for r in parts.regions)
    with torch.no_grad():
        assert torch.allclose(parts.graph(x), model(x))
    first = len(converts.calls)
    converts.calls.clear()
    partition(graph, (x,), target, converts=converts)
    assert first - len(converts.calls) == 5  # the same regions and halves again, no probe: the four side by side,
    # the halves (permute and addmm pass, tanh and sigmoid fail), tanh alone, sigmoid alone


def test_nodes_that_all_convert_are_probed_in_one_conversion_kept_in_the_records(tmp_path):
    """The real check (partition.Compiles, counted by a subclass): the probes of a graph whose
    every node converts cost one conversion, side by side (the halving of a failing probe:
    test_each_kind_of_node_is_tried_alone_once_and_a_pair_failing_together_is_still_split);
    what they found is kept in the records, and another process probes nothing again."""
    from tensortune.db import Database
    from tensortune.model.partition import Compiles, capture, partition
    from tensortune.target import make_target

    class Counted(Compiles):  # the real check, its calls counted
        def __init__(self, target, db):
            super().__init__(target, db)
            self.probes, self.sizes = dict(self.stored), []  # as a new process: only what the records hold

        def __call__(self, module, inputs):
            self.sizes.append(sum(n.op == "call_function" for n in module.graph.nodes))
            return super().__call__(module, inputs)

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 8)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x)) * 2).sigmoid() + x.exp()

    target, db = make_target("cpu", 2), Database(str(tmp_path / "t.db"))
    converts = Counted(target, db)
    model, x = Mixed().eval(), torch.randn(2, 8)
    graph = capture(model, (x,))
    parts = partition(graph, (x,), target, converts=converts)
    assert len(converts.probes) >= 6 and converts.sizes[0] == len(converts.probes)  # all probes in the first call
    assert len(converts.sizes) == 1 + len(parts.regions) and not parts.in_torch
    with torch.no_grad():
        assert torch.allclose(parts.graph(x), model(x), atol=1e-6)
    converts.store()
    again = Counted(target, db)
    assert again.probes == converts.probes
    partition(graph, (x,), target, converts=again)
    assert again.sizes == converts.sizes[1:]  # its regions checked, no node tried alone


def test_past_its_compile_budget_a_graph_runs_in_pytorch_and_says_so(tmp_path):
    model, x = with_erfinv()
    with pytest.warns(TensortuneWarning, match="compile budget"):
        fast, backend = compiled(model, db=str(tmp_path / "t.db"), compile_budget_s=1e-6)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x))
    assert not backend.regions and backend.share_in_tvm == 0
    with pytest.raises(UserError, match="compile_budget_s must be a positive"):
        tensortune.backend(compile_budget_s=0)


def test_a_compiled_graph_slower_than_eager_as_a_whole_runs_as_dynamo_gave_it(tmp_path, monkeypatch):
    """Its regions beat their own graphs (decomposed ATen), and the whole still loses to eager:
    dynamo's graph runs as it came, and the warning says so."""
    def region_wins_graph_loses(label, measure):  # a test double for the build-time timings
        return {"eager": 2e-3, "region": 1e-3, "tvm": 1e-3, "torch ops": 1.5e-3, "graph": 3e-3}.get(label, 3e-3)

    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(region_wins_graph_loses))
    model, x = with_erfinv()
    with pytest.warns(TensortuneWarning, match="graph 1 runs in PyTorch: compiled, it took 3.000 ms"):
        fast, backend = compiled(model, db=str(tmp_path / "t.db"))
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x))
    assert backend.regions == [] and backend.share_in_tvm == 0 and backend.in_eager


@pytest.mark.parametrize("graph_timings,rounds", [
    ([5e-3, 1.01e-3, 1.01e-3], 3),  # one outlier, then 1% over eager: within TIE, kept as timed
    ([1.05e-3] * 3 + [0.9e-3] * 3, 6),  # 5% over eager (past TIE, within CLOSE): timed again, then faster
])
def test_a_compiled_graph_within_timing_noise_of_eager_keeps_its_regions(tmp_path, monkeypatch, graph_timings,
                                                                         rounds):
    """The whole graph is timed against eager in turn, several times, and a graph within TIE of
    eager is kept: one slow timing (the machine drifting) does not throw its regions away. A
    graph slower by less than CLOSE is timed as many times again, and the means decide."""
    timings = iter(graph_timings)  # a test double for the build-time timings of the graph
    labels = []

    def drifting(label, measure):
        labels.append(label)
        if label == "graph":
            return next(timings)
        return {"eager": 1e-3, "region": 0.5e-3}.get(label, 2e-3)

    monkeypatch.setattr(tensortune.deploy.backend.Backend, "timer", staticmethod(drifting))
    model, x = with_erfinv()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x))
    assert backend.regions and not backend.in_eager
    graph = [label for label in labels if label in ("graph", "eager")][-2 * rounds:]
    assert graph == ["graph", "eager"] * rounds  # taken in turn


def tiny_llama():
    """A 1-layer Llama from `transformers` built from its config (rotary embeddings, RMSNorm,
    gated SiLU, grouped-query attention; random weights, nothing downloaded), 16 tokens: token
    ids in, logits out. Its causal mask is a cumsum over booleans."""
    import transformers

    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=64, vocab_size=128, max_position_embeddings=32)
    config._attn_implementation = "eager"
    torch.manual_seed(0)

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = transformers.LlamaForCausalLM(config)

        def forward(self, ids):
            return self.model(ids, use_cache=False).logits

    return Logits().eval(), (torch.randint(0, 128, (1, 16)),)


@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_a_rotary_decoder_runs_in_tvm_through_both_paths(tmp_path, in_process_cli):
    """Through the backend: every operator in TVM (the causal mask's cumsum over booleans
    included), the logits match eager. Through tune-model (from a factory file), whole, tuned
    and checked. (A model that must split: test_an_operator_tvm_lacks_runs_in_torch_and_the_rest_in_tvm.)"""
    model, (ids,) = tiny_llama()
    fast, backend = compiled(model, db=str(tmp_path / "t.db"))
    with torch.no_grad():
        assert torch.allclose(fast(ids), model(ids), atol=1e-4)
    assert backend.share_in_tvm == 1.0, backend.in_torch
    factory = tmp_path / "llama.py"
    factory.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom test_backend import tiny_llama\n")
    code, out, err = in_process_cli("tune-model", f"{factory}:tiny_llama", "--trials", "2", "--db", "t.db", "--json",
                                    "--no-compare", cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    assert not summary.get("in_torch") and summary["checked_against_torch"] < 1e-3
