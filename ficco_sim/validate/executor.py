"""The PyTorch executor: replay task graphs on real devices and time them.

:func:`replay` takes a list of named task graphs and returns, per graph, the measured
makespans of the timed repeats, whether the numerical result matched the unscheduled
reference, and which knobs of the graph the device could not honour. Three process
shapes (``mode``):

* ``distributed`` — one process per rank (``torch.multiprocessing`` spawn, gloo on CPU,
  NCCL on GPUs); SM transfers are ``batch_isend_irecv`` groups, one per communication
  kernel step. See :mod:`.launch`, :mod:`.cpu`, :mod:`.cuda`.
* ``single-gpu`` — one process and one device holding every rank's buffers; a remote
  transfer becomes a local copy of the same bytes on the same engine (DMA: contiguous
  ``copy_``; SM: a copy kernel on the communication stream). Validates the GPU-internal
  model (contention, priority, shaping, decomposition) on one device. See
  :mod:`.single_gpu`.
* ``single-process`` — like single-gpu, but rank g lives on ``cuda:g`` (copy engines move
  data between GPUs with ``cudaMemcpyPeerAsync``).

With ``ReplayOptions.profile_dir`` set, each rank replays every job once more after the
timed repeats (and after the result check), under ``torch.profiler`` with a
``record_function`` range ``ficco:<kind>:<op id>`` around every op it issues (op ids
are the task graph's task ids, transfer halves ``<transfer id>@send``/``@recv``), and
writes a compact Kineto trace ``<profile_dir>/<job>.rank<r>.json.gz`` (see
:func:`trace_path`); ``ficco-sim trace import|replay`` read it back. The timed repeats
never run under the profiler.

What a device cannot do is never silently substituted: it is listed in
``ReplayResult.not_honoured`` (and the CSV/report), and a DMA transfer that would have to
run as send/recv on GPUs is refused unless ``allow_fallback`` is set.

This module holds the parts every runner shares: options and results, the knob audit,
and the tensor work of one op (GEMM into preallocated views, reductions, copies).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from ..errors import InputError
from ..taskgraph import Slice, TaskGraph
from . import reference
from .plan import Op, check_io

MODES = ("distributed", "single-gpu", "single-process")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay. ``warmup``/``repeats`` are counts; ``timeout`` (s) bounds the whole
    replay (processes are killed past it); ``seed`` picks the input data; ``profile_dir``:
    where to write one profiled replay per job and rank (None: no profiling)."""

    device: str = "cpu"
    world_size: int = 2
    mode: str = "distributed"
    warmup: int = 1
    repeats: int = 3
    allow_fallback: bool = False
    seed: int = 0
    timeout: float = 600.0
    profile_dir: str | None = None

    def check(self) -> None:
        if self.device not in DEVICES:
            raise InputError("--device", None, f"unknown device {self.device!r}; use cpu or cuda")
        if self.mode not in MODES:
            raise InputError("--mode", None, f"unknown mode {self.mode!r}; known: {', '.join(MODES)}")
        if self.world_size < 1:
            raise InputError("--world-size", None, f"must be at least 1, got {self.world_size}")
        if self.repeats < 1 or self.warmup < 0:
            raise InputError("--repeats", None, "need at least one timed repeat and a non-negative warm-up")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise InputError("--device", None, "cuda requested but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}); use --device cpu")


@dataclass(frozen=True)
class Job:
    """One task graph to replay, under a name that ends up in the CSV. Consecutive jobs of
    one ``group`` (the schedules of one scenario) are timed taking turns, run by run, so
    that their ranking is not decided by when each ran (distributed replays)."""

    name: str
    graph: TaskGraph
    group: str | None = None


@dataclass
class ReplayResult:
    name: str
    times: list[float]                       # makespan of every timed repeat (s)
    correct: bool
    max_error: float
    not_honoured: list[str] = field(default_factory=list)   # "knob: reason"
    notes: list[str] = field(default_factory=list)
    device: str = ""
    parts: dict[str, float] = field(default_factory=dict)    # CPU: median s per rank in compute/post/wait/loop

    @property
    def median(self) -> float:
        s = sorted(self.times)
        n = len(s)
        return (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])) if n else float("nan")


def device_name(device: str) -> str:
    """A human name for the device: the GPU's name, or the CPU's."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# ----------------------------------------------------------------------------------------
# Profiling: one extra replay per job under torch.profiler, ranges named after the tasks.

RANGE_PREFIX = "ficco:"


def op_range(on: bool, kind: str, op_id: str):
    """The profiler range of one issued op (``ficco:<kind>:<op id>``) when ``on``, else a
    no-op, so that timed repeats pay nothing for profiling."""
    return torch.profiler.record_function(f"{RANGE_PREFIX}{kind}:{op_id}") if on else contextlib.nullcontext()


def trace_path(profile_dir: str | Path, job: str, rank: int | None = None) -> Path:
    """Where the profiled replay of ``job`` on ``rank`` goes (``rank=None``: a one-process
    replay holding every rank).

    >>> trace_path("p", "ag-gemm m=512 n=384 k=384 x2|shard-p2p-sm", 1).name
    'ag-gemm_m512_n384_k384_x2_shard-p2p-sm.rank1.json.gz'
    """
    name = re.sub(r"[^A-Za-z0-9.+-]+", "_", job.replace("=", "")).strip("_.") or "job"
    return Path(profile_dir) / (f"{name}.rank{rank}.json.gz" if rank is not None else f"{name}.json.gz")


@contextlib.contextmanager
def profiled(path: Path, device: str, meta: dict) -> Iterator[dict]:
    """Run the body under ``torch.profiler.profile`` (CPU activities, plus CUDA on GPUs)
    and save the compact trace to ``path``. The body may add entries to the yielded
    ``meta`` (stored under the trace's top-level ``ficco`` key). On an error nothing is
    written and the raw export is removed."""
    from torch.profiler import ProfilerActivity, profile
    from ..traces.kineto_io import compact_trace
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(meta)
    with tempfile.TemporaryDirectory(prefix="ficco-profile-") as tmp:
        raw = Path(tmp) / f"raw.{os.getpid()}.json"
        with profile(activities=acts, record_shapes=True) as prof:
            with torch.profiler.record_function("warm-up"):
                pass   # the profiler's first range costs ~1 ms; keep it out of the replay
            yield meta
        prof.export_chrome_trace(str(raw))
        compact_trace(raw, path, meta)


# ----------------------------------------------------------------------------------------
# The knob audit: what each device/mode can honour.

def _schedule_knobs(graph: TaskGraph) -> dict:
    name = graph.meta.get("schedule")
    if not name:
        return {}
    try:
        from ..schedules.schedule import parse_schedule
        s = parse_schedule(str(name))
    except Exception:  # noqa: BLE001 - a hand-built graph may carry any label
        return {}
    # a copy-engine schedule's c<N> is the engines its copies queue on: the graph's copy streams hold it
    return {"smem": s.smem, "channels": s.channels if s.engine == "sm" else None, "margin": s.margin}


def audit(graph: TaskGraph, opts: ReplayOptions, features: dict | None = None) -> list[str]:
    """The knobs of ``graph`` this replay cannot honour, as ``"knob: reason"`` lines.

    Raises InputError when a GPU replay would have to replace copy-engine transfers by
    send/recv and ``allow_fallback`` is off.
    """
    features = features or {}
    out = []
    prios = {s.priority for s in graph.streams}
    has_dma = any(t.engine == "dma" for t in graph.transfers)
    knobs = _schedule_knobs(graph)
    if opts.device == "cpu":
        if len(prios) > 1:
            out.append("priority: CPU has no stream priorities (ready compute runs in graph order, one thread)")
        if has_dma:
            out.append("dma: CPU has no copy engines (transfers are gloo messages or memcpy)")
        if knobs.get("smem"):
            out.append("smem: CPU has no shared memory to shape")
        if knobs.get("channels"):
            out.append("channels: CPU comm has no channels")
        if knobs.get("margin"):
            out.append("margin: CPU cores are not partitioned between compute and communication")
        return out
    if knobs.get("smem"):
        out.append("smem: " + features.get("smem_reason", "no resident shared-memory kernel (needs cupy or cuda.core)"))
    if knobs.get("channels"):
        out.append("channels: NCCL CTA count not pinned per schedule (set NCCL_MIN_CTAS/NCCL_MAX_CTAS)")
    if knobs.get("margin"):
        out.append("margin: GEMMs and NCCL kernels run on every SM (the SM split needs green contexts, "
                   "which this executor does not create)")
    if opts.mode == "distributed":
        if has_dma:
            reason = ("dma not honoured: cross-process copy-engine transfers need symmetric-memory signalling, "
                      "which this executor does not implement; run --mode single-process (one process drives "
                      "every GPU, copy_ between devices) or --single-gpu")
            if not opts.allow_fallback:
                raise InputError("--device cuda", "dma", reason + "; or pass --allow-fallback to replay them "
                                 "as NCCL send/recv (recorded as not honoured)")
            out.append("dma: replayed as NCCL send/recv (--allow-fallback)")
        comm_prios = {s.priority for s in graph.streams if s.name == "comm"}
        if len(prios) > 1 and comm_prios and max(comm_prios) > min(prios):
            out.append("priority: SM comm runs on ProcessGroupNCCL's own stream, made high priority "
                       "(-3) for the whole run, not per stream")
    else:
        if any(t.engine == "sm" for t in graph.transfers):
            out.append("sm comm: SM transfers are copy kernels (torch._foreach_copy_/add), not NCCL kernels "
                       "with their channel footprint")
    return out


# ----------------------------------------------------------------------------------------
# Tensor work of one op.

def to_torch_priority(prio: int, all_prios: list[int], rng: tuple[int, int]) -> int:
    """Map a ficco priority (larger = more urgent) to a CUDA one (more negative = more
    urgent), keeping the least urgent stream at ``rng[0]`` (normally 0) and clamping to
    ``rng`` = ``torch.cuda.Stream.priority_range()`` = (least, greatest).

    >>> to_torch_priority(1, [0, 1], (0, -3)), to_torch_priority(0, [0, 1], (0, -3))
    (-1, 0)
    >>> to_torch_priority(9, [0, 9], (0, -3))
    -3
    """
    least, greatest = rng
    lo = min(all_prios) if all_prios else 0
    return max(greatest, min(least, least - (prio - lo)))


def _slices(x) -> list[Slice]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def coalesce(slices: list[Slice]) -> list[Slice]:
    """Merge row slices of one buffer that follow each other.

    >>> coalesce([Slice("A", 0, 2), Slice("A", 2, 5), Slice("B", 5, 6)])
    [Slice(buffer='A', start=0, stop=5), Slice(buffer='B', start=5, stop=6)]
    """
    out: list[Slice] = []
    for s in slices:
        if out and out[-1].buffer == s.buffer and out[-1].stop == s.start:
            out[-1] = Slice(s.buffer, out[-1].start, s.stop)
        else:
            out.append(s)
    return out


def view(bufs: dict[str, torch.Tensor], s: Slice) -> torch.Tensor:
    return bufs[s.buffer][s.start:s.stop]


def gemm_fn(op: Op, bufs: dict[str, torch.Tensor], b_name: str, notes: list[str]) -> Callable[[], None]:
    """C rows = A rows @ B into preallocated views (``torch.mm(out=)``); row pieces that
    are not adjacent go through a staging buffer (one GEMM, as the graph says)."""
    io = op.io
    a = coalesce(_slices(io["a"]))
    c = coalesce(_slices(io["c"]))
    bname = io.get("b", b_name)
    bmat = view(bufs, bname) if isinstance(bname, Slice) else bufs[bname]
    acc = bool(io.get("accumulate", False))
    rows_a = sum(s.stop - s.start for s in a)
    rows_c = sum(s.stop - s.start for s in c)
    k, n = bmat.shape
    if rows_a != rows_c or bufs[a[0].buffer].shape[1] != k or bufs[c[0].buffer].shape[1] != n:
        raise InputError("task graph", op.id, f"GEMM shapes do not fit: A {rows_a}x{bufs[a[0].buffer].shape[1]}, "
                         f"B {k}x{n}, C {rows_c}x{bufs[c[0].buffer].shape[1]}")
    if len(a) == 1 and len(c) == 1:
        av, cv = view(bufs, a[0]), view(bufs, c[0])
        if acc:
            return lambda: cv.addmm_(av, bmat)
        return lambda: torch.mm(av, bmat, out=cv)
    notes.append(f"{op.id}: {len(a)} A pieces / {len(c)} C pieces staged through a copy around one GEMM")
    dev, dt = bmat.device, bmat.dtype
    ta = torch.empty((rows_a, k), device=dev, dtype=dt)
    tc = torch.empty((rows_c, n), device=dev, dtype=dt)
    avs = [view(bufs, s) for s in a]
    cvs, offs = [], 0
    for s in c:
        cvs.append((view(bufs, s), tc[offs:offs + s.stop - s.start]))
        offs += s.stop - s.start

    def run() -> None:
        torch.cat(avs, out=ta)
        torch.mm(ta, bmat, out=tc)
        for dst, src in cvs:
            if acc:
                dst.add_(src)
            else:
                dst.copy_(src)
    return run


def reduce_fn(op: Op, bufs: dict[str, torch.Tensor]) -> Callable[[], None]:
    """out = sum(inputs); ``out`` may be one of the inputs (an in-place accumulation)."""
    ins = list(_slices(op.io["inputs"]))
    out = op.io["out"]
    ov = view(bufs, out)
    if out in ins:
        rest = [view(bufs, s) for s in ins if s != out]

        def accumulate() -> None:
            for r in rest:
                ov.add_(r)
        return accumulate
    vs = [view(bufs, s) for s in ins]

    def run() -> None:
        if len(vs) == 1:
            ov.copy_(vs[0])
            return
        torch.add(vs[0], vs[1], out=ov)
        for v in vs[2:]:
            ov.add_(v)
    return run


def b_buffer(graph: TaskGraph) -> str:
    spec = reference.ref_spec(graph)
    return spec["b"] if spec else str(graph.meta.get("b", "B"))


def compute_fn(op: Op, bufs: dict[str, torch.Tensor], graph: TaskGraph, notes: list[str]) -> Callable[[], None]:
    if op.kind == "gemm":
        return gemm_fn(op, bufs, b_buffer(graph), notes)
    if op.kind == "reduce":
        return reduce_fn(op, bufs)
    return lambda: None


def prepare(graph: TaskGraph) -> None:
    """Checks that need no device: every task names its data, the reference is readable."""
    if not graph.buffers:
        raise InputError("task graph", "buffers", "declares no buffers, so it cannot be replayed")
    check_io(graph)
    reference.input_buffers(graph)
    if reference.ref_spec(graph) is None and not graph.meta.get("inputs"):
        raise InputError("task graph", "meta", "needs meta.reference (or meta.inputs) to build input data")


def verify(graph: TaskGraph, rank: int, bufs: dict[str, torch.Tensor], seed: int,
           oracle_bufs: dict[str, torch.Tensor] | None = None, ins: list | None = None) -> tuple[bool, float]:
    """Compare one rank's buffers with the reference (or, without one, the oracle); ``ins``:
    :func:`.reference.reference_inputs`, made once per graph."""
    want = reference.expected(graph, rank, seed, ins)
    ok, err = True, 0.0
    if want is not None:
        for where, values in want:
            o, e = reference.check(view(bufs, where), values)
            ok, err = ok and o, max(err, e)
        return ok, err
    assert oracle_bufs is not None
    for name, t in bufs.items():
        o, e = reference.check(t, oracle_bufs[name].to(torch.float64))
        ok, err = ok and o, max(err, e)
    return ok, err


def oracle(graph: TaskGraph, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Every rank's buffers after a plain sequential CPU replay in float64 (used only when
    a graph has no ``meta.reference``)."""
    from .single_gpu import run_local_cpu
    bufs = [reference.make_inputs(graph, r, reference.input_buffers(graph), torch.float64, "cpu", seed)
            for r in range(graph.num_gpus)]
    run_local_cpu(graph, bufs)
    return bufs


def replay(jobs: list[Job], opts: ReplayOptions) -> list[ReplayResult]:
    """Replay every job under ``opts`` (see module docstring)."""
    opts.check()
    if opts.profile_dir:   # fail before spawning anything
        try:
            Path(opts.profile_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError("--profile", None, f"cannot create {opts.profile_dir}: {exc.strerror}") from None
    for job in jobs:
        prepare(job.graph)
        if opts.mode == "distributed" and job.graph.num_gpus != opts.world_size:
            raise InputError("--world-size", None, f"{job.name}: graph has {job.graph.num_gpus} ranks, "
                             f"world size is {opts.world_size}")
    if opts.mode == "distributed":
        from .launch import run_distributed
        return run_distributed(jobs, opts)
    from .single_gpu import run_single
    return run_single(jobs, opts)
