"""Traces of ficco-sim's own executor (``ficco-sim validate --profile``).

The executor wraps every operation it issues in a profiler range ``ficco:<kind>:<op id>``
(kinds: gemm, reduce, copy, send, recv, wait), so a trace maps back to the task graph:
each range is one op; each gloo message is a comm op on its own ``gloo.<n>`` stream that
waits for the op before its posting, and the first op after its ``ficco:wait:<op id>``
range waits for it. Everything outside the ranges (barriers, the profiler's own ops) is
left out. :func:`ficco_sim.traces.kineto.load_kineto` dispatches here when it sees the
ranges.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .kineto_io import CPU_CATS, US, _num
from .ops import CPU_COMM, CPU_GEMM_OPS, DTYPE_SIZE, TraceOp, collective_kind

if TYPE_CHECKING:
    from .kineto import _File


EXECUTOR_RANGE = "ficco:"
EXECUTOR_KIND = {"gemm": "gemm", "reduce": "memory", "copy": "memory"}


def executor_ops(f: _File, names: dict) -> list[TraceOp]:
    """Ops of one rank's executor trace (see the module docstring)."""
    ranges, gloo, inner = [], [], []
    for i, e in enumerate(f.events):
        if e.get("ph") != "X" or e.get("cat") not in CPU_CATS:
            continue
        name = str(e.get("name", ""))
        item = (_num(e, "ts", f.where, f.pos[i]) * US, _num(e, "dur", f.where, f.pos[i]) * US, i, e)
        if e.get("cat") == "user_annotation" and name.startswith(EXECUTOR_RANGE) and name.count(":") >= 2:
            ranges.append(item)
        elif e.get("cat") == "user_annotation" and CPU_COMM.search(name):
            gloo.append(item)
        elif name in CPU_GEMM_OPS:
            inner.append(item)
    ops: list[TraceOp] = []
    posts: list[tuple[TraceOp, str]] = []          # (posting op, its op id)
    waits: list[tuple[float, Any, str]] = []       # (end, thread, op id waited for)
    for ts, dur, i, e in sorted(ranges, key=lambda x: x[0]):
        _, kind, task = str(e["name"]).split(":", 2)
        if kind == "wait":
            waits.append((ts + dur, e.get("tid"), task))
            continue
        op = TraceOp(f"r{f.rank}.c{i}", f.rank, f"{names.get(e.get('tid'), 'thread')}.{e.get('tid')}",
                     str(e["name"]), "compute", EXECUTOR_KIND.get(kind, "opaque"), ts, dur, order=i)
        mm = next((x for x in inner if x[3].get("tid") == e.get("tid") and ts <= x[0] <= ts + dur), None)
        if kind == "gemm" and mm is not None:
            args = mm[3].get("args") or {}
            op.shapes = args.get("Input Dims") if isinstance(args.get("Input Dims"), list) else []
            types = args.get("Input type")
            op.dtype = str(types[0]) if isinstance(types, list) and types else ""
        ops.append(op)
        if kind in ("send", "recv"):
            posts.append((op, task))
    thread_ops = sorted(ops, key=lambda o: o.start)
    lanes: list[float] = []                        # end of the last message on each gloo.<n>
    message: dict[str, TraceOp] = {}               # op id -> its gloo message
    for ts, dur, i, e in sorted(gloo, key=lambda x: x[0]):
        name = str(e.get("name", ""))
        post = next(((p, t) for p, t in posts if p.start <= ts <= p.end and p.name.split(":")[1] in name), None)
        if post is None or post[1] in message:
            continue                               # not a replayed op (a barrier, ...)
        lane = next((n for n, end in enumerate(lanes) if end <= ts), len(lanes))
        lanes[lane:lane + 1] = [ts + dur]
        c = TraceOp(f"r{f.rank}.c{i}", f.rank, f"gloo.{lane}", name, "comm", "comm", ts, dur, order=i)
        c.collective, c.launch = collective_kind(name), post[0].start
        c.group = next(iter(f.pg_ranks.values()), ()) or tuple(range(f.world or 1))
        args = e.get("args") or {}
        dims, types = args.get("Input Dims"), args.get("Input type")
        c.dtype = str(types[0]) if isinstance(types, list) and types else "float"
        if isinstance(dims, list) and dims and isinstance(dims[0], list):
            c.nbytes = float(math.prod(dims[0])) * DTYPE_SIZE.get(c.dtype, 4)
        before = [o for o in thread_ops if o.stream == post[0].stream and o.end <= post[0].start]
        if before:
            c.deps.append(before[-1].id)
        message[post[1]] = c
        ops.append(c)
    for end, tid, task in waits:
        c = message.get(task)
        nxt = next((o for o in thread_ops if o.stream.endswith(f".{tid}") and o.start >= end), None)
        if c is not None and nxt is not None and c.id not in nxt.deps:
            nxt.deps.append(c.id)
    return ops
