"""Rank symmetry for the discrete-event engine: simulate one GPU when all behave alike.

A task graph is *rotation symmetric* on a topology when turning every GPU id ``i`` into
``i + 1 (mod N)`` maps the graph onto itself (each task onto a task with the same work,
stream, and dependencies, drivers and peers at the same relative GPUs) and the topology
too (links onto links of the same bandwidth and latency; routes then turn with the GPUs,
ties included: :meth:`~ficco_sim.topology.Topology.route`). Then every GPU goes through the same states at the
same instants, and one GPU's run gives everyone's times: a rank's transfer to its peer at
offset ``d`` stands for the transfer into it from the peer at ``-d``; a link stands for
its class under rotation (a transfer crossing two links of one class uses that class
twice); HBM, copy engines and channels are the rank's own. Max-min fair sharing has one
answer, so on a symmetric state it is symmetric, and the folded run's rates are the full
run's.

:func:`fold` checks all this and returns the one-rank graph (``None`` when anything is
not symmetric: then the full graph runs); :meth:`Folded.expand` turns its timeline back
into one record per task of the full graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..taskgraph import Kernel, TaskGraph, Transfer, evolve
from ..timeline import LazyTimeline, TaskRecord, Timeline
from ..topology import Topology, gpu_index, gpu_node



@dataclass(frozen=True, eq=False)
class Share:
    """GPU 0's part of a rotation-symmetric graph lowered folded
    (:meth:`~ficco_sim.schedules.builder.GraphBuilder.build_share`), as made: ``tasks`` are GPU
    0's in the order it made them, naming other GPUs' tasks by their ids; ``where`` gives every
    task of every GPU as (GPU, place in that GPU's sequence). GPU g's i-th task is GPU 0's i-th
    turned by g (GPU ids ``+ g``, mod ``ranks``); the closed form compiles the whole graph from
    this (:func:`~ficco_sim.engine.closed_form_turned.compile_share`)."""

    ranks: int
    streams: tuple                             # GPU 0's streams
    tasks: tuple
    where: dict[str, tuple[int, int]] = field(repr=False)
    # the share this one was cut from and where each of its tasks went there (-1: dropped), so
    # that what its transfers cost, the same in both, is worked out once
    cut_from: "tuple[Share, list[int]] | None" = field(default=None, repr=False)
    memo: dict = field(default_factory=dict, repr=False)

    def without_gemms(self) -> "Share":
        """The share of :func:`~ficco_sim.metrics.comm_only_graph`'s graph: GEMM kernels
        removed with the dependencies and tile signals through them (the other GPUs' alike:
        their places are GPU 0's)."""
        gemm = [isinstance(t, Kernel) and t.kind == "gemm" for t in self.tasks]
        place, kept = [], 0
        for g in gemm:
            place.append(-1 if g else kept)
            kept += not g
        where = {x: (h, place[i]) for x, (h, i) in self.where.items() if not gemm[i]}
        tasks = tuple(t if all(d in where for d in t.deps) and not t.signals else
                      evolve(t, deps=tuple(d for d in t.deps if d in where),
                              signals=tuple(x for x in t.signals if x[0] in where))
                      for t, g in zip(self.tasks, gemm) if not g)
        return Share(self.ranks, self.streams, tasks, where, cut_from=(self, place))


@dataclass
class Folded:
    """GPU 0's share of a rotation-symmetric task graph (see module docstring)."""

    graph: TaskGraph                          # GPU 0's tasks, every transfer local (src = dst = 0)
    ranks: int                                # GPUs of the full graph
    pairs: dict[str, tuple[int, int]] = field(repr=False)    # a transfer's real (src, dst)
    full: TaskGraph | None = field(repr=False)
    rep: list[str] | None = field(repr=False)     # the representative (a GPU 0 task) of each task of ``full``
    unfold: Callable[[], TaskGraph] | None = field(default=None, repr=False)   # when ``full`` was not made
    made: list[str] | None = field(default=None, repr=False)     # with ``unfold``: GPU 0's ids in the order made

    def whole(self) -> tuple[TaskGraph, list[str]]:
        """(``full``, ``rep``); for a graph lowered folded (:func:`prefolded`) the full graph is
        made now, the first time every task's record is asked for, by the same lowering: its
        GPU g's i-th task stands for GPU 0's i-th."""
        if self.full is None or self.rep is None:
            full = self.unfold()
            seen, rep = [0] * self.ranks, []
            for t in full.tasks:
                i = seen[t.gpu]
                seen[t.gpu] = i + 1
                rep.append(self.made[i])
            self.full, self.rep = full, rep
        return self.full, self.rep

    def link(self, u: str, v: str) -> str:
        """The resource name of link ``u -> v``'s class: its member leaving (or entering) GPU 0."""
        n, a, b = self.ranks, gpu_index(u), gpu_index(v)
        g = a if a is not None else b
        if g is None:
            return f"link:{u}->{v}"
        u2 = u if a is None else gpu_node((a - g) % n)
        v2 = v if b is None else gpu_node((b - g) % n)
        return f"link:{u2}->{v2}"

    def expand(self, tl: Timeline, topology: Topology) -> Timeline:
        """The full graph's timeline: every task gets its representative's times (records
        made on first use: :class:`~ficco_sim.timeline.LazyTimeline`); per-GPU counters are
        repeated for every GPU, a link class's load for each of its links."""
        return LazyTimeline(lambda: self._records(tl), tl.makespan, self._counters(tl, topology), tl.events,
                            tl.solves)

    def _records(self, tl: Timeline) -> list[TaskRecord]:
        by_id = tl.by_id()
        out = []
        add = out.append
        full, rep = self.whole()
        for t, r in zip(full.tasks, map(by_id.__getitem__, rep)):
            if isinstance(t, Kernel):
                add(TaskRecord(t.id, t.gpu, t.stream, t.kind, t.role, t.label, r.ready, r.start, r.end, "", -1, -1,
                               0.0, t.grid, r.peak_resident))
            else:
                add(TaskRecord(t.id, t.gpu, t.stream or "sm-transfers", "transfer", t.role, t.label, r.ready,
                               r.start, r.end, t.engine, t.src, t.dst, t.nbytes))
        return out

    def _counters(self, tl: Timeline, topology: Topology) -> dict[str, list[tuple[float, float]]]:
        counters: dict[str, list[tuple[float, float]]] = {}
        members: dict[str, list[str]] = {}
        if any(name.startswith("link:") for name in tl.counters):    # (a run without records has none)
            for u, v in topology.graph.edges:
                members.setdefault(self.link(u, v), []).append(f"link:{u}->{v}")
        for name, series in tl.counters.items():
            if name.startswith("link:"):
                for link in members.get(name, [name]):
                    counters[link] = list(series)
            elif name.startswith("gpu0."):
                for i in range(self.ranks):
                    counters[f"gpu{i}.{name[5:]}"] = list(series)
            else:
                counters[name] = series
        return counters


def topology_turns(topology: Topology, n: int) -> bool:
    """Whether GPU ``i -> i + 1`` (switches fixed) maps every link onto a link alike
    (remembered per topology: a property of the topology alone)."""
    key = (id(topology), n)
    hit = _TURNS.get(key)
    if hit is None or hit[0] is not topology:
        if len(_TURNS) > 256:
            _TURNS.clear()
        g = topology.graph
        turn = {}
        for node in g.nodes:
            i = gpu_index(node)
            turn[node] = node if i is None else gpu_node((i + 1) % n)
        ok = True
        for u, v, d in g.edges(data=True):
            e = g.get_edge_data(turn[u], turn[v])
            if e is None or e["bandwidth"] != d["bandwidth"] or e["latency"] != d["latency"]:
                ok = False
                break
        hit = _TURNS[key] = (topology, ok)     # (the topology kept alive: its id names no other)
    return hit[1]


_TURNS: dict[tuple[int, int], tuple[Topology, bool]] = {}


def fold(graph: TaskGraph, topology: Topology) -> Folded | None:
    """GPU 0's share of ``graph`` when it and ``topology`` are rotation symmetric, else None."""
    got = folding(graph, topology)
    return got if isinstance(got, Folded) else None


def folding(graph: TaskGraph, topology: Topology) -> Folded | str:
    """:func:`fold`, or why the graph does not fold."""
    n = graph.num_gpus
    if n < 2 or topology.num_gpus != n:
        return "one GPU, or a topology of another size"
    prio: dict[str, int] = {}
    for s in graph.streams:
        if prio.setdefault(s.name, s.priority) != s.priority:
            return f"stream {s.name} has different priorities on different GPUs"
    at: dict[str, tuple[int, int]] = {}          # task -> (class, GPU)
    kinds: dict[tuple, int] = {}                  # a task's description, GPUs relative -> its number
    classes: dict[int, int] = {}                  # (description, k-th alike on its GPU) -> class
    occurrence: list[dict[int, int]] = [{} for _ in range(n)]    # per GPU: description -> alike seen so far
    span = len(graph.tasks) + 1                   # (description, k) as one number: description * span + k
    queued: list[list[int]] = [[] for _ in range(n)]      # classes of stream tasks, in order
    loose: list[list[int]] = [[] for _ in range(n)]       # classes of SM transfers

    get = at.__getitem__
    driven: dict[tuple, tuple] = {}
    order: list[int] = []                         # each task's class, in graph order
    mark = order.append

    def rel(ids, g):
        # (class, GPU offset) of each task named, as one number c * n + offset (flat tuples
        # hash faster); one name is the common case
        if len(ids) == 1:
            c, h = get(ids[0])
            return (c * n + (h - g) % n,)
        if len(ids) == 2:        # an SM transfer's two driver kernels
            (c, h), (d, k) = get(ids[0]), get(ids[1])
            return (c * n + (h - g) % n, d * n + (k - g) % n)
        return tuple([c * n + (h - g) % n for c, h in map(get, ids)]) if ids else ()

    for t in graph.tasks:
        g = t.gpu
        if not 0 <= g < n:
            return f"{t.id} is on GPU {g}, outside the graph's {n}"
        if t.__class__ is Transfer and t.engine == "sm" and not t.signals:
            # the bulk of a large graph (every ring step of every rank): the key of the branch
            # below, built without the fields every such transfer shares (engine, no flags)
            drivers = t.drivers
            hit = driven.get((g, drivers))
            if hit is None:
                hit = driven[(g, drivers)] = rel(drivers, g)
            deps = t.deps
            if len(deps) == 1:       # a ring step after the first: its rank's previous step
                c, h = get(deps[0])
                deps = c * n + (h - g) % n
            elif deps:
                deps = tuple(sorted(rel(deps, g)))     # (dependencies are a set: any order)
            kind = kinds.setdefault(("S", t.stream, t.nbytes, (t.src - g) % n, (t.dst - g) % n, t.dma_engine,
                                     t.reduce, t.role, hit, deps), len(kinds))
            seen = occurrence[g]
            k = seen[kind] = seen.get(kind, -1) + 1
            c = classes.setdefault(kind * span + k, len(classes))
            at[t.id] = (c, g)
            loose[g].append(c)
            mark(c)
            continue
        if t.__class__ is Kernel and t.waits:
            return f"{t.id}'s rows wait to arrive: not folded"
        sig = ()
        if t.signals:
            if any(at[k][1] != g for k, _ in t.signals):      # a flag crossing GPUs: not folded here
                return f"{t.id} waits on a tile signal from another GPU"
            sig = tuple([(at[k][0], share) for k, share in t.signals])
        deps = tuple(sorted(rel(t.deps, g))) if t.deps else ()     # (a set: named in any order)
        if t.__class__ is Kernel:
            key = ("K", t.stream, t.kind, t.grid, t.block, t.block_time, t.block_hbm_bytes, t.role, t.gemm, t.elems,
                   t.sms, tuple([(share, (dst - g) % n) for share, dst in t.stores]), sig, deps, t.setup)
            line = queued
        else:
            drivers = t.drivers
            if drivers:
                hit = driven.get((g, drivers))     # a kernel pair drives many transfers (every ring step)
                if hit is None:
                    hit = driven[(g, drivers)] = rel(drivers, g)
                drivers = hit
            key = ("T", t.engine, t.stream, t.nbytes, (t.src - g) % n, (t.dst - g) % n, t.dma_engine, t.reduce,
                   t.role, drivers, sig, deps, t.tune)
            line = queued if t.engine == "dma" else loose
        kind = kinds.setdefault(key, len(kinds))
        seen = occurrence[g]    # the k-th task alike on its GPU (comm kernels queued one after another)
        k = seen[kind] = seen.get(kind, -1) + 1
        c = classes.setdefault(kind * span + k, len(classes))
        at[t.id] = (c, g)
        line[g].append(c)
        mark(c)
    for g in range(1, n):       # streams run in order; SM transfers in any
        if queued[g] != queued[0] or sorted(loose[g]) != sorted(loose[0]):
            return f"GPU {g}'s tasks are not GPU 0's turned"
    if not topology_turns(topology, n):
        return "the topology does not turn onto itself"
    mine = [(t, c) for t, c in zip(graph.tasks, order) if t.gpu == 0]
    rep_of = {c: t.id for t, c in mine}           # class -> GPU 0's task
    tasks, pairs = [], {}
    for t, _ in mine:
        deps = tuple(rep_of[get(d)[0]] for d in t.deps)
        sigs = tuple((rep_of[get(k)[0]], share) for k, share in t.signals)
        if isinstance(t, Kernel):
            tasks.append(evolve(t, deps=deps, signals=sigs))
        else:
            pairs[t.id] = (t.src, t.dst)
            tasks.append(evolve(t, src=0, dst=0, deps=deps, signals=sigs,
                                 drivers=tuple(rep_of[get(k)[0]] for k in t.drivers)))
    streams = [s for s in graph.streams if s.gpu == 0]
    try:
        one = TaskGraph.build(1, streams, _referenced_first(tasks), buffers=graph.buffers,
                              meta=dict(graph.meta, folded_ranks=n))
    except ValueError as e:
        return f"GPU 0's tasks do not form a graph of their own ({e})"
    return Folded(one, n, pairs, graph, list(map(rep_of.__getitem__, order)))


def prefolded(ranks: int, streams: list, tasks: list, where: dict[str, tuple[int, int]],
              unfold: Callable[[], TaskGraph], *, buffers: dict, meta: dict) -> Folded:
    """GPU 0's share of a graph lowered folded (:class:`~ficco_sim.schedules.builder.GraphBuilder`
    with ``fold=True``): ``tasks`` are GPU 0's, in the order it made them; ``where`` gives every
    task made (GPU, place in its GPU's sequence): GPU 0's task at that place stands for it. As
    :func:`folding` makes it from the whole graph, without the whole graph. ``unfold()``: the
    whole graph, by the same lowering, for :meth:`Folded.expand`'s records only."""
    ids = [t.id for t in tasks]
    get = where.get

    def rep(x: str) -> str:
        w = get(x)
        return x if w is None else ids[w[1]]

    out, pairs = [], {}
    for t in tasks:
        deps = tuple(map(rep, t.deps))
        sigs = tuple((rep(k), share) for k, share in t.signals)
        if isinstance(t, Kernel):
            out.append(evolve(t, deps=deps, signals=sigs))
        else:
            pairs[t.id] = (t.src, t.dst)
            out.append(evolve(t, src=0, dst=0, deps=deps, signals=sigs, drivers=tuple(map(rep, t.drivers))))
    one = TaskGraph.build(1, streams, _referenced_first(out), buffers=buffers, meta=dict(meta, folded_ranks=ranks))
    return Folded(one, ranks, pairs, None, None, unfold, ids)


def _referenced_first(tasks: list) -> list:
    """``tasks`` in their order, except that a task comes after every task it names (a
    rank's task may stand for a peer's that the full graph lists later); each stream's
    tasks keep their order."""
    ids = {t.id for t in tasks}
    placed: set[str] = set()
    out, waiting = [], list(tasks)
    while waiting:
        later, held = [], set()        # held: streams with a task waiting (the rest of it waits too)
        for t in waiting:
            stream = (t.gpu, t.stream) if isinstance(t, Kernel) or t.engine == "dma" else None
            named = [*t.deps, *(k for k, _ in t.signals), *getattr(t, "drivers", ())]
            if stream not in held and all(x in placed or x not in ids for x in named):
                out.append(t)
                placed.add(t.id)
            else:
                later.append(t)
                if stream is not None:
                    held.add(stream)
        if len(later) == len(waiting):
            return tasks        # a cycle: TaskGraph.build says so
        waiting = later
    return out
