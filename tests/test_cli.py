"""The command line, run as users run it: a real process, a real SQLite file."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tensortune", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def assert_user_error(done, message):
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args,message", [
    (["tune", "matmul"], "unknown workload 'matmul'"),
    (["tune", "gemm", "--shape", "4,4"], "expected 3 values"),
    (["tune", "gemm", "--shape", "4,-4,4"], "positive integers"),
    (["tune", "gemm-1024", "--target", "tpu"], "unknown target 'tpu'"),
    (["tune", "gemm-1024", "--strategy", "magic", "--trials", "1"], "unknown strategy 'magic'"),
    (["tune", "gemm-1024", "--db", "/nonexistent/dir/t.db"], "cannot use database"),
    (["show", "gemm-1024", "--db", "/nonexistent.db"], "does not exist"),
    (["tune", "gemm-1024", "--target", "cuda", "--arch", "90"], "bad GPU architecture '90'"),
    (["tune", "gemm-1024", "--target", "cuda", "--space", "cpu-template"], "does not fit a cuda target"),
    (["tune", "gemm-1024", "--space", "magic"], "unknown space 'magic'"),
    (["batch", "import", "nowhere"], "is not a batch"),
    (["tune", "gemm", "--shape", "100000,100000,100000"], "GB to measure"),  # 120 GB of matrices
    (["tune", "gemm-1024", "--space", "sketch", "--warm-start-family"], "needs a template space"),
    (["tune", "gemm-1024", "--objectives", "latency,energy"], "energy is not an objective yet"),
    (["tune", "gemm-1024", "--objectives", "latency,power"], "unknown objective power"),
    (["tune", "gemm-1024", "--strategy", "nsga2", "--objectives", "latency"], "searches for the front of latency,build_s"),
    (["report", "gemm-1024", "--db", "/nonexistent.db", "--html", "x.html"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, in_process_cli):
    extra = ["--db", "t.db"] if args[0] == "tune" and "--db" not in args else []
    code, _, stderr = in_process_cli(*args, *extra, cwd=tmp_path)
    assert_user_error(subprocess.CompletedProcess(args, code, "", stderr), message)
    assert not (tmp_path / "t.db").exists()  # a refused command leaves no database behind


def test_an_internal_error_is_one_line_and_exit_1_and_debug_shows_the_traceback(in_process_cli):
    from tensortune.cli import app

    @app.command("fail-for-test")  # a test double: a command with a bug of ours
    def fail_for_test() -> None:
        raise KeyError("a bug")

    try:
        code, _, stderr = in_process_cli("fail-for-test")
        assert code == 1 and stderr.count("\n") == 1 and "internal error, KeyError" in stderr and "--debug" in stderr
        with pytest.raises(KeyError):
            in_process_cli("fail-for-test", "--debug")
    finally:
        app.registered_commands.pop()


QUIET_SCRIPT = """
import subprocess, sys
from tensortune.cli.quiet import drop_tvm_log
if sys.argv[1] == "quiet":
    drop_tvm_log()
import tvm
from tvm import te
x = te.placeholder((8,), name="x")
y = te.compute((8,), lambda i: te.power(x[i], 3.0), name="y")
tvm.compile(te.create_prim_func([x, y]), target="llvm")  # TVM warns about pow with y >= 3, in this process
subprocess.run([sys.executable, "-c", "import os; os.write(2, b'[12:00:00] /tvm/src/a.cc:7: Warning: from a worker' + bytes([10]))"])
print("kept: ours", file=sys.stderr)
"""


def test_tvms_log_lines_are_dropped_unless_verbose():
    """TVM's C++ log lines, from the process and from processes it starts, do not reach standard
    error by default (the command line calls drop_tvm_log unless --verbose); other lines do."""
    quiet, verbose = (subprocess.run([sys.executable, "-c", QUIET_SCRIPT, mode], capture_output=True, text=True,
                                     timeout=300) for mode in ("quiet", "verbose"))
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr + verbose.stderr
    assert "Detected pow(x, y)" in verbose.stderr and "from a worker" in verbose.stderr  # the test can fail
    assert "Warning" not in quiet.stderr and "kept: ours" in quiet.stderr


def test_make_clean_keeps_the_users_records():
    done = subprocess.run(["make", "-n", "clean"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "rm -rf .venv" in done.stdout and "tensortune.db" not in done.stdout


def test_bad_input_from_a_fresh_process_is_one_line_too(tmp_path):
    assert_user_error(cli("tune", "matmul", cwd=tmp_path), "unknown workload 'matmul'")


def test_tuning_for_a_gpu_on_a_machine_without_one_says_what_to_do(tmp_path):
    from tensortune.target import local_gpu_name

    if local_gpu_name():
        pytest.skip("this machine has a GPU")
    assert_user_error(cli("tune", "gemm-1024", "--target", "cuda", cwd=tmp_path), "tensortune batch export")


def test_a_corrupt_database_is_refused_and_left_intact(tmp_path):
    db = tmp_path / "bad.db"
    db.write_bytes(b"this is not sqlite" * 100)
    before = db.read_bytes()
    assert_user_error(cli("tune", "gemm", "--shape", "8,8,8", "--trials", "2", "--db", str(db)), "cannot use database")
    assert db.read_bytes() == before


@pytest.mark.slow  # the fast subset skips it: pytest -m 'not slow'
def test_tune_show_export_end_to_end(tmp_path, in_process_cli):
    """The tune as a user runs it; show and export in this process (TVM already imported)."""
    db = str(tmp_path / "t.db")
    done = cli("tune", "gemm", "--shape", "M=24,N=32,K=20", "--trials", "12", "--batch", "6", "--seed", "3",
               "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["trials"] == 12 and summary["threads"] >= 1
    assert summary["ms"]["tuned"] > 0 and summary["ms"]["naive"] > 0 and summary["ms"]["vendor:numpy"] > 0
    assert summary["speedup_over_naive"] == pytest.approx(summary["ms"]["naive"] / summary["ms"]["tuned"])
    assert summary["vendor_threads"]["openblas"] == summary["threads"]

    code, shown, _ = in_process_cli("show", "gemm", "--shape", "24,32,20", "--db", db)
    assert code == 0 and "12 trials" in shown and "best" in shown

    out = tmp_path / "export"
    code, _, stderr = in_process_cli("export", "gemm", "--shape", "24,32,20", "--db", db, "--out", str(out))
    assert code == 0, stderr
    record = json.loads((out / "record.json").read_text())
    assert record["workload"].startswith("gemm(M=24,N=32,K=20)#") and "T.prim_func" in (out / "kernel.py").read_text()
    _check_exported_library(out / "kernel.so")


def _check_exported_library(path):
    import numpy as np
    import tvm

    lib = tvm.runtime.load_module(str(path))
    a, b = np.random.rand(24, 20).astype("float32"), np.random.rand(20, 32).astype("float32")
    c = tvm.runtime.tensor(np.zeros((24, 32), "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5)


def test_list_names_families_and_presets():
    done = cli("list")
    assert done.returncode == 0
    for name in ("gemm", "conv1d", "dwconv2d", "dwsep_conv2d", "gemm-1024", "conv1d-1024", "dwconv2d-seed"):
        assert name in done.stdout


def test_an_unreachable_cluster_is_one_error_line_and_no_database(tmp_path, in_process_cli):
    code, _, stderr = in_process_cli("tune", "gemm-1024", "--trials", "4", "--cluster", "127.0.0.1:1", "--db", "t.db",
                                     cwd=tmp_path)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "--cluster" in lines[0], stderr
    assert not (tmp_path / "t.db").exists()
