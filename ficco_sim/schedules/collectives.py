"""Collectives lowered to transfers: ring and direct (all-to-all) patterns, on SM
communication kernels or on DMA engines.

Sizes are per-rank, rows of a 2-D buffer of ``cols`` columns (so the executor can move
real data): all-gather moves each rank's ``rows`` to every peer; reduce-scatter reduces
``rows * gpus`` rows so that rank g ends with its ``rows``; all-reduce is reduce-scatter
then all-gather; all-to-all moves ``counts[p][q]`` rows from p to q.

Every function appends to a :class:`GraphBuilder` and returns, per GPU, the ids whose
completion means "this GPU has its result".
"""

from __future__ import annotations

import functools
from itertools import accumulate
import math
import random
from typing import Sequence

from ..errors import InputError
from .builder import GraphBuilder, row_slice

# The algorithms each collective is lowered with (NCCL's names); "auto" picks one.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all-gather": ("ring", "direct"),
    "reduce-scatter": ("ring", "direct"),
    "all-reduce": ("ring", "direct"),
    "all-to-all": ("direct",),
    "send-recv": ("direct",),
}


def pick_algorithm(algorithm: str, collective: str, topology_kind: str, engine: str = "sm") -> str:
    """The algorithm ``collective`` runs with: ``algorithm`` itself when this collective has
    it on this engine, else an input error (never a silent substitute); ``auto``: what NCCL
    runs: ring on ring topologies and, for SM collectives, behind a switch (NVSwitch); direct
    on fully connected topologies (RCCL's rings over every xGMI link move what direct moves),
    on copy engines, and wherever ring does not exist.

    >>> pick_algorithm("auto", "all-gather", "switch"), pick_algorithm("auto", "all-to-all", "ring")
    ('ring', 'direct')
    """
    known = ALGORITHMS.get(collective)
    if known is None:
        raise InputError("--kind", None, f"unknown collective {collective!r}; known: {', '.join(ALGORITHMS)}")
    # a copy engine cannot reduce: reducing collectives on DMA copy, then add in a kernel (direct only)
    if engine == "dma" and collective in ("reduce-scatter", "all-reduce"):
        known = ("direct",)
    if algorithm == "auto":
        ring = topology_kind == "ring" or (topology_kind == "switch" and engine == "sm")
        return "ring" if ring and "ring" in known else known[-1]
    if algorithm not in known:
        where = f" on {engine.upper()}" if engine == "dma" and collective in ("reduce-scatter", "all-reduce") else ""
        raise InputError("--algorithm", None, f"{collective}{where} has no {algorithm!r} algorithm; "
                         f"known: auto, {', '.join(known)}")
    return algorithm


def ring_orders(topology) -> list[tuple[int, ...]]:
    """The rings a ring collective runs on ``topology``, as GPU orders (each GPU sends to the
    next): one ring (0, 1, ..., n-1) on rings and behind a switch (every order crosses the
    same ports); on fully connected topologies, link-disjoint rings that together use every
    link, as NCCL/RCCL spread their channels' rings over all links (:func:`disjoint_rings`).

    >>> from ficco_sim.topology import load_topology
    >>> len(ring_orders(load_topology("fc:8", "mi300x"))), ring_orders(load_topology("ring:4", "h100"))
    (7, [(0, 1, 2, 3)])
    """
    n = topology.num_gpus
    if topology.kind != "fc" or n < 3:
        return [tuple(range(n))]
    return disjoint_rings(n)


@functools.lru_cache(maxsize=64)
def disjoint_rings(n: int) -> list[tuple[int, ...]]:
    """Directed Hamiltonian cycles of the complete digraph on ``n`` GPUs that share no link:
    n - 1 of them (every directed link used once) wherever that exists (every n but 4 and 6,
    Tillson 1980), found by a deterministic search (seeded, bounded in steps, not time) up to
    16 GPUs; else as many as the search finds, and beyond 16 GPUs the circulant rings
    g -> g + s for every s coprime to n. The first is always (0, 1, ..., n-1).

    >>> [len(disjoint_rings(n)) for n in (3, 5, 8)], disjoint_rings(4)[0]
    ([2, 4, 7], (0, 1, 2, 3))
    """
    circulant = [tuple((i * s) % n for i in range(n)) for s in range(1, n) if math.gcd(s, n) == 1]
    if n > 16:
        return circulant
    best = circulant      # both it and every search start with the plain ring (0, 1, ..., n-1)
    for seed in range(64):
        found = _ring_search(n, random.Random(seed))
        if len(found) > len(best):
            best = found
        if len(best) == n - 1:
            break
    return best


def _ring_search(n: int, rng: random.Random, budget: int = 20_000) -> list[tuple[int, ...]]:
    """Greedy: the plain ring, then one Hamiltonian cycle after another over the links left
    (depth-first, fewest onward links first), until none is found within ``budget`` steps."""
    free = {(a, b) for a in range(n) for b in range(n) if a != b}
    rings = [tuple(range(n))]
    free -= {(i, (i + 1) % n) for i in range(n)}
    steps = [0]
    while len(rings) < n - 1:
        out = {a: [b for b in range(n) if (a, b) in free] for a in range(n)}
        path, seen = [0], {0}

        def dfs() -> bool:
            steps[0] += 1
            if steps[0] > budget:
                return False
            if len(path) == n:
                return (path[-1], 0) in free
            cand = [b for b in out[path[-1]] if b not in seen]
            rng.shuffle(cand)
            cand.sort(key=lambda b: sum(1 for x in out[b] if x not in seen))
            for b in cand:
                path.append(b)
                seen.add(b)
                if dfs():
                    return True
                path.pop()
                seen.discard(b)
            return False

        if not dfs():
            break
        rings.append(tuple(path))
        free -= {(path[i], path[(i + 1) % n]) for i in range(n)}
    return rings


def _rings(b: GraphBuilder, rows: int):
    """Each rank's ``rows`` split over the rings of ``b.rings`` (a ring with no row left out);
    per ring: (order, each GPU's position in it, row offset, rows, id suffix (empty for a
    single ring, so one-ring ids stay as they were), ring index)."""
    split = split_rows(rows, len(b.rings))
    parts = [(order, sum(split[:i]), k) for i, (order, k) in enumerate(zip(b.rings, split)) if k]
    for r, (order, off, k) in enumerate(parts):
        yield order, {v: i for i, v in enumerate(order)}, off, k, (f".r{r}" if len(parts) > 1 else ""), r


def split_rows(rows: int, parts: int) -> list[int]:
    """``rows`` split into ``parts`` near-equal counts (larger ones first).

    >>> split_rows(10, 4)
    [3, 3, 2, 2]
    """
    q, r = divmod(rows, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def staggered(g: int, n: int) -> list[int]:
    """GPU g's peers in ring order g+1, g+2, ...: when every GPU walks its peers this way,
    no GPU is everyone's first peer (no hot spot).

    >>> staggered(2, 4)
    [3, 0, 1]
    """
    return [(g + t) % n for t in range(1, n)]


def all_gather(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str, engine: str,
               algorithm: str, deps: Sequence[Sequence[str]] | None = None,
               kernels: Sequence[str] | None = None) -> list[list[str]]:
    """Rank g's rows ``[g*rows, (g+1)*rows)`` of ``buffer`` end up on every rank. ``kernels``:
    SM ring only, the running comm kernels to continue in (one collective call, as NCCL's
    all-reduce), with ``deps`` then gating the first step's transfers."""
    n = b.num_gpus
    e = rows * cols * b.elem(dtype)
    deps = deps or [[] for _ in range(n)]
    done: list[list[str]] = [[] for _ in range(n)]
    sl = lambda owner: row_slice(buffer, owner * rows, rows)  # noqa: E731

    if engine == "sm":
        kern = list(kernels) if kernels is not None else \
            [b.comm_kernel(f"{prefix}.k{g}", g, deps=deps[g], label="all-gather").id for g in range(n)]
        if algorithm == "ring":
            for order, pos, off, k, tag, _ in _rings(b, rows):
                part = lambda owner: row_slice(buffer, owner * rows + off, k)  # noqa: E731
                prev: dict[int, str] = {}
                size = k * cols * b.elem(dtype)
                for t in range(1, n):
                    cur = {}
                    label = f"AG ring step {t}"
                    for g in range(n):
                        dst, owner = order[(pos[g] + 1) % n], order[(pos[g] - t + 1) % n]
                        d = (prev[g],) if t > 1 else (tuple(deps[g]) if kernels is not None else ())
                        sl = part(owner)
                        cur[dst] = b.sm_transfer(f"{prefix}.s{t}.{g}-{dst}{tag}", g, dst, size,
                                                 (kern[g], kern[dst]), step=(prefix, t), deps=d, label=label,
                                                 io={"src": sl, "dst": sl}).id
                    prev = cur
        else:
            for g in range(n):
                for dst in range(n):
                    if dst != g:
                        b.sm_transfer(f"{prefix}.{g}-{dst}", g, dst, e, (kern[g], kern[dst]), step=(prefix,), label="AG direct",
                                      io={"src": sl(g), "dst": sl(g)})
        return [[k] for k in kern]

    if algorithm == "ring":
        for order, pos, off, k, tag, r in _rings(b, rows):   # one copy engine per ring
            part = lambda owner: row_slice(buffer, owner * rows + off, k)  # noqa: E731
            prev = {}
            for t in range(1, n):
                cur = {}
                for g in range(n):
                    dst, owner = order[(pos[g] + 1) % n], order[(pos[g] - t + 1) % n]
                    d = ([prev[g]] if t > 1 else []) + list(deps[g]) + list(deps[dst])
                    cur[dst] = b.dma_transfer(f"{prefix}.s{t}.{g}-{dst}{tag}", dst, g, dst, k * cols * b.elem(dtype),
                                              step=(prefix, t), deps=d, engine=r, label=f"AG ring step {t}",
                                              io={"src": part(owner), "dst": part(owner)}).id
                    done[dst].append(cur[dst])
                prev = cur
        return done
    for dst in range(n):
        for src in staggered(dst, n):
                tid = b.dma_transfer(f"{prefix}.{src}-{dst}", dst, src, dst, e, step=(prefix,), deps=list(deps[src]) + list(deps[dst]),
                                     label="AG direct", io={"src": sl(src), "dst": sl(src)}).id
                done[dst].append(tid)
    return done


def reduce_scatter(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str, staging: str,
                   engine: str, algorithm: str, deps: Sequence[Sequence[str]] | None = None,
                   ring_kernels: list | None = None) -> list[list[str]]:
    """Sum over ranks of ``buffer`` (``rows * gpus`` rows); rank g ends with the sum in its
    rows ``[g*rows, (g+1)*rows)`` of ``buffer``. SM rings reduce inside the kernel; DMA
    copies into ``staging`` and a reduce kernel adds."""
    n = b.num_gpus
    e = rows * cols * b.elem(dtype)
    deps = deps or [[] for _ in range(n)]
    sl = lambda buf, chunk: row_slice(buf, chunk * rows, rows)  # noqa: E731
    if engine == "sm" and algorithm == "ring":
        kern = [b.comm_kernel(f"{prefix}.k{g}", g, deps=deps[g], label="reduce-scatter").id for g in range(n)]
        last: list[list[str]] = [[] for _ in range(n)]
        for order, pos, off, k, tag, _ in _rings(b, rows):
            part = lambda chunk: row_slice(buffer, chunk * rows + off, k)  # noqa: E731
            prev: dict[int, str] = {}
            size = k * cols * b.elem(dtype)
            for t in range(1, n):
                cur = {}
                label = f"RS ring step {t}"
                for g in range(n):   # the chunk GPU g holds t - 1 partial sums of, ending at its owner
                    dst, chunk = order[(pos[g] + 1) % n], order[(pos[g] - t) % n]
                    d = (prev[g],) if t > 1 else ()
                    sl = part(chunk)
                    cur[dst] = b.sm_transfer(f"{prefix}.s{t}.{g}-{dst}{tag}", g, dst, size,
                                             (kern[g], kern[dst]), step=(prefix, t), deps=d, reduce=True,
                                             label=label, io={"src": sl, "dst": sl}).id
                prev = cur
            for g in range(n):
                last[g].append(prev[g])
        if ring_kernels is not None:       # the caller continues in these kernels: done = last step in
            ring_kernels[:] = kern
            return last
        return [[k] for k in kern]
    if algorithm == "ring":
        raise InputError("schedule", "engine", "a ring reduce-scatter on copy engines needs a reduce kernel per "
                         "step; use the direct algorithm for DMA")
    # Direct: every rank sends chunk d to rank d, which sums what it received with its own.
    done: list[list[str]] = [[] for _ in range(n)]
    incoming: list[list[str]] = [[] for _ in range(n)]
    kern = None
    if engine == "sm":
        kern = [b.comm_kernel(f"{prefix}.k{g}", g, deps=deps[g], label="reduce-scatter").id for g in range(n)]
    for src in range(n):
        for dst in staggered(src, n):
            io = {"src": sl(buffer, dst), "dst": sl(staging, src)}
            if engine == "sm":
                tid = b.sm_transfer(f"{prefix}.{src}-{dst}", src, dst, e, (kern[src], kern[dst]), step=(prefix,),
                                    label="RS direct", io=io).id
                incoming[dst].append(kern[dst])
            else:
                tid = b.dma_transfer(f"{prefix}.{src}-{dst}", src, src, dst, e, step=(prefix,), deps=list(deps[src]),
                                     label="RS direct", io=io).id
                incoming[dst].append(tid)
    for g in range(n):
        inputs = [sl(staging, p) for p in range(n) if p != g] + [sl(buffer, g)]
        red = b.reduce(f"{prefix}.sum{g}", g, rows, cols, dtype, n, deps=sorted(set(incoming[g])) + list(deps[g]),
                       label="RS sum", io={"inputs": inputs, "out": sl(buffer, g)})
        done[g].append(red.id)
    return done


def all_to_all(b: GraphBuilder, prefix: str, counts: Sequence[Sequence[int]], cols: int, dtype: str, *,
               src_buffer: str, dst_buffer: str, engine: str,
               deps: Sequence[Sequence[str]] | None = None) -> list[list[str]]:
    """``counts[p][q]`` rows from p to q, direct. Source rows of p are grouped by
    destination; destination rows of q are grouped by source (both in rank order)."""
    n = b.num_gpus
    deps = deps or [[] for _ in range(n)]
    esize = cols * b.elem(dtype)
    src_off = [[0, *accumulate(counts[p][:-1])] for p in range(n)]
    dst_off = [[0] * n for _ in range(n)]     # rows from ranks before p (not q itself) into q
    for q in range(n):
        run = 0
        for p in range(n):
            dst_off[p][q] = run
            if p != q:
                run += counts[p][q]
    kern = None
    if engine == "sm":
        kern = [b.comm_kernel(f"{prefix}.k{g}", g, deps=deps[g], label="all-to-all").id for g in range(n)]
    done: list[list[str]] = [[k] for k in kern] if kern else [[] for _ in range(n)]
    for q in range(n):
        for p in staggered(q, n):
            rows = counts[p][q]
            if rows == 0:
                continue
            io = {"src": row_slice(src_buffer, src_off[p][q], rows), "dst": row_slice(dst_buffer, dst_off[p][q], rows)}
            if engine == "sm":
                b.sm_transfer(f"{prefix}.{p}-{q}", p, q, rows * esize, (kern[p], kern[q]), step=(prefix,), label="A2A", io=io)
            else:
                done[q].append(b.dma_transfer(f"{prefix}.{p}-{q}", q, p, q, rows * esize, step=(prefix,),
                                              deps=list(deps[p]) + list(deps[q]), label="A2A", io=io).id)
    return done


def all_reduce(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str, staging: str,
               engine: str, algorithm: str) -> list[list[str]]:
    """Reduce-scatter then all-gather (``rows`` per rank after the scatter); an SM ring runs
    both in one kernel per rank (one collective call, one launch floor), as NCCL does."""
    kernels: list | None = [] if engine == "sm" and algorithm == "ring" else None
    rs = reduce_scatter(b, f"{prefix}.rs", rows, cols, dtype, buffer=buffer, staging=staging, engine=engine,
                        algorithm=algorithm, ring_kernels=kernels)
    return all_gather(b, f"{prefix}.ag", rows, cols, dtype, buffer=buffer, engine=engine, algorithm=algorithm,
                      deps=rs, kernels=kernels)


def send_recv(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str,
              engine: str) -> list[list[str]]:
    """Rank 0 sends ``rows`` rows to rank 1."""
    e = rows * cols * b.elem(dtype)
    io = {"src": row_slice(buffer, 0, rows), "dst": row_slice(buffer, 0, rows)}
    if engine == "sm":
        k0 = b.comm_kernel(f"{prefix}.k0", 0, label="send").id
        k1 = b.comm_kernel(f"{prefix}.k1", 1, label="recv").id
        b.sm_transfer(f"{prefix}.0-1", 0, 1, e, (k0, k1), step=(prefix,), label="send/recv", io=io)
        return [[k0], [k1]]
    t = b.dma_transfer(f"{prefix}.0-1", 1, 0, 1, e, step=(prefix,), label="send/recv", io=io).id
    return [[t], [t]]
