"""JSON execution traces with durations -> :class:`~ficco_sim.traces.ops.Trace`.

A PyTorch ``ExecutionTraceObserver`` file (``nodes``) has no times of its own; linked with
the Kineto trace of the same run it does (ET+). Two linkers write it, and both are read:

* **Chakra's** ``chakra_trace_link`` (2024-): every operator node gets ``ts``,
  ``inclusive_dur`` and ``exclusive_dur``; each GPU kernel, copy or memset it launched is a
  new node with ``cat``, ``ts``, ``inclusive_dur``, ``stream`` and its operator in
  ``ctrl_deps``, carrying the operator's ``inputs`` / ``outputs``.
* **PARAM's** ``trace_link.py`` (2023, schema ``1.0.1``): operator nodes get ``ts`` and
  ``dur``; GPU nodes are the Kineto events themselves (``cat``, ``ts``, ``dur``,
  ``args`` with ``stream``, ``grid``, ``block``, ``bytes``...), their operator in
  ``parent``; ``inputs`` are plain lists (``[id, storage, offset, numel, bytes, device]``
  per tensor) where later schemas write ``{"values": [...]}``.

Chakra's linker keys launches by the operator, so every kernel of one operator gets the end of
its last launch. A collective's process group is not read from ``record_param_comms`` (every
collective is taken over all ranks, one per file, in file order).

The nodes are turned into the Kineto events they came from and read by :mod:`.kineto`, so
a kernel, a copy or a host operator means here what it means in a Kineto trace: with GPU
nodes, those are the ops (their operators only lend their shapes; their own time is the
launch), without, each thread's outermost operators are (``ProfilerStep#N``, ``## name
##`` ranges, nodes of ``scope`` 7 (``record_function``) and the profiler's root nodes wrap
ops, they are not ops). On top of the
stream order, an op waits for the op on another stream that last wrote a tensor it reads
(same storage, offset and size). Start times are required: durations alone cannot tell
which node ran inside which. A host-only ET (no durations) is refused with a hint.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from .kineto_io import GPU_CATS, read_json
from .ops import Trace, rebase

_WRAPPER = re.compile(r"^\[pytorch\|profiler|^ProfilerStep#|^## .* ##$")
USER_SCOPE = 7           # at::RecordScope::USER_SCOPE: a record_function range (Kineto's user_annotation)
_OP_ID = re.compile(r"^r(\d+)\.[a-z]+(\d+)$")      # a Kineto op's id: its file and event position
_DURATIONS = ("dur", "inclusive_dur", "exclusive_dur")


def _value(n: dict, key: str) -> Any:
    """A node's field: top level, else in its ``attrs`` list (Chakra's later schemas)."""
    if key in n:
        return n[key]
    attrs = n.get("attrs")
    for a in attrs if isinstance(attrs, list) else []:
        if isinstance(a, dict) and a.get("name") == key:
            return a.get("value")
    return None


def _number(n: dict, keys: Sequence[str], where: str, j: int) -> float | None:
    for key in keys:
        v = _value(n, key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(where, f"nodes[{j}].{key}", f"must be a number, got {str(v)[:40]!r}")
        if v < 0 and key != "ts":
            raise InputError(where, f"nodes[{j}].{key}", f"negative duration {v!r}")
        return float(v)
    return None


def _io(n: dict, key: str, part: str = "values") -> Any:
    io = n.get(key)
    return io.get(part) if isinstance(io, dict) else (io if part == "values" else None)


def tensors(values: Any) -> list[tuple]:
    """(storage, offset, numel, element bytes) of every tensor in an ``inputs`` /
    ``outputs`` value list (``[id, storage, offset, numel, bytes, device]`` each, nested in
    lists for tensor-list arguments).

    >>> tensors([[8, 9, 0, 64, 4, "cuda:0"], 0.5, [[1, 2, 0, 8, 2, "cuda:0"]]])
    [(9, 0, 64, 4), (2, 0, 8, 2)]
    """
    out: list[tuple] = []

    def walk(v: Any) -> None:
        if (isinstance(v, list) and len(v) == 6 and isinstance(v[5], str)
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v[:5])):
            out.append((v[1], v[2], v[3], v[4]))
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(values)
    return out


def _event(n: dict, j: int, where: str) -> dict | None:
    """The Kineto event a node stands for (None: a node without a duration)."""
    dur = _number(n, _DURATIONS, where, j)
    if dur is None:
        return None
    ts = _number(n, ("ts",), where, j)
    name = n.get("name", "")
    if not isinstance(name, str):
        raise InputError(where, f"nodes[{j}].name", f"must be a string, got {str(name)[:40]!r}")
    kargs = n.get("args") if isinstance(n.get("args"), dict) else {}
    cat = _value(n, "cat")
    if cat is not None and not isinstance(cat, str):
        raise InputError(where, f"nodes[{j}].cat", f"must be a string, got {str(cat)[:40]!r}")
    stream = _value(n, "stream")
    stream = kargs.get("stream") if stream is None else stream
    if stream is None and cat in GPU_CATS:
        stream = _value(n, "tid")          # a Kineto GPU event's tid is its stream
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, (str, int))):
        raise InputError(where, f"nodes[{j}].stream", f"must be an integer or a name, got {str(stream)[:40]!r}")
    nid = n.get("id")
    own = nid if isinstance(nid, int) and not isinstance(nid, bool) and nid >= 0 else -(j + 1)   # (no other's)
    if cat in GPU_CATS or stream is not None:
        parent = _value(n, "parent")
        parent = _value(n, "ctrl_deps") if parent is None else parent
        device = kargs.get("device", n.get("pid", 0))
        # correlation: the node's position (ops keep it as their launch order); External id: its operator
        args = {**kargs, "stream": stream if stream is not None else 0, "correlation": j,
                "External id": parent if isinstance(parent, int) and not isinstance(parent, bool) else -(j + 1)}
        return {"ph": "X", "cat": cat if cat in GPU_CATS else "kernel", "name": name, "ts": ts, "dur": dur,
                "pid": device, "tid": args["stream"], "args": args}
    tid = _value(n, "tid")
    args = {"External id": own,
            "Input Dims": n.get("input_shapes", _io(n, "inputs", "shapes")),
            "Input type": n.get("input_types", _io(n, "inputs", "types"))}
    wrapper = _WRAPPER.search(name) or _value(n, "scope") == USER_SCOPE
    return {"ph": "X", "cat": "user_annotation" if wrapper else "cpu_op", "name": name,
            "ts": ts, "dur": dur, "pid": 0, "tid": tid if isinstance(tid, (int, str)) else 0,
            "args": {k: v for k, v in args.items() if v is not None}}


def _as_kineto(data: Any, where: str, index: int) -> tuple[dict, dict[int, dict], int]:
    """(Kineto-shaped content, event position -> node, host operators) of one file."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InputError(where, "nodes", "missing: not an execution trace")
    events, of_event = [], {}
    for j, n in enumerate(data["nodes"]):
        if isinstance(n, dict) and (e := _event(n, j, where)) is not None:
            of_event[len(events)] = n
            events.append(e)
    if not events:
        raise InputError(where, "nodes[].dur", "this host execution trace has no durations; import the "
                         "matching Kineto trace (one per rank) instead, or link the two with chakra_trace_link")
    if any(e["ts"] is None for e in events):
        raise InputError(where, "nodes[].ts", "its nodes carry durations but no start times: their order in "
                         "time, and which nest inside which, cannot be told; import the matching Kineto trace")
    host = sum(e["cat"] == "cpu_op" for e in events)
    return {"traceEvents": events, "distributedInfo": {"rank": index}}, of_event, host


def load_et_json(paths: Sequence[str | Path], *, steps: Sequence[int] | None = None) -> Trace:
    """Import linked execution traces, one per rank (see module docstring)."""
    from .kineto import load_kineto
    where = [str(p) for p in paths]
    read = [_as_kineto(read_json(p), w, i) for i, (p, w) in enumerate(zip(paths, where))]
    trace = load_kineto(where, steps=steps, parsed=[r[0] for r in read])
    trace.fmt = "et"
    nodes = {(rank, pos): n for rank, (_, of_event, _) in enumerate(read) for pos, n in of_event.items()}
    _tensor_deps(trace, nodes)
    if trace.on_gpu:
        moved = _gpu_starts(trace)
        trace.notes.append(f"GPU nodes are timed at their launch (the linker's ts): {moved} of {len(trace.ops)} "
                           "start later, when the op before them on their stream or an op whose tensors they "
                           "read had finished")
        if host := sum(r[2] for r in read):
            trace.notes.append(f"{host} host operators left out: the GPU nodes linked to them carry the work "
                               "(an operator's own time is its launch)")
    return trace


def _gpu_starts(trace: Trace) -> int:
    """Both linkers time a GPU node at its launch: the end of the runtime call that issued it
    (Chakra's ``get_start_timestamp_for_gpu_op``, PARAM's ``exact_match``), not when the GPU
    ran it. Each op keeps that as its launch and starts at the later of it and the end of what
    it waits for (the op before it on its stream, the ops it depends on); a copy from or to
    pageable host memory ran inside its call, so it ended when the call returned. Returns the
    ops that moved."""
    by_id = {o.id: o for o in trace.ops}
    last: dict[tuple, float] = {}
    moved = 0
    for o in sorted(trace.ops, key=lambda o: (o.start, o.order)):
        o.launch = o.start
        ready = max([last.get((o.rank, o.stream), -math.inf)] + [by_id[d].end for d in o.deps if d in by_id])
        start = max(o.launch - o.dur if "Pageable" in o.name else o.launch, ready)
        moved += start > o.launch
        o.start = start
        last[(o.rank, o.stream)] = o.end
    t0 = min(o.start for o in trace.ops)                   # a copy may now start before the first launch
    rebase(trace.ops, trace.sources[0], "nodes[].ts")
    trace.steps = {r: {n: (a - t0, b - t0) for n, (a, b) in w.items()} for r, w in trace.steps.items()}
    trace.ops.sort(key=lambda o: (o.start, o.rank, o.order))
    return moved


def _tensor_deps(trace: Trace, nodes: dict[tuple[int, int], dict]) -> None:
    """An op waits for the op on another stream that last wrote a tensor it reads; a
    collective without a size takes its first input tensor's."""
    writer: dict[tuple, Any] = {}
    for op in sorted(trace.ops, key=lambda o: (o.start, o.order)):
        m = _OP_ID.match(op.id)
        n = nodes.get((int(m.group(1)), int(m.group(2)))) if m else None
        if n is None:
            continue
        for t in tensors(_io(n, "inputs")):
            w = writer.get((op.rank, t))
            if w is not None and w.stream != op.stream and w.id not in op.deps:
                op.deps.append(w.id)
        outs = tensors(_io(n, "outputs"))
        for t in outs:
            writer[(op.rank, t)] = op
        if op.category == "comm" and not op.nbytes:
            first = tensors(_io(n, "inputs")) or outs
            op.nbytes = float(first[0][2] * first[0][3]) if first else 0.0
