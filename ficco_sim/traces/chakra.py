"""Execution traces: MLCommons Chakra ``.et`` (protobuf) and JSON ETs with durations.

**Chakra ``.et``** (schema ``et_def.proto`` of chakra 1.0): a stream of messages, each
prefixed by its varint length: one ``GlobalMetadata`` then ``Node`` s. Decoded here with
a small wire-format reader (no protobuf dependency). A node becomes an op:
``COMP_NODE`` -> compute (GEMM by name), ``COMM_COLL/SEND/RECV_NODE`` -> comm with
``comm_type`` / ``comm_size`` attributes, ``MEM_*`` -> opaque compute; metadata nodes
pass their dependencies through. Start and duration from ``start_time_micros`` /
``duration_micros``, stream from the ``stream`` attribute, dependencies from
``ctrl_deps`` and ``data_deps``. When a file has GPU nodes (``is_cpu_op`` false), CPU
nodes are left out (their time is the launch, not the work). One file per rank
(``trace.0.et``, ``trace.1.et``...).

**JSON ET** (PyTorch ``ExecutionTraceObserver`` output after ``chakra_trace_link``):
nodes that carry a duration (``dur`` / ``exclusive_dur``, top-level or in ``attrs``)
become ops on stream ``stream`` (GPU) or ``tid`` (CPU); dependencies are the tensors
they share (read after write of the same storage). A host-only ET has no durations: it
is refused with a hint to import the matching Kineto trace.

>>> blob = encode_chakra([{"id": 1, "name": "mm", "type": COMP_NODE, "duration_micros": 5},
...                       {"id": 2, "name": "ag", "type": COMM_COLL_NODE, "data_deps": [1], "duration_micros": 3,
...                        "attr": {"comm_type": 2, "comm_size": 1024}}])
>>> [n["name"] for n in decode_chakra(blob, "x.et")[1]]
['mm', 'ag']
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from .kineto import read_json
from .ops import Trace, TraceOp, classify_cpu_op, classify_kernel, collective_kind

METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
COMM_TYPES = {0: "all-reduce", 1: "reduce", 2: "all-gather", 3: "gather", 4: "scatter", 5: "broadcast",
              6: "all-to-all", 7: "reduce-scatter", 8: "reduce-scatter", 9: "barrier"}
US = 1e-6


# ------------------------------------------------------------------------------------
# Wire format

def _varint(buf: bytes, i: int, where: str) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf):
            raise InputError(where, None, "truncated protobuf (varint runs past the end)")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise InputError(where, None, "malformed protobuf varint")


def _fields(buf: bytes, where: str) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message."""
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i, where)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i, where)
        elif wt == 1:
            if i + 8 > len(buf):
                raise InputError(where, None, "truncated protobuf (fixed64)")
            v, i = struct.unpack_from("<d", buf, i)[0], i + 8
        elif wt == 2:
            n, i = _varint(buf, i, where)
            if i + n > len(buf):
                raise InputError(where, None, "truncated protobuf (length-delimited field)")
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            if i + 4 > len(buf):
                raise InputError(where, None, "truncated protobuf (fixed32)")
            v, i = struct.unpack_from("<f", buf, i)[0], i + 4
        else:
            raise InputError(where, None, f"unsupported protobuf wire type {wt} (field {num})")
        out.append((num, wt, v))
    return out


def _packed(v: Any, wt: int, where: str) -> list[int]:
    if wt == 0:
        return [v]
    vals, i = [], 0
    while i < len(v):
        x, i = _varint(v, i, where)
        vals.append(x)
    return vals


def _attr(buf: bytes, where: str) -> tuple[str, Any]:
    name, value = "", None
    for num, wt, v in _fields(buf, where):
        if num == 1:
            name = v.decode("utf-8", "replace")
        elif num == 2:
            continue
        elif wt == 2 and num in (29, 31):        # string_val, bytes_val
            value = v.decode("utf-8", "replace")
        elif wt == 2:                            # *_list messages: keep raw ints where possible
            value = [x for _, w, x in _fields(v, where) if w == 0]
        elif num == 27:
            value = bool(v)
        else:
            value = v
    return name, value


def _node(buf: bytes, where: str) -> dict:
    n: dict = {"ctrl_deps": [], "data_deps": [], "attr": {}}
    for num, wt, v in _fields(buf, where):
        if num == 1:
            n["id"] = v
        elif num == 2:
            n["name"] = v.decode("utf-8", "replace")
        elif num == 3:
            n["type"] = v
        elif num == 4:
            n["ctrl_deps"] += _packed(v, wt, where)
        elif num == 5:
            n["data_deps"] += _packed(v, wt, where)
        elif num == 6:
            n["start_time_micros"] = v
        elif num == 7:
            n["duration_micros"] = v
        elif num == 10:
            k, val = _attr(v, where)
            n["attr"][k] = val
    return n


def decode_chakra(blob: bytes, where: str) -> tuple[dict, list[dict]]:
    """(metadata attributes, nodes) of a Chakra ``.et`` byte string."""
    msgs, i = [], 0
    while i < len(blob):
        n, i = _varint(blob, i, where)
        if i + n > len(blob):
            raise InputError(where, None, f"truncated Chakra trace: message {len(msgs)} needs {n} bytes, "
                             f"{len(blob) - i} left")
        msgs.append(blob[i:i + n])
        i += n
    if not msgs:
        raise InputError(where, None, "empty Chakra trace")
    meta = {}
    for num, _, v in _fields(msgs[0], where):
        if num == 1 and isinstance(v, bytes):
            meta["version"] = v.decode("utf-8", "replace")
    nodes = [_node(m, where) for m in msgs[1:]]
    for k, n in enumerate(nodes):
        if "id" not in n:
            raise InputError(where, f"node[{k}].id", "missing")
    return meta, nodes


def _enc_varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _enc_field(num: int, value: Any) -> bytes:
    if isinstance(value, bool) or isinstance(value, int):
        return _enc_varint(num << 3) + _enc_varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return _enc_varint(num << 3 | 2) + _enc_varint(len(data)) + data


def encode_chakra(nodes: list[dict], version: str = "0.0.4") -> bytes:
    """A Chakra ``.et`` byte string (for tests and tools): node dicts with ``id``, ``name``,
    ``type``, ``ctrl_deps``, ``data_deps``, ``start_time_micros``, ``duration_micros``,
    ``attr`` (name -> int | bool | str)."""
    def msg(body: bytes) -> bytes:
        return _enc_varint(len(body)) + body
    out = msg(_enc_field(1, version))
    for n in nodes:
        body = _enc_field(1, n["id"]) + _enc_field(2, n.get("name", "")) + _enc_field(3, n.get("type", COMP_NODE))
        for d in n.get("ctrl_deps", []):
            body += _enc_field(4, d)
        for d in n.get("data_deps", []):
            body += _enc_field(5, d)
        body += _enc_field(6, n.get("start_time_micros", 0)) + _enc_field(7, n.get("duration_micros", 0))
        for k, v in (n.get("attr") or {}).items():
            num = 27 if isinstance(v, bool) else 9 if isinstance(v, int) else 29
            body += _enc_field(10, _enc_field(1, k) + _enc_field(num, v))
        out += msg(body)
    return out


def _rank_of(path: str, index: int) -> int:
    m = re.search(r"(\d+)\D*$", Path(path).name.split(".et")[0] + ".")
    return int(m.group(1)) if m else index


def load_chakra(paths: Sequence[str | Path]) -> Trace:
    """Import Chakra ``.et`` files, one per rank (see module docstring)."""
    ops: list[TraceOp] = []
    ranks_seen: dict[int, str] = {}
    for index, p in enumerate(paths):
        where = str(p)
        try:
            blob = Path(p).read_bytes()
        except OSError as exc:
            raise InputError(where, None, f"cannot read: {exc.strerror}") from None
        _, nodes = decode_chakra(blob, where)
        rank = _rank_of(where, index) if len(paths) > 1 else 0
        if rank in ranks_seen:
            raise InputError(where, "rank", f"inconsistent ranks: rank {rank} also in {ranks_seen[rank]}")
        ranks_seen[rank] = where
        ops += _chakra_ops(nodes, rank, where)
    n = max(ranks_seen) + 1
    group = tuple(range(n))
    for o in ops:
        if o.category == "comm" and not o.group:
            o.group = group
    timed = any(o.start > 0 for o in ops)
    trace = Trace(ops, n, [str(p) for p in paths], "chakra", on_gpu=True)
    if not timed:
        trace.notes.append("no start times in the trace: its makespan is the longest dependency chain")
    return trace


def _chakra_ops(nodes: list[dict], rank: int, where: str) -> list[TraceOp]:
    by_id = {n["id"]: n for n in nodes}
    if len(by_id) != len(nodes):
        raise InputError(where, "node.id", "duplicate node ids")
    has_gpu = any(n.get("attr", {}).get("is_cpu_op") is False for n in nodes)

    def keep(n: dict) -> bool:
        if n.get("type") == METADATA_NODE or n.get("type") not in range(1, 8):
            return False
        return not (has_gpu and n.get("attr", {}).get("is_cpu_op"))

    kept = {i for i, n in by_id.items() if keep(n)}
    resolved: dict[int, set[int]] = {}

    def real_deps(i: int, stack: tuple = ()) -> set[int]:
        # Dependencies on dropped nodes pass through to what those depended on.
        if i in resolved:
            return resolved[i]
        if i in stack:
            raise InputError(where, f"node[{i}].deps", f"dependency cycle: {' -> '.join(map(str, stack + (i,)))}")
        out: set[int] = set()
        n = by_id[i]
        for d in n["ctrl_deps"] + n["data_deps"]:
            if d not in by_id:
                raise InputError(where, f"node[{i}].data_deps", f"depends on unknown node {d}")
            out |= {d} if d in kept else real_deps(d, stack + (i,))
        resolved[i] = out
        return out

    ops = []
    for order, n in enumerate(nodes):
        if n["id"] not in kept:
            continue
        attr = n.get("attr", {})
        t, name = n.get("type"), n.get("name", "")
        op = TraceOp(f"r{rank}.n{n['id']}", rank, f"s{attr.get('stream', 0)}", name, "compute", "opaque",
                     n.get("start_time_micros", 0) * US, n.get("duration_micros", 0) * US, order=order)
        if t in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
            op.category, op.kind = "comm", "comm"
            ct = attr.get("comm_type")
            op.collective = COMM_TYPES.get(ct, "") if isinstance(ct, int) else collective_kind(name)
            if t != COMM_COLL_NODE:
                op.collective = "send-recv"
            size = attr.get("comm_size")
            op.nbytes = float(size) if isinstance(size, (int, float)) else 0.0
        elif t == COMP_NODE:
            op.kind = classify_kernel(name)[0] if classify_kernel(name)[0] == "gemm" else classify_cpu_op(name)[0]
            if op.kind == "comm":
                op.kind = "opaque"
        op.deps = [f"r{rank}.n{d}" for d in sorted(real_deps(n["id"]))]
        ops.append(op)
    return ops


# ------------------------------------------------------------------------------------
# JSON execution traces

def _node_value(n: dict, key: str) -> Any:
    if key in n:
        return n[key]
    for a in n.get("attrs") or []:
        if isinstance(a, dict) and a.get("name") == key:
            return a.get("value")
    return None


def _tensors(io: Any) -> list[tuple]:
    vals = (io or {}).get("values") if isinstance(io, dict) else None
    out: list[tuple] = []

    def walk(v: Any) -> None:
        if isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5]):
            out.append((v[1], v[2], v[3]))   # storage, offset, numel
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(vals)
    return out


def load_et_json(paths: Sequence[str | Path]) -> Trace:
    """Import JSON execution traces with durations (see module docstring)."""
    ops: list[TraceOp] = []
    for index, p in enumerate(paths):
        where = str(p)
        data = read_json(p)
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            raise InputError(where, "nodes", "missing: not an execution trace")
        rank = index
        timed = [n for n in data["nodes"] if isinstance(n, dict)
                 and isinstance(_node_value(n, "dur") or _node_value(n, "exclusive_dur"), (int, float))]
        if not timed:
            raise InputError(where, "nodes[].dur", "this host execution trace has no durations; import the "
                             "matching Kineto trace (one per rank) instead, or link the two with chakra_trace_link")
        writer: dict[tuple, str] = {}
        for order, n in enumerate(sorted(timed, key=lambda n: (_node_value(n, "ts") or 0, n.get("id", 0)))):
            name = str(n.get("name", ""))
            stream = _node_value(n, "stream")
            gpu_op = stream is not None
            kind, role = classify_kernel(name) if gpu_op else classify_cpu_op(name)
            ts = _node_value(n, "ts") or 0
            dur = _node_value(n, "dur") or _node_value(n, "exclusive_dur")
            op = TraceOp(f"r{rank}.e{n.get('id', order)}", rank,
                         f"s{stream}" if gpu_op else f"thread.{_node_value(n, 'tid') or 0}", name,
                         "comm" if role == "comm" else "compute", kind if role != "comm" else "comm",
                         float(ts) * US, float(dur) * US, order=order)
            if role == "comm":
                op.collective = collective_kind(name)
            for t in _tensors(n.get("inputs")):
                if t in writer and writer[t] != op.id:
                    op.deps.append(writer[t])
            for t in _tensors(n.get("outputs")):
                writer[t] = op.id
            op.deps = list(dict.fromkeys(op.deps))
            ops.append(op)
    n = len(paths)
    for o in ops:
        if o.category == "comm":
            o.group = tuple(range(n))
    trace = Trace(ops, n, [str(p) for p in paths], "et", on_gpu=any(o.stream.startswith("s") for o in ops))
    # Same-stream dependencies are implicit; drop them to keep the graph small.
    ids = {o.id: o for o in ops}
    for o in ops:
        o.deps = [d for d in o.deps if ids[d].stream != o.stream or ids[d].rank != o.rank]
    return trace
