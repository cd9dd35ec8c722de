"""CPU-only Kineto traces (no GPU activity): each thread a stream, its top-level
operators the ops, ``gloo:*`` annotations the collectives (see :mod:`.kineto`)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from .kineto_io import CPU_CATS, US, _num
from .ops import DTYPE_SIZE, TraceOp, classify_cpu_op, collective_kind

if TYPE_CHECKING:
    from .kineto import _File


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
        ts, dur = _num(e, "ts", f.where, f.pos[i]) * US, _num(e, "dur", f.where, f.pos[i]) * US
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
