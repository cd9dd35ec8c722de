"""The closed-form engine's SM and link rules, from the overlaps of a pass: how memory and
communication kernels share SMs with a GEMM running at their start (:func:`memory_hold`,
:func:`comm_release`: the slots its blocks leave them), how GEMMs wait for the SMs a memory
kernel holds (:func:`gemm_waits`), and the link shares of the next pass
(:func:`link_coefs`); the spans and member lists the contention rule
(:mod:`.closed_form_contention`) reads too.

All GPUs at once: members are gathered through padded index lists
(:class:`~.closed_form_tables.Groups`;
padding gathers an empty span at +inf) and merged into disjoint spans once per GPU (per
source/destination pair).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..gemm_model import blocks_beside, hands_off, waves_time
from ..hardware import GpuProfile
from ..schedules.builder import reduce_grid

if TYPE_CHECKING:
    from .closed_form import Template


@dataclass
class MemKernels:
    """A template's memory kernels (reductions and other bandwidth-bound SM work; a symmetry
    quotient keeps one per class): end and begin nodes, blocks at the reference sizes
    (scaled with the communicated shape), each block's time, HBM bytes and SM needs
    (:func:`~ficco_sim.gemm_model.block_needs`), its occupancy on an empty SM, and GEMMs of
    its GPU (positions in ``gemm_nodes``, padded with their count): those it may share SMs
    with, and, through its GPU's row of one table, all of them."""

    nodes: np.ndarray
    begin: np.ndarray
    grid: np.ndarray
    block_time: np.ndarray
    block_hbm: np.ndarray
    need: np.ndarray            # (M, 4)
    occupancy: np.ndarray
    gemms: np.ndarray           # (M, Wg) those it may share SMs with in a pass (see memory_kernels)
    gpu_row: np.ndarray         # (M,) its GPU's row in gpu_gemms
    gpu_gemms: np.ndarray       # (U, Wa) every GEMM of each GPU (shared by the GPU's kernels)
    elems: np.ndarray           # a reduction's elements per input at the reference sizes (NaN: unknown)
    blocks: list                # the distinct BlockShapes
    block_ix: np.ndarray        # each kernel's, as an index into blocks


@dataclass
class CommKernels:
    """A template's communication kernels for the dispatch rule of :func:`comm_release`:
    begin nodes (in ``comm_nodes`` order; a symmetry quotient keeps one kernel per class),
    each block's SM needs, occupancy on an empty SM, stream priority, the GEMMs of its GPU
    (positions in ``gemm_nodes``, padded with their count), the GEMMs' stream priorities and
    persistence; ``order``, ``issued`` (host-issued with nothing to wait for) and the GEMMs': which of
    two kernels reaching the SMs at one instant is dispatched first."""

    begin: np.ndarray           # (C,)
    need: np.ndarray            # (C, 4)
    occupancy: np.ndarray
    priority: np.ndarray
    gemms: np.ndarray           # (C, Wg)
    gemm_priority: np.ndarray   # (G,)
    order: np.ndarray           # (C,)
    gemm_order: np.ndarray      # (G,)
    gemm_persistent: np.ndarray  # (G,) bool
    issued: np.ndarray          # (C,) bool
    gemm_issued: np.ndarray     # (G,) bool
    queued: np.ndarray          # (C,) bool: its turn comes as its stream predecessor ends
    gemm_queued: np.ndarray     # (G,) bool


def join_keys(row_keys: np.ndarray, col_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of every pair with ``row_keys[row] == col_keys[col]``, distinct and sorted
    by row, then column (the stable sort keeps equal keys' columns ascending), as
    :func:`padded_lists` takes them ``ordered``.

    >>> [x.tolist() for x in join_keys(np.array([2, 1]), np.array([1, 2, 1]))]
    [[0, 1, 1], [1, 0, 2]]
    """
    order = np.argsort(col_keys, kind="stable")
    ranked = col_keys[order]
    lo = np.searchsorted(ranked, row_keys, "left")
    counts = np.searchsorted(ranked, row_keys, "right") - lo
    rows = np.repeat(np.arange(len(row_keys)), counts)
    pos = np.arange(int(counts.sum())) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return rows, order[pos]


def join_either(keys: np.ndarray, a: np.ndarray, b: np.ndarray, *,
                by_col: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pairs matching ``keys`` against ``a`` or ``b`` (columns when ``by_col``, else rows)."""
    if by_col:
        (r1, c1), (r2, c2) = join_keys(keys, a), join_keys(keys, b)
    else:
        (c1, r1), (c2, r2) = join_keys(keys, a), join_keys(keys, b)
    return np.concatenate([r1, r2]), np.concatenate([c1, c2])


def padded_lists(rows: np.ndarray, cols: np.ndarray, R: int, B: int, *, ordered: bool = False) -> np.ndarray:
    """Each row's distinct columns among the pairs (rows, cols), ascending, as an (R, width)
    matrix padded with ``B`` (a sentinel column); ``ordered``: the pairs are already distinct
    and sorted by row, then column (as ``np.nonzero`` gives them).

    >>> padded_lists(np.array([1, 0, 0, 0]), np.array([1, 2, 0, 2]), 2, 3).tolist()
    [[0, 2], [1, 3]]
    """
    if not ordered:
        key = np.unique(rows.astype(np.int64) * (B + 1) + cols)     # by row, then column
        rows, cols = key // (B + 1), key % (B + 1)
    counts = np.bincount(rows, minlength=R)
    width = max(1, int(counts.max())) if len(rows) else 1
    out = np.full((R, width), B, dtype=np.int64)
    first = np.cumsum(counts) - counts
    out[rows, np.arange(len(rows)) - first[rows]] = cols
    return out


def disjoint(starts: np.ndarray, ends: np.ndarray, sorted_starts: bool = False):
    """Spans (..., B) rewritten as disjoint spans with the same union (sorted by start, empty
    ones allowed): span i keeps only what lies past the ends of the spans before it, so the
    first j of them are the union of the j spans that start first. ``sorted_starts``: also
    return the starts in that order.

    >>> lo, hi = disjoint(np.array([[0.0, 1.0, 5.0]]), np.array([[2.0, 3.0, 6.0]]))
    >>> float((hi - lo).sum())
    4.0
    """
    order = np.argsort(starts, axis=-1)
    a = np.take_along_axis(starts, order, -1)
    b = np.take_along_axis(ends, order, -1)
    run = np.maximum.accumulate(b, axis=-1)
    prev = np.concatenate([np.full(a[..., :1].shape, -np.inf), run[..., :-1]], axis=-1)
    return (np.maximum(a, prev), np.maximum(b, prev)) + ((a,) if sorted_starts else ())


def covered(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (P, A): fraction of [s, e) covered by disjoint spans (P, A, B)."""
    cov = np.maximum(0.0, np.minimum(e[..., None], hi) - np.maximum(s[..., None], lo)).sum(-1)
    width = e - s
    return np.where(width > 0, cov / np.where(width > 0, width, 1.0), 0.0)


def _pad(x: np.ndarray, fill: float) -> np.ndarray:
    """``x`` (P, B) with one more column of ``fill`` (what sentinel indices gather)."""
    return np.concatenate([x, np.full((x.shape[0], 1), fill)], axis=1)


LEFTOVER_ROUNDS = 2      # max-min passes after the count: what the others leave of a link at their rates
SWEEP_CELLS = 4_000_000   # (scenario, link event) cells swept at once (~32 MB each array)


def link_coefs(tpl: "Template", vals: np.ndarray) -> np.ndarray:
    """(P, targets) seconds per byte of the target transfers from the spans of a pass
    ``vals``: each link of the path is divided by the time-averaged number of transfers on
    it over the target's span (itself included, at least one), the result capped by the
    transfer's engine/channel/HBM bound (:attr:`Template.xfer_cap`); then, :data:`LEFTOVER_ROUNDS`
    times, each share is raised to what the others leave of the link at their rates (their
    rates times their overlap with the span, over the span), never lowered: max-min sharing on
    average, a transfer held back elsewhere leaving its share to the rest (a ring's later steps
    crossing a slow bridge while its first one still does).

    The average over [s, e) is (F(e) - F(s)) / (e - s), where F(t) integrates the link's
    transfer count (or, for the others' load, their rates) up to t. F is swept once per link
    and pass: the starts and ends of the link's transfers in time order, the count stepping
    +1 / -1 (or +rate / -rate) at each (ties add nothing, as F is continuous), so the cost
    grows with the link's transfers, not their square."""
    tx = np.arange(len(tpl.xfer_nodes)) if tpl.xfer_targets is None else tpl.xfer_targets
    links = tpl.xfer_links
    if "crossings" not in tpl.level_cache:
        tpl.level_cache["crossings"] = _crossings(links, len(tpl.link_bw) - 1)
    x_of, crossing, ev_link = tpl.level_cache["crossings"]
    out = np.empty((len(vals), len(tx)))
    step = max(1, SWEEP_CELLS // max(1, len(ev_link)))
    i = np.maximum(crossing, 0)                                            # (X, Lmax); crossing -1: none
    bw = np.where(crossing >= 0, tpl.link_bw[links], np.inf)
    for a in range(0, len(vals), step):
        s = vals[a:a + step, tpl.xfer_begin]
        e = np.maximum(vals[a:a + step, tpl.xfer_nodes], s)
        t = np.concatenate([s[:, x_of], e[:, x_of]], axis=1)
        rows, C = np.arange(len(s))[:, None, None], len(x_of)
        span = (e - s)[:, :, None]
        pos = span > 0
        F = _swept(t, ev_link)
        conc = np.where(pos, (F[rows, i + C] - F[rows, i]).astype(float) / np.where(pos, span, 1.0), 1.0)
        share = bw / np.maximum(conc, 1.0)
        rate = np.minimum(share.min(-1), tpl.xfer_cap)
        for _ in range(LEFTOVER_ROUNDS):
            W = _swept(t, ev_link, rate[:, x_of])
            others = np.where(pos, (W[rows, i + C] - W[rows, i]).astype(float) / np.where(pos, span, 1.0), 0.0) \
                - rate[:, :, None]
            share = np.maximum(share, bw - np.maximum(others, 0.0))
            rate = np.minimum(share.min(-1), tpl.xfer_cap)
        out[a:a + step] = rate[:, tx]
    return 1.0 / out


def _crossings(links: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (transfer, path slot) crossing of a link, grouped by link: the transfer of each,
    each slot's crossing (-1: none), and the link of each start then each end event."""
    x_of, slot = np.nonzero(links < L)
    by_link = np.argsort(links[x_of, slot], kind="stable")
    x_of, slot = x_of[by_link], slot[by_link]
    crossing = np.full(links.shape, -1, dtype=np.int64)
    crossing[x_of, slot] = np.arange(len(x_of))
    ev_link = np.tile(links[x_of, slot], 2).astype(np.int16 if L < 2 ** 15 else np.int64)  # radix sort
    return x_of, crossing, ev_link


def _swept(t: np.ndarray, ev_link: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Per row, F (see :func:`link_coefs`) at each event of ``t`` (p, 2C): the starts then
    the ends of C link crossings, on links ``ev_link``; every crossing's events on one link."""
    C = t.shape[1] // 2
    bad = ~np.isfinite(t)
    if bad.any():      # never reached: after every finite time (an open span covers them all)
        t = np.where(bad, 2.0 * np.maximum(np.where(bad, -np.inf, t).max(1, keepdims=True), 0.0) + 1.0, t)
    by_time = np.argsort(t, axis=1, kind="stable")   # many ties: far faster than quicksort here
    order = np.take_along_axis(by_time, np.argsort(ev_link[by_time], axis=1, kind="stable"), 1)
    ts = np.take_along_axis(t, order, 1)                                   # by link, then time
    if w is None:       # the count of crossings on each link; with ``w`` (p, C), the sum of their weights
        count = np.cumsum(np.where(order < C, 1, -1), axis=1)             # 0 after each link's last
    else:
        count = np.cumsum(np.take_along_axis(np.concatenate([w, -w], axis=1), order, 1), axis=1)
    F = np.zeros(t.shape, dtype=np.longdouble)
    np.cumsum(count[:, :-1] * np.diff(ts, axis=1), axis=1, dtype=np.longdouble, out=F[:, 1:])
    out = np.empty(t.shape, dtype=np.longdouble)    # subtracted later: keep the long sums' digits
    np.put_along_axis(out, order, F, 1)
    return out


RUNNING_CELLS = 4_000_000   # (scenario, kernel, candidate GEMM) cells looked at at once (~32 MB each array)


def _running(tpl: "Template", vals: np.ndarray, start: np.ndarray, gemms: np.ndarray, resident: dict) -> dict:
    """For kernels starting at ``start`` (P, K) beside the GEMMs ``gemms`` (K, Wg positions,
    padded) of their GPU: the latest-ending GEMM running at that instant (``on``: there is
    one; ``j``: its position, the GEMM count if none), its begin, end and last-wave start,
    and where its blocks sit while it still has blocks to place and in its last wave
    (``resident``: per GEMM and scenario, from :func:`~ficco_sim.engine.closed_form.durations`).
    Candidates are scanned in blocks of kernels, so memory stays bounded."""
    inf = np.inf
    P, K = start.shape
    G = len(tpl.gemm_nodes)
    gb = _pad(vals[:, tpl.gemm_begin], inf)                                # (P, G + 1)
    gen = _pad(vals[:, tpl.gemm_nodes], inf)
    j = np.full((P, K), G, dtype=np.int64)
    step = max(1, RUNNING_CELLS // max(1, P * gemms.shape[1]))
    for a in range(0, K, step):
        cand = gemms[a:a + step]                                           # (k, Wg)
        s = start[:, a:a + step, None]
        gs, ge = gb[:, cand], gen[:, cand]                                 # (P, k, Wg)
        active = (gs <= s) & (ge > s)
        best = np.argmax(np.where(active, ge, -inf), axis=-1)              # (P, k)
        on = np.take_along_axis(active, best[..., None], -1)[..., 0]
        j[:, a:a + step] = np.where(on, cand[np.arange(len(cand))[None, :], best], G)
    on = j < G
    rows = np.arange(P)[:, None]
    at = lambda key: np.concatenate([resident[key], np.zeros((P, 1))], 1)[rows, j]  # noqa: E731
    begin, end = np.where(on, gb[rows, j], 0.0), np.where(on, gen[rows, j], 0.0)
    need = _gemm_need(resident, j)
    return {"on": on, "j": j, "begin": begin, "end": end,
            "split": np.where(on, begin + (end - begin) * at("last_at"), start), "last_at": at("last_at"),
            "waves": np.maximum(at("waves"), 1.0),
            "used": at("used"), "count": at("count").astype(np.int64), "full": at("full"),
            "used_last": at("used_last"), "count_last": at("count_last").astype(np.int64), "full_last": at("full_last"),
            "need": need}


def _gemm_need(resident: dict, j: np.ndarray) -> np.ndarray:
    """(P, K, 4) SM needs of a block of GEMM ``j`` (P, K positions; the GEMM count: none,
    needing nothing) per scenario (``resident``: :func:`~.closed_form_tiles.residency`)."""
    need = resident["need"]
    padded = np.concatenate([need, np.zeros((len(need), 1, 4), dtype=np.int64)], 1)
    return padded[np.arange(len(need))[:, None], j]


def _slots(gpu: GpuProfile, run: dict, need: np.ndarray, occupancy: np.ndarray, last: bool) -> np.ndarray:
    """Block slots a kernel (SM needs ``need``, ``occupancy`` on an empty SM) has beside the
    running GEMM ``run`` (:func:`_running`) before or in its last wave: the SMs it leaves
    empty, plus what still fits beside its blocks on the others."""
    key = "_last" if last else ""
    used, count, full = run["used" + key], run["count" + key], run["full" + key]
    return ((gpu.num_sms - used) * occupancy + full * blocks_beside(gpu.sm, need, run["need"], count)
            + (used - full) * blocks_beside(gpu.sm, need, run["need"], np.maximum(count - 1, 0)))


def memory_hold(tpl: "Template", gpu: GpuProfile, vals: np.ndarray, resident: dict, comm: np.ndarray) -> dict:
    """How each memory kernel (:class:`MemKernels`) shares SMs with the GEMM of its GPU
    running at its start in a pass ``vals``, applied in the next pass by
    :func:`~ficco_sim.engine.closed_form.run` against that GEMM's times there.

    The kernel shares the SMs with the GEMM in two phases: while the GEMM still has blocks
    to place (until a share ``last_at`` of its run), then during its last wave. In each it
    gets the slots :func:`_slots` says (nothing: it waits); its speed (``f1``, ``f2``) is
    its waves alone (``alone``, s) over its waves on those slots. Then it has the GPU. Of
    several such GEMMs the latest-ending counts (``begin_node``, ``end_node``). ``comm``:
    the communicated-shape factor its size scales by. (P, M) arrays."""
    mk = tpl.mem
    s = vals[:, mk.begin]                                                  # (P, M)
    run = _running(tpl, vals, s, mk.gemms, resident)
    grid, block_time, block_hbm = _scaled(mk, gpu, comm)
    alone = waves_time(gpu, grid, mk.occupancy[None, :], block_time, block_hbm)

    def speed(last: bool):
        slots = _slots(gpu, run, mk.need, mk.occupancy, last)
        t = waves_time(gpu, grid, np.maximum(slots, 1), block_time, block_hbm, sms=1)
        return np.where(slots > 0, alone / t, 0.0)

    return {"on": run["on"], **_partner_nodes(tpl, run, len(vals[0]) - 1),
            "last_at": run["last_at"], "alone": alone,
            "f1": speed(False), "f2": speed(True), "per_sm": np.minimum(mk.occupancy, np.ceil(grid / gpu.num_sms))}


def gemm_waits(tpl: "Template", gpu: GpuProfile, vals: np.ndarray, add: np.ndarray, hold: dict,
               resident: dict, before: np.ndarray | None = None) -> np.ndarray:
    """(P, nodes + 1) how long each GEMM's begin waits for SMs, from a pass ``vals``: a
    memory kernel keeps the SMs it took until it ends, so the first GEMM of its GPU issued
    while it runs, if none of that GEMM's blocks fits beside the kernel's
    (:func:`~ficco_sim.gemm_model.blocks_beside`), starts only when the kernel ends: its end
    in the pass, or under the two-phase rule (``hold``: :func:`memory_hold`, with the
    durations ``add``) when it started beside a GEMM. Read on the GEMM's begin node (the
    latest of several such kernels); 0 elsewhere. ``before``: the waits that pass had (a
    GEMM issued inside the kernel's run waits, wherever the pass's wait put its begin)."""
    mk, G = tpl.mem, len(tpl.gemm_nodes)
    out = np.zeros_like(vals)
    if not len(mk.nodes) or not G:
        return out
    P, M = len(vals), len(mk.nodes)
    ends = held_ends(tpl, vals, add, hold, np.arange(M))                   # (P, M)
    issued = vals if before is None else vals - before    # a GEMM's begin less the wait the pass gave it
    gb = _pad(issued[:, tpl.gemm_begin], np.inf)
    j = np.full((P, M), G, dtype=np.int64)              # the first GEMM issued inside each kernel's run
    step = max(1, RUNNING_CELLS // max(1, P * mk.gpu_gemms.shape[1]))
    for a in range(0, M, step):
        cand = mk.gpu_gemms[mk.gpu_row[a:a + step]]                        # (k, Wa)
        t = gb[:, cand]                                                    # (P, k, Wa)
        inside = (t > vals[:, mk.begin[a:a + step], None]) & (t < ends[:, a:a + step, None])
        first = np.argmin(np.where(inside, t, np.inf), axis=-1)
        hit = np.take_along_axis(inside, first[..., None], -1)[..., 0]
        j[:, a:a + step] = np.where(hit, cand[np.arange(len(cand))[None, :], first], G)
    rows = np.arange(P)[:, None]
    y = np.append(tpl.gemm_begin, tpl.num_nodes)[j]
    need = _gemm_need(resident, j)
    shut = blocks_beside(gpu.sm, need, mk.need, hold["per_sm"]) == 0
    wait = np.where((j < G) & shut, np.maximum(ends - issued[rows, y], 0.0), 0.0)
    np.maximum.at(out, (np.broadcast_to(rows, y.shape), y), wait)
    out[:, -1] = 0.0
    return out


def _partner_nodes(tpl: "Template", run: dict, sentinel: int) -> dict:
    """Begin and end nodes of the running GEMM of :func:`_running` (the sentinel if none)."""
    if not len(tpl.gemm_nodes):
        return {"begin_node": np.full(run["on"].shape, sentinel), "end_node": np.full(run["on"].shape, sentinel)}
    j = np.minimum(run["j"], len(tpl.gemm_nodes) - 1)
    return {"begin_node": np.where(run["on"], tpl.gemm_begin[j], sentinel),
            "end_node": np.where(run["on"], tpl.gemm_nodes[j], sentinel)}


def comm_release(tpl: "Template", gpu: GpuProfile, vals: np.ndarray, resident: dict) -> dict:
    """How each communication kernel (:class:`CommKernels`) waits for its first block, from
    a pass ``vals``: the GEMM of its GPU running when it was launched (``begin_node``,
    ``end_node``: that GEMM's nodes) and the rule (``mode``), applied in the next pass by
    :func:`~ficco_sim.engine.closed_form.run` against that GEMM's times there. It starts at
    once (mode 0) if :func:`_slots` leaves it any; else a kernel of a higher-priority
    stream takes the slots of the GEMM's next finishing wave (mode 2, ``waves``) if one
    retiring GEMM block leaves room for one of its blocks (blocks retire one at a time, and
    the GEMM's pending blocks refill a slot the kernel cannot use:
    :meth:`~ficco_sim.engine.dispatcher.SmPool.settle`), and otherwise, or at equal or lower
    priority, or beside a persistent GEMM (its SMs pass from tile to tile), it starts when the
    GEMM's last wave starts if that one leaves it any, else when the GEMM ends (mode 1 at
    ``frac`` of its run). ``first``: a GEMM reaching the SMs at the same instant goes first (issue
    order; a persistent one as the dispatcher orders arrivals: host-issued in issue order, else by
    priority; before either, of the two the one whose turn came on its own stream, not by another's
    event). (P, C) arrays."""
    ck = tpl.comm_kernels
    s = vals[:, ck.begin]                                                  # (P, C)
    run = _running(tpl, vals, s, ck.gemms, resident)
    lightest = run["count"] - (run["used"] > run["full"])                  # blocks on the lightest SMs it holds
    kept = np.append(ck.gemm_persistent, False)[run["j"]]
    handoff = hands_off(gpu.sm, ck.need, run["need"], lightest, kept)
    gemm_prio = np.append(ck.gemm_priority, 0)[run["j"]]
    high = (ck.priority[None, :] > gemm_prio) & handoff
    wait = run["on"] & (_slots(gpu, run, ck.need, ck.occupancy, False) <= 0)
    frac = np.where(_slots(gpu, run, ck.need, ck.occupancy, True) > 0, run["last_at"], 1.0)
    first = np.append(ck.gemm_order, np.iinfo(np.int64).max)[run["j"]] < ck.order[None, :]
    ahead = np.where(first, np.append(ck.gemm_issued, False)[run["j"]] | (gemm_prio >= ck.priority[None, :]),
                     ~ck.issued[None, :] & (gemm_prio > ck.priority[None, :]))
    first = np.where(kept, ahead, first)
    # of two released at one instant, the one queued on its own stream goes first (an event's waiter is woken later)
    gemm_queued = np.append(ck.gemm_queued, False)[run["j"]]
    first = np.where(gemm_queued != ck.queued[None, :], gemm_queued, first)
    return {"on": wait, "mode": np.where(wait, np.where(high, 2, 1), 0), "frac": frac, "waves": run["waves"],
            "last_at": run["last_at"],
            "first": first, **_partner_nodes(tpl, run, len(vals[0]) - 1)}


def _scaled(mk: MemKernels, gpu: GpuProfile, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, M) grid, block time and block HBM bytes of the memory kernels at each scenario's
    sizes: a reduction is one wave moving all its bytes (block time and total bytes scale
    with the communicated shape, its grid follows its elements); another kernel keeps its
    grid."""
    grid = np.broadcast_to(mk.grid, (len(comm), len(mk.grid))).astype(float)
    for b, block in enumerate(mk.blocks):
        cols = (mk.block_ix == b) & np.isfinite(mk.elems)
        if cols.any():
            grid[:, cols] = reduce_grid(gpu, block, np.round(mk.elems[cols][None, :] * comm[:, None]))
    return grid, mk.block_time * comm[:, None], mk.block_hbm * mk.grid * comm[:, None] / grid


@functools.lru_cache(maxsize=64)
def _rows(P: int) -> np.ndarray:
    """(P, 1) row numbers: ``x[_rows(P), idx]`` is ``take_along_axis(x, idx, 1)`` without its
    per-call checks (the hold rules gather per level, many times a pass)."""
    out = np.arange(P)[:, None]
    out.flags.writeable = False
    return out


def _at_level(hold: dict, cols: np.ndarray, lv: int) -> dict:
    """The hold's per-kernel (P, kernels) arrays at the kernels ``cols`` of level ``lv``, sliced
    once per hold: a hold is kept over the contention passes, and each level's slices serve them all.
    ``live``: some kernel of the level is held in some scenario (``on``); else the level is skipped."""
    memo = hold.setdefault("at_level", {})
    hit = memo.get(lv)
    if hit is None:
        hit = memo[lv] = {k: v[:, cols] for k, v in hold.items() if k != "at_level"}
        hit["live"] = bool(hit["on"].any())
    return hit


def apply_memory_hold(tpl: "Template", vals: np.ndarray, add: np.ndarray, hold: dict, cols: np.ndarray,
                      lv: int) -> None:
    """End the memory kernels ``cols`` of level ``lv`` (their end nodes were just computed) by the
    two-phase rule of :func:`.closed_form_overlap.memory_hold` against their GEMM's times in this pass
    (under :func:`~ficco_sim.engine.closed_form.run`'s ``np.errstate``)."""
    h = _at_level(hold, cols, lv)
    if h["live"]:
        vals[:, tpl.mem.nodes[cols]] = _held_ends(tpl, vals, add, h, cols)


def held_ends(tpl: "Template", vals: np.ndarray, add: np.ndarray, hold: dict, cols: np.ndarray) -> np.ndarray:
    """(P, cols) ends of the memory kernels ``cols`` under the two-phase rule (see
    :func:`apply_memory_hold`), their ends in ``vals`` where no GEMM holds them."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _held_ends(tpl, vals, add, {k: v[:, cols] for k, v in hold.items() if k != "at_level"}, cols)


def _held_ends(tpl: "Template", vals: np.ndarray, add: np.ndarray, h: dict, cols: np.ndarray) -> np.ndarray:
    """:func:`held_ends` with the hold's arrays already at ``cols`` (``h``)."""
    mk = tpl.mem
    s = vals[:, mk.begin[cols]]
    rows = _rows(len(vals))
    a = vals[rows, h["begin_node"]]
    dur = add[rows, h["end_node"]]
    b = a + dur
    split = a + h["last_at"] * dur
    on = h["on"] & (a <= s) & (s < b)
    d1 = np.where(on, np.maximum(0.0, split - s), 0.0)
    d2 = np.where(on, b - np.maximum(split, s), 0.0)
    alone, f1, f2 = h["alone"], h["f1"], h["f2"]
    w1, w2 = d1 * f1, d2 * f2                                              # work done (alone-seconds)
    t = np.where(w1 >= alone, alone / f1, np.where(w1 + w2 >= alone, d1 + (alone - w1) / f2, d1 + d2 + alone - w1 - w2))
    got = add[:, mk.nodes[cols]] * np.where(alone > 0, t / np.where(alone > 0, alone, 1.0), 1.0)
    return np.where(on, s + got, vals[:, mk.nodes[cols]])


def apply_comm_hold(tpl: "Template", vals: np.ndarray, add: np.ndarray, hold: dict, cols: np.ndarray,
                    lv: int) -> None:
    """Apply the release of the communication kernels ``cols`` of level ``lv`` (their begin nodes
    were just computed): the partner GEMM's begin is already known (a shallower level)."""
    h = _at_level(hold, cols, lv)
    if not h["live"]:
        return
    c = tpl.comm_kernels.begin[cols]
    s = vals[:, c]
    rows = _rows(len(vals))
    a = vals[rows, h["begin_node"]]
    dur = add[rows, h["end_node"]]
    b = a + dur
    mode, frac, waves = h["mode"], h["frac"], h["waves"]
    wave = np.where(waves > 1, dur * h["last_at"] / np.maximum(waves - 1, 1), dur)   # a full wave (not the last)
    boundary = np.minimum(a + np.ceil((s - a) / np.where(wave > 0, wave, 1.0)) * wave, b)
    release = np.where(mode == 2, boundary, a + frac * dur)
    # a GEMM reaching the SMs at the same instant holds the kernel only if issued before it
    tie = np.abs(a - s) <= 1e-12 * np.maximum(np.abs(s), 1e-9)
    before = (a < s) & ~tie | tie & h["first"]
    vals[:, c] = np.where((mode > 0) & before & (s < b), np.maximum(s, release), s)
