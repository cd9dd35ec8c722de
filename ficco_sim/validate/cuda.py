"""The CUDA runner: the same program, issued asynchronously onto prioritised streams.

* A job's streams are handed out by position: its i-th stream of one (device, priority)
  is the same object in every job of the process (:func:`pooled`). torch hands out
  streams from pools of 32 per priority, round robin, so a job's first 32 of a priority
  are distinct whatever ran before; beyond that a stream of the lowest (default) priority
  is a raw ``cudaStreamCreate`` stream outside the pool (an 8-rank FiCCO replay with DMA
  copies needs 40), and only where none can be made do two of the job's streams share a
  queue (the result says so). In single-GPU mode every emulated rank keeps its own CUDA
  streams, so independent ranks are not serialised behind each other on one shared
  stream. A ficco priority (larger = more urgent) maps
  to a CUDA priority with :func:`.executor.to_torch_priority` inside
  ``torch.cuda.Stream.priority_range()``.
* One event per op; an op's stream waits on the events of its dependencies issued on
  other streams (same-stream order is free).
* A ``torch.cuda._sleep`` gate holds every stream until the host has finished issuing,
  so launch latency does not masquerade as overlap; the makespan is the time from the
  gate's start event to the last stream's end event (``reference/torch_executor.md`` 6).
  If the gate had already opened when the host finished issuing, the sleep was too
  short: it is doubled for the next run and the result carries a note.
* GEMMs are ``torch.mm(..., out=view)``; reductions ``add``; DMA transfers are
  contiguous ``copy_`` (a copy engine between GPUs; on one GPU SM-scheduled work, as
  measured on an H200), SM transfers in one process are copy kernels
  (``torch._foreach_copy_``), and across processes NCCL ``batch_isend_irecv`` groups.

Nothing here has run on a GPU in CI; :func:`features` detects what the installed torch
offers so that the report can say what was and was not honoured.
"""

from __future__ import annotations

import importlib.util
from typing import Callable

import torch

from ..taskgraph import TaskGraph
from .executor import compute_fn, op_range, to_torch_priority, view
from .plan import Op, Program, batches

_POOLS: dict[tuple[int, int], list[tuple["torch.cuda.Stream", bool]]] = {}   # (device, priority) -> (stream, own)
SLEEP_CYCLES_PER_OP = 100_000     # ~50 us of host issue time per op at ~2 GHz (Python issue is slow)
SLEEP_CYCLES_MAX = 2_000_000_000  # ~1 s at ~2 GHz
STREAM_POOL = 32                  # torch's streams per (device, priority) before they alias


def features() -> dict:
    """What this torch/CUDA install offers the executor (feature-detected)."""
    f: dict = {"cuda": torch.cuda.is_available()}
    if not f["cuda"]:
        return f
    f["priority_range"] = tuple(torch.cuda.Stream.priority_range())
    f["sleep_gate"] = hasattr(torch.cuda, "_sleep")
    f["foreach_copy"] = hasattr(torch, "_foreach_copy_")
    try:
        f["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - no NCCL in this build
        f["nccl"] = None
    f["cupy"] = importlib.util.find_spec("cupy") is not None
    f["cuda_core"] = importlib.util.find_spec("cuda.core") is not None if importlib.util.find_spec("cuda") else False
    if f["cupy"] or f["cuda_core"]:
        f["smem_reason"] = ("cupy/cuda.core is installed but the resident shared-memory kernel is not implemented "
                            "in this executor yet")
    else:
        f["smem_reason"] = "neither cupy nor cuda.core is installed (needed for a resident shared-memory kernel)"
    f["devices"] = torch.cuda.device_count()
    return f


def raw_stream(device: torch.device) -> "torch.cuda.Stream | None":
    """A new stream outside torch's pool (``cudaStreamCreate``: the default, lowest priority,
    and blocking: it waits for the legacy default stream, which the replay leaves idle while it
    runs), or None where this torch offers no way to make one. Kept for the process's life."""
    try:
        import ctypes
        handle = ctypes.c_void_p()
        with torch.cuda.device(device):
            err = torch.cuda.cudart().cudaStreamCreate(ctypes.addressof(handle))
        if int(getattr(err, "value", err)) != 0 or not handle.value:
            return None
        return torch.cuda.ExternalStream(handle.value, device=device)
    except Exception:  # noqa: BLE001 - no cudart binding in this build: the pool's stream is used
        return None


def pooled(device: torch.device, priority: int, i: int, lowest: int) -> tuple["torch.cuda.Stream", bool]:
    """A job's ``i``-th stream of ``(device, priority)`` and whether it is its own (False: it
    shares torch's pool queue with the job's stream ``i - 32``)."""
    pool = _POOLS.setdefault((device.index or 0, priority), [])
    while len(pool) <= i:
        raw = raw_stream(device) if len(pool) >= STREAM_POOL and priority == lowest else None
        pool.append((raw, True) if raw is not None else
                    (torch.cuda.Stream(device=device, priority=priority), len(pool) < STREAM_POOL))
    return pool[i]


def aliased_pools(counts: dict[tuple[int, int], int], shared: dict[tuple[int, int], int]) -> list[str]:
    """One line per (device, priority) where the job has streams sharing a queue:
    ``counts`` its streams there, ``shared`` how many of them are not their own."""
    return [f"cuda:{d} priority {p}: {counts[(d, p)]} streams, {n} sharing a queue"
            for (d, p), n in sorted(shared.items()) if n]


def foreach_is_kernel(dsts: list, srcs: list) -> bool:
    """Whether ``torch._foreach_copy_(dsts, srcs)`` takes its fused CUDA kernel: one
    device and dtype for all, and every pair of equal sizes and strides, non-overlapping
    and dense (``ForeachUtils.h``); otherwise it silently runs per-tensor ``copy_``."""
    dev, dt = dsts[0].device, dsts[0].dtype
    for d, s in zip(dsts, srcs):
        if d.device != dev or s.device != dev or d.dtype != dt or s.dtype != dt:
            return False
        if d.shape != s.shape or d.stride() != s.stride() or not (d.is_contiguous() and s.is_contiguous()):
            return False
    return True


class CudaRunner:
    """Prepared replay of a program on CUDA.

    ``bufs[r]`` are rank r's buffers; ``device_of[gpu]`` the torch device of task-graph
    GPU ``gpu`` (all the same in single-GPU mode). ``distributed``: send/recv ops go to
    NCCL (this process is one rank); otherwise the program has only local ops.
    """

    def __init__(self, graph: TaskGraph, program: Program, bufs: dict[int, dict[str, torch.Tensor]],
                 device_of: dict[int, torch.device], notes: list[str], distributed: bool = False):
        self.program = program
        self.bufs = bufs
        self.device_of = device_of
        self.distributed = distributed
        self.notes = notes
        rng = tuple(torch.cuda.Stream.priority_range())
        prios = sorted(set(program.streams.values()))
        wanted = dict(program.streams)
        for op in program.ops:   # streams the planner did not list (defensive): lowest priority
            wanted.setdefault(op.stream, None)
        counts: dict[tuple[int, int], int] = {}
        shared: dict[tuple[int, int], int] = {}

        def take(device: torch.device, prio: int):
            key = (device.index or 0, prio)
            i = counts[key] = counts.get(key, 0) + 1
            stream, own = pooled(device, prio, i - 1, rng[0])
            shared[key] = shared.get(key, 0) + (not own)
            return stream
        self.streams = {key: take(device_of[key[0]], rng[0] if p is None else to_torch_priority(p, prios, rng))
                        for key, p in wanted.items()}
        self.gate = take(device_of[min(device_of)], rng[0])
        self.mirrors = {}   # a cross-GPU copy's stream on the other GPU (single-process mode)
        for op in program.ops:
            if op.kind == "copy" and device_of[op.io["src"][0]] != device_of[op.io["dst"][0]]:
                other = self.other_device(op)
                if (other, op.stream) not in self.mirrors:
                    self.mirrors[(other, op.stream)] = take(other, rng[0])
        for line in aliased_pools(counts, shared):
            notes.append(f"stream pool exhausted ({line}): torch reuses streams round robin")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.stream_end = {k: torch.cuda.Event() for k in self.streams}
        self.events = {op.id: torch.cuda.Event() for op in program.ops}
        self.fns: dict[str, Callable[[], None]] = {}
        self.temps: dict[str, torch.Tensor] = {}
        for op in program.ops:
            if op.kind in ("gemm", "reduce"):
                self.fns[op.id] = compute_fn(op, bufs[op.rank], graph, notes)
            elif op.kind == "recv" and op.reduce:
                self.temps[op.id] = torch.empty_like(view(bufs[op.rank], op.io["dst"]))
            elif op.kind == "copy":
                (sr, _), (dr, ds) = op.io["src"], op.io["dst"]
                if op.reduce and device_of[sr] != device_of[dr]:
                    self.temps[op.id] = torch.empty_like(view(bufs[dr], ds))
        self.batches = self._batches(program.ops)
        self.sleep_cycles = min(SLEEP_CYCLES_MAX, SLEEP_CYCLES_PER_OP * max(1, len(program.ops)))
        self.gate_log: list[bool] = []   # per run: its gate opened before the host finished issuing

    @property
    def gate_short(self) -> int:
        """Runs whose gate opened before the host finished issuing."""
        return sum(self.gate_log)

    def gate_note(self, warmup: int) -> str | None:
        """The report's note when the gate opened early in a timed run (the runs after the
        first ``warmup``): how many, since their makespans hold host launch time. A warm-up
        run's early gate (the first run issues cold) only lengthens the sleep: no note."""
        timed = self.gate_log[warmup:]
        if not any(timed):
            return None
        return (f"sleep gate opened before the host finished issuing in {sum(timed)} of {len(timed)} timed runs "
                "(host launch time in those makespans); its sleep was doubled after each")

    def _batches(self, ops: list[Op]) -> list[list[Op]]:
        if not self.distributed:
            return batches(ops)
        # NCCL: every consecutive send/recv without a dependency among them goes in one
        # group, whatever its stream, so that ring steps cannot deadlock.
        out: list[list[Op]] = []
        for op in ops:
            cur = out[-1] if out else None
            if (cur and op.kind in ("send", "recv") and cur[0].kind in ("send", "recv")
                    and not set(op.deps) & {o.id for o in cur}):
                cur.append(op)
            else:
                out.append([op])
        return out

    # -- issue ---------------------------------------------------------------------------
    def _wait(self, stream, ops: list[Op], issued_on: dict) -> None:
        for op in ops:
            for d in op.deps:
                if issued_on.get(d) is not stream:
                    stream.wait_event(self.events[d])

    def other_device(self, op: Op) -> torch.device:
        """Of a copy between two GPUs, the GPU its stream is not on."""
        (sr, _), (dr, _) = op.io["src"], op.io["dst"]
        return self.device_of[sr] if self.device_of[op.stream[0]] == self.device_of[dr] else self.device_of[dr]

    def _record(self, stream, ops: list[Op], issued_on: dict) -> None:
        for op in ops:
            self.events[op.id].record(stream)
            issued_on[op.id] = stream

    def _copy_batch(self, batch: list[Op], stream) -> None:
        srcs, dsts, adds = [], [], []
        for op in batch:
            (sr, ss), (dr, ds) = op.io["src"], op.io["dst"]
            src, dst = view(self.bufs[sr], ss), view(self.bufs[dr], ds)
            if self.device_of[sr] != self.device_of[dr]:
                mirror = self.mirrors[(self.other_device(op), op.stream)]
                mirror.wait_stream(stream)
                with torch.cuda.stream(mirror):
                    if op.reduce:
                        tmp = self.temps[op.id]
                        tmp.copy_(src, non_blocking=True)
                        dst.add_(tmp)
                    else:
                        dst.copy_(src, non_blocking=True)   # cudaMemcpyPeerAsync (copy engine)
                stream.wait_stream(mirror)
            elif op.reduce:
                adds.append((dst, src))
            elif op.engine == "dma":
                dst.copy_(src, non_blocking=True)            # contiguous: cudaMemcpyAsync (same GPU: SM work)
            else:
                srcs.append(src)
                dsts.append(dst)
        if dsts:
            if hasattr(torch, "_foreach_copy_") and foreach_is_kernel(dsts, srcs):
                torch._foreach_copy_(dsts, srcs)             # one multi-tensor copy kernel on SMs
            else:
                # _foreach_copy_ falls back to per-tensor copy_ (cudaMemcpyAsync on a copy
                # engine) for pairs it cannot fuse; an elementwise add is always an SM kernel.
                for d, s in zip(dsts, srcs):
                    torch.add(s, 0, out=d)
        for d, s in adds:
            d.add_(s)

    def _p2p_batch(self, batch: list[Op], stream) -> None:
        import torch.distributed as dist
        p2p = []
        for op in batch:
            bufs = self.bufs[op.rank]
            if op.kind == "send":
                p2p.append(dist.P2POp(dist.isend, view(bufs, op.io["src"]), op.peer))
            else:
                target = self.temps.get(op.id)
                p2p.append(dist.P2POp(dist.irecv, target if target is not None else view(bufs, op.io["dst"]),
                                      op.peer))
        works = dist.batch_isend_irecv(p2p)
        for w in works:
            w.wait()        # the current stream waits for NCCL's stream; the host does not block
        for op in batch:
            if op.id in self.temps:
                view(self.bufs[op.rank], op.io["dst"]).add_(self.temps[op.id])

    def run(self, label: bool = False) -> float:
        """Issue the whole program once; return the makespan in seconds. ``label``: a
        ``ficco:<kind>:<op id>[+<op id>...]`` profiler range around the issue of every
        batch (the profiled replay; kernels inherit it as ``gpu_user_annotation``)."""
        issued_on: dict = {}
        with torch.cuda.stream(self.gate):
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(self.sleep_cycles)
            self.start.record(self.gate)
        for s in self.streams.values():
            s.wait_event(self.start)
        for batch in self.batches:
            stream = self.streams[batch[0].stream]
            self._wait(stream, batch, issued_on)
            kind = batch[0].kind
            with torch.cuda.stream(stream), op_range(label, kind, "+".join(op.id for op in batch)):
                if kind in ("send", "recv"):
                    self._p2p_batch(batch, stream)
                elif kind == "copy":
                    self._copy_batch(batch, stream)
                elif kind in ("gemm", "reduce"):
                    self.fns[batch[0].id]()
            self._record(stream, batch, issued_on)
        for key, s in self.streams.items():
            self.stream_end[key].record(s)
            self.gate.wait_event(self.stream_end[key])
        self.end.record(self.gate)
        short = bool(self.start.query())
        self.gate_log.append(short)
        if short:
            # The gate opened while the host was still issuing: host launch time leaked
            # into the makespan. Sleep longer next time (gate_note says which runs it hit).
            self.sleep_cycles = min(SLEEP_CYCLES_MAX, 2 * self.sleep_cycles)
        self.end.synchronize()
        for dev in set(self.device_of.values()):
            torch.cuda.synchronize(dev)
        return self.start.elapsed_time(self.end) / 1e3    # elapsed_time is in ms
