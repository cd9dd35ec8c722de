"""One process per rank: spawn, rendezvous, replay every job, tear down.

The parent picks a free TCP port on 127.0.0.1, spawns ``world_size`` processes with
``torch.multiprocessing.start_processes`` (``spawn``), and joins them under a deadline;
past it, or when one rank fails, every still-running child is killed and joined, so no
process outlives :func:`run_distributed`. Each rank initialises ``torch.distributed``
(gloo on CPU, NCCL with ``device_id`` on GPUs) with ``timeout=60 s`` so a broken
schedule fails instead of hanging, replays all jobs (spawning once per run, not per
job), and rank 0 writes the gathered results to a JSON file the parent reads. With
``profile_dir`` each rank then replays the job once more under the profiler and writes
its own trace (:func:`_profile_rank`).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from . import reference
from .executor import Job, ReplayOptions, ReplayResult, audit, device_name, oracle, profiled, trace_path, verify
from .plan import plan_rank

INIT_TIMEOUT = timedelta(seconds=60)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wants_high_priority_comm(jobs: list[Job]) -> bool:
    for job in jobs:
        prios = [s.priority for s in job.graph.streams]
        comm = [s.priority for s in job.graph.streams if s.name == "comm"]
        if comm and max(comm) > min(prios):
            return True
    return False


def _init(rank: int, world: int, port: int, opts: ReplayOptions, high_prio: bool) -> None:
    kw: dict = {}
    if opts.device == "cuda":
        torch.cuda.set_device(rank)
        backend = "nccl"
        kw["device_id"] = torch.device("cuda", rank)
        if high_prio and hasattr(dist, "ProcessGroupNCCL"):
            o = dist.ProcessGroupNCCL.Options()
            o.is_high_priority_stream = True
            kw["pg_options"] = o
    else:
        torch.set_num_threads(1)
        backend = "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=INIT_TIMEOUT, **kw)


class _RankReplay:
    """One job prepared on this rank (program, buffers, runner), timed one run at a time so
    that the jobs of a group can take turns (:func:`_replay_group`)."""

    def __init__(self, job: Job, rank: int, opts: ReplayOptions):
        self.job, self.rank, self.opts = job, rank, opts
        graph = job.graph
        self.notes: list[str] = []
        program = plan_rank(graph, rank)
        if program.dropped_deps:
            self.notes.append(f"{program.dropped_deps} cross-rank dependencies left to the transfers that carry "
                              "the data")
        dev = torch.device("cuda", rank) if opts.device == "cuda" else torch.device("cpu")
        dtype = reference.exec_dtype(graph, opts.device)
        inputs = reference.input_buffers(graph)
        self.bufs = reference.make_inputs(graph, rank, inputs, dtype, dev, opts.seed)
        if opts.device == "cuda":
            from .cuda import CudaRunner
            self.runner = CudaRunner(graph, program, {rank: self.bufs}, {rank: dev}, self.notes, distributed=True)
        else:
            from .cpu import CpuRankRunner
            self.runner = CpuRankRunner(graph, program, self.bufs, self.notes)
        from .single_gpu import _restorer
        self.restore = _restorer({rank: self.bufs}, graph, inputs, opts)   # GPU: a device copy
        self.times: list[float] = []
        self.parts: list[dict] = []

    def once(self, timed: bool) -> None:
        """One replay from a barrier; ``timed``: keep its span (every rank's, on CPU)."""
        self.restore()
        if self.opts.device == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        if self.opts.device == "cuda":
            span = self.runner.run()
        else:
            t0, t1 = self.runner.run()
            spans: list = [None] * dist.get_world_size()
            dist.all_gather_object(spans, (t0, t1))
            span = max(e for _, e in spans) - min(s for s, _ in spans)
        if timed:
            self.times.append(span)
            if self.opts.device != "cuda":
                self.parts.append(self.runner.parts)

    def finish(self) -> dict:
        """Check the result (of the last run), profile once if asked, and summarise."""
        graph, opts = self.job.graph, self.opts
        if opts.device == "cuda" and (note := self.runner.gate_note(opts.warmup)):
            self.notes.append(note)
        ref_bufs = None if reference.ref_spec(graph) else oracle(graph, opts.seed)[self.rank]
        ok, err = verify(graph, self.rank, self.bufs, opts.seed, ref_bufs)
        if ref_bufs is not None:
            self.notes.append("no meta.reference: checked against a sequential CPU replay of the same graph")
        if opts.profile_dir:
            _profile_rank(self.job, self.rank, opts, self.runner, self.restore)
        parts = self.parts
        mid = {k: float(sorted(p[k] for p in parts)[len(parts) // 2]) for k in (parts[0] if parts else {})}
        return {"times": self.times, "ok": ok, "err": err, "notes": self.notes, "parts": mid}


def _replay_group(group: list[Job], rank: int, opts: ReplayOptions) -> list[dict]:
    """Replay the jobs of one group taking turns: every round runs each job once, starting
    one job later than the round before, so a slow spell of the host (another process, a
    frequency change) falls on all of them alike and their ranking compares like with like.
    Warm-up rounds first; the result check sees each job's last run."""
    prepared = [_RankReplay(job, rank, opts) for job in group]
    for i, order in enumerate(turns(len(prepared), opts.warmup + opts.repeats)):
        for j in order:
            prepared[j].once(timed=i >= opts.warmup)
    return [p.finish() for p in prepared]


def turns(jobs: int, rounds: int) -> list[list[int]]:
    """The order in which a group's ``jobs`` run, round by round: each round runs every job
    once, and round ``i`` starts with job ``i mod jobs`` (no job always runs first, right
    after the barrier, or last).

    >>> turns(3, 4)
    [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    """
    return [[(i + j) % jobs for j in range(jobs)] for i in range(rounds)]


def groups_of(jobs: list[Job]) -> list[list[Job]]:
    """Consecutive jobs with the same :attr:`Job.group` (``None``: a job on its own).

    >>> from ficco_sim.validate.testing import tiny_ag_gemm
    >>> g = tiny_ag_gemm()
    >>> [[j.name for j in b] for b in groups_of([Job("a", g, "x"), Job("b", g, "x"), Job("c", g), Job("d", g)])]
    [['a', 'b'], ['c'], ['d']]
    """
    out: list[list[Job]] = []
    for job in jobs:
        if out and job.group is not None and out[-1][-1].group == job.group:
            out[-1].append(job)
        else:
            out.append([job])
    return out


def _profile_rank(job: Job, rank: int, opts: ReplayOptions, runner, restore) -> None:
    """One more replay of ``job`` under the profiler, after the timed repeats and the
    check; the trace records this rank's own start/end (perf_counter s on CPU) or its
    event-timed makespan (s, GPU) under ``ficco``."""
    graph = job.graph
    restore()
    if opts.device == "cuda":
        torch.cuda.synchronize()
    meta = {"job": job.name, "rank": rank, "world_size": dist.get_world_size(), "device": opts.device,
            "mode": opts.mode, "schedule": graph.meta.get("schedule"), "scenario": graph.meta.get("scenario")}
    with profiled(trace_path(opts.profile_dir, job.name, rank), opts.device, meta) as m:
        dist.barrier()
        if opts.device == "cuda":
            m["makespan_s"] = runner.run(label=True)
        else:
            m["run_start_s"], m["run_end_s"] = runner.run(label=True)


def _worker(rank: int, world: int, port: int, jobs: list[Job], opts: ReplayOptions, out: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _init(rank, world, port, opts, _wants_high_priority_comm(jobs))
    try:
        dist.barrier()
        results = []
        for job, mine in ((j, m) for g in groups_of(jobs) for j, m in zip(g, _replay_group(g, rank, opts))):
            every: list = [None] * world
            dist.all_gather_object(every, mine)
            if opts.device == "cuda":
                # Each rank timed its own streams; the run ends when the last rank does.
                times = [max(r["times"][i] for r in every) for i in range(len(mine["times"]))]
            else:
                times = mine["times"]
            results.append({"name": job.name, "times": times, "ok": all(r["ok"] for r in every),
                            "err": max(r["err"] for r in every),
                            "notes": sorted({n for r in every for n in r["notes"]}),
                            "parts": {k: sum(r["parts"][k] for r in every) / world for k in mine["parts"]}})
        if rank == 0:
            Path(out).write_text(json.dumps(results))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(fn, args: tuple, world_size: int, timeout: float, what: str, complete=lambda: False) -> None:
    """Spawn ``fn(rank, *args)`` on ``world_size`` processes and join them within ``timeout``
    seconds; past it, or when one fails, kill and join every one still running. A rank
    killed by a signal while exiting is forgiven when ``complete()`` says its work is done
    (torch's profiler and gloo threads can abort a rank at exit: "terminate called without
    an active exception")."""
    ctx = mp.start_processes(fn, args=args, nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} exceeded {timeout:.0f} s; ranks killed")
    except mp.ProcessExitedException as exc:
        if exc.signal_name is None or not complete():
            raise
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)


def _complete(path: str, jobs: list[Job]) -> bool:
    """Whether ``path`` holds the results of every job (rank 0 writes them in one go)."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rows, list) and [r.get("name") for r in rows] == [j.name for j in jobs]


def run_distributed(jobs: list[Job], opts: ReplayOptions) -> list[ReplayResult]:
    """Replay ``jobs`` with one process per rank; see module docstring."""
    feats = {}
    if opts.device == "cuda":
        from ..errors import InputError
        from .cuda import features
        feats = features()
        if feats.get("devices", 0) < opts.world_size:
            raise InputError("--world-size", None, f"{opts.world_size} ranks need {opts.world_size} GPUs (NCCL "
                             f"allows one rank per GPU), {feats.get('devices', 0)} visible; try --single-gpu")
    not_honoured = {job.name: audit(job.graph, opts, feats) for job in jobs}   # may refuse before spawning
    with tempfile.TemporaryDirectory(prefix="ficco-validate-") as tmp:
        out = os.path.join(tmp, "results.json")
        run_ranks(_worker, (opts.world_size, free_port(), jobs, opts, out), opts.world_size, opts.timeout,
                  "validation replay", lambda: _complete(out, jobs))
        rows = json.loads(Path(out).read_text())
    name = device_name(opts.device)
    return [ReplayResult(r["name"], r["times"], r["ok"], r["err"], not_honoured[r["name"]], r["notes"], name,
                         r.get("parts", {})) for r in rows]
