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

import bisect
import gzip
import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from ..hardware import BlockShape
from .ops import DTYPE_SIZE, Trace, TraceOp, classify_cpu_op, classify_kernel, collective_kind

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_CATS = {"cpu_op", "user_annotation"}
US = 1e-6
_MEMCPY_DIR = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH)\b")
_DEVICES = re.compile(r"\(\s*(\w+)\s*(\d*)\s*->\s*(\w+)\s*(\d*)\s*\)")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file, gzipped or not; errors become :class:`InputError` naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), None, f"cannot read: {exc.strerror}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError):
        raise InputError(str(p), None, "truncated or corrupt gzip data") from None
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(raw.rstrip()) - 1 else "malformed JSON"
        raise InputError(str(p), None, f"{what} at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


KEEP_PH = {"X", "M", "s", "f", "i"}


def compact_trace(raw_path: str | Path, out_path: str | Path, meta: dict | None = None) -> Path:
    """Shrink a raw ``export_chrome_trace`` file for shipping: keep only what ficco-sim
    reads (``ph`` X/M/s/f/i events), round ``ts``/``dur`` to 0.001 us (1 ns), add ``meta``
    under the top-level key ``ficco``, gzip to ``out_path`` (written to a temporary name
    and renamed, so a failure leaves no half file) and delete ``raw_path``."""
    raw_path, out_path = Path(raw_path), Path(out_path)
    data = json.loads(raw_path.read_text())
    events = [e for e in data.get("traceEvents", []) if e.get("ph") in KEEP_PH]
    for e in events:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), float):
                e[key] = round(e[key], 3)
    data["traceEvents"] = events
    if meta:
        data["ficco"] = meta
    tmp = out_path.with_name(f".{out_path.name}.partial")
    try:
        with gzip.open(tmp, "wt") as f:
            json.dump(data, f, separators=(",", ":"))
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    raw_path.unlink()
    return out_path


def _events(data: Any, where: str) -> list[dict]:
    if isinstance(data, list):
        events = data
    elif isinstance(data, dict) and "traceEvents" in data:
        events = data["traceEvents"]
    else:
        raise InputError(where, "traceEvents", "missing: not a Chrome/Kineto trace")
    if not isinstance(events, list):
        raise InputError(where, "traceEvents", "must be a list of events")
    return [e for e in events if isinstance(e, dict)]


def _num(e: dict, key: str, where: str, index: int) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        name = e.get("name", "?")
        raise InputError(where, f"traceEvents[{index}].{key}",
                         f"missing or not a number in event {str(name)[:60]!r}" if v is None else
                         f"must be a number, got {v!r} in event {str(name)[:60]!r}")
    if key == "dur" and v < 0:
        raise InputError(where, f"traceEvents[{index}].dur", f"negative duration {v!r}")
    return float(v)


def _prod(v: Any) -> int:
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
        out = 1
        for x in v:
            out *= int(x)
        return out
    return 0


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

    def __init__(self, path: str, index: int):
        self.where = path
        data = read_json(path)
        self.events = _events(data, path)
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
        # A timeline exported by ficco-sim names the profile and topology it was simulated on.
        other = meta.get("otherData") if isinstance(meta.get("otherData"), dict) else {}
        self.topology = ""
        if other.get("generator") == "ficco-sim":
            self.device_name = self.device_name or str(other.get("gpu", ""))
            self.topology = str(other.get("topology", ""))
        self.on_gpu = any(e.get("cat") in GPU_CATS and e.get("ph") == "X" for e in self.events)


def load_kineto(paths: Sequence[str | Path]) -> Trace:
    """Import one Kineto trace per rank (see module docstring)."""
    if not paths:
        raise InputError("trace", None, "no trace files given")
    files = [_File(str(p), i) for i, p in enumerate(paths)]
    _check_ranks(files)
    on_gpu = {f.on_gpu for f in files}
    if len(on_gpu) > 1:
        raise InputError(files[0].where, "traceEvents", "mixes GPU traces and CPU-only traces across ranks")
    ops: list[TraceOp] = []
    prio: dict = {}
    notes: list[str] = []
    if files[0].on_gpu:
        device_to_gpu = _device_map(files)
        for fi, f in enumerate(files):
            ops += _gpu_ops(f, fi, device_to_gpu, prio, notes)
    else:
        for f in files:
            ops += _cpu_ops(f)
    if not ops:
        raise InputError(files[0].where, "traceEvents", "no GPU kernels, copies or CPU operators found")
    t0 = min(o.start for o in ops)
    for o in ops:
        o.start -= t0
        if o.launch is not None:
            o.launch -= t0
    ops.sort(key=lambda o: (o.start, o.rank, o.order))
    num = max(max(o.rank for o in ops), max((max(o.src, o.dst) for o in ops if o.category == "copy"), default=0)) + 1
    world = next((f.world for f in files if f.world), None)
    if world and len(files) > 1:
        num = max(num, world)
    return Trace(ops, num, [f.where for f in files], "kineto", files[0].device_name, files[0].on_gpu, prio, notes,
                 topology=files[0].topology)


def _check_ranks(files: list[_File]) -> None:
    worlds = {f.world for f in files if f.world is not None}
    if len(worlds) > 1:
        bad = next(f for f in files if f.world != files[0].world)
        raise InputError(bad.where, "distributedInfo.world_size",
                         f"inconsistent ranks: {bad.world} here, {files[0].world} in {files[0].where}")
    seen: dict[int, str] = {}
    for f in files:
        if f.rank in seen:
            raise InputError(f.where, "distributedInfo.rank", f"inconsistent ranks: rank {f.rank} also in {seen[f.rank]}")
        if f.world is not None and f.rank >= f.world:
            raise InputError(f.where, "distributedInfo.rank", f"rank {f.rank} is not below world_size {f.world}")
        seen[f.rank] = f.where


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


def _gpu_ops(f: _File, fi: int, device_to_gpu: dict, prio: dict, notes: list[str]) -> list[TraceOp]:
    cpu_by_ext: dict[Any, dict] = {}
    launch_ts: dict[Any, float] = {}
    waits: list[tuple[dict, float]] = []
    syncs: list[tuple[dict, float]] = []
    flows: list[dict] = []
    ops: list[TraceOp] = []
    for i, e in enumerate(f.events):
        ph, cat, args = e.get("ph"), e.get("cat"), e.get("args") or {}
        if ph in ("s", "f", "t") and cat != "ac2g":
            flows.append(e)
            continue
        if ph != "X":
            continue
        if cat in ("cpu_op", "user_annotation") and "External id" in args:
            prev = cpu_by_ext.get(args["External id"])
            # Prefer the op that carries comm metadata (record_param_comms) or shapes.
            if prev is None or ("Collective name" in args and "Collective name" not in prev):
                cpu_by_ext[args["External id"]] = args
        if cat in ("cuda_runtime", "cuda_driver", "cuda_sync"):
            ts = _num(e, "ts", f.where, i) * US
            if "correlation" in args:
                launch_ts[args["correlation"]] = ts
            name = str(e.get("name", ""))
            if "wait_on_stream" in args or "wait_on_cuda_event_record_corr_id" in args or name == "cudaStreamWaitEvent":
                waits.append((e, ts))
            elif "Synchronize" in name or cat == "cuda_sync":
                syncs.append((e, ts))
            continue
        if cat not in GPU_CATS:
            continue
        ts, dur = _num(e, "ts", f.where, i) * US, _num(e, "dur", f.where, i) * US
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
                op.block = BlockShape(threads, int(regs) if isinstance(regs, (int, float)) else 0,
                                      int(smem) if isinstance(smem, (int, float)) else 0)
            parent = cpu_by_ext.get(args.get("External id"), {})
            if op.category == "comm":
                _comm_meta(op, {**parent, **args}, f)
            else:
                _shape_meta(op, parent)
        elif cat == "gpu_memcpy":
            op.category, op.kind = "copy", "transfer"
            m = _MEMCPY_DIR.search(name)
            op.direction = m.group(1) if m else "DtoD"
            nbytes = args.get("bytes")
            if not isinstance(nbytes, (int, float)) or nbytes < 0:
                raise InputError(f.where, f"traceEvents[{i}].args.bytes", f"missing in memcpy {name[:60]!r}")
            op.nbytes = float(nbytes)
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
            elif op.direction in ("HtoD", "DtoH", "HtoH") and len(notes) < 5:
                notes.append(f"{name}: host copy kept with its measured time on GPU {gpu} (no PCIe model)")
        else:  # gpu_memset
            op.kind = "memory"
        ops.append(op)
    for o in ops:
        o.launch = launch_ts.get(o.order)
    _wait_deps(ops, waits, f)
    _sync_deps(ops, syncs)
    _flow_deps(ops, flows, f, device_to_gpu, fi)
    return ops


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


def _wait_deps(ops: list[TraceOp], waits: list[tuple[dict, float]], f: _File) -> None:
    """cudaStreamWaitEvent: the next op launched on the waiting stream waits for the last
    op launched on ``wait_on_stream`` before the event was recorded."""
    by_stream: dict[str, list[TraceOp]] = {}
    for o in sorted(ops, key=lambda o: o.order):
        by_stream.setdefault(o.stream, []).append(o)
    orders = {s: [o.order for o in lst] for s, lst in by_stream.items()}
    for e, _ts in waits:
        args = e.get("args") or {}
        src_stream = args.get("wait_on_stream")
        if src_stream is None or "stream" not in args:
            continue
        corr = args.get("correlation")
        rec = args.get("wait_on_cuda_event_record_corr_id", corr)
        if not isinstance(corr, int) or not isinstance(rec, int):
            continue
        src_ops, dst_ops = by_stream.get(f"s{src_stream}", []), by_stream.get(f"s{args['stream']}", [])
        i = bisect.bisect_left(orders.get(f"s{src_stream}", []), rec)       # last op launched before the record
        j = bisect.bisect_right(orders.get(f"s{args['stream']}", []), corr)  # first op launched after the wait
        if i > 0 and j < len(dst_ops):
            src, dst = src_ops[i - 1], dst_ops[j]
            if src.id not in dst.deps and src.stream != dst.stream:
                dst.deps.append(src.id)


def _sync_deps(ops: list[TraceOp], syncs: list[tuple[dict, float]]) -> None:
    """A host synchronisation: ops launched after it wait for the synchronised streams."""
    ordered = sorted(ops, key=lambda o: o.order)
    for e, _ts in syncs:
        args = e.get("args") or {}
        corr = args.get("correlation")
        if not isinstance(corr, int):
            continue
        only = args.get("stream") if "Stream" in str(e.get("name", "")) else None
        before: dict[str, TraceOp] = {}
        for o in ordered:
            if o.order < corr and (only is None or o.stream == f"s{only}"):
                before[o.stream] = o
        after: dict[str, TraceOp] = {}
        for o in ordered:
            if o.order > corr:
                after.setdefault(o.stream, o)
        for s, nxt in after.items():
            for s2, prev in before.items():
                if s2 != s and prev.id not in nxt.deps:
                    nxt.deps.append(prev.id)


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


# ------------------------------------------------------------------------------------
# CPU traces

def _cpu_ops(f: _File) -> list[TraceOp]:
    names = {}
    for e in f.events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            n = str((e.get("args") or {}).get("name", ""))
            m = re.search(r"\((.*)\)", n)
            names[e.get("tid")] = (m.group(1) if m else n) or "thread"
    from .executor_trace import EXECUTOR_RANGE, executor_ops   # ficco-sim's own executor traces
    if any(e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(EXECUTOR_RANGE)
           for e in f.events):
        return executor_ops(f, names)
    by_tid: dict[Any, list[tuple[float, float, int, dict]]] = {}
    for i, e in enumerate(f.events):
        if e.get("ph") != "X" or e.get("cat") not in CPU_CATS:
            continue
        ts, dur = _num(e, "ts", f.where, i) * US, _num(e, "dur", f.where, i) * US
        by_tid.setdefault(e.get("tid"), []).append((ts, dur, i, e))
    ops: list[TraceOp] = []
    for tid, evs in by_tid.items():
        evs.sort(key=lambda x: (x[0], -x[1]))
        stream = f"{names.get(tid, 'thread')}.{tid}"
        open_end = -math.inf
        for k, (ts, dur, i, e) in enumerate(evs):
            name = str(e.get("name", ""))
            kind, role = classify_cpu_op(name)
            if e.get("cat") == "user_annotation" and role != "comm":
                continue  # wrappers (ProfilerStep#N, record_function blocks) are not ops
            if ts < open_end - 1e-12:
                continue  # nested inside a kept op
            open_end = ts + dur
            args = e.get("args") or {}
            op = TraceOp(f"r{f.rank}.c{i}", f.rank, stream, name, "comm" if role == "comm" else "compute",
                         kind, ts, dur, order=i)
            op.shapes = args.get("Input Dims") if isinstance(args.get("Input Dims"), list) else []
            types = args.get("Input type")
            op.dtype = str(types[0]) if isinstance(types, list) and types else ""
            if role == "comm":
                op.collective = collective_kind(name)
                op.group = next(iter(f.pg_ranks.values()), ()) or tuple(range(f.world or 1))
                if op.shapes and isinstance(op.shapes[0], list):
                    op.nbytes = float(math.prod(op.shapes[0])) * DTYPE_SIZE.get(op.dtype, 4)
            ops.append(op)
    _cpu_comm_deps(ops)
    return ops


def _cpu_comm_deps(ops: list[TraceOp]) -> None:
    """Link each background collective to its launching ``c10d::`` op's thread: it starts
    after the op before the launch, and the first later op on that thread that reads a
    tensor of a shape the launch touched waits for it (``work.wait()``)."""
    launches = [o for o in ops if o.name.startswith("c10d::")]
    for c in (o for o in ops if o.category == "comm"):
        cands = [lo for lo in launches if lo.stream != c.stream and lo.start <= c.start
                 and collective_kind(lo.name) == c.collective]
        if not cands:
            continue
        lo = max(cands, key=lambda x: x.start)
        c.launch = lo.start
        before = [o for o in ops if o.stream == lo.stream and o.end <= lo.start]
        if before:
            c.deps.append(max(before, key=lambda x: x.end).id)
        # repr: c10d ops list their tensors one level deeper ([[[256, 384]], [], ...]).
        touched = {repr(d) for d in lo.shapes if isinstance(d, list) and d}
        for o in sorted((o for o in ops if o.stream == lo.stream and o.start >= c.end), key=lambda x: x.start):
            if touched & {repr(d) for d in o.shapes if isinstance(d, list) and d}:
                o.deps.append(c.id)
                break
