"""The closed-form engine: a task graph compiled once into a max-plus DAG, evaluated with numpy for
many sizes at once. With the DES (:mod:`.des`) it is one of the two models of time; everything that
is not the DES (``--engine analytical``, explore sweeps, the heuristic) comes here.

Compiling (:func:`compile_graph`) turns every task into nodes whose values are times:

* a kernel begins ``launch`` after its dependencies and its stream predecessor end; a
  GEMM (a kernel with a :class:`~ficco_sim.gemm_model.GemmShape`) ends its isolated time
  later (:func:`ficco_sim.gemm_model.gemm_times`: tile choice, waves, HBM bound), another
  compute or memory kernel after its blocks' closed-form waves, a communication kernel
  when the transfers it drives end;
* a transfer takes ``fixed + latency + bytes / bandwidth`` (alpha-beta): the bandwidth is
  the path's bottleneck link divided among the transfers that share it, capped by the
  copy engine or by the driving kernel's channels shared by its transfers of the step,
  and by HBM.

A tile signal (:attr:`~ficco_sim.taskgraph.Kernel.signals`) is a node that ends the share of
its producer GEMM's time its waves up to the last block covering its rows take (wave quantized,
:func:`~ficco_sim.gemm_model.tile_prefix_blocks`), plus the flag's path latency. A fused
GEMM's epilogue stores move their bytes over the path (or a full wave's blocks x a finite
``gemm.peer_rate``, added to its time) or are posted, beside its math (:func:`with_stores`).

Who shares a link is found in passes (:func:`evaluate`). The first pass divides each link
among the transfers of one concurrency step (:attr:`~ficco_sim.taskgraph.Transfer.step`)
that cross it (commands of one step queued on one engine run in rounds, each round
sharing links only with the other engines' same round). Two more passes divide it by
the time-averaged number of transfers on the link over the transfer's span in the pass
before, raised to what the others leave of it (:func:`.closed_form_overlap.link_coefs`): pieces
that the first pass lines up spread out once their neighbours are seen to finish early, as the
DES's max-min sharing shows. The last pass also applies the contention rule (:mod:`ficco_sim.contention`)
where the pass before shows overlap, and the dispatcher's rules for kernels that start
beside a running GEMM (:mod:`.closed_form_overlap`): a memory kernel gets the SM slots
the GEMM's blocks leave it, a communication kernel with none waits for the GEMM's last
or next wave; the GEMM is the one the pass before saw, its times those of this pass
(:func:`run`). A GEMM issued while a memory kernel of its GPU runs, with no room beside
its blocks, waits for it (:func:`.closed_form_overlap.gemm_waits`, from the pass before).
Without overlap the answer is exact for isolated GEMMs and alpha-beta collectives. Not seen: a GEMM
sharing HBM with a memory kernel beside it (the DES shares it max-min), a communication kernel on part
of its blocks, head-of-line dispatch (H100/H200 ``dispatch: strict``; 9 of 2,262 H100 oracle points, ≤ 2.9%).

A template compiled from a :class:`~ficco_sim.workload.Scenario` evaluates any scenario of
the same :meth:`~ficco_sim.workload.Scenario.structure` exactly: GEMM dimensions scale
with the scenario's m, n, k, transfer bytes and reductions with the communicated shape.

>>> from ficco_sim.schedules import lower
>>> from ficco_sim.workload import Scenario
>>> g = lower(Scenario("ag-gemm", 2, 1024, 1024, 1024), "none", "h100", "switch:2")
>>> closed_form_timeline(g, "h100", "switch:2").makespan > 0
True
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..contention import PROFILE, Weights
from ..errors import InputError
from ..gemm_model import GemmShape, blocks_per_sm, gemm_times, hbm_traffic, waves_time
from ..hardware import GpuProfile, load_gpu
from ..taskgraph import Kernel, TaskGraph
from ..timeline import TaskRecord, Timeline
from ..topology import Topology, load_topology
from ..workload import Scenario
from .closed_form_contention import slowdowns
from .closed_form_overlap import (CommKernels, MemKernels, apply_comm_hold, apply_memory_hold, comm_release,
                                  gemm_waits, link_coefs, memory_hold)
from .dag_levels import csr, levels_of, longest_path_levels, padded_levels
from .launch import launch_delays, persistent
from .closed_form_nodes import (CONST, FIXED, GATE, GEMM, MEM, SIG, SMX, XFER, ZERO,  # noqa: F401
                                kernel_isolated_time, task_rows)
from .closed_form_tiles import residency, signal_share, sources, with_signals, with_stores
from .closed_form_tables import (NO_TUNE, Groups, graph_comm_kernels, groups, link_tables, memory_kernels,
                                 transfer_cost, tuned_terms)

@dataclass
class Template:
    """A task graph compiled into a levelled max-plus DAG (see module docstring)."""

    ref: Scenario | None
    num_nodes: int
    levels: Sequence[tuple[np.ndarray, np.ndarray]]   # (node ids, padded input ids) per level
    kind: np.ndarray           # node -> ZERO | CONST | GEMM | XFER | MEM | FIXED | SMX
    const: np.ndarray          # CONST: launch; XFER: fixed + latency; MEM/FIXED: duration at ref; SIG: flag latency
    coef: np.ndarray           # XFER: s per byte; GEMM: epilogue stores, s per m*n; SIG: share of rows
    ref_bytes: np.ndarray      # XFER: bytes at ref; GEMM: fused stores' remote bytes per output element
    tune: np.ndarray           # (nodes, 5) SMX: call (bytes/byte, ranks, steps), channel cap, channels; GEMM: store_coef's last 3
    gemm_shape: np.ndarray     # GEMM node -> index into shapes
    shapes: list[GemmShape]    # at ref
    gpu_of: np.ndarray         # node -> GPU (kernels: their GPU; transfers: src)
    dst_of: np.ndarray         # transfers: dst, else -1
    gemm_nodes: np.ndarray     # end nodes of GEMM kernels (with a shape)
    gemm_begin: np.ndarray
    comm_nodes: np.ndarray     # end nodes of comm kernels
    comm_begin: np.ndarray
    comm_grid: np.ndarray
    xfer_nodes: np.ndarray
    xfer_begin: np.ndarray
    comm_scale: tuple[str, str] = ("m", "k")
    groups: Groups | None | str = "lazy"   # who shares SMs and links, for the contention pass
    tasks: np.ndarray | None = None             # (tasks, 2) begin and end node of each task, in graph order
    gemm_targets: np.ndarray | None = None      # GEMMs (transfers) whose slowdown the contention pass
    xfer_targets: np.ndarray | None = None      # computes; None: all (a quotient: one per class)
    link_bw: np.ndarray | None = None           # (links + 1,) B/s of every link, +inf for the sentinel
    xfer_links: np.ndarray | None = None        # (X, Lmax) links of each transfer's path (sentinel: links)
    xfer_cap: np.ndarray | None = None          # (X,) B/s: the copy engine / channel / HBM bound
    mem: MemKernels | None = None               # memory kernels, for the occupancy rule
    comm_kernels: CommKernels | None = None     # communication kernels, for the dispatch rule
    level_cache: dict = field(default_factory=dict)   # built once: kernels per level, link crossings
    quotient: "Template | None" = None          # evaluated instead when set (:mod:`.symmetry`)
    orbit: np.ndarray | None = None             # node (and sentinel) -> quotient node
    source: np.ndarray | None = None            # SIG node -> its producer GEMM's end node (else -1)
    places: np.ndarray | None = None            # compiled from a share (:mod:`.closed_form_turned`): (tasks of
                                                # GPU 0, 2) begin and end node of its i-th; GPU g's: + g * nodes/GPU
    share_dag: tuple | None = None              # compiled from a share: GPU 0's nodes' DAG (input counts, inputs
                                                # named by their GPU 0 node, levels), its quotient's own

    def contention_groups(self) -> Groups | None:
        """:attr:`groups`, built on first use (a sweep evaluates merged templates, never the
        templates they merge; a merged one with a symmetry quotient evaluates the quotient)."""
        if isinstance(self.groups, str):
            g = self.gpu_of
            self.groups = groups(g[self.gemm_nodes], g[self.comm_nodes], self.comm_grid, g[self.xfer_nodes],
                                 self.dst_of[self.xfer_nodes])
        return self.groups


def transfer_costs(graph: TaskGraph, gpu: GpuProfile, topo: Topology
                   ) -> dict[str, tuple[float, float, float, list]]:
    """(fixed s, s per byte at the first pass's share, cap B/s, path links) of every
    transfer of ``graph`` (alpha-beta; see module docstring). Transfers of one GPU pair
    share their route's list of links."""
    share: Counter = Counter()
    chan: Counter = Counter()
    position: Counter = Counter()
    routes: dict[tuple[int, int], tuple[list, float]] = {}
    link_bw: dict = {}
    edges = topo.graph.edges
    rows = []
    for t in graph.transfers:
        pair = (t.src, t.dst)
        route = routes.get(pair)
        if route is None:
            route = routes[pair] = (topo.path_links(t.src, t.dst), topo.path_latency(t.src, t.dst))
            for lk in route[0]:
                if lk not in link_bw:
                    link_bw[lk] = edges[lk]["bandwidth"]
        g = t.step if t.step is not None else ("own", t.id)
        r = 0
        if t.engine == "dma":
            key = (t.gpu, t.stream, g)
            r = position[key]
            position[key] = r + 1
        for lk in route[0]:
            share[(lk, g, r)] += 1
        if t.engine == "sm":
            chan[(t.drivers[0], g)] += 1
        rows.append((t, route, g, r))
    grid: dict[str, int] = {}
    out = {}
    for t, (links, latency), g, r in rows:
        if t.engine == "sm":
            d = t.drivers[0]
            blocks = grid.get(d)
            if blocks is None:
                blocks = grid[d] = graph.kernel(d).grid
            shared = chan[(d, g)]
        else:
            blocks = shared = 0
        out[t.id] = transfer_cost(t, gpu, links, latency, [link_bw[lk] / share[(lk, g, r)] for lk in links],
                                  blocks, shared)
    return out


def compile_graph(graph: TaskGraph, gpu: GpuProfile, topo: Topology, scenario: Scenario | None = None) -> Template:
    """The template of ``graph`` (lowered from ``scenario``, if any: then it rescales)."""
    if gpu.host is not None:
        raise InputError(gpu.path or gpu.name, "host", "a host device (the CPU replay's ranks sharing cores) has "
                         "no closed form; use the discrete-event engine (--engine des)")
    rows: list[tuple] = []     # (kind, gpu, const, coef, bytes, shape, dst, tune) per node
    add_row = rows.append

    def node(kind: int, gpu_id: int, const: float = 0.0, coef: float = 0.0, nb: float = 0.0, shape: int = -1,
             dst: int = -1) -> int:
        add_row((kind, gpu_id, const, coef, nb, shape, dst, NO_TUNE))
        return len(rows) - 1

    costs = transfer_costs(graph, gpu, topo)
    shapes: dict[GemmShape, int] = {}
    alone: dict[tuple, float] = {}       # isolated time per kernel footprint (many kernels share one)
    begin, end, ready, prev, last, armed = {}, {}, {}, {}, {}, {}
    driven: dict[str, list[str]] = {}
    signals: dict[str, tuple[int, ...]] = {}
    source: dict[int, int] = {}
    launch = launch_delays(graph.tasks, gpu)
    storing = {k.gpu for k in graph.kernels if k.stores}
    for t in graph.tasks:
        key = graph.stream_of(t)
        prev[t.id] = last.get(key) if key else None
        if key:
            last[key] = t.id
        if t.signals:
            here = t.gpu       # the issuing GPU polls the flag
            sig = []
            for kid, share in t.signals:
                k = graph.kernel(kid)
                i = node(SIG, here, topo.path_latency(k.gpu, here) if k.gpu != here else 0.0, share,
                         shape=shapes[k.gemm])
                source[i] = end[kid]
                sig.append(i)
            signals[t.id] = tuple(sig)
        ready[t.id], begin[t.id], end[t.id], arm = task_rows(t, gpu, topo, costs.get(t.id), rows, shapes, alone,
                                                             launch, storing)
        if arm is not None:
            armed[t.id] = arm
            driven[t.id] = []
        for k in getattr(t, "drivers", ()):
            driven[k].append(t.id)
    inputs: list[tuple[int, ...]] = [()] * len(rows)
    for kid, i in ((graph.task(x).signals[j][0], i) for x, sig in signals.items() for j, i in enumerate(sig)):
        inputs[i] = (begin[kid],)
    for t in graph.tasks:
        pre = tuple(end[d] for d in t.deps) + ((end[prev[t.id]],) if prev[t.id] else ()) + signals.get(t.id, ())
        if isinstance(t, Kernel):
            inputs[begin[t.id]] = pre
            if t.id in armed:
                inputs[armed[t.id]] = (begin[t.id],)
            inputs[end[t.id]] = (begin[t.id],) + tuple(end[x] for x in driven.get(t.id, ()))
            if t.waits:      # task_rows' layout: begin, its gates, the GEMM
                gates = [(begin[t.id] + 1 + i, tid) for i, tid in enumerate(w for _, w in t.waits if w)]
                for i, tid in gates:
                    inputs[i] = (end[tid],)
                    source[i] = end[t.id]
                inputs[end[t.id]] += tuple(i for i, _ in gates)
        else:
            inputs[ready[t.id]] = pre
            if t.engine == "sm":
                inputs[begin[t.id]] = (ready[t.id],) + tuple(armed[k] for k in t.drivers)
            inputs[end[t.id]] = (begin[t.id],)
    n = len(rows)
    kinds, gpus, consts, coefs, nbytes, shape_ix, dsts, tunes = (list(c) for c in zip(*rows)) if rows else ([],) * 8
    lens, flat = csr(inputs)
    level = longest_path_levels(lens, flat)
    levels = padded_levels(lens, flat, level)
    kernels = graph.kernels
    gemms = [t for t in kernels if t.kind == "gemm" and t.gemm is not None]
    comms = [t for t in kernels if t.kind == "comm"]
    mems = [t for t in kernels if t.kind == "memory"]
    xfers = graph.transfers
    ix = lambda d, ts: np.array([d[t.id] for t in ts], dtype=np.int64)  # noqa: E731
    comm_grid = np.array([k.grid for k in comms], dtype=float)
    gpu_of, dst_of = np.array(gpus, dtype=np.int64), np.array(dsts, dtype=np.int64)
    gemm_nodes, comm_nodes, xfer_nodes = ix(end, gemms), ix(end, comms), ix(end, xfers)
    return Template(
        ref=scenario, num_nodes=n, levels=levels, kind=np.array(kinds, dtype=np.int64), const=np.array(consts),
        coef=np.array(coefs), ref_bytes=np.array(nbytes), tune=np.array(tunes, dtype=float).reshape(-1, 5),
        gemm_shape=np.array(shape_ix, dtype=np.int64),
        shapes=list(shapes), gpu_of=gpu_of, dst_of=dst_of, gemm_nodes=gemm_nodes, gemm_begin=ix(begin, gemms),
        comm_nodes=comm_nodes, comm_begin=ix(begin, comms), comm_grid=comm_grid, xfer_nodes=xfer_nodes,
        xfer_begin=ix(begin, xfers), comm_scale=scenario.spec.comm_scale if scenario is not None else ("m", "k"),
        tasks=np.array([(begin[t.id], end[t.id]) for t in graph.tasks], dtype=np.int64).reshape(-1, 2),
        **link_tables([costs[t.id][3] for t in xfers], [costs[t.id][2] for t in xfers], topo),
        mem=memory_kernels(mems, ix(end, mems), ix(begin, mems), gpu, gpu_of, gemm_nodes, level, ix(begin, gemms)),
        comm_kernels=graph_comm_kernels(graph, comms, gemms, gpu, ix(begin, comms), level, ix(begin, gemms)),
        source=sources(source, n))


# ----------------------------------------------------------------------------------------
# Evaluation

def _factors(tpl: Template, scenarios: Sequence[Scenario] | None) -> dict[str, np.ndarray]:
    r = tpl.ref
    if not scenarios or r is None:
        return {d: np.ones(max(1, len(scenarios or ()))) for d in "mnk"}
    bad = [s.label() for s in scenarios if s.structure() != r.structure()]
    if bad:
        raise ValueError(f"scenario {bad[0]!r} is not shaped like the template's {r.label()!r}")
    return {d: np.array([getattr(s, d) / getattr(r, d) for s in scenarios]) for d in "mnk"}


def durations(tpl: Template, gpu: GpuProfile, scenarios: Sequence[Scenario] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict, np.ndarray]:
    """(P, nodes + 1) contention-free durations of non-transfer nodes, (P, nodes + 1) bytes
    of transfer nodes, (P, GEMMs) GEMM HBM bytes, where each GEMM's blocks sit
    (:func:`_residency`), and the durations again without fused epilogue stores (the
    isolated kernels the metrics compare with); one row per scenario (one row at the
    template's own sizes when none are given)."""
    f = _factors(tpl, scenarios)
    P = len(f["m"])
    kind = tpl.kind
    dur = np.zeros((P, tpl.num_nodes + 1))
    dur[:, :-1] = np.where((kind == CONST) | (kind == FIXED), tpl.const, 0.0)
    iso = dur            # the durations without fused epilogue stores (a copy only when there are some)
    gemm_hbm = np.zeros((P, len(tpl.gemm_nodes)))
    resident: dict = {}
    if tpl.shapes:
        S = len(tpl.shapes)
        times, traffic = np.zeros((P, S)), np.zeros((P, S))
        sizes: list = [None] * S
        picked: list = [None] * S
        alike: dict[tuple, list[int]] = {}      # shapes costed in one call: same dtype and kernel options
        for j, sh in enumerate(tpl.shapes):
            alike.setdefault((sh.dtype, sh.extra_smem, sh.accumulate, sh.sms), []).append(j)
        for (dtype, extra, accumulate, sms), js in alike.items():
            m, n, k = (np.stack([np.maximum(1, np.round(getattr(tpl.shapes[j], d) * f[d])) for j in js], axis=1)
                       for d in "mnk")                                      # (P, shapes alike)
            times[:, js], best = gemm_times(gpu, m, n, k, dtype, extra_smem=extra, accumulate=accumulate,
                                            tiles=True, sms=sms)
            traffic[:, js] = hbm_traffic(m, n, k, dtype, accumulate)
            for c, j in enumerate(js):
                sizes[j], picked[j] = (m[:, c], n[:, c], k[:, c]), best[:, c]
        g = np.flatnonzero(kind == GEMM)
        dur[:, g] = times[:, tpl.gemm_shape[g]]
        stored = g[tpl.coef[g] > 0]
        if len(stored):   # fused epilogue stores (not part of "iso")
            iso = dur.copy()
            dur[:, stored] = with_stores(gpu, tpl, stored, sizes, picked, dur[:, stored], traffic[:, tpl.gemm_shape[stored]])
        gemm_hbm = traffic[:, tpl.gemm_shape[tpl.gemm_nodes]]
        if (tpl.mem is not None and len(tpl.mem.nodes)) or len(tpl.comm_nodes):
            resident = residency(gpu, tpl.shapes, sizes, picked, tpl.gemm_shape[tpl.gemm_nodes])
        sig = np.flatnonzero((kind == SIG) | (kind == GATE))
        if len(sig):
            resident["signal"] = signal_share(gpu, tpl, sig, sizes, picked)
    a, b = tpl.comm_scale
    comm = f[a] * f[b]
    nbytes = np.zeros((P, tpl.num_nodes + 1))
    x = np.flatnonzero((kind == XFER) | (kind == SMX))
    nbytes[:, x] = tpl.ref_bytes[x] * comm[:, None]
    mm = np.flatnonzero(kind == MEM)
    dur[:, mm] = tpl.const[mm] * comm[:, None]
    resident["comm"] = comm
    if iso is not dur:
        iso[:, mm] = dur[:, mm]
    return dur, nbytes, gemm_hbm, resident, iso


def transfer_terms(tpl: Template, gpu: GpuProfile, nbytes: np.ndarray, xfer: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fixed s, bytes on the wire, least s per wire byte) of the transfer nodes ``xfer`` per
    scenario: SM transfers add the latency of the protocol NCCL's tuner picks and send its
    flags too, and a call too small for every channel runs on fewer (:func:`tuned_terms`)."""
    payload = nbytes[:, xfer]
    fixed = np.broadcast_to(tpl.const[xfer], payload.shape).copy()
    wire = payload.copy()
    floor = np.zeros_like(payload)
    sm = tpl.kind[xfer] == SMX
    if sm.any():
        lat, eff, floor[:, sm] = tuned_terms(gpu, payload[:, sm], tpl.tune[xfer[sm]])
        fixed[:, sm] += lat
        wire[:, sm] /= eff
    return fixed, wire, floor


def run(tpl: Template, add: np.ndarray, hold: dict | None = None) -> np.ndarray:
    """Node times: each node ends ``add`` after the latest of its inputs (level by level).
    ``hold`` (:mod:`.closed_form_overlap`: ``comm`` from ``comm_release``, ``mem`` from
    ``memory_hold``): kernels sharing SMs with a GEMM running at their start, timed against
    that GEMM's times in this pass as soon as their level is reached."""
    vals = np.zeros_like(add)
    cache = tpl.level_cache
    if hold and "comm" not in cache:
        for name, ks, at in (("comm", tpl.comm_kernels, "begin"), ("mem", tpl.mem, "nodes")):
            cache[name] = levels_of(tpl.levels, tpl.num_nodes, getattr(ks, at)) if ks is not None else {}
    comm_at = cache["comm"] if hold and "comm" in hold else {}
    mem_at = cache["mem"] if hold and "mem" in hold else {}
    one = len(vals) == 1        # one scenario: 1-d views of its row (2-d fancy indexing costs twice as much)
    v, a = vals[0], add[0]
    with np.errstate(divide="ignore", invalid="ignore"):    # once, not per held level
        for lv, (ids, pad) in enumerate(tpl.levels):
            if one:
                v[ids] = v[pad].max(axis=1) + a[ids]
            else:
                vals[:, ids] = vals[:, pad].max(axis=2) + add[:, ids]
            if lv in comm_at:
                apply_comm_hold(tpl, vals, add, hold["comm"], comm_at[lv], lv)
            if lv in mem_at:
                apply_memory_hold(tpl, vals, add, hold["mem"], mem_at[lv], lv)
    return vals


SHARING_PASSES = 2   # passes after the first that re-divide links by observed overlap
CONTENTION_PASSES = 3   # the last passes apply contention; after the first, the GEMMs' slowdowns again from
DAMP = 0.5              # the pass the previous ones made, half the new value and half the old


def evaluate(tpl: Template, gpu: GpuProfile, scenarios: Sequence[Scenario] | None = None, *,
             contention: bool = True, weights: Weights = PROFILE) -> dict[str, np.ndarray]:
    """Node times (``vals``, P x nodes + 1 sentinel), durations and makespans for every
    scenario (default: the template's own sizes); the passes of the module docstring."""
    if tpl.quotient is not None:
        ev = evaluate(tpl.quotient, gpu, scenarios, contention=contention, weights=weights)
        out = {k: ev[k][:, tpl.orbit] for k in ("vals", "add", "base", "iso", "nbytes")}
        return {**out, "makespan": ev["makespan"]}
    base, nbytes, gemm_hbm, resident, iso = durations(tpl, gpu, scenarios)
    xfer = np.flatnonzero((tpl.kind == XFER) | (tpl.kind == SMX))
    fixed, wire, floor = transfer_terms(tpl, gpu, nbytes, xfer)
    share, add = resident.get("signal"), base.copy()
    add[:, xfer] = fixed + np.maximum(tpl.coef[xfer], floor) * wire
    vals = run(tpl, with_signals(tpl, add, share))
    sharing = len(tpl.xfer_nodes) > 0 and tpl.xfer_links is not None
    passes = SHARING_PASSES if sharing else int(contention)
    contended = contention and tpl.contention_groups() is not None
    passes += max(0, CONTENTION_PASSES - 1) if contended else 0
    slow = waits = None
    for p in range(passes):
        hold = None
        c = p - (passes - CONTENTION_PASSES)          # which contention pass this is
        if contended and c >= 0:
            if c == 0:      # the overlaps of the pass without contention; who waits for SMs, kept after
                slow = slowdowns(tpl, gpu, vals, nbytes, gemm_hbm, weights)
                kept = {}
                if tpl.mem is not None and len(tpl.mem.nodes):
                    kept["mem"] = memory_hold(tpl, gpu, vals, resident, resident["comm"])
                if tpl.comm_kernels is not None and len(tpl.comm_nodes):
                    kept["comm"] = comm_release(tpl, gpu, vals, resident)
            else:           # the GEMMs' again from the pass contention made, damped
                slow = DAMP * slowdowns(tpl, gpu, vals, nbytes, gemm_hbm, weights, base, slow) + (1.0 - DAMP) * slow
            hold = kept
        if p < max(1, SHARING_PASSES) or not sharing:   # the extra contention passes keep the last link shares
            coef = np.broadcast_to(tpl.coef[xfer], wire.shape)
            if sharing:
                per_node = np.zeros((len(vals), tpl.num_nodes + 1))
                tx = slice(None) if tpl.xfer_targets is None else tpl.xfer_targets
                per_node[:, tpl.xfer_nodes[tx]] = link_coefs(tpl, vals)
                coef = per_node[:, xfer]
        last = add
        add = base.copy() if slow is None else base * slow
        add[:, xfer] = fixed + np.maximum(coef, floor) * wire * (1.0 if slow is None else slow[:, xfer])
        if hold and "mem" in hold:
            waits = gemm_waits(tpl, gpu, vals, add, hold["mem"], resident, waits)
            add += waits
        if contended and c >= 1 and np.array_equal(add, last):   # nothing moved: the pass would repeat
            break
        vals = run(tpl, with_signals(tpl, add, share), hold)
    return {"vals": vals, "add": add, "base": base, "iso": iso, "nbytes": nbytes,
            "makespan": vals[:, :-1].max(axis=1, initial=0.0)}


def closed_form_timeline(graph: TaskGraph, gpu: GpuProfile | str, topology: Topology | str, *,
                         contention: bool = True, weights: Weights = PROFILE) -> Timeline:
    """The closed-form timeline of ``graph`` (see module docstring)."""
    gpu = load_gpu(gpu)
    topology = load_topology(topology, gpu)
    tpl = compile_graph(graph, gpu, topology)
    return timeline_of(graph, tpl, evaluate(tpl, gpu, contention=contention, weights=weights)["vals"][0])


def timeline_of(graph: TaskGraph, tpl: Template, vals: np.ndarray) -> Timeline:
    """Task records from one row of node times."""
    records = []
    if tpl.tasks is None or len(tpl.tasks) != len(graph.tasks):
        raise ValueError("the template was not compiled from this graph")
    for t, (b, e) in zip(graph.tasks, tpl.tasks.tolist()):
        if isinstance(t, Kernel):
            records.append(TaskRecord(t.id, t.gpu, t.stream, t.kind, t.role, t.label, float(vals[b] - tpl.const[b]),
                                      float(vals[b]), float(vals[e]), grid=t.grid))
        else:
            stream = t.stream if t.engine == "dma" else "sm-transfers"
            records.append(TaskRecord(t.id, t.gpu, stream, "transfer", t.role, t.label, float(vals[b]),
                                      float(vals[b]), float(vals[e]), engine=t.engine, src=t.src, dst=t.dst,
                                      nbytes=t.nbytes))
    return Timeline(records, {}, len(records))
