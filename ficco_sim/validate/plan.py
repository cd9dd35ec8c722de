"""Turn a task graph into the ordered list of operations one executor process issues.

The executor never interprets the task graph directly: it first builds a **program**
(a list of :class:`Op` in a valid issue order, every dependency already resolved to op
ids of the same program). Two shapes exist:

* :func:`plan_rank` — one process per rank (``torch.distributed``). A transfer becomes a
  ``send`` half on its source rank and a ``recv`` half on its destination rank (a copy
  when both are the same rank). Halves driven by one SM communication kernel share a
  ``group`` so the runner can post them together (``batch_isend_irecv``). Dependencies
  on tasks of *other* ranks are dropped: the data they guard arrives through a transfer,
  whose receive half already waits for it.
* :func:`plan_local` — one process holds every rank's buffers (single-GPU mode, one
  process driving several GPUs, or the CPU oracle). A transfer is one ``copy`` from the
  source rank's slice to the destination rank's slice, on the engine the graph asks for.

Stream order is made explicit: every task also depends on the task before it on its
stream, so a runner that has no hardware streams (the CPU) honours it too, and the issue
order of a CUDA runner can never put a kernel ahead of its stream predecessor.

>>> from ficco_sim.hardware import BlockShape
>>> from ficco_sim.taskgraph import Kernel, Slice, Stream, TaskGraph, Transfer
>>> blk = BlockShape(128, 32, 0)
>>> g = TaskGraph.build(2, [Stream(0, "comm", 1), Stream(1, "comm", 1), Stream(1, "compute")], [
...     Kernel("k0", 0, "comm", "comm", 1, blk), Kernel("k1", 1, "comm", "comm", 1, blk),
...     Transfer("t", 0, 1, 64, "sm", 0, drivers=("k0", "k1"),
...              io={"src": Slice("A", 0, 2), "dst": Slice("A", 0, 2)}),
...     Kernel("mm", 1, "compute", "gemm", 1, blk, deps=("k1",),
...            io={"a": [Slice("A", 0, 4)], "c": [Slice("C", 0, 4)]})])
>>> [(op.id, op.kind, op.deps) for op in plan_rank(g, 1).ops]
[('t@recv', 'recv', ()), ('k1', 'nop', ('t@recv',)), ('mm', 'gemm', ('k1',))]
>>> [(op.id, op.kind) for op in plan_local(g).ops]
[('t', 'copy'), ('k0', 'nop'), ('k1', 'nop'), ('mm', 'gemm')]
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..errors import InputError
from ..taskgraph import Kernel, Slice, TaskGraph, Transfer

# Stream that carries the passive end of a DMA transfer when it has to be replayed as a
# send/recv pair (the graph gives a copy command a stream only on its issuing GPU).
PEER_STREAM = "__peer"


@dataclass(frozen=True)
class Op:
    """One thing a runner issues.

    ``kind``: ``gemm`` | ``reduce`` (sum of slices) | ``copy`` (local, src and dst given
    as (rank, Slice)) | ``send`` | ``recv`` | ``nop`` (a join point, e.g. the end of a
    communication kernel). ``stream`` is (gpu, stream name); ``rank`` is whose buffers
    the op touches (for ``copy`` the destination's). ``engine`` is ``sm`` or ``dma`` for
    data movement. ``reduce`` (recv/copy): add into the destination instead of
    overwriting it.
    """

    id: str
    kind: str
    rank: int
    stream: tuple[int, str]
    deps: tuple[str, ...] = ()
    task: str = ""
    group: str = ""
    engine: str = ""
    peer: int = -1
    tag: int = 0
    reduce: bool = False
    io: dict = field(default_factory=dict, compare=False)


@dataclass
class Program:
    """A topologically ordered list of ops, plus what the planner had to leave out."""

    ops: list[Op]
    streams: dict[tuple[int, str], int]           # (gpu, name) -> ficco priority
    dropped_deps: int = 0                          # cross-rank deps implied by transfers
    notes: list[str] = field(default_factory=list)

    def by_id(self) -> dict[str, Op]:
        return {op.id: op for op in self.ops}


def check_io(graph: TaskGraph) -> None:
    """Every task the executor must run names its data; raise InputError otherwise."""
    where = graph.meta.get("name") or "task graph"
    for t in graph.tasks:
        if t.signals or (isinstance(t, Kernel) and (t.stores or t.waits)):
            raise InputError(str(where), t.id, "a fused kernel (tile signals, epilogue stores or rows waiting to "
                             "arrive) cannot be replayed: "
                             "the torch executor runs whole kernels and has no per-tile flags; validate the "
                             "decomposed schedules (shard-*, ficco-*) instead")
        if isinstance(t, Transfer):
            need = ("src", "dst")
        elif t.kind == "gemm":
            need = ("a", "c")
        elif t.kind == "memory":
            need = ("inputs", "out")
        else:
            continue
        missing = [k for k in need if k not in t.io]
        if missing:
            raise InputError(str(where), t.id, f"io lacks {', '.join(missing)}: the executor cannot replay a task "
                             "without knowing which buffer rows it reads and writes")
        for k in need:
            vals = t.io[k]
            for v in (vals if isinstance(vals, (list, tuple)) else [vals]):
                if isinstance(v, Slice):
                    if v.buffer not in graph.buffers:
                        raise InputError(str(where), f"{t.id}.io.{k}", f"unknown buffer {v.buffer!r}")
                    if not 0 <= v.start <= v.stop <= graph.buffers[v.buffer].rows:
                        raise InputError(str(where), f"{t.id}.io.{k}",
                                         f"rows [{v.start}, {v.stop}) outside buffer {v.buffer!r} "
                                         f"({graph.buffers[v.buffer].rows} rows)")


def _stream_predecessors(graph: TaskGraph) -> dict[str, str]:
    last: dict[tuple[int, str], str] = {}
    pred: dict[str, str] = {}
    for t in graph.tasks:
        key = graph.stream_of(t)
        if key is None:
            continue
        if key in last:
            pred[t.id] = last[key]
        last[key] = t.id
    return pred


def _driver_on(graph: TaskGraph, t: Transfer, gpu: int) -> Kernel:
    for d in t.drivers:
        k = graph.kernel(d)
        if k.gpu == gpu:
            return k
    raise InputError("task graph", t.id, f"SM transfer {t.src}->{t.dst} has no driver kernel on GPU {gpu}")


def _toposort(ops: list[Op], position: dict[str, tuple]) -> list[Op]:
    """Kahn's algorithm; among ready ops the one earliest in the graph goes first."""
    by_id = {op.id: op for op in ops}
    indeg = {op.id: 0 for op in ops}
    users: dict[str, list[str]] = {op.id: [] for op in ops}
    for op in ops:
        for d in set(op.deps):
            indeg[op.id] += 1
            users[d].append(op.id)
    heap = [(position[i], i) for i, n in indeg.items() if n == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(by_id[i])
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, (position[u], u))
    if len(out) != len(ops):
        raise InputError("task graph", None, "dependency cycle after mapping transfers onto ranks")
    return out


def _compute_op(t: Kernel, deps: tuple[str, ...]) -> Op:
    kind = {"gemm": "gemm", "memory": "reduce"}.get(t.kind, "nop")
    return Op(t.id, kind, t.gpu, (t.gpu, t.stream), deps, task=t.id, io=dict(t.io))


def plan_rank(graph: TaskGraph, rank: int) -> Program:
    """The program rank ``rank`` runs when every rank is its own process."""
    pred = _stream_predecessors(graph)
    index = {t.id: i for i, t in enumerate(graph.tasks)}
    streams = {(s.gpu, s.name): s.priority for s in graph.streams if s.gpu == rank}
    halves: dict[str, list[str]] = {}       # comm kernel id -> its halves on this rank
    ops: list[Op] = []
    position: dict[str, tuple] = {}
    dropped = 0
    # Which op id stands for "task X is done" on this rank (None: not observable here).
    done_op: dict[str, str] = {}
    for t in graph.tasks:
        if isinstance(t, Kernel) and t.gpu == rank:
            done_op[t.id] = t.id
        elif isinstance(t, Transfer):
            if t.src == rank == t.dst:
                done_op[t.id] = t.id
            elif t.src == rank:
                done_op[t.id] = f"{t.id}@send"
            elif t.dst == rank:
                done_op[t.id] = f"{t.id}@recv"

    def local(ids) -> tuple[str, ...]:
        nonlocal dropped
        out = []
        for d in ids:
            if d in done_op:
                out.append(done_op[d])
            else:
                dropped += 1
        return tuple(dict.fromkeys(out))

    for t in graph.tasks:
        own = list(t.deps) + ([pred[t.id]] if t.id in pred else [])
        if isinstance(t, Kernel):
            if t.gpu != rank:
                continue
            if t.kind == "comm":
                halves.setdefault(t.id, [])
                continue   # its join op is added once all halves are known
            ops.append(_compute_op(t, local(own)))
            position[t.id] = (index[t.id], 0)
            continue
        if rank not in (t.src, t.dst):
            continue
        tag = index[t.id]
        if t.engine == "sm":
            k = _driver_on(graph, t, rank)
            start = local(list(k.deps) + ([pred[k.id]] if k.id in pred else []) + list(t.deps))
            stream, group, pos = (rank, k.stream), k.id, (index[k.id], index[t.id])
        else:
            k = None
            start = local(own)
            stream = (rank, t.stream) if t.gpu == rank else (rank, PEER_STREAM)
            streams.setdefault(stream, 0)
            group, pos = t.id, (index[t.id], 0)
        oid = done_op[t.id]
        if t.src == t.dst:
            op = Op(oid, "copy", rank, stream, start, t.id, group, t.engine, rank, tag, t.reduce,
                    {"src": (rank, t.io["src"]), "dst": (rank, t.io["dst"])})
        elif t.src == rank:
            op = Op(oid, "send", rank, stream, start, t.id, group, t.engine, t.dst, tag, t.reduce,
                    {"src": t.io["src"]})
        else:
            op = Op(oid, "recv", rank, stream, start, t.id, group, t.engine, t.src, tag, t.reduce,
                    {"dst": t.io["dst"]})
        ops.append(op)
        position[oid] = pos
        if k is not None:
            halves[k.id].append(oid)
    for kid, hs in halves.items():
        k = graph.kernel(kid)
        deps = tuple(hs) if hs else local(list(k.deps) + ([pred[kid]] if kid in pred else []))
        ops.append(Op(kid, "nop", rank, (rank, k.stream), deps, task=kid))
        position[kid] = (index[kid], len(graph.tasks) + 1)
    return Program(_toposort(ops, position), streams, dropped)


def plan_local(graph: TaskGraph) -> Program:
    """The program of one process that holds every rank's buffers."""
    pred = _stream_predecessors(graph)
    index = {t.id: i for i, t in enumerate(graph.tasks)}
    streams = {(s.gpu, s.name): s.priority for s in graph.streams}
    driven: dict[str, list[str]] = {}
    ops: list[Op] = []
    position: dict[str, tuple] = {}
    for t in graph.tasks:
        own = tuple(t.deps) + ((pred[t.id],) if t.id in pred else ())
        if isinstance(t, Kernel):
            if t.kind == "comm":
                driven.setdefault(t.id, [])
                continue
            ops.append(_compute_op(t, own))
            position[t.id] = (index[t.id], 0)
            continue
        if t.engine == "sm":
            # The copy runs as the source end's communication kernel would: on its stream.
            k = _driver_on(graph, t, t.src)
            start = list(t.deps)
            for d in t.drivers:
                kd = graph.kernel(d)
                start += list(kd.deps) + ([pred[d]] if d in pred else [])
                driven.setdefault(d, []).append(t.id)
            stream, group, pos = (k.gpu, k.stream), k.id, (index[k.id], index[t.id])
        else:
            start, stream, group, pos = list(own), (t.gpu, t.stream), t.id, (index[t.id], 0)
        ops.append(Op(t.id, "copy", t.dst, stream, tuple(dict.fromkeys(start)), t.id, group, t.engine,
                      t.src, index[t.id], t.reduce, {"src": (t.src, t.io["src"]), "dst": (t.dst, t.io["dst"])}))
        position[t.id] = pos
    for kid, ts in driven.items():
        k = graph.kernel(kid)
        deps = tuple(ts) if ts else tuple(k.deps) + ((pred[kid],) if kid in pred else ())
        ops.append(Op(kid, "nop", k.gpu, (k.gpu, k.stream), deps, task=kid))
        position[kid] = (index[kid], len(graph.tasks) + 1)
    return Program(_toposort(ops, position), streams, 0)


def batches(ops: list[Op]) -> list[list[Op]]:
    """Split an issue order into batches: consecutive send/recv/copy ops of one group
    with no dependency among them go together (one ``batch_isend_irecv``); every other
    op is a batch of one.

    >>> a = Op("a", "send", 0, (0, "c"), group="k"); b = Op("b", "recv", 0, (0, "c"), group="k")
    >>> c = Op("c", "send", 0, (0, "c"), ("b",), group="k")
    >>> [[o.id for o in bt] for bt in batches([a, b, c])]
    [['a', 'b'], ['c']]
    """
    out: list[list[Op]] = []
    for op in ops:
        cur = out[-1] if out else None
        if (cur and op.kind in ("send", "recv", "copy") and cur[0].kind in ("send", "recv", "copy")
                and op.group and cur[0].group == op.group and cur[0].stream == op.stream
                and not set(op.deps) & {o.id for o in cur}):
            cur.append(op)
        else:
            out.append([op])
    return out
