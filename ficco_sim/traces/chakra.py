"""Execution traces: MLCommons Chakra ``.et`` (protobuf).

**Chakra ``.et``** (schema ``et_def.proto`` of chakra 1.0, proto3): a stream of
messages, each prefixed by its varint length: one ``GlobalMetadata`` then ``Node`` s.
Decoded here with a small wire-format reader (no protobuf dependency) that reads what
proto3 writers leave out as its default: a node without an ``id`` field is node 0, one
without ``type`` is ``INVALID_NODE``, a missing time is 0. Attributes are read by their
``oneof`` field (``int64_val``, ``bool_val``, ``double_val``, ``*_list``...).

A node becomes an op: ``COMP_NODE`` -> compute (GEMM by name), ``MEM_LOAD/STORE_NODE``
-> a ``memory`` op, ``COMM_COLL_NODE`` -> a collective whose kind comes from
``comm_type`` (``CollectiveCommType``; the name when the attribute is absent),
``COMM_SEND/RECV_NODE`` -> send-recv with its peer from ``comm_dst`` / ``comm_src``;
bytes from ``comm_size``. Metadata, invalid and unknown nodes pass their dependencies
through. Start and duration from ``start_time_micros`` / ``duration_micros``; stream
from the ``stream`` attribute (GPU nodes without one: ``tid``, which is the stream in
converted PyTorch traces; else ``s0`` for compute and ``comm`` for communication, as
ASTRA-sim runs one of each at a time). Dependencies from ``data_deps`` and
``ctrl_deps``, less two kinds that real files have, each dropped and counted in a
note: ids not in the file (converted traces point at the root node and at filtered-out
ops) and ``ctrl_deps`` that contradict ``data_deps`` (converted PyTorch traces put the
caller there, which waits for its callees). When a file has GPU nodes (``is_cpu_op``
false), CPU nodes are left out (their time is the launch, not the work). One file per
rank (``trace.0.et``, ``trace.1.et``...).

A file with no start times (ASTRA-sim workloads, converted PyTorch traces) gets
as-soon-as-possible starts: each op begins when its dependencies and the op before it
on its stream are done, so the trace's makespan is its longest dependency chain.
Workload files give communication no duration at all (ASTRA-sim simulates it): replay
holds such ops for 0 s, ``trace whatif --topology ...`` models them from their bytes.

JSON execution traces (PyTorch's, linked with their Kineto trace) are :mod:`.et_json`'s.

>>> blob = encode_chakra([{"id": 0, "name": "mm", "type": COMP_NODE, "duration_micros": 5},
...                       {"id": 2, "name": "ag", "type": COMM_COLL_NODE, "data_deps": [0, 7], "duration_micros": 3,
...                        "attr": {"comm_type": 2, "comm_size": 1024}}])
>>> [(n["id"], n["name"], n["attr"]) for n in decode_chakra(blob, "x.et")[1]]
[(0, 'mm', {}), (2, 'ag', {'comm_type': 2, 'comm_size': 1024})]
>>> t = load_chakra_blobs([("x.0.et", blob)])
>>> [(o.id, o.collective, o.deps) for o in t.ops]
[('r0.n0', '', []), ('r0.n2', 'all-gather', ['r0.n0'])]
>>> t.notes[0]
'dropped 1 dependency on node ids not in their file (1 data_deps, 0 ctrl_deps; e.g. x.0.et node 2 -> 7)'
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Sequence

import networkx as nx

from ..errors import InputError
from .chakra_wire import (COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, INVALID_NODE,  # noqa: F401
                          MEM_LOAD_NODE, MEM_STORE_NODE, METADATA_NODE, decode_chakra, encode_chakra)
from .ops import Trace, TraceOp, classify_cpu_op, classify_kernel, collective_kind, rebase

COMM_NODES = (COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE)
OP_NODES = (MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE) + COMM_NODES
COMM_TYPES = {0: "all-reduce", 1: "reduce", 2: "all-gather", 3: "gather", 4: "scatter", 5: "broadcast",
              6: "all-to-all", 7: "reduce-scatter", 8: "reduce-scatter", 9: "barrier"}
US = 1e-6


# ------------------------------------------------------------------------------------
# Nodes -> ops

def _rank_of(path: str, index: int) -> int:
    m = re.search(r"(\d+)\D*$", Path(path).name.split(".et")[0] + ".")
    return int(m.group(1)) if m else index


def load_chakra(paths: Sequence[str | Path]) -> Trace:
    """Import Chakra ``.et`` files, one per rank (see module docstring)."""
    blobs = []
    for p in paths:
        try:
            blobs.append((str(p), Path(p).read_bytes()))
        except OSError as exc:
            raise InputError(str(p), None, f"cannot read: {exc.strerror}") from None
    return load_chakra_blobs(blobs)


def load_chakra_blobs(blobs: Sequence[tuple[str, bytes]]) -> Trace:
    """:func:`load_chakra` on (name, bytes) pairs, one per rank."""
    if not blobs:
        raise InputError("trace", None, "no Chakra files given")
    ops: list[TraceOp] = []
    ranks_seen: dict[int, str] = {}
    tally: Counter = Counter()
    for index, (where, blob) in enumerate(blobs):
        meta, nodes = decode_chakra(blob, where)
        tally["no_metadata"] += bool(meta.get("no_metadata"))
        rank = _rank_of(where, index) if len(blobs) > 1 else 0
        if rank in ranks_seen:
            raise InputError(where, "rank", f"inconsistent ranks: rank {rank} also in {ranks_seen[rank]}")
        ranks_seen[rank] = where
        ops += _chakra_ops(nodes, rank, where, tally)
    n = max(ranks_seen) + 1
    for o in ops:
        if o.category == "comm" and not o.group:
            o.group = tuple(range(n))
    trace = Trace(ops, n, [w for w, _ in blobs], "chakra", on_gpu=True)
    trace.notes += _notes(tally, ops)
    if not any(o.start > 0 for o in ops):
        _asap(ops, ranks_seen)
        trace.notes.append("no start times in the trace: ops start as soon as their dependencies and stream "
                           "allow, so its makespan is the longest dependency chain")
    else:
        rebase(ops, blobs[0][0], "node.start_time_micros")
    return trace


def _notes(tally: Counter, ops: list[TraceOp]) -> list[str]:
    out = []
    if tally["dangling"]:
        k = tally["dangling"]
        out.append(f"dropped {k} dependenc{'y' if k == 1 else 'ies'} on node ids not in their file "
                   f"({tally['dangling_data']} data_deps, {tally['dangling_ctrl']} ctrl_deps; "
                   f"e.g. {tally['dangling_example']})")
    if tally["ctrl_contradicted"]:
        out.append(f"dropped {tally['ctrl_contradicted']} ctrl_deps that contradict data_deps (on the node itself "
                   "or on one that waits for it: a caller, as converted PyTorch traces record it)")
    if tally["skipped"]:
        out.append(f"{tally['skipped']} invalid or unknown-type node(s) left out (their dependencies pass through)")
    if tally["no_metadata"]:
        out.append(f"{tally['no_metadata']} file(s) without GlobalMetadata (chakra < 0.0.4)")
    if tally["no_kind"]:
        out.append(f"{tally['no_kind']} collective(s) of unknown kind (no or unknown comm_type, name not "
                   "recognised)")
    if tally["pg"]:
        out.append(f"{tally['pg']} collective(s) name a process group (pg_name): taken as all ranks, the group's "
                   "members are not in the trace")
    idle = [o for o in ops if o.category == "comm" and o.dur <= 0]
    if idle:
        out.append(f"{len(idle)} of {sum(o.category == 'comm' for o in ops)} communication op(s) have no duration "
                   "(a workload for a simulator, not a measurement): replay holds them for 0 s; "
                   "`trace whatif --topology ...` models them from their bytes")
    return out


def _int_attr(attr: dict, key: str, where: str, field: str) -> int | None:
    v = attr.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v:
        raise InputError(where, f"{field}.attr[{key}]", f"must be a non-negative number, got {v!r}")
    return int(v)


def _chakra_ops(nodes: list[dict], rank: int, where: str, tally: Counter) -> list[TraceOp]:
    pos: dict[int, int] = {}
    for k, n in enumerate(nodes):
        if n["id"] in pos:
            raise InputError(where, f"node[{k}].id", f"duplicate node id {n['id']} (also node[{pos[n['id']]}])")
        pos[n["id"]] = k
    for n in nodes:
        for key in ("data_deps", "ctrl_deps"):
            gone = [d for d in n[key] if d not in pos]
            if gone:
                tally["dangling"] += len(gone)
                tally["dangling_" + key[:4]] += len(gone)
                tally.setdefault("dangling_example", f"{Path(where).name} node {n['id']} -> {gone[0]}")
                n[key] = [d for d in n[key] if d in pos]
    _consistent_ctrl(nodes, where, tally)
    has_gpu = any(n["attr"].get("is_cpu_op") is False for n in nodes)

    def keep(n: dict) -> bool:
        return n["type"] in OP_NODES and not (has_gpu and n["attr"].get("is_cpu_op"))

    kept = {n["id"] for n in nodes if keep(n)}
    tally["skipped"] += sum(1 for n in nodes if n["type"] not in OP_NODES and n["type"] != METADATA_NODE)
    deps = _resolve(nodes, kept, pos, where)
    ops = []
    for order, n in enumerate(nodes):
        if n["id"] not in kept:
            continue
        ops.append(_op(n, rank, order, where, tally))
        ops[-1].deps = [f"r{rank}.n{d}" for d in sorted(deps[n["id"]])]
    return ops


def _consistent_ctrl(nodes: list[dict], where: str, tally: Counter) -> None:
    """Drop the ``ctrl_deps`` that contradict ``data_deps``: on the node itself, or on a
    node that waits (through data) for this one. Converted PyTorch traces record the
    caller there, which runs around its callees, not before them; simulators (ASTRA-sim,
    chakra's feeder) order by ``data_deps`` only."""
    if not any(n["ctrl_deps"] for n in nodes):
        return
    parents = {n["id"]: n["data_deps"] for n in nodes}
    g = nx.DiGraph()
    g.add_nodes_from(parents)
    g.add_edges_from((d, i) for i, ds in parents.items() for d in ds)
    try:
        topo = {i: k for k, i in enumerate(nx.topological_sort(g))}
    except nx.NetworkXUnfeasible:
        cycle = [a for a, _ in nx.find_cycle(g)]
        raise InputError(where, "data_deps", "dependency cycle: " + " -> ".join(map(str, cycle + cycle[:1]))) \
            from None
    for n in nodes:
        keep = [d for d in n["ctrl_deps"]
                if d != n["id"] and not (topo[n["id"]] < topo[d] and _reaches(parents, d, n["id"], topo))]
        tally["ctrl_contradicted"] += len(n["ctrl_deps"]) - len(keep)
        n["ctrl_deps"] = keep


def _reaches(parents: dict[int, list[int]], start: int, target: int, topo: dict[int, int]) -> bool:
    """Whether ``start`` waits for ``target`` through data dependencies."""
    seen, stack = {start}, [start]
    while stack:
        for d in parents[stack.pop()]:
            if d == target:
                return True
            if d not in seen and topo[d] > topo[target]:   # nodes sorted before target cannot reach it
                seen.add(d)
                stack.append(d)
    return False


def _resolve(nodes: list[dict], kept: set[int], pos: dict[int, int], where: str) -> dict[int, set[int]]:
    """Kept node id -> the kept nodes it waits for: dependencies on left-out nodes pass
    through to what those waited for (iteratively: real traces chain thousands deep)."""
    by_id = {n["id"]: n for n in nodes}
    done: dict[int, set[int]] = {}
    for root in kept:
        stack = [(root, iter(by_id[root]["data_deps"] + by_id[root]["ctrl_deps"]))]
        acc: dict[int, set[int]] = {root: set()}
        while stack:
            i, it = stack[-1]
            for d in it:
                if d in kept:
                    acc[i].add(d)
                elif d in done:
                    acc[i] |= done[d]
                elif d in acc:
                    path = [s for s, _ in stack]
                    path = path[path.index(d):] + [d]
                    raise InputError(where, f"node[{pos[d]}].deps",
                                     f"dependency cycle: {' -> '.join(map(str, path))}")
                else:
                    acc[d] = set()
                    stack.append((d, iter(by_id[d]["data_deps"] + by_id[d]["ctrl_deps"])))
                    break
            else:
                stack.pop()
                done[i] = acc.pop(i)
                if stack:
                    acc[stack[-1][0]] |= done[i]
    return {i: done[i] for i in kept}


def _op(n: dict, rank: int, order: int, where: str, tally: Counter) -> TraceOp:
    attr, t, name = n["attr"], n["type"], n["name"]
    field = f"node[{order}]"
    stream = attr.get("stream")
    if stream is None and attr.get("is_cpu_op") is False:
        stream = attr.get("tid")
    sname = f"s{stream}" if stream is not None else ("comm" if t in COMM_NODES else "s0")
    op = TraceOp(f"r{rank}.n{n['id']}", rank, sname, name, "compute", "opaque",
                 n["start_time_micros"] * US, n["duration_micros"] * US, order=order)
    if t in COMM_NODES:
        op.category, op.kind = "comm", "comm"
        op.nbytes = float(_int_attr(attr, "comm_size", where, field) or 0)
        if t == COMM_COLL_NODE:
            ct = _int_attr(attr, "comm_type", where, field)
            op.collective = COMM_TYPES.get(ct, "") if ct is not None else collective_kind(name)
            tally["no_kind"] += not op.collective
            tally["pg"] += str(attr.get("pg_name") or "0") != "0"
        else:
            # comm_type on send/recv nodes is not a collective (generators write the node type there)
            op.collective = "send-recv"
            peer = _int_attr(attr, "comm_dst" if t == COMM_SEND_NODE else "comm_src", where, field)
            if peer is not None and peer != rank:
                op.group = tuple(sorted((rank, peer)))
                op.src, op.dst = (rank, peer) if t == COMM_SEND_NODE else (peer, rank)
    elif t in (MEM_LOAD_NODE, MEM_STORE_NODE):
        op.kind = "memory"
    else:
        gpu_kind = classify_kernel(name)[0]
        if attr.get("is_cpu_op") is False:
            op.kind = gpu_kind if gpu_kind in ("gemm", "memory") else "opaque"
        else:
            op.kind = "gemm" if gpu_kind == "gemm" or classify_cpu_op(name)[0] == "gemm" else "opaque"
    return op


def _asap(ops: list[TraceOp], sources: dict[int, str]) -> None:
    """Start each op when its dependencies and the op before it on its stream are done,
    streams taking their ops in a topological order (file order where free: ASTRA-sim
    workloads need not list a node after those it waits for), which becomes ``order``."""
    by_id = {o.id: o for o in ops}
    g = nx.DiGraph()
    g.add_nodes_from(by_id)
    g.add_edges_from((d, o.id) for o in ops for d in o.deps)
    try:
        topo = list(nx.lexicographical_topological_sort(g, key=lambda i: (by_id[i].rank, by_id[i].order)))
    except nx.NetworkXUnfeasible:
        cycle = [a for a, _ in nx.find_cycle(g)]
        raise InputError(sources[by_id[cycle[0]].rank], "deps",
                         "dependency cycle: " + " -> ".join(cycle + cycle[:1])) from None
    free: dict[tuple[int, str], float] = {}
    for k, i in enumerate(topo):
        o = by_id[i]
        o.order = k
        o.start = max([free.get((o.rank, o.stream), 0.0)] + [by_id[d].end for d in o.deps])
        free[(o.rank, o.stream)] = o.end
