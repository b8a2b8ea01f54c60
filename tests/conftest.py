import os
import tempfile

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")
# each pytest worker's timings take turns on the cores with its own processes only (measure/cores.py):
# with one lock for both workers, a timing in one stopped the other's builds (the suite took 630 s
# so, 527 s with a lock each, 2-core AMD EPYC). No test depends on a timing's value, only on its being made.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
os.environ.setdefault("TENSORTUNE_CORES_LOCK", os.path.join(tempfile.gettempdir(), f"tensortune-cores-{WORKER}.lock"))

# the files that take longest, longest first (seconds on a 2-core AMD EPYC, 2026-12-07): the
# Makefile's workers take files in collection order (--no-loadscope-reorder), so these start
# first and no worker is left running one alone at the end (test_cluster.py last cost 100 s)
LONGEST_FIRST = ["test_cluster.py",  # 132, mostly a local Ray cluster starting actors
                 "test_backend.py", "test_model.py", "test_strategies.py", "test_sketch.py",
                 "test_tensor_cores.py", "test_batch.py", "test_cli.py"]

SMALL = {  # small shapes, with 1s, primes and non-powers of two
    "gemm": [(1, 1, 1), (7, 13, 5), (16, 24, 12), (33, 17, 64)],
    "conv1d": [(1, 1), (13, 5), (64, 16), (97, 31)],
    "dwconv2d": [(1, 1, 1, 1, 1), (1, 3, 7, 5, 3), (2, 4, 12, 10, 3), (1, 2, 9, 9, 5)],
    "dwsep_conv2d": [(1, 1, 1, 1, 1, 1), (1, 3, 7, 5, 3, 2), (1, 4, 8, 12, 3, 6)],
}


@pytest.fixture(scope="session")
def cpu_target():
    """This machine's CPU, kernels on two threads."""
    from tensortune.target import make_target

    return make_target("cpu", 2)


@pytest.fixture(scope="session")
def target_spec(cpu_target):
    """The CPU target as TVM takes it, for the tests that compile with TVM directly."""
    return cpu_target.spec


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module's tests: the surrogate models of the strategies (GPs,
    small networks) fit tiny matrices, which torch's OpenMP threads, spinning beside the other
    pytest worker's compiles, made 2-5x slower (a 5-seed BO test took 97 s instead of 20)."""
    from tensortune.model.vm import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture
def in_process_cli(capsys, monkeypatch):
    """The real command line (tensortune.cli.main) in this process, which has already paid
    for importing TVM: (exit code, stdout, stderr). For quick checks of bad input; the
    end-to-end tests run `python -m tensortune` as users do."""
    from tensortune import cli

    def run(*args, cwd=None):
        if cwd is not None:
            monkeypatch.chdir(cwd)
        monkeypatch.setattr("sys.argv", ["tensortune", *map(str, args)])
        try:
            cli.main()
            code = 0
        except SystemExit as done:
            code = done.code or 0
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def pytest_collection_modifyitems(items):
    """LONGEST_FIRST's files first, in its order; the rest after them, as collected."""
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)
