"""Tuning over a real local Ray cluster (measure/cluster.py): a head and device nodes on this
machine, in a network namespace of their own so Ray binds loopback only. The scenarios run
as one script (tests/cluster_scenarios.py: one cluster for the module); each test checks one
of its findings."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the cluster extra is not installed: pip install -e '.[cluster]'")
pytestmark = pytest.mark.slow


def _namespace_ok() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-n", "true"]).returncode == 0


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    if not _namespace_ok():
        pytest.skip("needs a network namespace of its own (unshare -n, as root) to keep Ray on loopback")
    out = tmp_path_factory.mktemp("cluster") / "found.json"
    script = Path(__file__).parent / "cluster_scenarios.py"
    done = subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {sys.executable} {script} {out}"],
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_hanging_kernel_costs_one_candidate(found):
    hanging = found["hanging"]
    assert hanging["statuses"] == ["ok", "run_timeout", "ok", "wrong"], hanging["reasons"]
    assert hanging["seconds"] < 60
    assert hanging["runs_before_last_build"] >= 1  # builds and runs overlap: a device does not wait for the round


def test_a_lost_node_loses_no_record_the_run_finishes_and_a_joining_node_is_used(found):
    lost = found["node_lost"]
    assert lost["devices_before"] == 2 and lost["devices_after"] == 1 and lost["lost"]
    assert lost["devices_joined"] == 2
    assert lost["statuses"] == ["ok"] * (24 + 4)


def test_a_tune_over_two_device_classes_stores_what_a_local_tune_stores_once_per_class(found):
    classes = found["two_classes"]
    assert classes["exit"] == 0
    (local,) = classes["local"].values()
    assert list(classes["local"]) == [classes["local_hardware"]] and sorted(classes["cluster"]) == ["fake-a", "fake-b"]
    assert classes["cluster"]["fake-a"] == classes["cluster"]["fake-b"] == local
    assert len(local) == len(set(p for p, _ in local)) == 8  # no point twice
    assert all(status == "ok" for _, status in local)


def test_two_commands_take_a_machine_from_nothing_to_a_cluster_tune(found):
    """`tensortune node --head`, then `tune --cluster auto`: the task is tuned on this machine's
    device class with no resource declared by hand."""
    head = found["node_head"]
    assert head["started"] == 0, head["start_output"]
    assert head["tuned"] == 0, head["tune_output"]
    assert list(head["records"]) == [head["hardware"]]
    assert len(head["records"][head["hardware"]]) == 4
