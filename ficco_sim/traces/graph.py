"""A measured :class:`~ficco_sim.traces.ops.Trace` -> :class:`~ficco_sim.taskgraph.TaskGraph`.

Every op becomes tasks on its rank's GPU, in an order that respects stream order and
the trace's cross-stream dependencies (a cycle is an :class:`InputError`):

* compute ops -> one kernel. With a launch footprint (``grid``, ``block``) the kernel
  keeps it, and ``block_time`` is chosen so that the kernel takes the measured duration on
  the SMs it had: ``dur / waves`` with ``waves = ceil(grid / (SMs x blocks_per_sm))``, SMs
  all of ``gpu``'s but those kernels already running beside it held (:mod:`.measured_sms`).
  Without one (CPU traces): one block of one warp running ``dur``. No HBM bytes: the
  measured time already contains whatever contention there was.
* comm ops, ``comm="measured"`` (replay): an opaque kernel with the measured duration,
  role ``comm``, holding the trace's channel footprint (or the profile's comm block).
  ``comm="model"`` (what-if): the collective is matched across ranks (by sequence
  number, else by order) and lowered to SM transfers driven by one comm kernel per rank
  (``engine="sm"``) or to copy-engine transfers (``engine="dma"``), bytes from the trace.
* copies (``gpu_memcpy``): peer and device copies -> DMA transfers of the measured bytes
  (with ``engine="sm"`` peer copies become an SM comm kernel + transfer); host copies
  (HtoD/DtoH) keep their measured time as a one-thread block, scaled by the host links'
  ratio (PCIe, ``host_link_gbps``) in a what-if on another GPU.
* **gaps**: when an op started later than its stream and its dependencies allowed, the
  difference becomes, where its host launched it after that, a wait for its host launch:
  each host thread's launches chained at the trace's pace (:meth:`_Lowering.host`, ``host``
  kernels that take no SM), so that a faster GPU does not outrun its host; the rest (launch
  latency, untraced waits) an ``idle`` kernel of one 1-thread block before it
  (``keep_gaps=True``), so that replay keeps the trace's own pacing; replay then runs with
  ``launch_overhead = 0``.

>>> from pathlib import Path
>>> from ficco_sim.hardware import load_gpu
>>> from ficco_sim.traces.kineto import load_kineto
>>> t = load_kineto([Path(__file__).parents[2] / "traces" / "cpu_mm_chain.json.gz"])
>>> g = trace_to_graph(t, load_gpu("h100"))
>>> g.num_gpus, len([k for k in g.kernels if k.label != "idle"])
(1, 6)
"""

from __future__ import annotations

import math
from dataclasses import replace

import networkx as nx

from ..errors import InputError
from ..gemm_model import blocks_per_sm
from ..hardware import BlockShape, GpuProfile
from ..taskgraph import Kernel, Stream, TaskGraph, Transfer
from ..timeline import union_length
from .measured_sms import free_sms
from .ops import Trace, TraceOp, match_collectives

WARP_BLOCK = BlockShape(threads=32, registers=16, smem=0)
IDLE_BLOCK = BlockShape(threads=1, registers=1, smem=0)
COMM_MODES = ("measured", "model")
# symmetric collectives end together on all their ranks; a rooted one (ops.ROOTED) need not: a small broadcast's root
# ends before its peers begin (RCCL broadcasts of 53 elements on 4 x MI300X, amd/HPCTrainingExamples' fused trace)
COUPLED = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"}


def fit_block(block: BlockShape, gpu: GpuProfile) -> tuple[BlockShape, bool]:
    """``block`` clamped to what one SM of ``gpu`` can hold; True if it had to change."""
    lim = gpu.sm
    threads = max(1, min(block.threads, lim.max_threads))
    regs = max(1, min(block.registers or 32, lim.registers // threads))
    smem = max(0, min(block.smem, lim.max_smem_per_block, lim.smem - lim.reserved_smem_per_block))
    fitted = BlockShape(threads, regs, smem)
    return fitted, (fitted.threads, fitted.smem) != (block.threads, block.smem) or \
        (block.registers and fitted.registers != block.registers)


def waves(gpu: GpuProfile, grid: int, block: BlockShape, sms: float | None = None) -> int:
    """Waves a kernel of ``grid`` blocks needs on ``sms`` SMs of ``gpu`` (default all: alone)."""
    per_wave = (gpu.num_sms if sms is None else sms) * max(1, blocks_per_sm(gpu.sm, block))
    return max(1, math.ceil(grid / per_wave))


def ordered_ops(trace: Trace, coupled: dict | None = None, after: dict | None = None) -> list[TraceOp]:
    """Ops in an order that respects stream order (start time) and cross-stream deps; with
    ``coupled`` (:func:`~ficco_sim.traces.ops.match_collectives`), also every member of a
    collective after everything any member waits for."""
    ops = trace.ops
    ids = {o.id for o in ops}
    g = nx.DiGraph()
    g.add_nodes_from(o.id for o in ops)
    last: dict[tuple[int, str], str] = {}
    before: dict[str, list[str]] = {}
    for o in sorted(ops, key=lambda o: (o.start, o.order)):
        key = (o.rank, o.stream)
        if key in last:
            g.add_edge(last[key], o.id)
            before[o.id] = [last[key]]
        last[key] = o.id
        for d in o.deps:
            if d not in ids:
                raise InputError(trace.sources[min(o.rank, len(trace.sources) - 1)], f"{o.id}.deps",
                                 f"depends on unknown op {d!r}")
            g.add_edge(d, o.id)
    for b, firsts in (after or {}).items():
        g.add_edges_from((a, b) for a in firsts)
    for _num, members in (coupled or {}).values():
        for a in members:
            for x in before.get(a.id, []) + a.deps:
                g.add_edges_from((x, b.id) for b in members if b is not a)
    pos = {o.id: (o.start, o.order, o.rank) for o in ops}
    by_id = trace.by_id()
    try:
        return [by_id[i] for i in nx.lexicographical_topological_sort(g, key=lambda i: pos[i])]
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
    path = " -> ".join([a for a, _ in cycle] + [cycle[0][0]])
    src = by_id[cycle[0][0]]
    raise InputError(trace.sources[min(src.rank, len(trace.sources) - 1)], "deps",
                     f"dependency cycle (with stream order): {path}")


class _Lowering:
    def __init__(self, trace: Trace, gpu: GpuProfile, comm: str, engine: str | None, keep_gaps: bool,
                 priorities: dict | None, scale: dict | None, footprints: bool = True,
                 overrides: dict | None = None):
        if comm not in COMM_MODES:
            raise InputError("--comm", None, f"unknown {comm!r}; known: {', '.join(COMM_MODES)}")
        if engine not in (None, "sm", "dma"):
            raise InputError("--engine", None, f"unknown {engine!r}; known: sm, dma")
        self.trace, self.gpu, self.comm, self.engine, self.keep_gaps = trace, gpu, comm, engine, keep_gaps
        self.priorities = dict(trace.stream_priority)
        self.priorities.update(priorities or {})
        self.streams: dict[tuple[int, str], Stream] = {}
        self.tasks: list = []
        self.exits: dict[str, list[str]] = {}   # op id -> task ids whose completion means "op done"
        self.notes: list[str] = list(trace.notes)
        self.clamped = 0
        self.scale = dict(scale or {})
        self.footprints = footprints
        self.overrides = dict(overrides or {})
        self._stream_of: dict[str, tuple[int, str] | None] = {}
        # the SMs each measured kernel had beside the others' (its block time is read against them)
        self.free = free_sms(trace.ops, gpu) if footprints else {}
        self._indexed = 0
        # each host thread's launches in order, and the host tasks placed so far (:meth:`host`)
        self.launches: dict[tuple[int, object], list[TraceOp]] = {}
        for op in sorted((o for o in trace.ops if o.host and o.launch is not None), key=lambda o: (o.launch, o.order)):
            self.launches.setdefault((op.rank, op.host[0]), []).append(op)
        self.hosted: dict[str, str] = {}
        self._next_launch: dict[tuple[int, object], int] = {}
        self._early: dict[tuple[int, object], float] = {}
        self.host_waits: dict[int, list[tuple[float, float]]] = {}   # rank -> spans an op waited for its launch

    def stream(self, gpu: int, name: str) -> str:
        if (gpu, name) not in self.streams:
            self.streams[(gpu, name)] = Stream(gpu, name, int(self.priorities.get((gpu, name), 0)))
        return name

    def exits_of(self, ids) -> list[str]:
        out: list[str] = []
        for i in ids:
            out += self.exits.get(i, [])
        return out

    # -- per op ------------------------------------------------------------------------
    def kernel(self, op: TraceOp, *, kind: str, role: str, deps: list[str], default_block: BlockShape,
               dur: float | None = None) -> Kernel:
        grid = op.grid if op.grid and op.block and self.footprints else 0
        block = op.block if grid else default_block
        block, changed = fit_block(block, self.gpu)
        self.clamped += bool(changed and grid)
        grid = grid or 1
        dur = (op.dur if dur is None else dur) * \
            (self.scale.get(op.cls or kind, self.scale.get(kind, 1.0)) if role == "compute" else 1.0)
        if op.id in self.overrides:
            grid, block, dur = self.overrides[op.id]
        block_time = dur / waves(self.gpu, grid, block, self.free.get(op.id) if grid > 1 else None)
        k = Kernel(id=op.id, gpu=op.rank, stream=self.stream(op.rank, op.stream), kind=kind, grid=grid,
                   block=block, block_time=block_time, block_hbm_bytes=0.0, deps=tuple(dict.fromkeys(deps)),
                   role=role, label=op.name[:80], io={"measured_dur": op.dur, "trace_op": op.id})
        self.tasks.append(k)
        return k

    def idle(self, op: TraceOp, gap: float, deps: list[str]) -> str:
        k = Kernel(id=f"{op.id}.idle", gpu=op.rank, stream=self.stream(op.rank, op.stream), kind="opaque", grid=1,
                   block=IDLE_BLOCK, block_time=gap, deps=tuple(dict.fromkeys(deps)), role="compute", label="idle",
                   io={"gap_before": op.id})
        self.tasks.append(k)
        return k.id

    def build(self) -> TaskGraph:
        # GPU collectives end together on all their ranks (a CPU/gloo op does not: it returns
        # once its message is posted); point-to-point pairs are not matched by count.
        matched = match_collectives(self.trace.ops)
        coupled = {k: v for k, v in matched.items() if v[1][0].collective in COUPLED} \
            if self.comm == "measured" and self.trace.on_gpu else {}
        # a modelled receive comes after its send (the message is sent when the sender is ready)
        sends = {k: v for k, v in matched.items() if _p2p(v[1])} if self.comm == "model" else {}
        after = {m.id: [s.id for s in members if s.src == s.rank] for _n, members in sends.values()
                 for m in members if m.dst == m.rank}
        try:
            ops = ordered_ops(self.trace, coupled, after)
        except InputError:
            if not coupled:
                raise
            ops, coupled = ordered_ops(self.trace, None, after), {}   # ranks order their collectives differently
            self.notes.append("collectives left uncoupled: their order differs between ranks")
        by_id = self.trace.by_id()
        prev_on_stream: dict[tuple[int, str], TraceOp] = {}
        instances = match_collectives(ops) if self.comm == "model" else {}
        if self.comm == "model":
            alone = [o for o in ops if o.category == "comm" and (o.id not in instances or o.nbytes <= 0)]
            if alone:
                self.notes.append(f"{len(alone)} collective(s) kept measured: peers missing from the trace or "
                                  "size unknown")
        pending: dict[int, list[str]] = {}       # collective instance -> member kernel ids placed so far
        arrived: dict[str, str] = {}             # coupled member -> its arrival task
        for op in ops:
            if op.id in arrived:                 # placed with its instance: only the transfer part is left
                self.coupled(op, [arrived[m.id] for m in coupled[op.id][1]])
                continue
            deps = self.entry(op, prev_on_stream, by_id)
            if op.id not in coupled:
                self.lower(op, deps, instances, pending)
                continue
            # The first member of a collective reached: every member arrives now (their inputs
            # are placed: ordered_ops saw to it); each one's transfer part starts once all have.
            for m in coupled[op.id][1]:
                arrived[m.id] = self.arrival(m, deps if m is op else self.entry(m, prev_on_stream, by_id))
            self.coupled(op, [arrived[m.id] for m in coupled[op.id][1]])
        if self.host_waits and self.trace.makespan > 0:
            present = {o.rank for o in self.trace.ops}
            share = sum(union_length(w) for w in self.host_waits.values()) / (self.trace.makespan * len(present))
            last = max(o.launch for seq in self.launches.values() for o in seq) / self.trace.makespan
            self.notes.append(f"ops waited for their hosts' launches {100 * share:.0f}% of the trace (a rank's "
                              f"mean), and the launches keep the trace's pace: the last is at {100 * last:.0f}% of "
                              "the trace, so no GPU ends it much sooner (a launch that blocked on a full queue counts "
                              "as host time)")
        graph_streams = sorted(self.streams.values(), key=lambda s: (s.gpu, s.name))
        meta = {"source": "trace", "trace_files": list(self.trace.sources), "comm": self.comm,
                "engine": self.engine or "as traced", "trace_makespan": self.trace.makespan,
                "notes": self.notes + ([f"{self.clamped} kernel footprints clamped to fit {self.gpu.name}"]
                                       if self.clamped else [])}
        try:
            return TaskGraph.build(self.trace.num_ranks, graph_streams, self.tasks, meta=meta)
        except ValueError as exc:
            raise InputError(self.trace.sources[0], "deps", str(exc)) from None

    def entry(self, op: TraceOp, prev_on_stream: dict, by_id: dict) -> list[str]:
        """The tasks ``op`` waits for: its dependencies, its stream predecessor where stream
        order is not implicit, and the idle time the trace left before it (``keep_gaps``)."""
        key = (op.rank, op.stream)
        prev = prev_on_stream.get(key)
        prev_on_stream[key] = op
        deps = self.exits_of(op.deps)
        # Stream order is implicit only between single tasks on the same stream.
        if prev is not None and (len(self.exits.get(prev.id, [])) != 1 or
                                 self.task_stream(self.exits[prev.id][0]) != key):
            deps += self.exits_of([prev.id])
        if self.keep_gaps:
            allowed = max([prev.end if prev else 0.0] + [by_id[d].end for d in op.deps])
            if op.host and op.launch is not None and op.launch > allowed:     # the GPU waited for the host
                deps = deps + [self.host(op)]
                self.host_waits.setdefault(op.rank, []).append((allowed, op.launch))
                allowed = op.launch
            gap = op.start - allowed
            if op.category == "copy" and op.direction not in ("HtoD", "DtoH", "HtoH") and self.footprints:
                # The engine pays a command's fixed cost and the path latency before the
                # first byte moves (where the trace's start is): not a gap.
                gap -= self.gpu.dma.command_overhead + (self.gpu.link.latency if op.src != op.dst else 0.0)
            if gap > 1e-9:
                deps = [self.idle(op, gap, deps)]
        return deps

    def host(self, op: TraceOp) -> str:
        """The task that ends when ``op``'s host thread launched it: the thread's launches in
        order, each so long after the one before (or after what a synchronisation between them
        waited for, once that is placed) as the trace says: the host's own pace, which another
        GPU does not change (a ``host`` kernel on the thread's own stream: it takes no SM)."""
        key = (op.rank, op.host[0])
        seq, i = self.launches[key], self._next_launch.get(key, 0)
        while op.id not in self.hosted and i < len(seq):
            o, i = seq[i], i + 1
            _tid, prev, since_prev, syncs, since_syncs = o.host
            deps = [self.hosted[prev]] if prev in self.hosted else []
            done = [self.exits[s] for s in syncs if s in self.exits]
            synced = bool(syncs) and len(done) == len(syncs)
            # a previous launch outside the trace (a --steps window) counts as none: from the trace's start
            wait = since_syncs if synced else since_prev if prev in self.hosted else o.launch
            # a first launch before the trace's start (its first op) starts at 0: the next ones make it up,
            # until a synchronisation sets the thread's clock by the GPU's
            early = 0.0 if synced else self._early.get(key, 0.0)
            self._early[key] = max(0.0, early - wait)
            wait = max(0.0, wait - early)
            if synced:
                deps += [t for ts in done for t in ts]
            k = Kernel(id=f"{o.id}.host", gpu=o.rank, stream=self.stream(o.rank, f"host:{key[1]}"), kind="host",
                       grid=1, block=IDLE_BLOCK, block_time=wait, deps=tuple(dict.fromkeys(deps)), role="compute",
                       label="idle", io={"launch_of": o.id})
            self.tasks.append(k)
            self.hosted[o.id] = k.id
        self._next_launch[key] = i
        return self.hosted[op.id]

    def arrival(self, op: TraceOp, deps: list[str]) -> str:
        """A coupled collective's member reaching it on its rank (no time of its own)."""
        k = Kernel(id=f"{op.id}.arrive", gpu=op.rank, stream=self.stream(op.rank, op.stream), kind="opaque", grid=1,
                   block=IDLE_BLOCK, block_time=0.0, deps=tuple(dict.fromkeys(deps)), role="comm", label="arrive",
                   io={"arrival_of": op.id})
        self.tasks.append(k)
        return k.id

    def coupled(self, op: TraceOp, arrivals: list[str]) -> None:
        """A coupled member's transfer part: it starts when every member has arrived and
        holds the collective's measured transfer time (:func:`~ficco_sim.traces.ops.split_waits`)."""
        k = self.kernel(op, kind="opaque", role="comm", deps=arrivals, default_block=self.gpu.comm_kernel.block,
                        dur=op.dur - (op.wait or 0.0))
        self.exits[op.id] = [k.id]

    def task_stream(self, task_id: str) -> tuple[int, str] | None:
        while self._indexed < len(self.tasks):   # index tasks added since the last call
            t = self.tasks[self._indexed]
            self._stream_of[t.id] = (t.gpu, t.stream) if isinstance(t, Kernel) or t.engine == "dma" else None
            self._indexed += 1
        return self._stream_of.get(task_id)

    def lower(self, op: TraceOp, deps: list[str], instances: dict, pending: dict) -> None:
        engine = self.engine
        if op.category == "compute":
            k = self.kernel(op, kind=op.kind if op.kind in ("gemm", "memory", "opaque") else "opaque",
                            role="compute", deps=deps, default_block=WARP_BLOCK)
            self.exits[op.id] = [k.id]
        elif op.category == "copy":
            self.copy(op, deps, engine)
        elif self.comm == "model" and op.id in instances and op.nbytes > 0:
            self.modelled_comm(op, deps, instances[op.id], pending)
        else:
            k = self.kernel(op, kind="opaque", role="comm", deps=deps, default_block=self.gpu.comm_kernel.block)
            self.exits[op.id] = [k.id]

    def copy(self, op: TraceOp, deps: list[str], engine: str | None) -> None:
        stream = self.stream(op.rank, op.stream)
        if op.direction in ("HtoD", "DtoH", "HtoH") or not self.footprints or op.nbytes < 0:
            # The host link is not in the topology: a host copy keeps its measured time (scaled by
            # the host links' ratio in a what-if on another GPU), as a
            # one-thread block that holds (almost) nothing on the GPU. So does every copy of an
            # exact replay (``footprints=False``: measured times throughout), and a copy whose size
            # the trace does not record (``nbytes`` -1).
            host = op.direction in ("HtoD", "DtoH", "HtoH")
            k = Kernel(id=op.id, gpu=op.rank, stream=stream, kind="memory", grid=1, block=IDLE_BLOCK,
                       block_time=op.dur * (self.scale.get("host-copy", 1.0) if host else 1.0),
                       deps=tuple(dict.fromkeys(deps)), role="comm", label=op.name[:80],
                       io={"measured_dur": op.dur, "host_copy_bytes": op.nbytes})
            self.tasks.append(k)
            self.exits[op.id] = [k.id]
            return
        if engine == "sm" and op.src != op.dst:
            k = Kernel(id=op.id, gpu=op.rank, stream=stream, kind="comm", grid=self.gpu.comm_kernel.channels,
                       block=self.gpu.comm_kernel.block, deps=tuple(deps), role="comm", label=op.name[:80])
            t = Transfer(id=f"{op.id}.x", src=op.src, dst=op.dst, nbytes=op.nbytes, engine="sm", gpu=op.src,
                         drivers=(k.id,), role="comm", label=op.direction)
            self.tasks += [k, t]
            self.exits[op.id] = [k.id]
            return
        if op.dma_engine is not None:
            ce = op.dma_engine
        elif op.src != op.dst:   # one engine per peer, as the lowering does
            ce = (op.dst if op.src == op.rank else op.src)
        else:
            ce = {"HtoD": 0, "DtoH": 1}.get(op.direction, 2)
        ce %= self.gpu.dma.engines
        t = Transfer(id=op.id, src=op.src, dst=op.dst, nbytes=op.nbytes, engine="dma", gpu=op.rank, stream=stream,
                     dma_engine=ce, deps=tuple(deps), role="comm", label=f"{op.direction} {op.name[:60]}",
                     io={"measured_dur": op.dur})
        self.tasks.append(t)
        self.exits[op.id] = [t.id]

    def p2p(self, op: TraceOp, deps: list[str], num: int, members: list[TraceOp]) -> None:
        """One side of a matched send/receive (see :meth:`modelled_comm`)."""
        engine = self.engine or "sm"
        tid = f"p2p{num}"
        if op.src == op.rank:       # the send: ordered_ops places it before its receive
            if engine == "sm":
                k = Kernel(id=op.id, gpu=op.rank, stream=self.stream(op.rank, op.stream), kind="comm",
                           grid=self.gpu.comm_kernel.channels, block=self.gpu.comm_kernel.block,
                           deps=tuple(dict.fromkeys(deps)), role="comm", label=op.name[:80])
                self.tasks += [k, Transfer(id=tid, src=op.src, dst=op.dst, nbytes=op.nbytes, engine="sm",
                                           gpu=op.src, drivers=(k.id,), role="comm", label="send-recv")]
                self.exits[op.id] = [k.id]
            else:
                self.tasks.append(Transfer(id=tid, src=op.src, dst=op.dst, nbytes=op.nbytes, engine="dma",
                                           gpu=op.src, stream=self.stream(op.rank, op.stream),
                                           dma_engine=op.dst % self.gpu.dma.engines, deps=tuple(dict.fromkeys(deps)),
                                           role="comm", label="send-recv"))
                self.exits[op.id] = [tid]
            return
        k = Kernel(id=op.id, gpu=op.rank, stream=self.stream(op.rank, op.stream), kind="opaque", grid=1,
                   block=IDLE_BLOCK, block_time=0.0, deps=tuple(dict.fromkeys(deps + [tid])), role="comm",
                   label=op.name[:80], io={"receives": tid})
        self.tasks.append(k)
        self.exits[op.id] = [k.id]

    def modelled_comm(self, op: TraceOp, deps: list[str], inst: tuple[int, list[TraceOp]], pending: dict) -> None:
        """One member of a collective; the transfers are emitted once every member is placed
        (a matched send and receive: the message leaves with the send, the receive ends when
        it has arrived)."""
        num, members = inst
        if _p2p(members):
            self.p2p(op, deps, num, members)
            return
        engine = self.engine or "sm"
        if engine == "sm":
            k = Kernel(id=op.id, gpu=op.rank, stream=self.stream(op.rank, op.stream), kind="comm",
                       grid=op.grid if op.grid and op.block else self.gpu.comm_kernel.channels,
                       block=fit_block(op.block, self.gpu)[0] if op.grid and op.block else self.gpu.comm_kernel.block,
                       deps=tuple(dict.fromkeys(deps)), role="comm", label=op.name[:80])
            self.tasks.append(k)
            self.exits[op.id] = [k.id]
            pending.setdefault(num, []).append(k.id)
        else:
            pending.setdefault(num, []).append(op.id)
            self.exits[op.id] = []
            self._dma_entry = getattr(self, "_dma_entry", {})
            self._dma_entry[op.id] = deps
        if len(pending[num]) < len(members):
            return
        # Every member placed: emit the transfers.
        by_rank = {m.rank: m for m in members}
        for src, dst, nbytes in _pairs(members):
            a, b = by_rank[src], by_rank[dst]
            tid = f"{a.id}->{dst}"
            if engine == "sm":
                self.tasks.append(Transfer(id=tid, src=src, dst=dst, nbytes=nbytes, engine="sm", gpu=src,
                                           drivers=(a.id, b.id), role="comm", label=a.collective))
            else:
                stream = self.stream(dst, f"{b.stream}.ce{src}")
                d = self._dma_entry[a.id] + self._dma_entry[b.id]
                self.tasks.append(Transfer(id=tid, src=src, dst=dst, nbytes=nbytes, engine="dma", gpu=dst,
                                           stream=stream, dma_engine=src % self.gpu.dma.engines,
                                           deps=tuple(dict.fromkeys(d)), role="comm", label=a.collective))
                self.exits[b.id].append(tid)
        if engine == "dma":
            for m in members:   # a member with no incoming bytes is done when its inputs are
                if not self.exits[m.id]:
                    self.exits[m.id] = list(self._dma_entry[m.id])


def _p2p(members: list[TraceOp]) -> bool:
    """A matched send/receive pair that says who sends (Chakra COMM_SEND/RECV nodes)."""
    return members[0].collective == "send-recv" and len(members) == 2 and \
        all(m.src >= 0 and m.dst >= 0 for m in members) and {m.rank for m in members} == {members[0].src,
                                                                                         members[0].dst}


def _pairs(members: list[TraceOp]) -> list[tuple[int, int, float]]:
    """(src, dst, bytes) of a direct (all-to-all pattern) lowering of one collective;
    ``nbytes`` is each rank's input."""
    n = len(members)
    ranks = [m.rank for m in members]
    kind = members[0].collective
    out = []
    if kind == "send-recv" and all(m.src >= 0 and m.dst >= 0 for m in members):
        # a matched send and receive: one message, from the sender to the receiver
        return [(m.src, m.dst, m.nbytes) for m in members if m.src == m.rank][:1]
    for m in members:
        b = m.nbytes
        per = {"all-gather": b, "reduce-scatter": b / n, "all-reduce": 2 * b / n, "all-to-all": b / n}.get(kind)
        if per is None:  # broadcast / send-recv / unknown: to the next rank
            nxt = ranks[(ranks.index(m.rank) + 1) % n]
            out.append((m.rank, nxt, b))
            continue
        out += [(m.rank, r, per) for r in ranks if r != m.rank]
    return out


def trace_to_graph(trace: Trace, gpu: GpuProfile, *, comm: str = "measured", engine: str | None = None,
                   keep_gaps: bool = True, priorities: dict | None = None,
                   scale: dict | None = None, footprints: bool = True,
                   overrides: dict | None = None) -> TaskGraph:
    """The task graph of a measured trace on ``gpu`` (see module docstring).

    ``priorities``: ``{(gpu, stream): priority}`` overrides (larger = more urgent).
    ``scale``: ``{kernel kind: factor}`` applied to measured compute durations (what-if
    on another GPU). ``footprints=False``: every measured kernel (and copy) becomes one
    block of its measured duration, so kernels that overlapped in the trace cannot slow each other
    again in the simulation (exact replay; SM-sharing what-ifs then say nothing).
    ``overrides``: ``{op id: (grid, block, duration)}`` for compute kernels (what-if).
    """
    return _Lowering(trace, gpu, comm, engine, keep_gaps, priorities, scale, footprints, overrides).build()


def replay_profile(gpu: GpuProfile) -> GpuProfile:
    """``gpu`` as replay needs it: no launch overhead (the trace's gaps carry it) and no
    extra contention slowdown (measured durations already contain it)."""
    return replace(gpu, launch_overhead=0.0, comm_kernel=replace(gpu.comm_kernel, launch=0.0),
                   contention=replace(gpu.contention, compute_per_hbm_util=0.0, comm_per_hbm_util=0.0))
