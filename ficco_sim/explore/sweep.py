"""Sweeps: simulate many (scenario, schedule) points, in parallel, resumably.

A sweep is a list of **jobs**; a job is one scenario on one GPU and topology with its
schedules (they share the baseline), or for the ``analytical`` (closed-form) engine a batch of scenarios.
Jobs run in this process (``jobs=1``), in local processes (``concurrent.futures``) or
on Ray (``ray=True`` or an address). Each finished point is appended to
``<out>/points.jsonl`` (flushed and fsync'ed) as soon as its job ends; running the same
sweep with the same ``out`` again skips the points already there, and a half-written
last line (a crash mid-write) is dropped. Results come back in job order whatever ran
them, so they are identical across executors.

>>> from ficco_sim.workload import Scenario
>>> rows = run_sweep([Job("h100", "switch:2", (Scenario("ag-gemm", 2, 1024, 1024, 1024),),
...                       ("none", "shard-p2p-dma"), "analytical")], progress=False)
>>> [r["schedule"] for r in rows]
['none', 'shard-p2p-dma']
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import InputError
from ..workload import Scenario

ENGINES = ("des", "analytical")
POINTS_FILE = "points.jsonl"


@dataclass(frozen=True)
class Job:
    """Schedules of some scenarios on one GPU and topology, with one engine."""

    gpu: str
    topology: str
    scenarios: tuple[Scenario, ...]
    schedules: tuple[str, ...]
    engine: str = "des"

    def keys(self) -> list[tuple]:
        return [point_key(self.gpu, self.topology, s.label(), sch, self.engine)
                for s in self.scenarios for sch in self.schedules]


def point_key(gpu: str, topology: str, scenario: str, schedule: str, engine: str) -> tuple:
    return (gpu, topology, scenario, schedule, engine)


def _row_key(row: dict) -> tuple:
    return point_key(row["gpu_arg"], row["topology_arg"], row["scenario"], row["schedule"], row["engine"])


def run_job(job: Job) -> list[dict]:
    """Simulate one job; every point gives a row (``status`` ok | invalid | error)."""
    from ..hardware import load_gpu
    from ..simulate import baseline, simulate
    from ..topology import load_topology
    from .estimate import estimate_many
    gpu = load_gpu(job.gpu)
    topo = load_topology(job.topology, gpu)
    tag = {"gpu_arg": job.gpu, "topology_arg": job.topology}
    rows: list[dict] = []
    if job.engine == "analytical":
        try:
            got = estimate_many(job.scenarios, job.schedules, gpu, topo)
            return [dict(r, status="ok", reason="", **tag) for r in got]
        except InputError:
            pass  # fall back to one scenario at a time to locate the bad points
        for s in job.scenarios:
            for sch in job.schedules:
                try:
                    rows.append(dict(estimate_many([s], [sch], gpu, topo)[0], status="ok", reason="", **tag))
                except Exception as e:  # noqa: BLE001 -- recorded, not hidden
                    rows.append(_failed(s, sch, job, e))
        return rows
    for s in job.scenarios:
        try:
            base = baseline(s, gpu, topo, engine=job.engine)
        except Exception as e:  # noqa: BLE001
            rows += [_failed(s, sch, job, e) for sch in job.schedules]
            continue
        for sch in job.schedules:
            try:
                r = simulate(s, sch, gpu, topo, engine=job.engine, base=base)
                rows.append(dict(r.row(), status="ok", reason="", **tag))
            except Exception as e:  # noqa: BLE001
                rows.append(_failed(s, sch, job, e))
    return rows


def _failed(s: Scenario, sch: str, job: Job, e: Exception) -> dict:
    status = "invalid" if isinstance(e, InputError) else "error"
    msg = e.message if isinstance(e, InputError) else f"{type(e).__name__}: {e}"
    return {"scenario": s.label(), "kind": s.kind, "gpus": s.gpus, "m": s.m, "n": s.n, "k": s.k, "dtype": s.dtype,
            "gpu": job.gpu, "topology": job.topology, "schedule": str(sch), "engine": job.engine,
            "status": status, "reason": msg, "gpu_arg": job.gpu, "topology_arg": job.topology}


# ----------------------------------------------------------------------------------------
# The append-only point log

def read_points(path: Path) -> list[dict]:
    """Rows already in ``path``; a torn last line is cut off the file (it was never complete)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    rows, good = [], 0
    for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        try:
            rows.append(json.loads(line))
            good += len(line) + 1
        except (json.JSONDecodeError, UnicodeDecodeError):
            break
    if good < len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
    return rows


def append_points(path: Path, rows: Iterable[dict]) -> None:
    text = "".join(json.dumps(_jsonable(r), sort_keys=True) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def write_atomic(path: Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` then move the result over ``path`` (never a half file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ----------------------------------------------------------------------------------------
# Running

def _ray_module(address):
    try:
        import ray
    except ImportError:
        raise InputError("--ray", None, "ray is not installed; install the extra: pip install 'ficco-sim[ray]'") \
            from None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
    return ray


def run_sweep(jobs: Sequence[Job], *, workers: int = 1, ray: bool | str = False, out: str | Path | None = None,
              progress: bool = True, on_rows: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Run ``jobs``; return every row in job order (resuming from ``out`` when given)."""
    if workers < 1:
        raise InputError("--jobs", None, f"must be at least 1, got {workers}")
    log = None
    done: dict[tuple, dict] = {}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        log = Path(out) / POINTS_FILE
        for r in read_points(log):
            done.setdefault(_row_key(r), r)
    todo = [j for j in jobs if not all(k in done for k in j.keys())]

    def finished(rows: list[dict]) -> None:
        fresh = [r for r in rows if _row_key(r) not in done]
        if log is not None and fresh:
            append_points(log, fresh)
        for r in fresh:
            done[_row_key(r)] = r
        if on_rows:
            on_rows(rows)

    total = sum(len(j.keys()) for j in jobs)
    with _progress(progress, total, total - sum(len(j.keys()) for j in todo)) as advance:
        if ray:
            rmod = _ray_module(ray if isinstance(ray, str) else None)
            remote = rmod.remote(run_job)
            pending = {remote.remote(j): j for j in todo}
            while pending:
                ready, _ = rmod.wait(list(pending), num_returns=1)
                for ref in ready:
                    j = pending.pop(ref)
                    finished(rmod.get(ref))
                    advance(len(j.keys()))
        elif workers == 1 or len(todo) <= 1:
            for j in todo:
                finished(run_job(j))
                advance(len(j.keys()))
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futs = {pool.submit(run_job, j): j for j in todo}
                while futs:
                    ready, _ = wait(list(futs), return_when=FIRST_COMPLETED)
                    for f in ready:
                        j = futs.pop(f)
                        finished(f.result())
                        advance(len(j.keys()))
    return [done[k] for j in jobs for k in j.keys() if k in done]


class _progress:
    """A rich progress bar (on stderr) for long sweeps; a no-op when disabled."""

    def __init__(self, show: bool, total: int, already: int):
        self.show, self.total, self.already = show, total, already
        self.bar = None

    def __enter__(self):
        if self.show and self.total - self.already > 0:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
            self.bar = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("points", total=self.total, completed=self.already)
        return self.advance

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
