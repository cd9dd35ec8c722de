"""A short plain-Python closed-form evaluator: the oracle the vectorized engine is tested
against. One task at a time, by recursion over dependencies; the same rule as
``ficco_sim.engine.closed_form`` (alpha-beta per concurrency step in the first pass, then
two passes that share each link by the overlap seen in the pass before, the last one with
the contention rule; the GEMM cost), written as plainly as possible."""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict

from ficco_sim.contention import PROFILE, comm_slowdown, compute_slowdown, covered_excess, slowed_time
from ficco_sim.engine.closed_form import kernel_isolated_time
from ficco_sim.engine.closed_form import CONTENTION_PASSES, DAMP
from ficco_sim.engine.launch import launch_delays
from ficco_sim.gemm_model import block_needs, blocks_beside, blocks_per_sm, gemm_times, hbm_traffic, plan_gemm, waves_time
from ficco_sim.taskgraph import UNTUNED, Kernel, TaskGraph, Transfer


def _cover(a0, a1, spans):
    if a1 <= a0:
        return 0.0
    cov, cur = 0.0, a0
    for s, e in sorted(spans):
        s, e = max(s, cur), min(e, a1)
        if e > s:
            cov, cur = cov + e - s, e
    return cov / (a1 - a0)


def _factor(s: float, e: float, other: float, b_max: float, excess) -> float:
    """Slowdown factor of a run [s, e) of the contention-free pass (contention.slowed_time)."""
    if e <= s:
        return 1.0 + other
    return slowed_time(e - s, other, b_max, excess) / (e - s)


def hbm_slowed(gpu, s: float, e: float, other: float, xf, weights=PROFILE, run=None) -> float:
    """A GEMM run [s, e) beside transfers ``xf`` (((start, end), mean rate)): at each covered
    instant the rule's factor for the bytes all of them move, at their mean rate over the
    covered time of the slowed run; only transfers under way before its contention-free end."""
    xf = [((a, b), r) for (a, b), r in xf if a < e * (1 - 1e-9)]
    spans = [x for x, _ in xf]

    def excess(t: float) -> float:
        w = _cover(s, s + t, spans) * t
        moved = sum(max(0.0, min(s + t, b) - max(s, a)) * r for (a, b), r in xf)
        return covered_excess(w, compute_slowdown(gpu, moved / w if w > 0 else 0.0, weights=weights) - 1.0)

    b_max = compute_slowdown(gpu, sum(r for _, r in xf), weights=weights) - 1.0 if any(a < e and b > s for (a, b), _ in xf) else 0.0
    return _factor(s, e if run is None else s + run, other, b_max, excess)


def _duration(gpu, k: Kernel) -> float:
    if k.gemm is None:
        return kernel_isolated_time(gpu, k, launch=False)
    g = k.gemm
    return float(gemm_times(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate,
                            sms=g.sms))


def _memory_hold(gpu, k: Kernel, s: float, gemms):
    """How a memory kernel starting at ``s`` shares SMs with the GEMMs ``gemms`` ((start, end,
    kernel)) of its GPU in a pass: None, or (the latest-ending GEMM running at ``s``, its
    share of its time before its last wave, the kernel's speed while that GEMM has blocks to
    place and in its last wave)."""
    running = [x for x in gemms if x[0] <= s < x[1]]
    if not running:
        return None
    a, b, x = max(running, key=lambda r: r[1])
    g = x.gemm
    plan = plan_gemm(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate, sms=g.sms)
    S, occ = g.sms or gpu.num_sms, plan.occupancy     # the GEMM's SMs (an SM margin leaves the rest empty)
    waves = math.ceil(plan.grid / (S * occ))
    last = plan.grid - (waves - 1) * S * occ
    alone = kernel_isolated_time(gpu, k, launch=False)

    def speed(blocks):
        slots = _slots_beside(gpu, k, plan, S, blocks)
        return alone / waves_time(gpu, k.grid, slots, k.block_time, k.block_hbm_bytes, sms=1) if slots > 0 else 0.0

    return x.id, _last_wave_at(gpu, plan, S), speed(min(plan.grid, S * occ)), speed(last)


def _last_wave_at(gpu, plan, S: int) -> float:
    """Share of a GEMM's time before its last wave starts: its full waves' time over all its
    waves' (a partial last wave moves fewer bytes, so it may be the shorter one)."""
    occ = plan.occupancy
    waves = math.ceil(plan.grid / (S * occ))
    t = lambda blocks: float(waves_time(gpu, blocks, occ, plan.block_time, plan.block_hbm_bytes,  # noqa: E731
                                        sms=S, gemm=True))
    return t((waves - 1) * S * occ) / t(plan.grid)


def _slots_beside(gpu, k: Kernel, plan, S: int, blocks: int) -> int:
    """Slots for ``k``'s blocks on a GPU whose S SMs hold ``blocks`` of a GEMM's blocks spread
    evenly (some SMs one more than the others), the other SMs empty."""
    q, r = divmod(blocks, S)

    def beside(held: int) -> int:
        return int(blocks_beside(gpu.sm, block_needs(gpu.sm, k.block), block_needs(gpu.sm, plan.block), held))

    own = blocks_per_sm(gpu.sm, k.block)
    if blocks < S:
        return (gpu.num_sms - blocks) * own + blocks * beside(1)
    return (gpu.num_sms - S) * own + r * beside(q + 1) + (S - r) * beside(q)


def _shared_time(alone: float, s: float, a: float, dur: float, last_at: float, f1: float, f2: float) -> float:
    """A memory kernel's time from ``s`` beside a GEMM running [a, a + dur): speed ``f1``
    until its last wave starts (at ``last_at`` of its run), ``f2`` in it, then alone."""
    split = a + dur * last_at
    d1, d2 = max(0.0, split - s), a + dur - max(split, s)
    w1, w2 = d1 * f1, d2 * f2
    if w1 >= alone:
        return alone / f1
    if w1 + w2 >= alone:
        return d1 + (alone - w1) / f2
    return d1 + d2 + alone - w1 - w2


def _comm_hold(gpu, k: Kernel, s: float, gemms, priority: int):
    """How a communication kernel launched at ``s`` waits beside the GEMMs ``gemms`` ((start,
    end, kernel, stream priority)) of its GPU in a pass: None (it starts at once), or (the
    GEMM holding it back, the share of its run a full wave takes, the share of its run to wait
    for, or None: until its next wave ends)."""
    running = [x for x in gemms if x[0] <= s < x[1]]
    if not running:
        return None
    a, b, x, prio = max(running, key=lambda r: r[1])
    g = x.gemm
    plan = plan_gemm(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate, sms=g.sms)
    S, occ = g.sms or gpu.num_sms, plan.occupancy
    waves = math.ceil(plan.grid / (S * occ))
    last = plan.grid - (waves - 1) * S * occ
    blocks = min(plan.grid, S * occ)
    if _slots_beside(gpu, k, plan, S, blocks) > 0:
        return None
    lightest = blocks // S          # the SMs holding fewest of its blocks (blocks >= S here)
    handoff = blocks_beside(gpu.sm, block_needs(gpu.sm, k.block), block_needs(gpu.sm, plan.block), lightest - 1) > 0
    last_at = _last_wave_at(gpu, plan, S)
    wave = last_at / (waves - 1) if waves > 1 else 1.0
    if priority > prio and handoff and not g.persistent:   # one retiring block makes room: the next wave's slots
        return x.id, wave, None
    return x.id, wave, last_at if _slots_beside(gpu, k, plan, S, last) > 0 else 1.0


def _order(graph: TaskGraph) -> tuple[dict, dict]:
    """Each task's predecessor on its stream, and the SM transfers each kernel drives."""
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
    return prev, driven


def _depths(graph: TaskGraph) -> dict[str, int]:
    """Longest-path depth of every kernel's begin and end in the engine's node DAG (a GEMM may
    hold a communication kernel back only if its begin is shallower than the kernel's, or as
    deep and issued before it, and
    share SMs with a memory kernel only if its begin is shallower than the kernel's end)."""
    prev, driven = _order(graph)
    memo: dict = {}

    def depth(tid: str, node: str) -> int:
        if (tid, node) not in memo:
            t = graph.task(tid)
            pre = [("end", d) for d in t.deps] + ([("end", prev[tid])] if prev[tid] else [])
            if node == "ready" or (node == "begin" and (isinstance(t, Kernel) or t.engine == "dma")):
                ins = pre
            elif node == "begin":
                ins = [("ready", tid)] + [("begin", d) for d in t.drivers]
            else:
                ins = [("begin", tid)] + [("end", x) for x in driven.get(tid, [])]
            memo[(tid, node)] = 1 + max([depth(x, n) for n, x in ins] + [0])
        return memo[(tid, node)]

    return {(k.id, n): depth(k.id, n) for k in graph.kernels for n in ("begin", "end")}


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

    def sharers(t: Transfer, link) -> float:
        """Static: the transfers of its step and round on ``link``."""
        return share[(link, step[t.id], rnd[t.id])]

    def cap(t: Transfer) -> tuple[float, float, float, float]:
        """(bound on its rate the links share around: engine or its kernel's channels, and HBM;
        the tuned channels' bound, applied after the sharing; fixed cost; wire bytes)."""
        bw, tuned, fixed, wire = float("inf"), float("inf"), 0.0, t.nbytes
        if t.engine == "dma":
            bw, fixed = gpu.dma.cap(t.src, t.dst), gpu.dma.command_overhead
        else:
            k, spec = graph.kernel(t.drivers[0]), gpu.comm_kernel
            kernel_share = k.grid * spec.channel_bandwidth / chan[(k.id, step[t.id])]
            call, ranks, steps = t.tune or UNTUNED
            p, c = (float(v) for v in spec.tuned(t.nbytes, call, ranks, k.grid, steps))     # NCCL's tuner, the one rule
            bw = kernel_share
            if c < k.grid:      # fewer channels: a grouped send's own, or that share of a ring step's kernel
                tuned = c * spec.channel_bandwidth if call == 0 and ranks > 0 else kernel_share * c / k.grid
            proto = spec.protocols[int(p)]
            wire = t.nbytes / proto.efficiency
            fixed = proto.latency + float(spec.p2p_fill(wire, call, ranks, c))
        return min(bw, gpu.hbm_effective / (2 if t.src == t.dst else 1)), tuned, fixed, wire

    shared = {}

    def rates(seen) -> dict[str, float]:
        """Every transfer's rate from the spans of the pass before (``seen``): each link divided
        by the time-averaged count of transfers on it over the transfer's span (at least one),
        then, twice, raised to what the others leave of the link at their rates (their rates
        times their overlap with the span, over the span: max-min, a transfer held back
        elsewhere leaves its share), never below the count's share; capped by :func:`cap`'s
        bound (the tuned channels come after, in :func:`xfer_time`)."""
        if shared.get("seen") is seen:
            return shared["rates"]
        ids = [t.id for t in graph.transfers]
        bound = {t.id: cap(t)[0] for t in graph.transfers}
        links = {t.id: topo.path_links(t.src, t.dst) for t in graph.transfers}

        def over(a, b) -> float:
            return max(0.0, min(seen[a][1], seen[b][1]) - max(seen[a][0], seen[b][0]))

        def span(a) -> float:
            return seen[a][1] - seen[a][0]

        part = {}
        for a in ids:
            for lk in links[a]:
                conc = sum(over(a, u) for u in on_link[lk]) / span(a) if span(a) > 0 else 1.0
                part[(a, lk)] = topo.graph.edges[lk]["bandwidth"] / max(1.0, conc)
        rate = {a: min([part[(a, lk)] for lk in links[a]] + [bound[a]]) for a in ids}
        for _ in range(2):
            left = {}
            for a in ids:
                for lk in links[a]:
                    others = sum(rate[u] * over(a, u) for u in on_link[lk]) / span(a) - rate[a] if span(a) > 0 else 0.0
                    left[(a, lk)] = max(part[(a, lk)], topo.graph.edges[lk]["bandwidth"] - max(others, 0.0))
            part = left
            rate = {a: min([part[(a, lk)] for lk in links[a]] + [bound[a]]) for a in ids}
        shared.update(seen=seen, rates=rate)
        return rate

    def xfer_time(t: Transfer, slow: float, seen) -> float:
        bound, tuned, fixed, wire = cap(t)
        if seen is None:
            bw = min([topo.graph.edges[lk]["bandwidth"] / sharers(t, lk) for lk in topo.path_links(t.src, t.dst)]
                     + [bound])
        else:
            bw = rates(seen)[t.id]
        return fixed + topo.path_latency(t.src, t.dst) + wire * (1.0 / min(bw, tuned)) * slow

    prev, driven = _order(graph)
    task_order = {t.id: i for i, t in enumerate(graph.tasks)}
    delay = launch_delays(graph.tasks, gpu)      # the engines' one rule: launches in issue order

    def one_pass(slow: dict[str, float], seen=None, hold=None, share=None, wait=None) -> dict[str, tuple[float, float]]:
        start, end = {}, {}

        def begin(tid):
            if tid not in start:
                t = graph.task(tid)
                ready = max([finish(d) for d in t.deps] + ([finish(prev[tid])] if prev[tid] else []) + [0.0])
                if isinstance(t, Kernel):
                    start[tid] = ready + delay[tid] + (wait or {}).get(tid, 0.0)
                    how = (hold or {}).get(tid)
                    if how is not None:
                        a = begin(how[0])
                        dur = _duration(gpu, graph.task(how[0])) * slow.get(how[0], 1.0)
                        tie = abs(a - start[tid]) <= 1e-12 * max(abs(start[tid]), 1e-9)
                        before = (a < start[tid] and not tie) or (tie and task_order[how[0]] < task_order[tid])
                        if before and start[tid] < a + dur:
                            wave = dur * how[1]
                            rel = a + how[2] * dur if how[2] is not None else \
                                min(a + math.ceil((start[tid] - a) / wave) * wave, a + dur)
                            start[tid] = max(start[tid], rel)
                elif t.engine == "sm":   # after the driving kernels' handshake
                    start[tid] = max([ready] + [begin(k) + gpu.handshake_of("comm") for k in t.drivers])
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
                    how = (share or {}).get(tid)
                    if how is not None:
                        a = begin(how[0])
                        dur = _duration(gpu, graph.task(how[0])) * slow.get(how[0], 1.0)
                        if a <= s < a + dur:
                            end[tid] = s + _shared_time(_duration(gpu, t), s, a, dur, *how[1:])
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
        gemms = [k for k in graph.kernels if k.kind == "gemm" and k.gemm is not None]
        depth = _depths(graph)

        def gemm_slowdowns(times, slow, before):
            """Every GEMM's factor from a pass; with ``before`` (the factors that made it) its run
            is its duration alone and the new factor is damped."""
            for k in gemms:
                s, e = times[k.id]
                comm = [(times[c.id], c.grid) for c in graph.kernels if c.kind == "comm" and c.gpu == k.gpu]
                xf = [(times[t.id], t.nbytes / (times[t.id][1] - times[t.id][0])) for t in graph.transfers
                      if k.gpu in (t.src, t.dst) and times[t.id][1] > times[t.id][0]]
                held = max([g for (a, b), g in comm if a < e and b > s] + [0])
                cover = _cover(s, e, [x for x, _ in comm])
                other = compute_slowdown(gpu, 0.0, held_sms=float(held), sm_cover=cover, resident_cover=cover) - 1.0
                fresh = hbm_slowed(gpu, s, e, other, xf, run=None if before is None else _duration(gpu, k))
                slow[k.id] = fresh if before is None else DAMP * fresh + (1 - DAMP) * before.get(k.id, 1.0)

        def transfer_slowdowns(times, slow):
            for t in graph.transfers:
                s, e = times[t.id]
                near = []
                for k in gemms:
                    if k.gpu in (t.src, t.dst):
                        a, b = times[k.id]
                        g = k.gemm
                        near.append(((a, b), hbm_traffic(g.m, g.n, g.k, g.dtype, g.accumulate) / (b - a) if b > a else 0.0))
                rate = max([r for (a, b), r in near if a < e and b > s] + [0.0])
                b = comm_slowdown(gpu, rate) - 1.0 if _cover(s, e, [x for x, _ in near]) > 0 else 0.0
                slow[t.id] = _factor(s, e, 0.0, b, lambda t, s=s, b=b, spans=[x for x, _ in near]:
                                     covered_excess(_cover(s, s + t, spans) * t, b))

        def holds(times):
            """Memory kernels sharing SMs with a GEMM, communication kernels held back by one."""
            share = {k.id: _memory_hold(gpu, k, times[k.id][0], [(*times[x.id], x) for x in gemms if x.gpu == k.gpu and
                                                                 depth[(x.id, "begin")] < depth[(k.id, "end")]])
                     for k in graph.kernels if k.kind == "memory"}
            prio = {(x.gpu, x.name): x.priority for x in graph.streams}
            order = {t.id: i for i, t in enumerate(graph.tasks)}
            hold = {k.id: _comm_hold(gpu, k, times[k.id][0], [(*times[x.id], x, prio[(x.gpu, x.stream)]) for x in gemms
                                                              if x.gpu == k.gpu and
                                                              (depth[(x.id, "begin")], order[x.id]) <
                                                              (depth[(k.id, "begin")], order[k.id])],
                                     prio[(k.gpu, k.stream)])
                    for k in graph.kernels if k.kind == "comm"}
            return hold, share

        def waits(times, slow, share, waited):
            """GEMMs issued while a memory kernel of their GPU holds the SMs wait for it to end
            (``waited``: the waits the pass had, taken off its GEMMs' begins)."""
            wait: dict[str, float] = {}
            issued = {y.id: times[y.id][0] - (waited or {}).get(y.id, 0.0) for y in gemms}
            for k in graph.kernels:      # a memory kernel keeps its SMs until it ends
                if k.kind != "memory":
                    continue
                s, end = times[k.id]
                if share[k.id] is not None:
                    x = graph.task(share[k.id][0])
                    a, dur = times[x.id][0], _duration(gpu, x) * slow.get(x.id, 1.0)
                    if a <= s < a + dur:
                        end = s + _shared_time(_duration(gpu, k), s, a, dur, *share[k.id][1:])
                inside = [y for y in gemms if y.gpu == k.gpu and s < issued[y.id] < end]
                if not inside:
                    continue
                y = min(inside, key=lambda y: (issued[y.id], gemms.index(y)))
                g = y.gemm
                plan = plan_gemm(gpu, g.m, g.n, g.k, g.dtype, extra_smem=g.extra_smem, accumulate=g.accumulate, sms=g.sms)
                per_sm = min(blocks_per_sm(gpu.sm, k.block), math.ceil(k.grid / gpu.num_sms))
                if blocks_beside(gpu.sm, block_needs(gpu.sm, plan.block), block_needs(gpu.sm, k.block), per_sm) == 0:
                    wait[y.id] = max(wait.get(y.id, 0.0), end - issued[y.id])
            return wait

        # the first contention pass from the pass without contention (whose holds are kept); then
        # the GEMMs' slowdowns again from the pass contention made, damped; link shares kept
        seen = times if graph.transfers else None
        slow: dict[str, float] = {}
        gemm_slowdowns(times, slow, None)
        transfer_slowdowns(times, slow)
        hold, share = holds(times)
        wait = waits(times, slow, share, None)
        times = one_pass(slow, seen, hold, share, wait)
        for _ in range(CONTENTION_PASSES - 1):
            gemm_slowdowns(times, slow, dict(slow))
            wait = waits(times, slow, share, wait)
            times = one_pass(slow, seen, hold, share, wait)
        return times
    finally:
        sys.setrecursionlimit(old)
