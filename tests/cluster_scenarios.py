"""The Ray scenarios of tests/test_cluster.py, run as one script in a network namespace of its
own (`unshare -n`, loopback up), so the real local Ray cluster binds 127.0.0.1 only. One
cluster serves every scenario: a head node (builds) and device nodes, each declaring a fake
device class as its custom resource (`tensortune-device:fake-a`, ...) as a real device node
declares its hardware. Writes each scenario's findings, as JSON, to the file named by argv[1].

    unshare -n sh -c 'ip link set lo up && python tests/cluster_scenarios.py out.json'
"""
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))  # tests/mutants.py

from ray.cluster_utils import Cluster  # noqa: E402

from tensortune.db import Database  # noqa: E402
from tensortune.measure.cluster import DEVICE, RayEvaluator  # noqa: E402
from tensortune.measure.config import MeasureConfig  # noqa: E402
from tensortune.target import make_target  # noqa: E402

QUICK = dict(threads=1, repeat=3, min_repeat_ms=1, final_repeat=3, final_min_repeat_ms=1)


def _records(db_path: str) -> dict:
    db = Database(db_path)
    try:
        return {task.hardware: sorted((json.dumps(r.point, sort_keys=True), r.result.status.value)
                                      for r in db.records(task)) for task in db.tasks()}
    finally:
        db.close()


def hanging_then_node_lost(cluster, address: str, node) -> tuple[dict, dict, object]:
    """On one evaluator (its actors cost a TVM import each): first a kernel that hangs, among
    correct ones, costs itself only; then a device node removed while a round runs: nothing
    finished is lost, its jobs go to the device left, every point is answered once; a node
    that joins is used from the next round. Returns the findings and the node that joined."""
    from mutants import MutantSpace

    target = make_target("cpu", 1)
    space = MutantSpace(target)
    slow = {**QUICK, "repeat": 3, "min_repeat_ms": 100}  # each timing lasts 0.3 s: the node goes mid-round
    # the hanging kernel costs this limit; a correct one's run (its check and 0.3 s of timing) took
    # over 3 s on a 2-core machine with the suite's other worker and another process compiling
    # beside it (fresh-check, 2026-12-07), so the limit leaves it room
    with RayEvaluator(target, MeasureConfig(**slow, run_timeout_s=12.0, cluster=address), "fake-a") as evaluator:
        start = time.perf_counter()
        results = evaluator.measure(space, [{"kernel": "naive"}, {"kernel": "hangs"}, {"kernel": "naive"},
                                            {"kernel": "clamped"}])
        last_build = max(end for method, _, end, _ in evaluator.spans if method == "build")
        hanging = {"statuses": [r.status.value for r in results], "reasons": [r.reason for r in results],
                   "seconds": time.perf_counter() - start,
                   "runs_before_last_build": sum(sent < last_build for method, sent, _, _ in evaluator.spans
                                                 if method == "run")}
        devices = len(evaluator.devices)
        killer = threading.Timer(2.0, cluster.remove_node, args=(node,))
        killer.start()
        results = evaluator.measure(space, [{"kernel": "naive"}] * 24)  # ~4 s on two devices
        killer.join()
        after = len(evaluator.devices)
        joining = cluster.add_node(num_cpus=1, resources={DEVICE + "fake-a": 1})  # a device node joins mid-run
        cluster.wait_for_nodes()
        joined = evaluator.measure(space, [{"kernel": "naive"}] * 4)
        return hanging, {"devices_before": devices, "devices_after": after, "devices_joined": len(evaluator.devices),
                         "statuses": [r.status.value for r in results + joined], "lost": evaluator.lost}, joining


def two_classes(address: str, tmp: str) -> dict:
    """`tensortune tune --cluster` with two device classes: two tasks, one per class, each
    storing what the same command stores without a cluster (random search, one seed)."""
    from tensortune import cli

    def tune(db: str, *cluster: str) -> int:
        sys.argv = ["tensortune", "tune", "gemm", "--shape", "32,32,32", "--trials", "8", "--batch", "4",
                    "--strategy", "random", "--seed", "0", "--threads", "1", "--no-baselines", "--db", db,
                    "--json", *cluster]
        try:
            cli.main()
        except SystemExit as done:
            return done.code or 0
        return 0

    code = tune(f"{tmp}/classes.db", "--cluster", address) or tune(f"{tmp}/local.db")
    if code:
        return {"exit": code}
    return {"exit": 0, "cluster": _records(f"{tmp}/classes.db"), "local": _records(f"{tmp}/local.db"),
            "local_hardware": make_target("cpu", 1).hardware}


def node_head(tmp: str) -> dict:
    """From nothing to a cluster tune in two commands: `tensortune node --head` (a Ray head on
    this machine, itself a device node of its class), then `tune --cluster auto`."""
    import shutil
    import subprocess

    command = [sys.executable, "-m", "tensortune"]
    started = subprocess.run([*command, "node", "--head", "--threads", "1"], capture_output=True, text=True,
                             timeout=180)
    try:
        tuned = subprocess.run([*command, "tune", "gemm", "--shape", "32,32,32", "--trials", "4", "--batch", "4",
                                "--strategy", "random", "--threads", "1", "--no-baselines", "--db", f"{tmp}/auto.db",
                                "--json", "--cluster", "auto"], capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run([shutil.which("ray", path=os.path.dirname(sys.executable)), "stop", "--force"],
                       capture_output=True, timeout=120)
    return {"started": started.returncode, "start_output": (started.stdout + started.stderr)[-2000:],
            "tuned": tuned.returncode, "tune_output": tuned.stderr[-2000:],
            "records": _records(f"{tmp}/auto.db") if tuned.returncode == 0 else {},
            "hardware": make_target("cpu", 1).hardware}


def main(out: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1, resources={DEVICE + "fake-a": 1})
    second = cluster.add_node(num_cpus=1, resources={DEVICE + "fake-a": 1})
    cluster.wait_for_nodes()
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        found["hanging"], found["node_lost"], joined = hanging_then_node_lost(cluster, cluster.address, second)
        cluster.remove_node(joined)  # one device of each class: fewer actors, each importing TVM, to start
        cluster.add_node(num_cpus=1, resources={DEVICE + "fake-b": 1})
        cluster.wait_for_nodes()
        found["two_classes"] = two_classes(cluster.address, tmp)
    with open(out, "w") as f:
        json.dump(found, f)
    import ray

    ray.shutdown()
    cluster.shutdown()
    with tempfile.TemporaryDirectory() as tmp:
        found["node_head"] = node_head(tmp)
    with open(out, "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    main(sys.argv[1])
