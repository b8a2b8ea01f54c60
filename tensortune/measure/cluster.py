"""The Ray evaluator: one tuning run's builds and timings spread over a Ray cluster.

The coordinator (the process that tunes) schedules each point, as the local Measurer does, and
sends the scheduled module to a builder: a Ray actor holding one CPU on any node, compiling
in a worker process of its own (measure/pool.py), so a compiler crash or hang costs that
candidate only and the time limit counts from when the compile starts, not from when the job
was queued. The library comes back as bytes and goes to a device: an actor pinned to a node
by the custom resource `tensortune-device:<hardware>` (the node declares it when it joins:
`tensortune node` prints the command), which checks and times one kernel at a time in its own
run worker, holding its host's cores (measure/cores.py) so no build of this run, or of
another tensortune process on that host, runs meanwhile.

The coordinator alone answers: one Result per point, which the tuning round stores (in one
transaction per round, keyed by point), so a retried job cannot store a point twice. A job
whose actor dies (its node lost) is sent once more to another actor; lost again, it is
answered as a crash with the reason, and the run goes on with the actors left. Devices are
never mixed: an evaluator times on one device class (hardware fingerprint), which is the
`hardware` of the records it makes; several devices of that class share the work.
"""
from __future__ import annotations

import itertools
import os
import tempfile
import time
from dataclasses import dataclass

from ..errors import UserError
from ..points import Point, point_key
from . import cores, tasks
from .config import MeasureConfig
from .measurer import DrawSeeds, build_failure, run_result, schedule
from .pool import Outcome, WorkerPool
from .result import Result

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


def node_command(hardware: str, address: str = "HEAD:6379") -> str:
    """The `ray start` command that makes this machine a device node of its class."""
    return f"ray start --address={address} --resources='{{\"{DEVICE}{hardware}\": 1}}'"


class _Builder:
    """A Ray actor: compiles scheduled modules in a worker process, returns the files."""

    def __init__(self, timeout_s: float):
        self.pool = WorkerPool(1, tasks.build)
        self.tmp = tempfile.mkdtemp(prefix="tensortune-ray-build-")
        self.serial = itertools.count()
        self.timeout_s = timeout_s

    def build(self, module: str, target: dict) -> Outcome:
        path = os.path.join(self.tmp, f"{next(self.serial)}.so")
        with cores.turn(alone=False):  # never while a device on this host times
            outcome = self.pool.map([tasks.BuildTask(module, target, path)], self.timeout_s)[0]
        files = _take_files(path)
        return Outcome(True, (files, outcome.value)) if outcome.ok else outcome


class _Device:
    """A Ray actor pinned to a device node: checks and times one kernel at a time."""

    def __init__(self, threads: int):
        self.pool = WorkerPool(1, tasks.run, env={"TVM_NUM_THREADS": str(threads), cores.SPIN: cores.KERNEL_SPIN},
                               self_timed=True)
        self.tmp = tempfile.mkdtemp(prefix="tensortune-ray-run-")
        self.serial = itertools.count()

    def run(self, files: dict[str, bytes], job: tuple, timeout_s: float) -> Outcome:
        """`job`: RunTask's fields but the path (workload ident, timing, seed, device)."""
        base = os.path.join(self.tmp, str(next(self.serial)))
        for suffix, data in files.items():
            with open(base + suffix, "wb") as f:
                f.write(data)
        workload, timing, seed, device = job
        with cores.turn(alone=True):
            outcome = self.pool.map([tasks.RunTask(workload, base + ".so", timing, seed, device)], timeout_s)[0]
        _take_files(base + ".so")
        return outcome


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
    index: int
    args: tuple
    tries: int = 0


class RayEvaluator:
    """The evaluator (see evaluator.py) over a Ray cluster, timing on the devices of one
    class (`hardware`). Close it, or use it as a context."""

    def __init__(self, target_spec: dict, config: MeasureConfig, hardware: str):
        import ray

        connect(config.cluster)
        classes = device_classes(config.cluster)
        if hardware not in classes:
            raise UserError(f"the Ray cluster has no device of class {hardware} (it has: "
                            f"{', '.join(classes) or 'none'}); start a device node with {node_command(hardware)}",
                            option="--cluster")
        self.target, self.config, self.hardware = target_spec, config, hardware
        self.draws = DrawSeeds(config.seed)
        builders = max(1, int(ray.cluster_resources().get("CPU", 1)) - classes[hardware])
        self.builders = [ray.remote(num_cpus=1)(_Builder).remote(config.build_timeout_s) for _ in range(builders)]
        self.devices = [ray.remote(num_cpus=0, resources={DEVICE + hardware: 1})(_Device).remote(config.threads)
                        for _ in range(classes[hardware])]
        self.built: dict[tuple, tuple[dict, float]] = {}  # (workload, space, point) -> (files, build seconds)
        self.lost: list[str] = []  # why actors were given up, for the run's report
        self.phase_s = {"build": 0.0, "run": 0.0}  # wall seconds in each phase, all rounds (benchmarks/cluster.py)
        self.jobs = {"build": 0, "run": 0}

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        keys = [(space.workload.ident, space.name, point_key(p)) for p in points]
        builds = self._build(space, points, keys)
        cfg = self.config
        timing = cfg.timing(final, cutoff_s)
        run_timeout = min(cfg.run_timeout_s, max(cfg.min_run_timeout_s, 8 * cutoff_s))
        seed = self.draws.seed(space.workload, final)
        device = "cuda" if self.target["kind"] == "cuda" else "cpu"
        built = [i for i, b in enumerate(builds) if b.ok]
        runs = self._spread(self.devices, "run", [_Job(i, (builds[i].value[0], (space.workload.ident, timing, seed, device),
                                                            run_timeout)) for i in built])
        results = [build_failure(b) for b in builds]
        for i in built:
            results[i] = run_result(runs[i], builds[i].value[1])
            if results[i].ok:
                self.built[keys[i]] = builds[i].value
        return results

    def _build(self, space, points: list[Point], keys: list[tuple]) -> list[Outcome]:
        outcomes = [Outcome(True, self.built[k]) if k in self.built else schedule(space, p) for k, p in zip(keys, points)]
        todo = [i for i, (k, o) in enumerate(zip(keys, outcomes)) if o.ok and k not in self.built]
        done = self._spread(self.builders, "build", [_Job(i, (outcomes[i].value, self.target)) for i in todo])
        for i in todo:
            outcomes[i] = done[i]
        return outcomes

    def _spread(self, actors: list, method: str, jobs: list[_Job]) -> dict[int, Outcome]:
        """Each job on a free actor, one job per actor at a time; a job whose actor died goes
        once more to another (the actor is dropped); answers by job index."""
        import ray
        from ray.exceptions import RayActorError

        start = time.perf_counter()
        self.jobs[method] += len(jobs)
        answers: dict[int, Outcome] = {}
        pending, running = list(jobs)[::-1], {}  # running: object ref -> (actor, job)
        while pending or running:
            busy = [actor for actor, _ in running.values()]
            free = [a for a in actors if a not in busy]
            while pending and free:
                job, actor = pending.pop(), free.pop()
                running[getattr(actor, method).remote(*job.args)] = (actor, job)
            if not running:
                raise UserError(f"no {method} actor is left in the Ray cluster ({'; '.join(self.lost)})")
            (ref,), _ = ray.wait(list(running), num_returns=1)
            actor, job = running.pop(ref)
            try:
                answers[job.index] = ray.get(ref)
            except RayActorError as err:  # its node is gone: drop the actor, try the job once more
                if actor in actors:
                    actors.remove(actor)
                self.lost.append(f"a {method} actor died: {str(err).strip().splitlines()[0][:120]}")
                job.tries += 1
                if job.tries > RETRIES:
                    answers[job.index] = Outcome(False, kind="crash", reason=f"lost with its node {job.tries} times")
                else:
                    pending.append(job)
        self.phase_s[method] += time.perf_counter() - start
        return answers

    def close(self) -> None:
        import ray

        for actor in self.builders + self.devices:
            ray.kill(actor)

    def __enter__(self) -> "RayEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
