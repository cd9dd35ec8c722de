"""Kineto (PyTorch profiler) Chrome-trace JSON -> :class:`~ficco_sim.traces.ops.Trace`.

One file per rank (``prof.export_chrome_trace(path)``, plain or gzipped). What is read
(``shared/reference/torch_executor.md`` section 5.1):

* **GPU traces** (any ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` event): every GPU op
  becomes an op on stream ``args.stream`` (``tid``) of its device. Kernels carry
  ``grid``, ``block``, ``registers per thread`` and ``shared memory`` (the block
  footprint) and, for NCCL, ``Collective name``, ``In msg nelems``, ``dtype``,
  ``Process Group Ranks`` (taken from the launching CPU op through ``External id`` when
  the kernel lacks them). Memcpys carry ``bytes`` and, for P2P, the devices. Stream
  priorities come from ``args.priority`` (CUDA sign: lower is more urgent; flipped).
* **CPU traces** (no GPU activity): the top-level ``cpu_op`` of each thread, plus
  ``user_annotation`` collectives such as ``gloo:all_gather``, on stream = thread.
  Wrapping annotations (``ProfilerStep#3``, ``record_function`` blocks with children)
  are not ops.

Dependencies beyond stream order: ``cudaStreamWaitEvent`` / ``cuda_sync`` events
(``wait_on_stream``, ``wait_on_cuda_event_record_corr_id``), host synchronisations
(``cud*Synchronize``: the next launch waits for the synchronised streams), flow
events (``ph: s/f``, other than the launch flows ``ac2g``) and, on CPU traces, the
launch of an async collective and the first later op on the launching thread that
reads a tensor of the collective's shape (the ``work.wait()`` consumer).

**Executor traces** (``ficco-sim validate --profile``; CPU traces with
``ficco:<kind>:<op id>`` ranges): each range is one op on its thread (``gemm`` ->
gemm with the shapes of the ``aten::mm`` inside, ``reduce``/``copy`` -> memory,
``send``/``recv`` -> the host work of posting the message), named after the task it
replays. The ``gloo:send``/``gloo:recv`` annotation that a posting starts is the message
itself, on its own ``gloo.<n>`` stream (as many as messages in flight at once); it
waits for the op before its posting, and the first op after its ``ficco:wait:<op id>``
range waits for it. Everything outside the ranges (barriers, the profiler's own ops) is
left out.

>>> from pathlib import Path
>>> t = load_kineto([Path(__file__).parents[2] / "traces" / "cpu_mm_chain.json.gz"])
>>> t.num_ranks, len(t.ops), t.on_gpu
(1, 6, False)
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from ..hardware import BlockShape
from .host import COMM_OPS, RUNTIME_CATS, Call, Host, api
from .kineto_cpu import _cpu_ops
from .kineto_io import GPU_CATS, US, _events, _num, _prod, count, kineto_hook_for, read_json
from .kineto_set import _check_ranks, _check_set, _select_steps
from .ops import (CPU_GEMM_OPS, DTYPE_SIZE, Trace, TraceOp, classify_kernel, collective_kind,
                  kernel_class, rebase, split_waits)

_MEMCPY_DIR = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH)\b")
_DEVICES = re.compile(r"\(\s*(\w+)\s*(\d*)\s*->\s*(\w+)\s*(\d*)\s*\)")


def _ranks(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            return ()
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return tuple(v)
    return ()


class _File:
    """One rank's file, parsed."""

    def __init__(self, path: str, index: int, data: Any = None):
        self.where = path
        data = read_json(path, kineto_hook_for) if data is None else data
        self.events, self.pos = _events(data, path)
        meta = data if isinstance(data, dict) else {}
        dist = meta.get("distributedInfo") or {}
        if not isinstance(dist, dict):
            raise InputError(path, "distributedInfo", "must be a mapping")
        self.rank = dist.get("rank", index)
        self.world = dist.get("world_size")
        for key, v in (("rank", self.rank), ("world_size", self.world)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise InputError(path, f"distributedInfo.{key}", f"must be a non-negative integer, got {v!r}")
        self.pg_ranks = {}
        for pg in dist.get("pg_config") or []:
            if isinstance(pg, dict):
                self.pg_ranks[str(pg.get("pg_name"))] = _ranks(pg.get("ranks"))
        props = meta.get("deviceProperties") or []
        self.device_name = props[0].get("name", "") if props and isinstance(props[0], dict) else ""
        sms = props[0].get("numSms", 0) if props and isinstance(props[0], dict) else 0
        self.device_sms = sms if isinstance(sms, int) and not isinstance(sms, bool) and 0 < sms < 10 ** 5 else 0
        # A timeline exported by ficco-sim names the profile and topology it was simulated on.
        other = meta.get("otherData") if isinstance(meta.get("otherData"), dict) else {}
        self.topology = ""
        if other.get("generator") == "ficco-sim":
            self.device_name = self.device_name or str(other.get("gpu", ""))
            self.topology = str(other.get("topology", ""))
        self.nccl_version = str(dist.get("nccl_version", ""))
        # GPU activity?, ProfilerStep#N windows (s) and the file's own span (s), in one pass
        self.on_gpu = False
        self.steps: dict[int, tuple[float, float]] = {}
        starts, ends = [], []
        for e in self.events:
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            if cat in GPU_CATS:
                self.on_gpu = True     # (a GPU event with a bad ts/dur is refused by _gpu_ops, naming it)
            ts, dur = e.get("ts"), e.get("dur")
            if ts.__class__ not in (int, float) or dur.__class__ not in (int, float):
                continue
            starts.append(ts)
            ends.append(ts + dur)
            if cat in ("user_annotation", "cpu_op"):
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
                    # several processes in one file (its ranks) each mark the step: the step spans them all
                    a, b = self.steps.get(int(name[13:]), (math.inf, -math.inf))
                    self.steps[int(name[13:])] = (min(a, ts * US), max(b, (ts + dur) * US))
        self.span = (min(starts, default=math.inf) * US, max(ends, default=-math.inf) * US)


def load_kineto(paths: Sequence[str | Path], *, steps: Sequence[int] | None = None,
                parsed: Sequence[dict] | None = None) -> Trace:
    """Import one Kineto trace per rank (see module docstring). ``steps``: keep only the
    ops launched (GPU) or run (CPU) inside those ``ProfilerStep#N`` windows. ``parsed``: the
    files' content already read (an execution trace's, as :mod:`.et_json` writes it)."""
    if not paths:
        raise InputError("trace", None, "no trace files given")
    files = [_File(str(p), i, None if parsed is None else parsed[i]) for i, p in enumerate(paths)]
    _check_ranks(files)
    notes_set = _check_set(files)
    on_gpu = {f.on_gpu for f in files}
    if len(on_gpu) > 1:
        raise InputError(files[0].where, "traceEvents", "mixes GPU traces and CPU-only traces across ranks")
    ops: list[TraceOp] = []
    prio: dict = {}
    notes: list[str] = []
    if files[0].on_gpu:
        device_to_gpu = _device_map(files)
        stats: dict[str, int] = {}
        for fi, f in enumerate(files):
            ops += _gpu_ops(f, fi, device_to_gpu, prio, stats)
        if stats.get("waits") or stats.get("syncs") or stats.get("entries"):
            notes.append(f"dependencies from the host side: {stats['waits']} stream waits, {stats['syncs']} host "
                         f"synchronisations, {stats['entries']} collective entries"
                         + (f" ({stats['corrected']} moved to an earlier op the run shows had finished)"
                            if stats["corrected"] else "")
                         + (f"; {stats['unresolved']} waits or synchronisations name no stream that could be "
                            "told, and order nothing" if stats["unresolved"] else ""))
        if stats.get("unsized"):
            notes.append(f"{stats['unsized']} device copies whose size the trace records nowhere (neither on the "
                         "copy nor on a runtime call) kept with their measured times")
        if stats.get("host_copies"):
            notes.append(f"{stats['host_copies']} host copies (HtoD/DtoH) kept with their measured times "
                         "(a what-if on another GPU scales them by the host links' bandwidth)")
    else:
        for f in files:
            ops += _cpu_ops(f)
        named = next((f.device_name for f in files if f.device_name), "")
        if named:
            notes.append(f"the trace names a GPU ({named}) but records no kernel, copy or memset on it (the "
                         "profiler's GPU activity was not recorded): its host operators are replayed as a CPU trace")
    if not ops:
        raise InputError(files[0].where, "traceEvents", "no GPU kernels, copies or CPU operators found")
    if steps:
        ops = _select_steps(ops, files, steps)
    notes[:0] = notes_set
    t0 = min(o.start for o in ops)
    rebase(ops, files[0].where, "traceEvents.ts")
    ops.sort(key=lambda o: (o.start, o.rank, o.order))
    if files[0].on_gpu:    # a GPU collective's kernel spans until all its ranks are done
        split_waits(ops)
    num = max(max(o.rank for o in ops), max((max(o.src, o.dst) for o in ops if o.category == "copy"), default=0)) + 1
    world = next((f.world for f in files if f.world), None)
    if world and len(files) > 1:
        num = max(num, world)
    # one file holds every rank its ops name (their ranks are its devices, not its distributed rank)
    owners = {r: files[0] for r in {o.rank for o in ops}} if len(files) == 1 else {f.rank: f for f in files}
    windows = {r: {n: (a - t0, b - t0) for n, (a, b) in f.steps.items()} for r, f in owners.items()}
    return Trace(ops, num, [f.where for f in files], "kineto", files[0].device_name, files[0].on_gpu, prio, notes,
                 topology=files[0].topology, steps=windows, device_sms=files[0].device_sms)


def _device_of(e: dict) -> Any:
    args = e.get("args") or {}
    return args.get("device", e.get("pid"))


def _device_map(files: list[_File]) -> dict[tuple[int, Any], int]:
    """(file index, device id) -> GPU index. One file per rank: its devices map to its rank
    (one device each); a single file with several devices maps them in sorted order."""
    out: dict[tuple[int, Any], int] = {}
    if len(files) == 1:
        f = files[0]
        devices = sorted({_device_of(e) for e in f.events if e.get("cat") in GPU_CATS and e.get("ph") == "X"},
                         key=str)
        for i, d in enumerate(devices):
            out[(0, d)] = i
        return out
    for i, f in enumerate(files):
        devices = {_device_of(e) for e in f.events if e.get("cat") in GPU_CATS and e.get("ph") == "X"}
        if len(devices) > 1:
            raise InputError(f.where, "traceEvents.args.device",
                             f"one rank's file has kernels on {len(devices)} devices; expected one per rank")
        for d in devices:
            out[(i, d)] = f.rank
    return out


def _gpu_ops(f: _File, fi: int, device_to_gpu: dict, prio: dict, stats: dict) -> list[TraceOp]:
    cpu_by_ext: dict[Any, dict] = {}
    calls: list[Call] = []
    comm_ranges: dict[Any, list] = {}
    gemm_ranges: dict[Any, list] = {}
    flows: list[dict] = []
    ops: list[TraceOp] = []
    unnamed: set[str] = set()     # comm kernels whose kind comes from their name only
    missing_bytes: set[str] = set()      # memcpy ops whose bytes are not on the GPU event
    host_copies = unsized = 0
    for i, e in enumerate(f.events):
        ph, cat, args = e.get("ph"), e.get("cat"), e.get("args") or {}
        if ph in ("s", "f", "t") and cat != "ac2g":
            flows.append(e)
            continue
        if ph != "X":
            continue
        if cat in ("cpu_op", "user_annotation"):
            if "External id" in args:
                prev = cpu_by_ext.get(args["External id"])
                # Prefer the op that carries comm metadata (record_param_comms) or shapes.
                if prev is None or ("Collective name" in args and "Collective name" not in prev):
                    cpu_by_ext[args["External id"]] = args
            name = str(e.get("name", ""))
            if name.startswith(COMM_OPS) or name in CPU_GEMM_OPS:
                ts = _num(e, "ts", f.where, f.pos[i]) * US
                ranges = comm_ranges if name.startswith(COMM_OPS) else gemm_ranges
                ranges.setdefault(e.get("tid"), []).append((ts, ts + _num(e, "dur", f.where, f.pos[i]) * US, name, args))
            continue
        if cat in RUNTIME_CATS:
            corr = args.get("correlation")
            if isinstance(corr, int):
                ts = _num(e, "ts", f.where, f.pos[i]) * US
                calls.append(Call(e.get("tid"), ts, ts + _num(e, "dur", f.where, f.pos[i]) * US,
                                  api(str(e.get("name", ""))), corr, args))
            continue
        if cat not in GPU_CATS:
            continue
        ts, dur = _num(e, "ts", f.where, f.pos[i]) * US, _num(e, "dur", f.where, f.pos[i]) * US
        name = str(e.get("name", ""))
        gpu = device_to_gpu[(fi, _device_of(e))]
        stream_id = args.get("stream", e.get("tid"))
        stream = f"s{stream_id}"
        corr = args.get("correlation", i)
        tag = {"kernel": "k", "gpu_memcpy": "cp"}.get(cat, "ms")
        op = TraceOp(f"r{f.rank}.{tag}{i}", gpu, stream, name, "compute", "opaque",
                     ts, dur, order=corr if isinstance(corr, int) else i)
        if isinstance(args.get("priority"), int):
            # CUDA: numerically lower = more urgent; ficco-sim: larger = more urgent.
            prio[(gpu, stream)] = -args["priority"]
        if cat == "kernel":
            kind, role = classify_kernel(name)
            op.cls = kernel_class(name)
            if args.get("ficco role") in ("compute", "comm"):  # a timeline ficco-sim exported
                role = args["ficco role"]
                kind = "comm" if role == "comm" else args.get("ficco kind", kind)
                kind = kind if kind in ("gemm", "comm", "memory", "opaque") else "opaque"
            op.kind = kind
            op.category = "comm" if role == "comm" else "compute"
            op.grid = _prod(args.get("grid"))
            threads = _prod(args.get("block"))
            if threads:
                regs = args.get("registers per thread", 0)
                smem = args.get("shared memory", 0)
                op.block = BlockShape(threads, count(regs), count(smem))
            parent = cpu_by_ext.get(args.get("External id"), {})
            if op.category == "comm":
                _comm_meta(op, {**parent, **args}, f)
                if not (parent.get("Collective name") or args.get("Collective name")):
                    unnamed.add(op.id)
            else:
                _shape_meta(op, parent)
        elif cat == "gpu_memcpy":
            op.category, op.kind = "copy", "transfer"
            m = _MEMCPY_DIR.search(name)
            op.direction = m.group(1) if m else "DtoD"
            nbytes = args.get("bytes")
            if nbytes is None:
                op.nbytes = -1.0           # roctracer: the size is on the runtime call (resolved below)
                missing_bytes.add(op.id)
            elif not isinstance(nbytes, (int, float)) or isinstance(nbytes, bool) or nbytes < 0:
                raise InputError(f.where, f"traceEvents[{f.pos[i]}].args.bytes", f"must be a non-negative number in "
                                 f"memcpy {name[:60]!r}, got {nbytes!r}")
            else:
                op.nbytes = float(nbytes)
            op.direction = op.direction if m or not isinstance(args.get("kind"), str) else \
                (_MEMCPY_DIR.search(args["kind"]).group(1) if _MEMCPY_DIR.search(args["kind"]) else "DtoD")
            op.src = op.dst = gpu
            if isinstance(args.get("ficco dma engine"), int):
                op.dma_engine = args["ficco dma engine"]
            if op.direction == "PtoP":
                src_dev, dst_dev = args.get("fromDevice"), args.get("toDevice")
                if src_dev is None:
                    dm = _DEVICES.search(name)
                    if dm and dm.group(2) and dm.group(4):
                        src_dev, dst_dev = int(dm.group(2)), int(dm.group(4))
                op.src = device_to_gpu.get((fi, src_dev), _peer(src_dev, gpu))
                op.dst = device_to_gpu.get((fi, dst_dev), _peer(dst_dev, gpu))
            elif op.direction in ("HtoD", "DtoH", "HtoH"):
                host_copies += 1
        else:  # gpu_memset
            op.kind = op.cls = "memory"
        ops.append(op)
    host = Host(calls, comm_ranges, gemm_ranges)
    launches = {c.corr: c for c in calls}
    for o in ops:
        c = launches.get(o.order)
        o.launch = c.ts if c is not None else None
        if c is not None:
            _from_launch(o, c)
        if o.id in missing_bytes and o.nbytes < 0:     # no size anywhere (ROCm records some copies so)
            unsized += 1
        if o.category == "comm" and c is not None and (o.id in unnamed or not o.nbytes):
            host.describe_comm(o, c.tid, c.ts, rename=o.id in unnamed)
        elif o.kind == "gemm" and not o.call and c is not None:    # (shapes from its own op too: the call's)
            host.gemm_shapes(o, c.tid, c.ts)
    links = host.link(ops)
    for key in ("waits", "syncs", "entries", "corrected", "unresolved"):
        stats[key] = stats.get(key, 0) + getattr(links, key)
    stats["host_copies"] = stats.get("host_copies", 0) + host_copies
    stats["unsized"] = stats.get("unsized", 0) + unsized
    _flow_deps(ops, flows, f, device_to_gpu, fi)
    return ops


def _from_launch(op: TraceOp, call: Call) -> None:
    """What the runtime call knows and the GPU event lacks (roctracer): a memcpy's size, a
    kernel's grid and block. ``hipExtModuleLaunchKernel`` gives its grid in work-items
    (threads), so blocks = ceil(grid / block) per dimension, on the call and on the kernel
    event alike (MIOpen's kernels in TraceLens' MI300X traces: 102,760,448 "blocks" of 256
    threads where 401,408 ran)."""
    args = call.args
    if op.category == "copy" and op.nbytes < 0:
        try:
            size = float(args.get("size", args.get("bytes")))
        except (TypeError, ValueError):
            return
        if math.isfinite(size) and size >= 0:
            op.nbytes = size
        return
    work_items = call.name == "ExtModuleLaunchKernel"
    if op.category == "copy" or (op.grid and not work_items) or not isinstance(args.get("grid"), list):
        return
    grid, block = args.get("grid"), args.get("block")
    if not isinstance(block, list) or not all(isinstance(x, int) and x > 0 for x in grid + block):
        return
    if work_items:
        grid = [-(-g // max(1, b)) for g, b in zip(grid, block)]
    op.grid = _prod(grid)
    smem = args.get("shared memory", 0)
    op.block = op.block or BlockShape(_prod(block), 0, count(smem))


def _peer(dev: Any, default: int) -> int:
    return int(dev) if isinstance(dev, int) else default


def _comm_meta(op: TraceOp, args: dict, f: _File) -> None:
    coll = args.get("Collective name")
    op.collective = collective_kind(str(coll)) if coll else collective_kind(op.name)
    nelems = args.get("In msg nelems", args.get("In msg size"))
    dtype = str(args.get("dtype", ""))
    op.dtype = dtype
    if isinstance(nelems, (int, float)):
        op.nbytes = float(nelems) * DTYPE_SIZE.get(dtype, 2)
    group = _ranks(args.get("Process Group Ranks"))
    if not group:
        pg = str(args.get("Process Group Name", "0"))
        group = f.pg_ranks.get(pg, ())
    if not group and isinstance(args.get("Group size"), int):
        group = tuple(range(args["Group size"]))
    if not group and f.world:
        group = tuple(range(f.world))    # no group recorded: the default process group
    op.group = group
    seq = args.get("Seq")
    op.seq = seq if isinstance(seq, int) else None


def _shape_meta(op: TraceOp, parent: dict) -> None:
    dims = parent.get("Input Dims")
    if isinstance(dims, list):
        op.shapes = dims
    types = parent.get("Input type")
    if isinstance(types, list) and types:
        op.dtype = str(types[0])


def _flow_deps(ops: list[TraceOp], flows: list[dict], f: _File, device_to_gpu: dict, fi: int) -> None:
    """Flow arrows (``s`` -> ``f``) between GPU ops: the arrow's end waits for its start."""
    if not flows:
        return
    by_track: dict[tuple[int, str], list[TraceOp]] = {}
    for o in ops:
        by_track.setdefault((o.rank, o.stream), []).append(o)
    start: dict[tuple, TraceOp] = {}

    def find(e: dict) -> TraceOp | None:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            return None
        gpu = device_to_gpu.get((fi, e.get("pid")))
        if gpu is None:
            gpu = f.rank
        t = ts * US
        for o in by_track.get((gpu, f"s{e.get('tid')}"), []):
            # Binding: the enclosing op, or one that starts at the timestamp (1 ns slack).
            if o.start - 1e-9 <= t <= o.end + 1e-9:
                return o
        return None

    for e in flows:
        key = (e.get("cat"), e.get("id"))
        if e.get("ph") == "s":
            op = find(e)
            if op is not None:
                start[key] = op
        elif e.get("ph") == "f" and key in start:
            op = find(e)
            if op is not None and op is not start[key] and start[key].id not in op.deps:
                op.deps.append(start[key].id)


