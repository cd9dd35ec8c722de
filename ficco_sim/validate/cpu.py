"""The CPU runner of one rank (gloo): streams become ordered queues, communication is
asynchronous (``isend``/``irecv`` with ``async_op`` work handles as the dependency
edges), compute runs on the main thread.

The issue loop is a list scheduler: post every send/recv whose dependencies are done
(gloo moves them on its own threads), then run one ready compute op (the most urgent
stream first, then graph order), and when nothing is ready wait for the oldest pending
message. Stream order is already part of every op's dependencies (see :mod:`.plan`).

On two cores real CPU GEMMs and gloo's threads fight for the same cores, so overlap is
mostly lost (``reference/torch_executor.md`` 4.1): the CPU runner validates ordering,
dependencies and data, not hardware timing.

``run(label=True)`` (the profiled replay) wraps every posted send/recv, every compute op
and every wait for a message in a ``ficco:<kind>:<op id>`` profiler range (kinds
``send``, ``recv``, ``gemm``, ``reduce``, ``copy``, ``wait``); gloo records the message
itself as ``gloo:send``/``gloo:recv``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

import torch
import torch.distributed as dist

from ..taskgraph import TaskGraph
from .executor import compute_fn, op_range, view
from .plan import Op, Program


class CpuRankRunner:
    """Prepared replay of one rank's program on CPU; :meth:`run` returns (start, end)."""

    def __init__(self, graph: TaskGraph, program: Program, bufs: dict[str, torch.Tensor], notes: list[str]):
        self.program = program
        self.ops = program.ops
        self.bufs = bufs
        self.prio = {op.id: program.streams.get(op.stream, 0) for op in self.ops}
        self.order = {op.id: i for i, op in enumerate(self.ops)}
        self.fns: dict[str, Callable[[], None]] = {}
        self.temps: dict[str, torch.Tensor] = {}
        for op in self.ops:
            if op.kind in ("gemm", "reduce"):
                self.fns[op.id] = compute_fn(op, bufs, graph, notes)
            elif op.kind == "recv" and op.reduce:
                self.temps[op.id] = torch.empty_like(view(bufs, op.io["dst"]))
        self.users: dict[str, list[str]] = {op.id: [] for op in self.ops}
        for op in self.ops:
            for d in set(op.deps):
                self.users[d].append(op.id)

    def _copy(self, op: Op) -> None:
        (_, src), (_, dst) = op.io["src"], op.io["dst"]
        if op.reduce:
            view(self.bufs, dst).add_(view(self.bufs, src))
        else:
            view(self.bufs, dst).copy_(view(self.bufs, src))

    def run(self, label: bool = False) -> tuple[float, float]:
        """Replay once; (start, end) in ``time.perf_counter`` seconds. ``label``: profiler
        ranges around every op (see module docstring). :attr:`parts` then holds where this
        rank's time went: ``compute`` (GEMM, reduce, copy ops), ``post`` (posting messages),
        ``wait`` (blocked on a message) and ``loop`` (the rest: the issue loop itself)."""
        clock = time.perf_counter
        parts = {"compute": 0.0, "post": 0.0, "wait": 0.0}
        by_id = {op.id: op for op in self.ops}
        waiting = {op.id: len(set(op.deps)) for op in self.ops}
        ready_comm: list[str] = []
        ready_other: list[str] = []
        pending: deque[tuple[str, object]] = deque()
        finished = 0

        def done(oid: str) -> None:
            nonlocal finished
            finished += 1
            for u in self.users[oid]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    (ready_comm if by_id[u].kind in ("send", "recv") else ready_other).append(u)

        for op in self.ops:
            if waiting[op.id] == 0:
                (ready_comm if op.kind in ("send", "recv") else ready_other).append(op.id)
        start = time.perf_counter()
        while finished < len(self.ops):
            while ready_comm:
                op = by_id[ready_comm.pop(0)]
                t0 = clock()
                with op_range(label, op.kind, op.id):
                    if op.kind == "send":
                        w = dist.isend(view(self.bufs, op.io["src"]).contiguous(), dst=op.peer, tag=op.tag)
                    else:
                        target = self.temps.get(op.id)
                        w = dist.irecv(target if target is not None else view(self.bufs, op.io["dst"]),
                                       src=op.peer, tag=op.tag)
                pending.append((op.id, w))
                parts["post"] += clock() - t0
            # Harvest whatever finished meanwhile.
            for _ in range(len(pending)):
                oid, w = pending.popleft()
                if w.is_completed():
                    with op_range(label, "wait", oid):
                        w.wait()
                        self._finish_recv(by_id[oid])
                    done(oid)
                else:
                    pending.append((oid, w))
            if ready_comm:
                continue
            if ready_other:
                # Most urgent stream first, then graph order.
                ready_other.sort(key=lambda i: (-self.prio[i], self.order[i]))
                oid = ready_other.pop(0)
                op = by_id[oid]
                t0 = clock()
                if op.kind == "copy":
                    with op_range(label, "copy", oid):
                        self._copy(op)
                elif oid in self.fns:
                    with op_range(label, op.kind, oid):
                        self.fns[oid]()
                parts["compute"] += clock() - t0
                done(oid)
                continue
            if pending:
                oid, w = pending.popleft()
                t0 = clock()
                with op_range(label, "wait", oid):
                    w.wait()
                    self._finish_recv(by_id[oid])
                parts["wait"] += clock() - t0
                done(oid)
                continue
            raise RuntimeError("CPU runner stalled: ops wait on dependencies that can never finish")
        end = clock()
        parts["loop"] = max(0.0, end - start - sum(parts.values()))
        self.parts = parts
        return start, end

    def _finish_recv(self, op: Op) -> None:
        if op.kind == "recv" and op.reduce:
            view(self.bufs, op.io["dst"]).add_(self.temps[op.id])
