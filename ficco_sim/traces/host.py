"""What the host side of a Kineto GPU trace says about the GPU ops it launched.

A GPU trace records, besides the kernels and copies, the CUDA/HIP runtime calls of every
CPU thread (``cuda_runtime`` / ``cuda_driver`` events, correlated with the GPU op they
launched) and the PyTorch operators around them (``cpu_op`` / ``user_annotation``).
From them this module infers what PyTorch really ordered, with no help from CUPTI sync
events (Kineto's default):

* **stream waits** (``cudaStreamWaitEvent``, no stream recorded): the waiting stream is
  the stream of the next op the same thread launches; the stream waited on is the stream
  of the last op the thread launched before the matching ``cudaEventRecord`` (or, when
  records are not traced, before the wait) on another stream; the op waited for is the
  last op launched on that stream before the record;
* **host synchronisations**: ``cudaDeviceSynchronize`` waits for every stream of the
  device; ``cudaStreamSynchronize`` / ``cudaEventSynchronize`` for one stream: the one
  whose op ended while the call blocked (the latest), else the stream of the last op the
  thread launched. The ops the thread launches next wait for what was synchronised;
* **collective entry**: a collective's stream waits for the stream that enqueued it; where
  that wait is not traced (sampled traces), the enqueuing thread's last launch on another
  stream is taken;
* **collectives** from the operators that enqueued them (``nccl:all_to_all``,
  ``c10d::_reduce_scatter_base_``, ``record_param_comms`` with ``Collective name``):
  kind, bytes (``In msg nelems`` or the operator's ``Input Dims``), dtype and group.

Every inferred dependency is checked against the measurement: an op never waits for
one that ended after it started in the run (to 1 us, the trace's resolution); where the
inference names such an op, the latest earlier op of the same stream that had ended is
taken instead, and the count of such corrections is reported.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import Any

from .ops import DTYPE_SIZE, TraceOp, collective_kind

US = 1e-6
SLACK = 1.5e-6          # Kineto timestamps are whole microseconds in older traces
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "cuda_sync", "hip_runtime", "hip_api"}
COMM_OPS = ("nccl:", "rccl:", "c10d::", "record_param_comms", "gloo:")


@functools.lru_cache(maxsize=4096)
def api(name: str) -> str:
    """A runtime call's name without its vendor prefix (``cudaStreamWaitEvent`` ->
    ``StreamWaitEvent``, ``hipDeviceSynchronize`` -> ``DeviceSynchronize``)."""
    for p in ("cuda", "hip", "cu"):
        if name.startswith(p) and len(name) > len(p) and name[len(p)].isupper():
            return name[len(p):]
    return name


@dataclass
class Call:
    """One runtime call on a CPU thread (seconds)."""

    tid: Any
    ts: float
    end: float
    name: str          # without vendor prefix
    corr: int
    args: dict


@dataclass
class HostLinks:
    """Counts of what the host side gave (for notes and tests)."""

    waits: int = 0          # stream-wait dependencies added
    syncs: int = 0          # host-synchronisation dependencies added
    entries: int = 0        # collectives' waits for their enqueuing stream, where untraced
    corrected: int = 0      # inferred dependencies moved to an earlier op to agree with the measurement
    unresolved: int = 0     # waits/syncs whose streams could not be told
    comm_named: int = 0     # collectives named from their enqueuing operator


class Host:
    """The runtime calls and communication operators of one rank's file."""

    def __init__(self, calls: list[Call], comm_ranges: dict[Any, list[tuple[float, float, str, dict]]],
                 gemm_ranges: dict[Any, list[tuple[float, float, str, dict]]] | None = None):
        self.calls = sorted(_merge_sync_events(calls), key=lambda c: (c.ts, c.corr))
        self.comm_ranges = {t: sorted(r, key=lambda x: (x[0], -x[1])) for t, r in comm_ranges.items()}
        self.gemm_ranges = {t: sorted(r, key=lambda x: (x[0], -x[1])) for t, r in (gemm_ranges or {}).items()}
        self._gemm_starts = {t: [x[0] for x in r] for t, r in self.gemm_ranges.items()}

    def gemm_shapes(self, op: TraceOp, launch_tid: Any, launch_ts: float) -> None:
        """``op``'s input dims and dtype from the innermost matrix-product operator
        (``aten::mm``, ``aten::addmm`` ...) enclosing its launch, when it recorded shapes."""
        ranges = self.gemm_ranges.get(launch_tid, [])
        i = bisect.bisect_right(self._gemm_starts.get(launch_tid, []), launch_ts + SLACK)
        for ts, end, _name, args in reversed(ranges[max(0, i - 16):i]):
            dims = args.get("Input Dims")
            if end >= launch_ts - SLACK and isinstance(dims, list) and any(isinstance(d, list) and len(d) == 2
                                                                            for d in dims):
                op.shapes = dims
                op.dtype = op.dtype or _dtype(args)
                op.call = (launch_tid, ts)    # its operator: a split-K GEMM's reduction kernel shares it
                return

    # -- dependencies -----------------------------------------------------------------
    def link(self, ops: list[TraceOp]) -> HostLinks:
        """Add the dependencies the runtime calls imply to ``ops`` (one rank's GPU ops)."""
        out = HostLinks()
        launch_of = {c.corr: c for c in self.calls}
        # per thread: ops in launch order; per stream: ops in launch order
        thread_ops: dict[Any, list[TraceOp]] = {}
        stream_ops: dict[str, list[TraceOp]] = {}
        for o in sorted(ops, key=lambda o: o.order):
            c = launch_of.get(o.order)
            if c is not None:
                thread_ops.setdefault(c.tid, []).append(o)
            stream_ops.setdefault(o.stream, []).append(o)
        thread_keys = {t: [o.order for o in lst] for t, lst in thread_ops.items()}
        per_stream: dict[Any, dict[str, list[TraceOp]]] = {}     # thread -> stream -> its launches
        for t, lst in thread_ops.items():
            for o in lst:
                per_stream.setdefault(t, {}).setdefault(o.stream, []).append(o)
        per_stream_keys = {t: {st: [o.order for o in lst] for st, lst in d.items()} for t, d in per_stream.items()}
        stream_keys = {s: [o.order for o in lst] for s, lst in stream_ops.items()}

        def last_on(stream: str, before: int) -> TraceOp | None:
            i = bisect.bisect_left(stream_keys.get(stream, []), before)
            return stream_ops[stream][i - 1] if i > 0 else None

        def last_by_thread(tid, before: int, not_stream: str | None = None) -> TraceOp | None:
            keys, lst = thread_keys.get(tid, []), thread_ops.get(tid, [])
            i = bisect.bisect_left(keys, before)
            while i > 0:
                i -= 1
                if lst[i].stream != not_stream:
                    return lst[i]
            return None

        def next_by_thread(tid, after: int) -> TraceOp | None:
            keys, lst = thread_keys.get(tid, []), thread_ops.get(tid, [])
            i = bisect.bisect_right(keys, after)
            return lst[i] if i < len(lst) else None

        def first_per_stream(tid, after: int) -> list[TraceOp]:
            """The thread's first launch on each stream after ``after`` (what a host
            synchronisation orders)."""
            out = []
            for st, keys in per_stream_keys.get(tid, {}).items():
                i = bisect.bisect_right(keys, after)
                if i < len(keys):
                    out.append(per_stream[tid][st][i])
            return out

        def add(src: TraceOp | None, dst: TraceOp | None, counter: str) -> None:
            if src is None or dst is None or src is dst or src.stream == dst.stream:
                return
            if src.end > dst.start + SLACK:        # the run contradicts it: take what had ended
                keys = stream_keys[src.stream]
                i = bisect.bisect_left(keys, src.order)
                while i > 0 and stream_ops[src.stream][i].end > dst.start + SLACK:
                    i -= 1
                src = stream_ops[src.stream][i]
                if src.end > dst.start + SLACK:
                    out.corrected += 1
                    return
                out.corrected += 1
            if src.id not in dst.deps:
                dst.deps.append(src.id)
                setattr(out, counter, getattr(out, counter) + 1)

        records: dict[Any, list[Call]] = {}
        synced: dict[int, list[TraceOp | None]] = {}    # a synchronisation's call -> the ops it waited for
        for c in self.calls:
            name = c.name
            if name in ("EventRecord", "EventRecordWithFlags"):
                records.setdefault(c.tid, []).append(c)
                continue
            if name == "StreamWaitEvent":
                if isinstance(c.args.get("wait_on_stream"), int) and c.args["wait_on_stream"] >= 0 and \
                        isinstance(c.args.get("stream"), int) and c.args["stream"] >= 0:
                    self._cupti_wait(c, stream_ops, stream_keys, add)
                    continue
                dst = next_by_thread(c.tid, c.corr)
                if dst is None:
                    continue
                recs = [r for r in records.get(c.tid, [])[-8:] if r.corr < c.corr]
                src = None
                for r in reversed(recs):         # the latest record whose stream is another one
                    cand = last_by_thread(c.tid, r.corr)
                    if cand is not None and cand.stream != dst.stream:
                        src = last_on(cand.stream, r.corr)
                        break
                if src is None:
                    cand = last_by_thread(c.tid, c.corr, not_stream=dst.stream)
                    src = last_on(cand.stream, c.corr) if cand is not None else None
                if src is None:
                    out.unresolved += 1
                add(src, dst, "waits")
            elif name in ("DeviceSynchronize", "CtxSynchronize"):
                after = first_per_stream(c.tid, c.corr)
                for s in stream_ops:
                    src = last_on(s, c.corr)
                    synced.setdefault(c.corr, []).append(src)
                    for dst in after:
                        add(src, dst, "syncs")
            elif name in ("StreamSynchronize", "EventSynchronize"):
                waited, stream_arg = c.args.get("wait_on_stream"), c.args.get("stream")
                rec = c.args.get("wait_on_cuda_event_record_corr_id")
                if isinstance(waited, int) and waited >= 0:       # CUPTI: the event's stream
                    stream = f"s{waited}"
                    src = last_on(stream, rec if isinstance(rec, int) and rec >= 0 else c.corr)
                    synced.setdefault(c.corr, []).append(src)
                    for dst in first_per_stream(c.tid, c.corr):
                        add(src, dst, "syncs")
                    continue
                if isinstance(stream_arg, int) and stream_arg >= 0:
                    stream = f"s{stream_arg}"
                else:
                    stream = self._synced_stream(c, stream_ops, last_on, last_by_thread)
                if stream is None:
                    out.unresolved += 1
                    continue
                src = last_on(stream, c.corr)
                synced.setdefault(c.corr, []).append(src)
                for dst in first_per_stream(c.tid, c.corr):
                    add(src, dst, "syncs")
        self._pace(ops, synced)
        # A collective's stream always waits for the stream that enqueued it (ProcessGroup
        # NCCL/RCCL record an event on the current stream first): where the wait itself is
        # not in the trace (sampled or filtered traces), the enqueuing thread's last launch
        # on another stream is what it waited for.
        for o in ops:
            c = launch_of.get(o.order)
            if o.category == "comm" and c is not None and not any(d for d in o.deps):
                prev = last_by_thread(c.tid, o.order, not_stream=o.stream)
                add(last_on(prev.stream, o.order) if prev is not None else None, o, "entries")
        return out

    def _pace(self, ops: list[TraceOp], synced: dict[int, list[TraceOp | None]]) -> None:
        """Each launched op's ``host``: its thread launched it so long after its previous launch on
        the same GPU, or after what a synchronisation the thread made in between waited for ended,
        whichever was later (the host's own pace, which a faster GPU does not change; :mod:`.graph`
        keeps it). A copy whose call returned only once it was done (to pageable memory, a blocking
        cudaMemcpy) held the thread like a synchronisation. Times are differences on the calls'
        clock, whatever its origin."""
        of = {o.order: o for o in ops}
        last: dict[tuple, tuple[str, float, int]] = {}      # (GPU, thread) -> (op id, launch, syncs seen)
        held: dict[Any, list[tuple[tuple[str, ...], float]]] = {}  # thread -> its syncs in order: (op ids, end)
        for c in self.calls:
            done = [o for o in synced.get(c.corr, []) if o is not None]
            if done:
                held.setdefault(c.tid, []).append((tuple(o.id for o in done), max(o.end for o in done)))
                continue
            o = of.get(c.corr)
            if o is None:
                continue
            key = (o.rank, c.tid)
            prev, at, seen = last.get(key, ("", 0.0, 0))
            new = held.get(c.tid, [])[seen:]        # the thread's syncs since this GPU's previous launch
            syncs = tuple(i for ids, _ in new for i in ids)
            since = max([at] + [end for _, end in new]) if new else 0.0
            # (a chain's first launch: the graph times it from the trace's start, on the ops' clock)
            o.host = (c.tid, prev, max(0.0, c.ts - at) if prev else 0.0, syncs,
                      max(0.0, c.ts - since) if syncs else 0.0)
            last[key] = (o.id, c.ts, len(held.get(c.tid, [])))
            if o.category == "copy" and c.end >= o.end - SLACK and o.end > c.ts:      # the call waited for it
                held.setdefault(c.tid, []).append(((o.id,), o.end))

    @staticmethod
    def _cupti_wait(c: Call, stream_ops, stream_keys, add) -> None:
        """A wait CUPTI recorded with both streams (``cuda_sync`` / sync events on)."""
        rec = c.args.get("wait_on_cuda_event_record_corr_id", c.corr)
        if not isinstance(rec, int) or not isinstance(c.args["wait_on_stream"], int) or c.args["wait_on_stream"] < 0:
            return
        src_s, dst_s = f"s{c.args['wait_on_stream']}", f"s{c.args['stream']}"
        i = bisect.bisect_left(stream_keys.get(src_s, []), rec)
        j = bisect.bisect_right(stream_keys.get(dst_s, []), c.corr)
        if i > 0 and j < len(stream_ops.get(dst_s, [])):
            add(stream_ops[src_s][i - 1], stream_ops[dst_s][j], "waits")

    @staticmethod
    def _synced_stream(c: Call, stream_ops, last_on, last_by_thread) -> str | None:
        """The stream a stream/event synchronisation without a stream argument waited for:
        the one whose last op launched before the call ended latest while it blocked; else
        the stream of the thread's last launch."""
        best, best_end = None, -math.inf
        for s in stream_ops:
            o = last_on(s, c.corr)
            if o is not None and c.ts - SLACK <= o.end <= c.end + SLACK and o.end > best_end:
                best, best_end = s, o.end
        if best is not None:
            return best
        o = last_by_thread(c.tid, c.corr)
        return o.stream if o is not None else None

    # -- collectives --------------------------------------------------------------------
    def describe_comm(self, op: TraceOp, launch_tid: Any, launch_ts: float, rename: bool = True) -> bool:
        """Fill ``op``'s collective kind, bytes, dtype and group from the innermost
        communication operator enclosing its launch; True when it named the kind.
        ``rename``: the kind the op has came from its kernel name only (NCCL <= 2.18 names
        every collective ``SendRecv``): the operator's kind replaces it."""
        found = False
        for ts, end, name, args in reversed(self.comm_ranges.get(launch_tid, [])):
            if ts > launch_ts + SLACK or end < launch_ts - SLACK:
                continue
            coll = args.get("Collective name")
            kind = collective_kind(str(coll)) if coll else collective_kind(name)
            if kind and not found and (rename or not op.collective):
                op.collective, found = kind, True
            if not op.nbytes:
                nbytes = _bytes(args)
                if nbytes:
                    op.nbytes = nbytes
                    op.dtype = op.dtype or _dtype(args)
            if isinstance(args.get("Group size"), int) and not op.group:
                op.group = tuple(range(args["Group size"]))
            if found and op.nbytes:
                break
        return found


_SYNC_KINDS = {"Stream Wait Event": "StreamWaitEvent", "Event Sync": "EventSynchronize",
               "Stream Sync": "StreamSynchronize", "Context Sync": "DeviceSynchronize"}


def _merge_sync_events(calls: list[Call]) -> list[Call]:
    """CUPTI sync events (``cuda_sync``, when traced) name the streams of a runtime call
    with the same correlation: their arguments join that call (which keeps its CPU
    thread), so each synchronisation is read once, with its streams."""
    runtime = [c for c in calls if not c.args.get("cuda_sync_kind")]
    by_corr = {c.corr: c for c in runtime}
    runtime_sorted = sorted(runtime, key=lambda c: c.corr)
    corrs = [c.corr for c in runtime_sorted]
    orphans = []
    for c in calls:
        kind = c.args.get("cuda_sync_kind")
        if not kind:
            continue
        name = _SYNC_KINDS.get(str(kind), c.name.replace(" ", ""))
        host = by_corr.get(c.corr)
        if host is not None:
            host.args = {**host.args, **{k: v for k, v in c.args.items() if k != "correlation"}}
            host.name = name
        else:   # its runtime call is not traced: the thread of the call just before it
            i = bisect.bisect_left(corrs, c.corr)
            tid = runtime_sorted[i - 1].tid if i > 0 else c.tid
            orphans.append(Call(tid, c.ts, c.end, name, c.corr, c.args))
    return runtime + orphans


def _dtype(args: dict) -> str:
    types = args.get("Input type")
    if isinstance(args.get("dtype"), str):
        return args["dtype"]
    return str(types[0]) if isinstance(types, list) and types else ""


def _bytes(args: dict) -> float:
    """Bytes of a collective's input from ``In msg nelems`` or its first tensor's dims."""
    nelems = args.get("In msg nelems")
    dtype = _dtype(args)
    size = DTYPE_SIZE.get(dtype, 0)
    if isinstance(nelems, (int, float)) and nelems > 0:
        return float(nelems) * (size or 2)
    dims = args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and size and \
            all(isinstance(x, int) for x in dims[0]):
        return float(math.prod(dims[0])) * size
    return 0.0
