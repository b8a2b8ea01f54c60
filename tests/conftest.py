import os

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")

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
