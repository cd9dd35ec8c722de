"""The discrete-event simulator: task graph -> :class:`~ficco_sim.timeline.Timeline`.

Built on simpy. Every stream is a simpy process that walks its tasks in order, waiting for
their dependencies; kernels then pay their launch delay (:mod:`.launch`) and join their GPU's
:class:`~ficco_sim.engine.dispatcher.SmPool`; copy commands queue on their DMA engine (a
``simpy.Resource`` of capacity one: FIFO), pay the per-command cost and the path latency, then
move bytes. SM transfers start once their dependencies are done and both driver kernels have a
resident block, after the path latency; a communication kernel's channels drive bytes once
their handshake is over, and blocks placed later (as a GEMM frees SMs) pay their own. A task
with tile signals also waits for the producer GEMM's blocks covering those rows (blocks are
dispatched in index order, so done blocks form a prefix) and the flag's path latency; a fused
GEMM's blocks with epilogue stores hold their SMs until their tiles have crossed the links to
their peers, each block moving at most ``gemm.peer_rate``, or, where the profile gives no such
rate (posted stores: Ampere's epilogue writes to peer memory), leave them at once, their tiles
done when their bytes have landed. On a host device (the CPU replay,
:class:`~ficco_sim.hardware.HostSpec`) a rank's compute ops and its message posts take turns
on its one issuing thread, and compute and messages share the rank's cores evenly.

Whatever moves (waves of compute blocks, transfers) is a fluid :class:`~ficco_sim.engine.fluid.Activity`
sharing links, HBM, copy engines and the channels of resident communication kernels by max-min
fairness; on top of that, the profile's calibrated interference coefficients slow compute by the HBM
traffic of communication and vice versa. Rates are recomputed once per instant at which anything
changed ("settle"), so symmetric GPUs finishing together cost one recomputation. SM transfers move
through these steps in batches (:mod:`~ficco_sim.engine.sm_transfers`), and a graph whose GPUs all do
the same thing, turned, runs one GPU (:mod:`~ficco_sim.engine.fold`). A ``host`` kernel (a trace's launch pace) holds no SM.

>>> from ficco_sim.schedules import lower
>>> from ficco_sim.workload import Scenario
>>> g = lower(Scenario("ag-gemm", 2, 1024, 1024, 1024), "none", "h100", "switch:2")
>>> tl = simulate_graph(g, "h100", "switch:2")
>>> tl.makespan > 0
True
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import simpy

from ..contention import comm_slowdown, compute_slowdown
from ..errors import InputError
from ..gemm_model import plan_gemm, roofline, tile_prefix_blocks
from ..hardware import GpuProfile, load_gpu
from ..taskgraph import Kernel, TaskGraph, Transfer
from ..timeline import TaskRecord, Timeline
from ..topology import Topology, load_topology
from .des_host import host_time, post, post_all
from .des_wiring import Wiring
from .dispatcher import SmPool, Waiting
from .fluid import Activity, FluidPool
from .fold import Folded, fold
from .gcpause import paused_gc
from .launch import host_issued, launch_delays, persistent
from .sm_transfers import SmTransfers
from .tile_order import TileOrder

SETTLE_PRIORITY = 2   # after every ordinary simpy event of the same instant (NORMAL = 1)
NAN = float("nan")


class Simulation(Wiring):
    """One run of one task graph. Use :func:`simulate_graph`."""

    def __init__(self, graph: TaskGraph, gpu: GpuProfile, topology: Topology, *, policy: str | None = None,
                 record: bool = True, folded: Folded | None = None):
        if topology.num_gpus < graph.num_gpus:
            raise InputError("topology", None, f"{topology.name} has {topology.num_gpus} GPUs, "
                             f"the task graph needs {graph.num_gpus}")
        super().__init__()
        self.g, self.gpu, self.topo, self.record = graph, gpu, topology, record
        self.folded = folded      # one rank of a symmetric graph (engine.fold): links by class, real peers
        self.pairs = folded.pairs if folded else {}
        self.env = simpy.Environment()
        env = self.env
        self.done: dict[str, simpy.Event] = {}     # kernels, copies, and SM transfers a stream task awaits
        self.started = {k.id: env.event() for k in graph.kernels}
        self.launch = launch_delays(graph.tasks, gpu)     # per kernel: its turn to its blocks dispatchable
        self.issued = host_issued(graph.tasks)
        self.pools = [SmPool(gpu.num_sms, gpu.sm, policy or gpu.dispatch) for _ in range(graph.num_gpus)]
        self.waiting: list[list[Waiting]] = [[] for _ in range(graph.num_gpus)]
        self.engines = [[simpy.Resource(env, 1) for _ in range(gpu.dma.engines)] for _ in range(graph.num_gpus)]
        self.fluid = FluidPool()
        for i in range(graph.num_gpus):
            self.fluid.set_capacity(f"hbm{i}", gpu.hbm_effective)
        if gpu.host is not None:      # ranks are processes on one host: each has its share of the cores
            for i in range(graph.num_gpus):
                self.fluid.set_capacity(f"host{i}", gpu.host.cores / graph.num_gpus)
        self.records: dict[str, TaskRecord] = {}
        self.dirty: set[int] = set()
        self.settle_pending = False
        self.version = 0
        self.last, self.seq, self.events = 0.0, 0, 0
        self.blocks_done: dict[str, int] = {}
        self.resident: dict[str, int] = {}
        self.comm_blocks = np.zeros(max(self.g.num_gpus, 1))   # resident communication blocks per GPU
        self.cohorts: dict[str, list[np.ndarray]] = {}
        self.armed: dict[str, int] = {}     # a communication kernel's channels past their handshake
        self.finished_comm: set[str] = set()
        self.tiled: dict[str, TileOrder] = {}        # GEMMs whose block order matters (signals, stores)
        self.signal_events: dict[str, list] = {}      # task -> its tile-signal events
        self._setup()

    # -- set-up ---------------------------------------------------------------------------
    def _tile_order(self, k: Kernel) -> "TileOrder":
        hit = self.tiled.get(k.id)
        if hit is None:
            sh = k.gemm
            plan = plan_gemm(self.gpu, sh.m, sh.n, sh.k, sh.dtype, extra_smem=sh.extra_smem,
                             accumulate=sh.accumulate, sms=sh.sms)
            hit = self.tiled[k.id] = TileOrder(plan.tile, sh, k.grid, k.stores)
        return hit

    def _signal(self, t, kid: str, share: float):
        """The event of ``t``'s tile signal on GEMM ``kid``: the blocks covering ``share`` of its
        rows are done, and the flag has crossed from the producer's GPU to ``t``'s."""
        k = self.g.kernel(kid)
        order = self._tile_order(k)
        need = min(k.grid, int(tile_prefix_blocks(order.tile, order.shape.m, order.shape.n, share)))
        latency = self._path(k.gpu, t.gpu)[1] if k.gpu != t.gpu else 0.0    # the issuing GPU polls
        ev = self.env.event()
        bisect.insort(order.waits, (need, latency, ev), key=lambda w: w[0])
        return ev

    def _setup(self) -> None:
        per_stream: dict[tuple[int, str], list] = {}
        sm: list[Transfer] = []
        env, done = self.env, self.done
        self.placed_at: list[int] = []      # task positions of the kernels and copies (the rest: SM transfers)
        for pos, t in enumerate(self.g.tasks):
            if t.signals:
                self.signal_events[t.id] = [self._signal(t, kid, share) for kid, share in t.signals]
            if isinstance(t, Kernel):
                if t.stores:
                    self._tile_order(t)
                self.records[t.id] = TaskRecord(t.id, t.gpu, t.stream, t.kind, t.role, t.label, NAN, NAN, NAN,
                                                grid=t.grid)
                self.blocks_done[t.id] = 0
                self.resident[t.id] = 0
                self.cohorts[t.id] = []
            elif t.engine == "dma":
                self.records[t.id] = TaskRecord(t.id, t.gpu, t.stream, "transfer", t.role, t.label, NAN, NAN, NAN,
                                                engine=t.engine, src=t.src, dst=t.dst, nbytes=t.nbytes)
            else:       # an SM transfer: its record is written at the end
                sm.append(t)
                continue
            done[t.id] = env.event()
            self.placed_at.append(pos)
            per_stream.setdefault((t.gpu, t.stream), []).append(t)
        for tasks in per_stream.values():      # the SM transfers a stream task waits on get events too
            for t in tasks:
                for d in (*t.deps, *(w for _, w in getattr(t, "waits", ()) if w)):
                    if d not in done:
                        done[d] = env.event()
        self.threads: list | None = None     # a host device: each rank's issuing thread (HostSpec)
        # a host's communication kernel: the SM transfers its rank posts (index, seconds), in order
        self.posts: dict[str, list[tuple[int, float]]] = {}
        waits = None
        if self.gpu.host is not None:
            self.threads = [simpy.PriorityResource(env, 1) for _ in range(self.g.num_gpus)]
            rank_of = {k.id: k.gpu for k in self.g.kernels}
            waits = np.zeros(len(sm), dtype=np.int64)
            for j, t in enumerate(sm):
                for d in dict.fromkeys(t.drivers):
                    if rank_of.get(d) in (t.src, t.dst):
                        self.posts.setdefault(d, []).append((j, self.gpu.host.post_cost(t.nbytes)))
                        waits[j] += 1
        self.sm = SmTransfers(self, sm, waits)
        for key, tasks in per_stream.items():
            self.env.process(self._stream(self.g.stream(*key).priority, tasks))

    # -- processes ------------------------------------------------------------------------
    def _stream(self, priority: int, tasks: list):
        env = self.env
        for i, t in enumerate(tasks):     # queued: its turn came as its stream predecessor ended, no event held it
            events = [self.done[d] for d in t.deps] + self.signal_events.get(t.id, [])
            queued = i > 0 and all(e.triggered for e in events)
            if events:
                yield simpy.AllOf(env, events)
            rec, thread = self.records[t.id], self.threads[t.gpu] if self.threads is not None else None
            rec.ready = env.now
            if isinstance(t, Kernel) and t.kind == "host":
                yield from host_time(env, t.block_time, rec, self.done[t.id])
            elif isinstance(t, Kernel):
                held = None
                if thread is not None:      # the rank's issuing thread: posts first, then compute ops one at a time
                    if t.kind == "comm":
                        if t.id in self.posts:      # posted one by one; each moves once both ends posted it
                            env.process(post_all(env, thread, self.posts[t.id], self.sm.release))
                    else:
                        yield env.timeout(0)    # a post that became ready at this instant goes first
                        held = thread.request(priority=(1, -priority))
                        yield held
                if self.launch[t.id]:
                    yield env.timeout(self.launch[t.id])
                w = Waiting(t.id, t.block, t.grid, priority, self.seq, t.sms,
                            free=t.kind == "comm" and self.gpu.host is not None, issued=t.id in self.issued,
                            persistent=persistent(t, self.gpu) and not t.waits, queued=queued)
                if t.waits:
                    self._gate(t, w)
                self.pools[t.gpu].arrive(w)
                self.seq += 1
                self._dirty(t.gpu)
                yield self.done[t.id]
                if held is not None:
                    thread.release(held)
            else:
                if thread is not None and t.src != t.dst:     # a message: both its ends' threads post it
                    cost = self.gpu.host.post_cost(t.nbytes)
                    peer = t.dst if t.gpu == t.src else t.src
                    yield simpy.AllOf(env, [env.process(post(env, self.threads[g], cost)) for g in (t.gpu, peer)])
                engine = self.engines[t.gpu][t.dma_engine % len(self.engines[t.gpu])]
                with engine.request() as req:
                    yield req
                    rec.start = env.now   # the engine starts the command: its fixed cost is part of it
                    self._count(f"gpu{t.gpu}.dma_busy", +1)
                    wait = self.gpu.dma.command_overhead + self._path(*self.pair(t))[1]
                    if wait:
                        yield env.timeout(wait)
                    self._start_transfer(t)
                    yield self.done[t.id]
                    self._count(f"gpu{t.gpu}.dma_busy", -1)

    # -- fluid activities ------------------------------------------------------------------
    def _start_transfer(self, t: Transfer) -> None:
        """A copy's bytes start moving (after the command cost and the path latency); SM
        transfers start in batches (:class:`~ficco_sim.engine.sm_transfers.SmTransfers`)."""
        if t.nbytes <= 0:
            self._finish_transfer(t)
            return
        usage = self.transfer_usage(*self.pair(t), t.reduce)
        act = Activity(t.id, t.nbytes, usage, cap=self.gpu.dma.cap(*self.pair(t)), gpu=t.dst, kind="transfer",
                       ends=(t.src, t.dst), on_done=lambda t=t: self._finish_transfer(t))
        self._add_activity(act)

    def _finish_transfer(self, t: Transfer) -> None:
        self.records[t.id].end = self.env.now
        self.done[t.id].succeed()

    def _add_activity(self, act: Activity) -> None:
        self._advance()
        if self.record:
            self.link_counters.update((r, None) for r in act.usage if r.startswith("link:"))
        self.fluid.add(act)
        self._request_settle()

    def _advance(self) -> None:
        dt = self.env.now - self.last
        if dt > 0:
            self.fluid.advance(dt)
        self.last = self.env.now

    # -- kernels ---------------------------------------------------------------------------
    def _placed(self, gpu: int, w: Waiting, counts: np.ndarray) -> None:
        k = self.g.kernel(w.id)
        rec = self.records[k.id]
        n = int(counts.sum())
        if self.resident[k.id] == 0 and self.blocks_done[k.id] == 0 and math.isnan(rec.start):
            rec.start = self.env.now
            shake = self.gpu.handshake_of(k.kind) + k.setup
            if shake:    # the ranks' handshake: resident, its transfers not started yet
                self.env.timeout(shake).callbacks.append(lambda _e, ev=self.started[k.id]: ev.succeed())
            else:
                self.started[k.id].succeed()
        self.resident[k.id] += n
        rec.peak_resident = max(rec.peak_resident, self.resident[k.id])
        self._count(f"gpu{gpu}.blocks.{k.role}", n)
        if k.kind == "comm":
            self.comm_blocks[gpu] += n
            self.cohorts[k.id].append(counts)
            late = rec.start < self.env.now and self.gpu.handshake_of(k.kind) + k.setup
            if late:    # a later cohort's channels drive bytes once their own handshake is over
                self.env.timeout(late).callbacks.append(lambda _e, kid=k.id, m=n: self._arm(kid, m, True))
            else:
                self._arm(k.id, n)
            if not self.sm.open_of(k.id):
                self._finish_comm(k.id)
            else:
                self._request_settle()
            return
        order = self.tiled.get(k.id)
        first = order.place(n) if order is not None else 0
        if k.block_time <= 0:
            self._computed(k, counts, first)
            return
        block_time = k.block_time * self._occupied(k, counts)      # fewer of its blocks per SM: faster
        hbm_rate = n * k.block_hbm_bytes / block_time   # bytes/s at full speed
        usage = {f"hbm{gpu}": hbm_rate} if hbm_rate > 0 else {}
        weight = 1.0 / hbm_rate if hbm_rate > 0 else 1.0
        if self.gpu.host is not None:
            # a core per resident block (the rank's compute thread), from the rank's share of the host's cores;
            # weighted so that a compute thread and a message's thread get equal cores past it (a byte weighs 1)
            usage[f"host{gpu}"] = float(n)
            weight = self.gpu.host.core_s_per_byte / 2 or 1.0
        act = Activity(f"{k.id}@{self.seq}", block_time, usage, cap=1.0, weight=weight, gpu=gpu, kind="compute",
                       roofline=hbm_rate if k.kind == "gemm" else 0.0,
                       on_done=lambda k=k, c=counts, f=first: self._computed(k, c, f))
        self.seq += 1
        self._add_activity(act)

    def _computed(self, k: Kernel, counts: np.ndarray, first: int) -> None:
        """A cohort's blocks ``[first, first + n)`` finished computing: fused epilogue stores to
        peers go out now. Blocks that move their tiles themselves (a finite ``gemm.peer_rate``:
        a few KiB in flight each, Flux's Hopper kernel) keep their SMs until the bytes land;
        posted stores (no such rate: Ampere's epilogue writes to peer memory) leave the SMs to
        the kernel's next tiles at once. A tile is done (its signal, the kernel's end) once its
        bytes have landed."""
        if not k.stores:
            self._cohort_done(k, counts, first)
            return
        order = self.tiled[k.id]
        sends = [(dst, blocks, nbytes) for dst, blocks, nbytes in order.stores_of(first, int(counts.sum()))
                 if dst != k.gpu and nbytes > 0]
        if not sends:
            self._cohort_done(k, counts, first)
            return
        held = math.isfinite(self.gpu.gemm.peer_rate)
        if not held:
            self._release(k, counts)
        left = [len(sends)]

        def landed() -> None:
            left[0] -= 1
            if left[0] == 0:
                if held:
                    self._release(k, counts)
                self._landed(k, counts, first)

        for dst, blocks, nbytes in sends:
            usage = dict(self._path(k.gpu, dst)[0])
            at = self.rank(dst)       # (a folded rank receives its peer's stores)
            usage[f"hbm{at}"] = usage.get(f"hbm{at}", 0.0) + 1.0
            # each storing block has a few KiB in flight: the blocks move at most blocks x peer_rate
            cap = blocks * self.gpu.gemm.peer_rate
            self._add_activity(Activity(f"{k.id}@{self.seq}->{dst}", nbytes, usage, cap=cap, gpu=at,
                                        kind="transfer", ends=(k.gpu, at), on_done=landed))
            self.seq += 1

    def _arm(self, kid: str, n: int, later: bool = False) -> None:
        """``n`` more channels of communication kernel ``kid`` drive its bytes."""
        if kid not in self.finished_comm:
            if later:
                self._advance()
            self.armed[kid] = self.armed.get(kid, 0) + n
            for end in ("send", "recv"):
                self.fluid.set_capacity(f"{end}:{kid}", self.armed[kid] * self.gpu.comm_kernel.channel_bandwidth)
            if later:
                self._request_settle()

    def _finish_comm(self, kid: str) -> None:
        if kid in self.finished_comm:
            return
        self.finished_comm.add(kid)
        k = self.g.kernel(kid)
        if self.gpu.host is None:         # on a host device the library's threads held nothing
            for counts in self.cohorts[kid]:
                self.pools[k.gpu].retire(k.block, counts)
        self._count(f"gpu{k.gpu}.blocks.comm", -self.resident[kid])
        self.comm_blocks[k.gpu] -= self.resident[kid]
        self.resident[kid] = 0
        self.fluid.set_capacity(f"send:{kid}", 0.0)
        self.fluid.set_capacity(f"recv:{kid}", 0.0)
        self.waiting[k.gpu] = [w for w in self.waiting[k.gpu] if w.id != kid]
        self.records[kid].end = self.env.now
        self.done[kid].succeed()
        self._dirty(k.gpu)

    # -- settling an instant -----------------------------------------------------------------
    def _dirty(self, gpu: int) -> None:
        self.dirty.add(gpu)
        self._request_settle()

    def _request_settle(self) -> None:
        if not self.settle_pending:
            self.settle_pending = True
            ev = simpy.Event(self.env)
            ev.callbacks.append(self._settle)
            ev._ok, ev._value = True, None
            self.env.schedule(ev, SETTLE_PRIORITY, 0)

    def _settle(self, _event) -> None:
        self.settle_pending = False
        self.events += 1
        self._advance()
        while self.dirty:
            gpu = self.dirty.pop()
            for w, counts in self.pools[gpu].settle(self.waiting[gpu]):
                self._placed(gpu, w, counts)
            self.waiting[gpu] = [w for w in self.waiting[gpu] if w.unplaced > 0]
        self._recompute()

    def _recompute(self) -> None:
        self.fluid.rates()     # channel capacities are kept current by _placed/_finish_comm
        self._interfere()
        self.version += 1
        if self.record:
            self._record_links()
        nxt = self.fluid.next_finish()
        if math.isfinite(nxt):
            # at least the clock's own spacing: a step below it (late in a long clock) would never move it
            wake, ver = self.env.timeout(max(nxt, 2 * math.ulp(self.env.now)) if nxt > 0 else 0.0), self.version
            wake.callbacks.append(lambda _e, ver=ver: self._wake(ver))

    def _interfere(self) -> None:
        """Slowdown beyond fair sharing: GEMM waves by the loads their math does not hide
        (:func:`~ficco_sim.gemm_model.roofline`), compute by communication's HBM traffic, and back."""
        f = self.fluid
        s = f.slots()
        if not len(s):
            return
        roof = self._roofline(s)
        comp = f.compute[s]
        beside = self.gpu.contention.compute_beside_comm_kernel > 0 and bool(self.comm_blocks.any())
        if comp.any() and (beside or not comp.all()):     # one side alone: nothing slows it (factors 1)
            n = self.g.num_gpus      # every hbm<i> is registered at set-up: one entry per GPU
            comp_hbm, comm_hbm = (x[:n] for x in f.hbm_rates())
            slow = np.empty(len(s))
            on = f.gpu[s[comp]]
            slow[comp] = compute_slowdown(self.gpu, comm_hbm[on], resident_cover=(self.comm_blocks[on] > 0) * 1.0)
            ends = f.ends[s[~comp]]
            slow[~comp] = comm_slowdown(self.gpu, np.maximum(comp_hbm[ends[:, 0]], comp_hbm[ends[:, 1]]))
            if roof is not None:
                slow[roof[0]] *= roof[1]
            f.rate[s] /= slow
        elif roof is not None:
            f.rate[s[roof[0]]] /= roof[1]

    def _roofline(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(mask over ``s`` of the GEMM cohorts, their factor) or None: a GPU's cohorts asking ``u``
        times its HBM rate are slowed ``max(1, u)`` by the fair share, their waves take ``roofline(1, u, p)``."""
        p = self.gpu.gemm.roofline_exponent
        if math.isinf(p):
            return None
        roof = self.fluid.roofline[s]
        pick = roof > 0
        if not pick.any():
            return None
        on = self.fluid.gpu[s[pick]]
        u = (np.bincount(on, weights=roof[pick]) / self.gpu.hbm_effective)[on]
        return pick, roofline(1.0, u, p) / np.maximum(1.0, u)

    def _wake(self, ver: int) -> None:
        if ver != self.version:
            return
        self._advance()
        acts, batch = self.fluid.finished()
        for a in acts:
            a.on_done()
        if len(batch):
            self.sm.finish(batch)
        self._request_settle()

    # -- run -------------------------------------------------------------------------------
    def run(self) -> Timeline:
        self.env.run()
        stuck = [tid for tid, ev in self.done.items() if not ev.triggered] + self.sm.stuck()
        if stuck:
            where = self.g.meta.get("schedule", "task graph")
            raise InputError("simulation", str(where), f"deadlock: {len(stuck)} tasks never finished "
                             f"(first: {', '.join(stuck[:3])}); the dispatch policy or dependencies block progress")
        sm, records, j = self.sm.records(), [], 0          # in task order
        for k, (pos, rec) in enumerate(zip(self.placed_at, self.records.values())):
            records.extend(sm[j:pos - k])
            records.append(rec)
            j = pos - k
        records.extend(sm[j:])
        return Timeline(records, self.counters, self.events, self.fluid.solves)


def simulate_graph(graph: TaskGraph, gpu: GpuProfile | str, topology: Topology | str, *,
                   policy: str | None = None, record: bool = True, fold_ranks: bool = True) -> Timeline:
    """Run the discrete-event simulation of ``graph`` on ``gpu`` GPUs joined by ``topology``.

    A rotation-symmetric graph runs one rank and copies its times to the others
    (:mod:`ficco_sim.engine.fold`; the same answers, N times less work);
    ``fold_ranks=False`` runs every rank."""
    gpu = load_gpu(gpu)
    topology = load_topology(topology, gpu)
    with paused_gc():
        folded = fold(graph, topology) if fold_ranks and gpu.host is None else None
        if folded is None:
            return Simulation(graph, gpu, topology, policy=policy, record=record).run()
        return simulate_folded(folded, gpu, topology, policy=policy, record=record)


def simulate_folded(folded: Folded, gpu: GpuProfile | str, topology: Topology | str, *, policy: str | None = None,
                    record: bool = True) -> Timeline:
    """:func:`simulate_graph` of a rotation-symmetric graph given as its GPU 0 share
    (:mod:`ficco_sim.engine.fold`): one rank runs, every rank's times are its."""
    gpu = load_gpu(gpu)
    topology = load_topology(topology, gpu)
    with paused_gc():
        tl = Simulation(folded.graph, gpu, topology, policy=policy, record=record, folded=folded).run()
        return folded.expand(tl, topology)
