"""The closed form's template of a rotation-symmetric graph, compiled from GPU 0's share.

A lowering that gives every GPU the same tasks turned (:class:`~ficco_sim.engine.fold.Share`:
GPU g's i-th task is GPU 0's i-th with every GPU id ``+ g``) on a topology that turns onto
itself (:func:`~ficco_sim.engine.fold.topology_turns`) has a template that turns too: GPU g's
nodes are GPU 0's with their GPUs, peers and inputs turned. So GPU 0's tasks are compiled as
:func:`~ficco_sim.engine.closed_form.compile_graph` compiles any task (the same nodes, costs
and inputs, an input on GPU h named as (h, node)), and the other GPUs' nodes are made from
them with whole-array operations. Transfer costs need every GPU's transfers (who shares a
link in a step): they are GPU 0's turned, counted from GPU 0's by turning their routes.

The template is the whole graph's, nodes numbered GPU by GPU (GPU g's nodes at
``g * N0 ...``, each GPU's in the order GPU 0 made its tasks) where ``compile_graph``
numbers them in the graph's order: the same values node for node, as the tests check. It
carries no task list (:attr:`~ficco_sim.engine.closed_form.Template.tasks`): records come
from the whole graph's template.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from ..errors import InputError
from ..hardware import GpuProfile
from ..taskgraph import Kernel
from ..topology import Topology
from ..workload import Scenario
from .closed_form import SIG, Template, task_rows
from .closed_form_tables import NO_TUNE, comm_kernels, link_tables, memory_kernels, transfer_cost
from .closed_form_tiles import sources
from .dag_levels import LazyLevels, longest_path_levels, padded_levels
from .fold import Share
from .launch import host_issued, launch_delays, queued_turns


def compile_share(share: Share, gpu: GpuProfile, topo: Topology, scenario: Scenario | None = None) -> Template:
    """The template of the whole graph ``share`` is GPU 0's part of (see module docstring)."""
    if gpu.host is not None:
        raise InputError(gpu.path or gpu.name, "host", "a host device (the CPU replay's ranks sharing cores) has "
                         "no closed form; use the discrete-event engine (--engine des)")
    n, tasks, where = share.ranks, share.tasks, share.where
    if any(isinstance(t, Kernel) and t.waits for t in tasks):    # (the builder makes such graphs whole)
        raise ValueError("a share with rows waiting to arrive: compile the whole graph")
    costs, routes = _costs_of(share, gpu, topo)
    rows: list[tuple] = []          # (kind, gpu, const, coef, bytes, shape, dst, tune) per node of GPU 0
    add = rows.append
    shapes: dict = {}
    alone: dict = {}
    begin, end, ready, armed = [0] * len(tasks), [0] * len(tasks), [0] * len(tasks), {}
    sig_nodes: dict[int, list[int]] = {}
    sig_of: list[tuple[int, int, int]] = []     # (SIG node, producer's GPU, producer's place)
    launch = launch_delays(tasks, gpu)
    for j, t in enumerate(tasks):
        if t.signals:
            sig = []
            for kid, rows_share in t.signals:
                h, i = where[kid]
                sig.append(len(rows))
                sig_of.append((len(rows), h, i))
                add((SIG, 0, topo.path_latency(h, 0) if h else 0.0, rows_share, 0.0,
                     shapes.setdefault(tasks[i].gemm, len(shapes)), -1, NO_TUNE))
            sig_nodes[j] = sig
        ready[j], begin[j], end[j], arm = task_rows(t, gpu, topo, costs.get(j), rows, shapes, alone, launch)
        if arm is not None:
            armed[j] = arm
    N0 = len(rows)
    at = lambda x, nodes: where[x][0] * N0 + nodes[where[x][1]]  # noqa: E731  (a named task's node, GPU 0's frame)
    driven: dict[int, list[int]] = {}
    for j, t in enumerate(tasks):      # a kernel on GPU 0 drives GPU g's copy of transfer j when j's driver is on -g
        if not isinstance(t, Kernel):
            for d in t.drivers:
                h, i = where[d]
                driven.setdefault(i, []).append(((n - h) % n) * N0 + end[j])
    inputs: list[tuple[int, ...]] = [()] * N0
    for node, h, i in sig_of:
        inputs[node] = (h * N0 + begin[i],)
    last: dict = {}
    for j, t in enumerate(tasks):
        key = t.stream if isinstance(t, Kernel) or t.engine == "dma" else None
        prev = last.get(key) if key else None
        if key:
            last[key] = j
        pre = tuple(at(d, end) for d in t.deps) + ((end[prev],) if prev is not None else ()) + \
            tuple(sig_nodes.get(j, ()))
        if isinstance(t, Kernel):
            inputs[begin[j]] = pre
            if j in armed:
                inputs[armed[j]] = (begin[j],)
            inputs[end[j]] = (begin[j],) + tuple(driven.get(j, ()))
        else:
            inputs[ready[j]] = pre
            if t.engine == "sm":
                inputs[begin[j]] = (ready[j],) + tuple(at(d, armed) for d in t.drivers)
            inputs[end[j]] = (begin[j],)
    kind, gpu0, const, coef, nbytes, shape, dst0, tune = (np.array(c) for c in zip(*rows))
    turns = np.arange(n)[:, None]
    lens0 = np.fromiter(map(len, inputs), dtype=np.int64, count=N0)
    flat0 = np.fromiter((x for row in inputs for x in row), dtype=np.int64, count=int(lens0.sum()))
    lens = np.tile(lens0, n)
    flat = (((flat0 // N0 + turns) % n) * N0 + flat0 % N0).reshape(-1)
    # GPU g's node i lies as deep as GPU 0's (the graph turns onto itself), and the inputs
    # taken modulo one GPU's nodes form a DAG (a cycle there would turn into one in the graph)
    level0 = longest_path_levels(lens0, flat0 % N0)
    level = np.tile(level0, n)
    node = lambda local: (turns * N0 + np.asarray(local, dtype=np.int64)).reshape(-1)  # noqa: E731
    pick = lambda cond: [j for j, t in enumerate(tasks) if cond(t)]  # noqa: E731
    gemms = pick(lambda t: isinstance(t, Kernel) and t.kind == "gemm" and t.gemm is not None)
    comms = pick(lambda t: isinstance(t, Kernel) and t.kind == "comm")
    mems = pick(lambda t: isinstance(t, Kernel) and t.kind == "memory")
    xfers = pick(lambda t: not isinstance(t, Kernel))
    gpu_of = ((gpu0 + turns) % n).reshape(-1)
    dst_of = np.where(dst0 >= 0, (dst0 + turns) % n, -1).reshape(-1)
    gemm_nodes, gemm_begin = node([end[j] for j in gemms]), node([begin[j] for j in gemms])
    comm_nodes, comm_begin = node([end[j] for j in comms]), node([begin[j] for j in comms])
    prio = {s.name: s.priority for s in share.streams}
    per_gpu = lambda js, f: np.tile(np.array([f(j) for j in js], dtype=np.int64), n)  # noqa: E731
    on = lambda js: np.repeat(np.arange(n), len(js))  # noqa: E731
    pairs = np.array([(tasks[j].src, tasks[j].dst) for j in xfers], dtype=np.int64).reshape(-1, 2)
    turned = (pairs[None, :, :] + turns[:, :, None]) % n          # (GPU g, transfer, src/dst)
    code = turned[..., 0] * n + turned[..., 1]
    met, which = np.unique(code.reshape(-1), return_inverse=True)
    paths = [routes[(c // n, c % n)][0] for c in met.tolist()]
    source = {}
    for node_, h, i in sig_of:
        for g in range(n):
            source[g * N0 + node_] = ((h + g) % n) * N0 + end[i]
    return Template(
        ref=scenario, num_nodes=n * N0, levels=LazyLevels(lambda: padded_levels(lens, flat, level)),
        share_dag=(lens0, flat0 % N0, level0), kind=np.tile(kind, n),
        const=np.tile(const.astype(float), n), coef=np.tile(coef.astype(float), n),
        ref_bytes=np.tile(nbytes.astype(float), n), tune=np.tile(tune.astype(float).reshape(-1, 5), (n, 1)),
        gemm_shape=np.tile(shape.astype(np.int64), n),
        shapes=list(shapes), gpu_of=gpu_of.astype(np.int64), dst_of=dst_of.astype(np.int64),
        gemm_nodes=gemm_nodes, gemm_begin=gemm_begin, comm_nodes=comm_nodes, comm_begin=comm_begin,
        comm_grid=np.tile(np.array([tasks[j].grid for j in comms], dtype=float), n),
        xfer_nodes=node([end[j] for j in xfers]), xfer_begin=node([begin[j] for j in xfers]),
        comm_scale=scenario.spec.comm_scale if scenario is not None else ("m", "k"), tasks=None,
        places=np.array([begin, end], dtype=np.int64).T.reshape(-1, 2),
        **link_tables(paths, np.tile([costs[j][2] for j in xfers], n), topo, which.reshape(-1)),
        mem=memory_kernels([tasks[j] for j in mems] * n, node([end[j] for j in mems]), node([begin[j] for j in mems]),
                           gpu, gpu_of, gemm_nodes, level, gemm_begin),
        comm_kernels=comm_kernels([tasks[j] for j in comms] * n, [tasks[j] for j in gemms] * n, gpu,
                                  comm_begin, level, gemm_begin, gpus=(on(comms), on(gemms)),
                                  order=(per_gpu(comms, int), per_gpu(gemms, int)),
                                  priority=(per_gpu(comms, lambda j: prio[tasks[j].stream]),
                                            per_gpu(gemms, lambda j: prio[tasks[j].stream])),
                                  issued=host_issued(tasks), queued=queued_turns(tasks)),
        source=sources(source, n * N0))


def _costs_of(share: Share, gpu: GpuProfile, topo: Topology) -> tuple[dict[int, tuple], dict]:
    """:func:`_costs`, kept on the share; a share cut from another (its communication alone:
    the same transfers, GEMMs dropped) takes its parent's, renumbered."""
    def kept(s: Share):
        hit = s.memo.get("costs")
        return hit[2:] if hit is not None and hit[0] is gpu and hit[1] is topo else None

    got = kept(share)
    if got is None:
        parent = kept(share.cut_from[0]) if share.cut_from is not None else None
        if parent is not None:
            place = share.cut_from[1]
            got = ({place[j]: c for j, c in parent[0].items()}, parent[1])
        else:
            got = _costs(share, gpu, topo)
        share.memo["costs"] = (gpu, topo, *got)
    return got


def _costs(share: Share, gpu: GpuProfile, topo: Topology) -> tuple[dict[int, tuple], dict]:
    """:func:`~ficco_sim.engine.closed_form.transfer_costs` of GPU 0's transfers (by place),
    and the routes of every GPU pair met. Who shares a link in a step is counted over every
    GPU's transfers: GPU 0's, their routes turned by each g. A driver's transfers of a step
    are counted from GPU 0's: GPU g's copy of a transfer driven by place i on GPU h is
    driven by place i on GPU h + g, so each (place, step) counts GPU 0's transfers once."""
    n, tasks, where = share.ranks, share.tasks, share.where
    if any(isinstance(t, Kernel) and t.waits for t in tasks):    # (the builder makes such graphs whole)
        raise ValueError("a share with rows waiting to arrive: compile the whole graph")
    routes: dict[tuple[int, int], tuple[list, float]] = {}

    def route(a: int, b: int) -> tuple[list, float]:
        hit = routes.get((a, b))
        if hit is None:
            hit = routes[(a, b)] = (topo.path_links(a, b), topo.path_latency(a, b))
        return hit

    position: Counter = Counter()
    kinds: Counter = Counter()          # (pair, step, round) -> GPU 0's transfers
    chan: Counter = Counter()
    rows = []
    for j, t in enumerate(tasks):
        if isinstance(t, Kernel):
            continue
        step = t.step if t.step is not None else ("own", j)
        r = 0
        if t.engine == "dma":
            r = position[(t.stream, step)]
            position[(t.stream, step)] = r + 1
        if t.step is not None:
            kinds[((t.src, t.dst), step, r)] += 1
        if t.engine == "sm":
            chan[(where[t.drivers[0]][1], step)] += 1
        rows.append((j, t, step, r))
    orbit: dict[int, Counter] = {}      # d -> the links crossed by the routes of every pair (g, g + d)

    def turned(d: int) -> Counter:
        hit = orbit.get(d)
        if hit is None:
            hit = orbit[d] = Counter(lk for g in range(n) for lk in route(g, (g + d) % n)[0])
        return hit

    apart: defaultdict = defaultdict(Counter)    # (step, round) -> {d: GPU 0's transfers d apart}
    for ((a, b), step, r), count in kinds.items():      # a pair turned by every g is every pair d apart
        apart[(step, r)][(b - a) % n] += count
    bandwidth = {(u, v): bw for u, v, bw in topo.graph.edges(data="bandwidth")}
    load: dict = {}                     # (link, step, round) -> transfers of every GPU crossing it

    def sharers(lk, step, r) -> int:
        hit = load.get((lk, step, r))
        if hit is None:
            hit = load[(lk, step, r)] = sum(c * turned(d)[lk] for d, c in apart[(step, r)].items())
        return hit

    out = {}
    for j, t, step, r in rows:
        links, latency = route(t.src, t.dst)
        rates = [bandwidth[lk] / (sharers(lk, step, r) if t.step is not None else 1) for lk in links]
        if t.engine == "sm":
            i = where[t.drivers[0]][1]
            blocks, shared = tasks[i].grid, chan[(i, step)]
        else:
            blocks = shared = 0
        out[j] = transfer_cost(t, gpu, links, latency, rates, blocks, shared)
    for d in {(t.dst - t.src) % n for _, t, _, _ in rows}:     # every turned pair's route, for the link tables
        turned(d)
    return out, routes

