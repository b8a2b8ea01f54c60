"""The Ray evaluator: one tuning run's builds and timings spread over a Ray cluster.

The coordinator (the process that tunes) schedules each point, as the local Measurer does, and
sends the scheduled module to a builder: a Ray actor holding one CPU on any node, compiling
in a worker process of its own (measure/pool.py), so a compiler crash or hang costs that
candidate only and the time limit counts from when the compile starts, not from when the job
was queued. The library comes back as bytes and goes to a device as soon as one is free (the
other builds go on meanwhile, so a device does not wait for a round's last compile): an actor
pinned to a node by the custom resource `tensortune-device:<hardware>` (the node declares it
when it joins: `tensortune node` prints the command), which checks and times one kernel at a
time in its own run worker, holding its host's cores (measure/cores.py) so no build of this run, or of
another tensortune process on that host, runs meanwhile.

The coordinator alone answers: one Result per point, which the tuning round stores (in one
transaction per round, keyed by point), so a retried job cannot store a point twice. A job
whose actor dies (its node lost) is sent once more to another actor; lost again, it is
answered as a crash with the reason, and the run goes on with the actors left. Devices are
never mixed: an evaluator times on one device class (hardware fingerprint), which is the
`hardware` of the records it makes; several devices of that class share the work, and nodes
that join the cluster during a run get actors from the next round on.
"""
from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass

from ..errors import UserError
from ..target import Target
from ..points import Point, point_key
from . import cores, tasks
from .config import MeasureConfig
from .measurer import DrawSeeds, build_failure, run_result, schedule
from .pool import Outcome, WorkerPool
from ..result import Result

DEVICE = "tensortune-device:"  # a node's custom resource: DEVICE + its hardware fingerprint
RETRIES = 1  # a job whose actor died is sent again this many times


def connect(address: str) -> None:
    """Join the Ray cluster at `address` ("auto": the one this machine belongs to) as a
    driver; a UserError if Ray is not installed or the cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise UserError("--cluster needs Ray: pip install -e '.[cluster]'") from None
    if ray.is_initialized():
        return
    if address != "auto":  # Ray itself retries an unreachable address for minutes
        _probe(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as err:  # Ray's ConnectionError, ValueError, ... : one line either way
        raise UserError(f"cannot reach the Ray cluster at '{address}': {type(err).__name__}: "
                        f"{str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}", option="--cluster") from None


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """A UserError now if nothing listens at host:port."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as err:
        raise UserError(f"cannot reach the Ray cluster at '{address}' ({err}); give the head's HOST:PORT "
                        "(ray start --head prints it) or auto", option="--cluster") from None


def device_classes(address: str) -> dict[str, int]:
    """Hardware fingerprint -> devices of that class in the cluster (their nodes' resources)."""
    import ray

    connect(address)
    return {name.removeprefix(DEVICE): int(count) for name, count in ray.cluster_resources().items()
            if name.startswith(DEVICE)}


def node_argv(hardware: str, address: str | None) -> list[str]:
    """The `ray start` command that makes this machine a device node of its class: the head of
    a new cluster where `address` is None, else a node joining the head at `address`."""
    import json

    where = "--head" if address is None else f"--address={address}"
    return ["ray", "start", where, f"--resources={json.dumps({DEVICE + hardware: 1})}"]


def node_command(hardware: str, address: str = "HEAD:6379") -> str:
    """`node_argv` as a shell line, to print."""
    import shlex

    return shlex.join(node_argv(hardware, address))


class _Builder:
    """A Ray actor: compiles scheduled modules in a worker process, returns the files."""

    def __init__(self, timeout_s: float):
        self.pool = WorkerPool(1, tasks.build)
        self.tmp = tempfile.mkdtemp(prefix="tensortune-ray-build-")
        self.serial = itertools.count()
        self.timeout_s = timeout_s

    def build(self, module: str, target: dict) -> tuple[Outcome, float]:
        """(the outcome, with the files when built; seconds it held the cores)."""
        path = os.path.join(self.tmp, f"{next(self.serial)}.so")
        with cores.turn(alone=False):  # never while a device on this host times
            start = time.perf_counter()
            outcome = self.pool.map([tasks.BuildTask(module, target, path)], self.timeout_s)[0]
            held = time.perf_counter() - start
        files = _take_files(path)
        return (Outcome(True, (files, outcome.value)) if outcome.ok else outcome), held


class _Device:
    """A Ray actor pinned to a device node: checks and times one kernel at a time."""

    def __init__(self, threads: int):
        self.pool = WorkerPool(1, tasks.run, env={"TVM_NUM_THREADS": str(threads), cores.SPIN: cores.KERNEL_SPIN},
                               self_timed=True)
        self.tmp = tempfile.mkdtemp(prefix="tensortune-ray-run-")
        self.serial = itertools.count()

    def run(self, files: dict[str, bytes], job: tuple, timeout_s: float) -> tuple[Outcome, float]:
        """`job`: RunTask's fields but the path (workload ident, timing, seed, device). Returns
        (the outcome, seconds it held the device)."""
        base = os.path.join(self.tmp, str(next(self.serial)))
        for suffix, data in files.items():
            with open(base + suffix, "wb") as f:
                f.write(data)
        workload, timing, seed, device = job
        with cores.turn(alone=True):
            start = time.perf_counter()
            outcome = self.pool.map([tasks.RunTask(workload, base + ".so", timing, seed, device)], timeout_s)[0]
            held = time.perf_counter() - start
        _take_files(base + ".so")
        return outcome, held


def _take_files(path: str) -> dict[str, bytes]:
    """The library at `path` and the files beside it (a CUDA binary), read and removed."""
    base = os.path.splitext(path)[0]
    files = {}
    for suffix in (".so", ".fatbin", ".sha256"):
        if os.path.exists(base + suffix):
            with open(base + suffix, "rb") as f:
                files[suffix] = f.read()
            os.remove(base + suffix)
    return files


@dataclass
class _Job:
    index: int  # the point's place in the round
    method: str  # "build" (on a builder) or "run" (on a device)
    args: tuple
    tries: int = 0


class RayEvaluator:
    """The evaluator (see evaluator.py) over a Ray cluster, timing on the devices of one
    class (`hardware`). Close it, or use it as a context."""

    def __init__(self, target: Target, config: MeasureConfig, hardware: str):
        connect(config.cluster)
        classes = device_classes(config.cluster)
        if hardware not in classes:
            raise UserError(f"the Ray cluster has no device of class {hardware} (it has: "
                            f"{', '.join(classes) or 'none'}); start a device node with {node_command(hardware)}",
                            option="--cluster")
        self.target, self.config, self.hardware = target, config, hardware
        self.draws = DrawSeeds(config.seed)
        self.builders: list = []  # Ray actor handles, made by _grow
        self.devices: list = []
        self.built: dict[tuple, tuple[dict, float]] = {}  # (workload, space, point) -> (files, build seconds)
        self.lost: list[str] = []  # why actors were given up, for the run's report
        # each job's (build | run, sent, answered, seconds its actor held the cores or device): benchmarks/cluster.py
        self.spans: list[tuple[str, float, float, float]] = []

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        self._grow()
        keys = [(space.workload.ident, space.name, point_key(p)) for p in points]
        cfg = self.config
        job = (space.workload.ident, cfg.timing(final, cutoff_s), self.draws.seed(space.workload, final),
               "cuda" if self.target.kind == "cuda" else "cpu")
        run_timeout = min(cfg.run_timeout_s, max(cfg.min_run_timeout_s, 8 * cutoff_s))
        run = lambda i: _Job(i, "run", (builds[i][0], job, run_timeout))  # noqa: E731
        results: list[Result | None] = [None] * len(points)
        builds: dict[int, tuple[dict, float]] = {}  # index -> (files, build seconds)
        jobs = []
        for i, (key, point) in enumerate(zip(keys, points)):
            if key in self.built:  # built and correct in an earlier round: time it again only
                builds[i] = self.built[key]
                jobs.append(run(i))
                continue
            scheduled = schedule(space, point)
            if scheduled.ok:
                jobs.append(_Job(i, "build", (scheduled.value, self.target.spec)))
            else:
                results[i] = build_failure(scheduled)

        def then(done: _Job, outcome: Outcome) -> _Job | None:
            if done.method == "build":
                if not outcome.ok:
                    results[done.index] = build_failure(outcome)
                    return None
                builds[done.index] = outcome.value
                return run(done.index)
            results[done.index] = run_result(outcome, builds[done.index][1])
            if results[done.index].ok:
                self.built[keys[done.index]] = builds[done.index]
            return None

        self._dispatch(jobs, then)
        return results

    def _grow(self) -> None:
        """Actors for the nodes that joined since the last round: as many builders as the
        cluster's CPUs not counted for devices, a device actor per device of the class. (An
        actor whose node left is dropped when a job finds it dead.)"""
        import ray

        resources = ray.cluster_resources()
        devices = int(resources.get(DEVICE + self.hardware, 0))
        builders = max(1, int(resources.get("CPU", 1)) - devices)
        self.builders += [ray.remote(num_cpus=1)(_Builder).remote(self.config.build_timeout_s)
                          for _ in range(builders - len(self.builders))]
        self.devices += [ray.remote(num_cpus=0, resources={DEVICE + self.hardware: 1})(_Device).remote(self.config.threads)
                         for _ in range(devices - len(self.devices))]

    def _dispatch(self, jobs: list[_Job], then) -> None:
        """Each job on a free actor of its kind (builders, devices), one job per actor at a
        time. `then(job, outcome)` takes each answer and may give a next job (a build's run),
        which starts as soon as a device is free: a device times the round's first kernels
        while the builders compile the rest. A job whose actor died goes once more to another
        (the actor is dropped); lost again, it is answered as a crash."""
        import ray
        from ray.exceptions import RayActorError

        actors = {"build": self.builders, "run": self.devices}
        pending = {"build": deque(j for j in jobs if j.method == "build"),
                   "run": deque(j for j in jobs if j.method == "run")}
        running: dict = {}  # object ref -> (actor, job, start)
        while any(pending.values()) or running:
            busy = [actor for actor, _, _ in running.values()]
            for method, queue in pending.items():
                free = [a for a in actors[method] if a not in busy]
                while queue and free:
                    job, actor = queue.popleft(), free.pop()
                    running[getattr(actor, method).remote(*job.args)] = (actor, job, time.perf_counter())
            if not running:
                method = next(m for m, queue in pending.items() if queue)
                raise UserError(f"no {method} actor is left in the Ray cluster ({'; '.join(self.lost)})")
            (ref,), _ = ray.wait(list(running), num_returns=1)
            actor, job, start = running.pop(ref)
            try:
                outcome, held = ray.get(ref)
            except RayActorError as err:  # its node is gone: drop the actor, try the job once more
                if actor in actors[job.method]:
                    actors[job.method].remove(actor)
                self.lost.append(f"a {job.method} actor died: {str(err).strip().splitlines()[0][:120]}")
                job.tries += 1
                if job.tries <= RETRIES:
                    pending[job.method].append(job)
                    continue
                outcome, held = Outcome(False, kind="crash", reason=f"lost with its node {job.tries} times"), 0.0
            self.spans.append((job.method, start, time.perf_counter(), held))
            follow = then(job, outcome)
            if follow is not None:
                pending[follow.method].append(follow)

    def close(self) -> None:
        import ray

        for actor in self.builders + self.devices:
            ray.kill(actor)

    def __enter__(self) -> "RayEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
