"""A short plain-Python closed-form evaluator: the oracle the vectorized engine is tested
against. One task at a time, by recursion over dependencies; the same rule as
``ficco_sim.engine.closed_form`` (alpha-beta per concurrency step in the first pass, then
two passes that share each link by the overlap seen in the pass before, the last one with
the contention rule; the GEMM cost), written as plainly as possible."""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict

from ficco_sim.contention import comm_slowdown, compute_slowdown
from ficco_sim.engine.closed_form import kernel_isolated_time
from ficco_sim.gemm_model import block_needs, blocks_beside, blocks_per_sm, gemm_times, hbm_traffic, plan_gemm, waves_time
from ficco_sim.taskgraph import Kernel, TaskGraph, Transfer


def _cover(a0, a1, spans):
    if a1 <= a0:
        return 0.0
    cov, cur = 0.0, a0
    for s, e in sorted(spans):
        s, e = max(s, cur), min(e, a1)
        if e > s:
            cov, cur = cov + e - s, e
    return cov / (a1 - a0)


def _duration(gpu, k: Kernel) -> float:
    if k.gemm is None:
        return kernel_isolated_time(gpu, k, launch=False)
    g = k.gemm
    return float(gemm_times(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate))


def _memory_slowdown(gpu, k: Kernel, s: float, gemms) -> float:
    """A memory kernel starting at ``s`` beside the GEMMs ``gemms`` ((start, end, shape)):
    the latest-ending one running at ``s`` leaves it SMs in two phases (blocks still to
    place, then the last wave); then the whole GPU."""
    running = [(a, b, g) for a, b, g in gemms if a <= s < b]
    if not running:
        return 1.0
    a, b, g = max(running, key=lambda x: x[1])
    plan = plan_gemm(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate)
    S, occ = gpu.num_sms, plan.occupancy
    waves = math.ceil(plan.grid / (S * occ))
    last = plan.grid - (waves - 1) * S * occ
    split = a + (b - a) * (waves - 1) / waves
    d1, d2 = max(0.0, split - s), b - max(split, s)
    alone = kernel_isolated_time(gpu, k, launch=False)
    own = blocks_per_sm(gpu.sm, k.block)

    def speed(used, count):
        beside = int(blocks_beside(gpu.sm, block_needs(gpu.sm, k.block), block_needs(gpu.sm, plan.block), count))
        slots = (S - used) * own + used * beside
        return alone / waves_time(gpu, k.grid, slots, k.block_time, k.block_hbm_bytes, sms=1) if slots > 0 else 0.0

    f1 = speed(min(S, plan.grid), min(occ, math.ceil(plan.grid / S)))
    f2 = speed(min(S, last), min(occ, math.ceil(last / S)))
    w1, w2 = d1 * f1, d2 * f2
    if w1 >= alone:
        t = alone / f1
    elif w1 + w2 >= alone:
        t = d1 + (alone - w1) / f2
    else:
        t = d1 + d2 + alone - w1 - w2
    return t / alone if alone > 0 else 1.0


def reference(graph: TaskGraph, gpu, topo, contention: bool = True) -> dict[str, tuple[float, float]]:
    """(start, end) of every task."""
    step = {t.id: t.step if t.step is not None else ("own", t.id) for t in graph.transfers}
    rnd, pos, share, chan = {}, Counter(), Counter(), Counter()
    for t in graph.transfers:
        rnd[t.id] = 0
        if t.engine == "dma":
            rnd[t.id] = pos[(t.gpu, t.stream, step[t.id])]
            pos[(t.gpu, t.stream, step[t.id])] += 1
        for link in topo.path_links(t.src, t.dst):
            share[(link, step[t.id], rnd[t.id])] += 1
        if t.engine == "sm":
            chan[(t.drivers[0], step[t.id])] += 1

    on_link = defaultdict(list)
    for t in graph.transfers:
        for link in topo.path_links(t.src, t.dst):
            on_link[link].append(t.id)

    def sharers(t: Transfer, link, seen) -> float:
        """Static: the transfers of its step and round on ``link``; else the time-averaged
        count over its span in the pass before (``seen``)."""
        if seen is None:
            return share[(link, step[t.id], rnd[t.id])]
        s, e = seen[t.id]
        if e <= s:
            return 1.0
        over = sum(max(0.0, min(e, seen[u][1]) - max(s, seen[u][0])) for u in on_link[link])
        return max(1.0, over / (e - s))

    def xfer_time(t: Transfer, slow: float, seen) -> float:
        bw = min([topo.graph.edges[lk]["bandwidth"] / sharers(t, lk, seen)
                  for lk in topo.path_links(t.src, t.dst)] + [float("inf")])
        fixed, wire = 0.0, t.nbytes
        if t.engine == "dma":
            bw, fixed = min(bw, gpu.dma.cap(t.src, t.dst)), gpu.dma.command_overhead
        else:
            k = graph.kernel(t.drivers[0])
            bw = min(bw, k.grid * gpu.comm_kernel.channel_bandwidth / chan[(k.id, step[t.id])])
            proto = gpu.comm_kernel.protocols[gpu.comm_kernel.protocol_index(t.nbytes)]
            fixed, wire = proto.latency, t.nbytes / proto.efficiency
        bw = min(bw, gpu.hbm_effective / (2 if t.src == t.dst else 1))
        return fixed + topo.path_latency(t.src, t.dst) + wire * (1.0 / bw) * slow

    prev, last = {}, {}
    for t in graph.tasks:
        key = graph.stream_of(t)
        prev[t.id] = last.get(key) if key else None
        if key:
            last[key] = t.id
    driven = defaultdict(list)
    for t in graph.transfers:
        for k in t.drivers:
            driven[k].append(t.id)

    def one_pass(slow: dict[str, float], seen=None) -> dict[str, tuple[float, float]]:
        start, end = {}, {}

        def begin(tid):
            if tid not in start:
                t = graph.task(tid)
                ready = max([finish(d) for d in t.deps] + ([finish(prev[tid])] if prev[tid] else []) + [0.0])
                if isinstance(t, Kernel):
                    start[tid] = ready + gpu.launch_of(t.kind)
                elif t.engine == "sm":
                    start[tid] = max([ready] + [begin(k) for k in t.drivers])
                else:
                    start[tid] = ready
            return start[tid]

        def finish(tid):
            if tid not in end:
                t = graph.task(tid)
                s = begin(tid)
                if isinstance(t, Kernel) and t.kind == "comm":
                    end[tid] = max([s] + [finish(x) for x in driven[tid]])
                elif isinstance(t, Kernel):
                    end[tid] = s + _duration(gpu, t) * slow.get(tid, 1.0)
                else:
                    end[tid] = s + xfer_time(t, slow.get(tid, 1.0), seen)
            return end[tid]

        for t in graph.tasks:
            finish(t.id)
        return {t: (start[t], end[t]) for t in start}

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20 * len(graph.tasks) + 1000))
    try:
        times = one_pass({})
        if graph.transfers:
            times = one_pass({}, times)
        if not contention:
            return one_pass({}, times) if graph.transfers else times
        slow = {}
        gemms = [k for k in graph.kernels if k.kind == "gemm" and k.gemm is not None]
        for k in gemms:
            s, e = times[k.id]
            comm = [(times[c.id], c.grid) for c in graph.kernels if c.kind == "comm" and c.gpu == k.gpu]
            xf = [(times[t.id], t.nbytes / (times[t.id][1] - times[t.id][0])) for t in graph.transfers
                  if k.gpu in (t.src, t.dst) and times[t.id][1] > times[t.id][0]]
            held = max([g for (a, b), g in comm if a < e and b > s] + [0])
            rate = max([r for (a, b), r in xf if a < e and b > s] + [0.0])
            slow[k.id] = compute_slowdown(gpu, rate, held_sms=float(held), sm_cover=_cover(s, e, [x for x, _ in comm]),
                                          hbm_cover=_cover(s, e, [x for x, _ in xf]))
        for k in graph.kernels:
            if k.kind == "memory":
                slow[k.id] = _memory_slowdown(gpu, k, times[k.id][0], [(*times[x.id], x.gemm) for x in gemms
                                                                        if x.gpu == k.gpu])
        for t in graph.transfers:
            s, e = times[t.id]
            near = []
            for k in gemms:
                if k.gpu in (t.src, t.dst):
                    a, b = times[k.id]
                    g = k.gemm
                    near.append(((a, b), hbm_traffic(g.m, g.n, g.k, g.dtype, g.accumulate) / (b - a) if b > a else 0.0))
            rate = max([r for (a, b), r in near if a < e and b > s] + [0.0])
            slow[t.id] = comm_slowdown(gpu, rate, cover=_cover(s, e, [x for x, _ in near]))
        return one_pass(slow, times if graph.transfers else None)
    finally:
        sys.setrecursionlimit(old)
