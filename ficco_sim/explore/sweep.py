"""Sweeps: simulate many (scenario, schedule) points, in parallel, resumably, safely.

A sweep is a list of **jobs**; a job is one scenario on one GPU and topology with its
schedules (they share the baseline), or for the ``analytical`` (closed-form) engine a batch of scenarios.
Jobs run in this process (``jobs=1``), in local processes (``concurrent.futures``) or
on Ray (``ray=True`` or an address). Results come back in job order whatever ran them, so
they are identical across executors.

With an output folder, every finished point is appended to ``<out>/points.jsonl`` as soon as
its job ends, one **checked record** per line (the JSON row, a tab, its CRC-32). Running the
same sweep into the same folder again skips the points already there. A point is known by
its identity (GPU and topology *content*, scenario identity :meth:`Scenario.key`, schedule,
engine), never by a name: after editing a profile or renaming a scenario nothing stale is reused.
A record torn by a crash, at any byte, fails its check and is dropped (the file is rewritten
without it), so the next append never glues onto it. One sweep writes into a folder at a
time (:func:`~ficco_sim.files.folder_lock`). Worker processes die with the sweep, however it
ends; Ctrl-C stops at once and keeps every finished point.

>>> from ficco_sim.workload import Scenario
>>> rows = run_sweep([Job("h100", "switch:2", (Scenario("ag-gemm", 2, 1024, 1024, 1024),),
...                       ("none", "shard-p2p-dma"), "analytical")], progress=False)
>>> [r["schedule"] for r in rows]
['none', 'shard-p2p-dma']
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import threading
import zlib
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..errors import InputError
from ..files import atomic_path, folder_lock
from ..workload import Scenario

ENGINES = ("des", "analytical", "rank")   # rank: the closed form's makespan alone (a confirmed study's first pass)
POINTS_FILE = "points.jsonl"


@dataclass(frozen=True)
class Job:
    """Schedules of some scenarios on one GPU and topology, with one engine."""

    gpu: str
    topology: str
    scenarios: tuple[Scenario, ...]
    schedules: tuple[str, ...]
    engine: str = "des"

    def keys(self, hardware: str = "") -> list[tuple]:
        """The identities of the job's points (``hardware``: :func:`hardware_id` of its pair)."""
        return [point_key(self.gpu, self.topology, hardware, s.key(), str(sch), self.engine)
                for s in self.scenarios for sch in self.schedules]


def point_key(gpu: str, topology: str, hardware: str, scenario_id: str, schedule: str, engine: str) -> tuple:
    return (gpu, topology, hardware, scenario_id, schedule, engine)


def _row_key(row: dict) -> tuple:
    return point_key(row["gpu_arg"], row["topology_arg"], row.get("hardware_id", ""), row["scenario_id"],
                     row["schedule"], row["engine"])


def hardware_id(gpu: str, topology: str) -> str:
    """A digest of every value of the GPU profile and topology ``(gpu, topology)`` load to, and
    of the code's version: the same names after an edit on disk are other hardware, and a
    new release recomputes what it may answer differently."""
    from .. import __version__
    from ..hardware import load_gpu
    from ..topology import load_topology
    from .estimate import fingerprint
    g = load_gpu(gpu)
    text = f"{__version__}\n{fingerprint(g)}\n{fingerprint(load_topology(topology, g))}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def run_job(job: Job) -> list[dict]:
    """Simulate one job; every point gives a row (``status`` ok | invalid | error)."""
    from ..hardware import load_gpu
    from ..simulate import baseline, simulate
    from ..topology import load_topology
    from .estimate import estimate_many, rank_many
    gpu = load_gpu(job.gpu)
    topo = load_topology(job.topology, gpu)
    tag = {"gpu_arg": job.gpu, "topology_arg": job.topology}
    rows: list[dict] = []
    if job.engine in ("analytical", "rank"):
        many = estimate_many if job.engine == "analytical" else rank_many
        try:
            for s in job.scenarios:
                s.check_fits(gpu)
            got = many(job.scenarios, job.schedules, gpu, topo)
            return [dict(r, status="ok", reason="", **tag) for r in got]
        except InputError:
            pass  # fall back to one scenario at a time to locate the bad points
        for s in job.scenarios:
            try:
                s.check_fits(gpu)
            except InputError as e:      # every point of a scenario no GPU holds
                rows += [_failed(s, sch, job, e) for sch in job.schedules]
                continue
            for sch in job.schedules:
                try:
                    rows.append(dict(many([s], [sch], gpu, topo)[0], status="ok", reason="", **tag))
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
    return {**s.columns(), "gpu": job.gpu, "topology": job.topology, "schedule": str(sch), "engine": job.engine,
            "status": status, "reason": msg, "gpu_arg": job.gpu, "topology_arg": job.topology}


# ----------------------------------------------------------------------------------------
# The append-only point log: one checked record per line

def _record(row: dict) -> bytes:
    text = json.dumps(_jsonable(row), sort_keys=True)
    return f"{text}\t{zlib.crc32(text.encode()):08x}\n".encode()


def _parse(line: bytes) -> dict | None:
    """The row of one complete line, or None when the line fails its check."""
    text, tab, crc = line.rpartition(b"\t")
    if not tab or len(crc) != 8:
        return None
    try:
        if int(crc, 16) != zlib.crc32(text):
            return None
        row = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) else None


def read_points(path: Path) -> list[dict]:
    """The checked rows in ``path``. Records that fail their check (torn by a crash at any byte,
    glued to a torn one, or not ficco-sim's) are dropped, and the file is rewritten without them
    so that the next append starts on a record boundary."""
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]   # tail: bytes after the last newline (torn) or b""
    rows = [_parse(line) for line in complete]
    good = [r for r in rows if r is not None]
    if len(good) < len(rows) or tail:
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"".join(_record(r) for r in good))
    return good


def append_points(path: Path, rows: Iterable[dict]) -> None:
    data = b"".join(_record(r) for r in rows)
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _jsonable(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep; the message says what was kept."""


def _die_with(parent: int) -> None:
    """Worker start-up: Ctrl-C is the parent's to handle (a terminal sends it to the whole
    process group), and the worker ends when its parent does, however the parent ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:          # the parent died before the line above ran
        os._exit(1)

    def watch() -> None:                # elsewhere than Linux: notice being orphaned
        while True:
            threading.Event().wait(0.5)
            if os.getppid() != parent:
                os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: queued jobs are cancelled, running ones killed (their points are not
    finished; a resumed sweep computes them)."""
    # no public way to kill a pool's workers before Python 3.14 (``kill_workers``)
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)


def _in_pool(todo: Sequence[Job], workers: int, finished: Callable[[Job, list[dict]], None]) -> None:
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_die_with, initargs=(os.getpid(),))
    clean = False
    try:
        futs = {pool.submit(run_job, j): j for j in todo}
        while futs:
            ready, _ = wait(list(futs), return_when=FIRST_COMPLETED)
            for f in ready:
                finished(futs.pop(f), f.result())
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)
        else:
            _kill_workers(pool)


def _on_ray(todo: Sequence[Job], address, finished: Callable[[Job, list[dict]], None]) -> None:
    rmod = _ray_module(address)
    remote = rmod.remote(run_job)
    pending = {remote.remote(j): j for j in todo}
    try:
        while pending:
            ready, _ = rmod.wait(list(pending), num_returns=1)
            for ref in ready:
                finished(pending.pop(ref), rmod.get(ref))
    finally:
        for ref in pending:
            rmod.cancel(ref, force=True)


def run_sweep(jobs: Sequence[Job], *, workers: int = 1, ray: bool | str = False, out: str | Path | None = None,
              progress: bool = True, on_rows: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Run ``jobs``; return every row in job order (resuming from ``out`` when given).
    Ctrl-C raises :class:`Interrupted` once the workers are gone; finished points stay logged."""
    if workers < 1:
        raise InputError("--jobs", None, f"must be at least 1, got {workers}")
    if out is None:
        return _run(jobs, workers, ray, None, progress, on_rows)
    with folder_lock(out, "an explore sweep"):
        return _run(jobs, workers, ray, Path(out) / POINTS_FILE, progress, on_rows)


def _run(jobs, workers, ray, log: Path | None, progress, on_rows) -> list[dict]:
    hw = {pair: hardware_id(*pair) for pair in dict.fromkeys((j.gpu, j.topology) for j in jobs)}
    keys = {id(j): j.keys(hw[(j.gpu, j.topology)]) for j in jobs}
    done: dict[tuple, dict] = {}
    for r in read_points(log) if log is not None else ():
        if "scenario_id" in r:
            done.setdefault(_row_key(r), r)
    todo = [j for j in jobs if not all(k in done for k in keys[id(j)])]

    def finished(job: Job, rows: list[dict]) -> None:
        # rows pass through JSON whether fresh or resumed: one set of types and values
        rows = [json.loads(json.dumps(_jsonable(dict(r, hardware_id=hw[(job.gpu, job.topology)])), sort_keys=True))
                for r in rows]
        fresh = [r for r in rows if _row_key(r) not in done]
        if log is not None and fresh:
            append_points(log, fresh)
        for r in fresh:
            done[_row_key(r)] = r
        if on_rows:
            on_rows(rows)
        advance(len(rows))

    total = sum(len(k) for k in keys.values())
    already = total - sum(len(keys[id(j)]) for j in todo)
    try:
        with _progress(progress, total, already) as advance:
            if ray:
                _on_ray(todo, ray if isinstance(ray, str) else None, finished)
            elif workers == 1 or len(todo) <= 1:
                for j in todo:
                    finished(j, run_job(j))
            else:
                _in_pool(todo, workers, finished)
    except KeyboardInterrupt:
        kept = len([k for ks in keys.values() for k in ks if k in done])
        where = f" in {log}; run the same command again to resume" if log is not None else ""
        raise Interrupted(f"{kept} of {total} points finished{where}") from None
    return [done[k] for j in jobs for k in keys[id(j)] if k in done]


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
