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

from itertools import accumulate
from typing import Sequence

from ..errors import InputError
from ..hardware import NVLS_MIN_BYTES, CommKernelSpec
from .builder import GraphBuilder, row_slice
from .rings import disjoint_rings, ring_orders  # noqa: F401  (the lowerings' ring orders)

# The algorithms each collective is lowered with (NCCL's names); "auto" picks one. NVLS
# (NVLink SHARP: the switch reduces and multicasts) needs a switch whose GPU profile has it.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all-gather": ("ring", "direct"),
    "reduce-scatter": ("ring", "direct"),
    "all-reduce": ("ring", "direct", "nvls"),
    "all-to-all": ("direct",),
    "send-recv": ("direct",),
}


def pick_algorithm(algorithm: str, collective: str, topology_kind: str, engine: str = "sm", *,
                   gpus: int = 0, spec: CommKernelSpec | None = None, nbytes: int | None = None) -> str:
    """The algorithm ``collective`` runs with: ``algorithm`` itself when this collective has
    it on this engine, else an input error (never a silent substitute); ``auto``: what NCCL
    runs: an SM all-reduce of ``gpus`` GPUs and ``nbytes`` per rank (None: large) behind a
    switch in NVLS when the GPU's ``spec`` has it from that many GPUs
    (:attr:`CommKernelSpec.nvls_min_gpus`) and the size is :data:`NVLS_MIN_BYTES` or more; else ring on ring
    topologies, on any other link graph (``custom``: islands of fast links, a node's own
    wiring; the ring :func:`~ficco_sim.schedules.rings.widest_ring`) and, for SM
    collectives, behind a switch (NVSwitch); on fully connected topologies, for SM
    collectives, what the GPU's library runs there (:attr:`CommKernelSpec.fully_connected`:
    NCCL's rings over every NVLink, :func:`~ficco_sim.schedules.rings.ring_orders`, or
    direct: RCCL's rings over every xGMI link move what direct moves); direct on copy
    engines behind a switch or fully connected, and wherever ring does not exist.

    >>> pick_algorithm("auto", "all-gather", "switch"), pick_algorithm("auto", "all-to-all", "ring")
    ('ring', 'direct')
    """
    known = ALGORITHMS.get(collective)
    if known is None:
        raise InputError("--kind", None, f"unknown collective {collective!r}; known: {', '.join(ALGORITHMS)}")
    nvls = engine == "sm" and topology_kind == "switch" and spec is not None and spec.nvls_channels > 0
    if not nvls:
        known = tuple(a for a in known if a != "nvls")
    # a copy engine cannot reduce: reducing collectives on DMA copy, then add in a kernel (direct only)
    if engine == "dma" and collective in ("reduce-scatter", "all-reduce"):
        known = ("direct",)
    if algorithm == "auto":
        if "nvls" in known and gpus >= spec.nvls_min_gpus and (nbytes is None or nbytes >= NVLS_MIN_BYTES):
            return "nvls"
        ring = topology_kind in ("ring", "custom") or (engine == "sm" and (topology_kind == "switch" or (
            topology_kind == "fc" and spec is not None and spec.fully_connected == "ring")))
        return "ring" if ring and "ring" in known else ("direct" if "direct" in known else known[-1])
    if algorithm not in known:
        where = f" on {engine.upper()}" if engine == "dma" and collective in ("reduce-scatter", "all-reduce") else ""
        why = ("; NVLS needs SM channels behind a switch whose GPU profile has comm_kernel.nvls"
               if algorithm == "nvls" and "nvls" in ALGORITHMS[collective] else "")
        raise InputError("--algorithm", None, f"{collective}{where} has no {algorithm!r} algorithm here; "
                         f"known: auto, {', '.join(known)}{why}")
    return algorithm


def _rings(b: GraphBuilder, rows: int):
    """Each rank's ``rows`` split over the rings of ``b.rings`` (a ring with no row left out);
    per ring: (order, each GPU's position in it, row offset, rows, id suffix (empty for a
    single ring, so one-ring ids stay as they were), ring index)."""
    split = split_rows(rows, len(b.rings))
    parts = [(order, sum(split[:i]), k) for i, (order, k) in enumerate(zip(b.rings, split)) if k]
    for r, (order, off, k) in enumerate(parts):
        yield order, {v: i for i, v in enumerate(order)}, off, k, (f".r{r}" if len(parts) > 1 else ""), r


def call_tuning(b: GraphBuilder, rank_bytes: float, call_bytes: float, size: float,
                all_reduce: bool = False) -> tuple[float, float, float]:
    """:attr:`~ficco_sim.taskgraph.Transfer.tune` of the ``size``-byte steps of a ring call
    whose tuner sees ``call_bytes`` (NCCL 2.22 on: an all-gather's or reduce-scatter's whole
    call) or ``rank_bytes`` (earlier NCCL: one rank's share; the GPU profile's
    ``comm_kernel.tuner``); an all-reduce's halves pass its buffer as both, and its ring
    steps are twice an all-gather's."""
    seen = rank_bytes if b.gpu.comm_kernel.tuner == "rank" else call_bytes
    steps = (b.num_gpus - 1) * (2 if all_reduce else 1)
    return (seen / size, float(b.num_gpus), float(steps)) if size > 0 else ()


def p2p_tuning(b: GraphBuilder) -> tuple[float, float, float]:
    """:attr:`~ficco_sim.taskgraph.Transfer.tune` of one send of a grouped point-to-point
    call among the builder's GPUs (NCCL's all-to-all and send-recv)."""
    return (0.0, float(b.num_gpus), 0.0)


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
                tune = call_tuning(b, e * n if kernels is not None else e, e * n, size, kernels is not None)
                for t in range(1, n):
                    cur = {}
                    label = f"AG ring step {t}"
                    for g in range(n):
                        dst, owner = order[(pos[g] + 1) % n], order[(pos[g] - t + 1) % n]
                        d = (prev[g],) if t > 1 else (tuple(deps[g]) if kernels is not None else ())
                        sl = part(owner)
                        cur[dst] = b.sm_transfer(f"{prefix}.s{t}.{g}-{dst}{tag}", g, dst, size,
                                                 (kern[g], kern[dst]), step=(prefix, t), deps=d, label=label,
                                                 io={"src": sl, "dst": sl}, tune=tune).id
                    prev = cur
        else:
            for g in range(n):     # (every GPU its peers in the same turned order: see staggered)
                for dst in staggered(g, n):
                    b.sm_transfer(f"{prefix}.{g}-{dst}", g, dst, e, (kern[g], kern[dst]), step=(prefix,),
                                  label="AG direct", io={"src": sl(g), "dst": sl(g)})
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
            tune = call_tuning(b, e * n if ring_kernels is not None else e, e * n, size, ring_kernels is not None)
            for t in range(1, n):
                cur = {}
                label = f"RS ring step {t}"
                for g in range(n):   # the chunk GPU g holds t - 1 partial sums of, ending at its owner
                    dst, chunk = order[(pos[g] + 1) % n], order[(pos[g] - t) % n]
                    d = (prev[g],) if t > 1 else ()
                    sl = part(chunk)
                    cur[dst] = b.sm_transfer(f"{prefix}.s{t}.{g}-{dst}{tag}", g, dst, size,
                                             (kern[g], kern[dst]), step=(prefix, t), deps=d, reduce=True,
                                             label=label, io={"src": sl, "dst": sl}, tune=tune).id
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
    # each transfer made in its issuer's turn (the sender's on SMs, the receiver's on copy engines),
    # every issuer walking its peers in the same turned order (see staggered)
    for a in range(n):
        for z in staggered(a, n):
            p, q = (a, z) if engine == "sm" else (z, a)
            rows = counts[p][q]
            if rows == 0:
                continue
            io = {"src": row_slice(src_buffer, src_off[p][q], rows), "dst": row_slice(dst_buffer, dst_off[p][q], rows)}
            if engine == "sm":
                b.sm_transfer(f"{prefix}.{p}-{q}", p, q, rows * esize, (kern[p], kern[q]), step=(prefix,), label="A2A",
                              io=io, tune=p2p_tuning(b))
            else:
                done[q].append(b.dma_transfer(f"{prefix}.{p}-{q}", q, p, q, rows * esize, step=(prefix,),
                                              deps=list(deps[p]) + list(deps[q]), label="A2A", io=io).id)
    return done


def all_reduce(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str, staging: str,
               engine: str, algorithm: str) -> list[list[str]]:
    """Reduce-scatter then all-gather (``rows`` per rank after the scatter); an SM ring runs
    both in one kernel per rank (one collective call, one launch floor), as NCCL does. NVLS:
    :func:`nvls_all_reduce`."""
    if algorithm == "nvls":
        return nvls_all_reduce(b, prefix, rows, cols, dtype, buffer=buffer)
    kernels: list | None = [] if engine == "sm" and algorithm == "ring" else None
    rs = reduce_scatter(b, f"{prefix}.rs", rows, cols, dtype, buffer=buffer, staging=staging, engine=engine,
                        algorithm=algorithm, ring_kernels=kernels)
    return all_gather(b, f"{prefix}.ag", rows, cols, dtype, buffer=buffer, engine=engine, algorithm=algorithm,
                      deps=rs, kernels=kernels)


def nvls_wire(n: int) -> float:
    """Bytes each transfer of :func:`nvls_all_reduce` puts on the links per byte of its
    slice: with the switch reducing and multicasting, a rank's link carries ``(n + 1) / n``
    of the buffer each way (the switch reads the rank's copy of all ``n`` slices, its own
    included, and sends back its reduced slice; the rank stores its slice once, and the
    switch sends it all ``n`` reduced slices), spread over the ``2 (n - 1)`` pair transfers.

    >>> nvls_wire(2), nvls_wire(8)
    (1.5, 0.6428571428571429)
    """
    return (n + 1) / (2 * (n - 1))


def nvls_all_reduce(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *,
                    buffer: str) -> list[list[str]]:
    """All-reduce in the switch (NCCL's NVLS): rank g's slice of ``rows`` rows is summed by
    the switch from every rank's copy (the transfers into g, reducing) and multicast back
    (the transfers out of g, after all of them), on one NVLS kernel per rank of
    :attr:`CommKernelSpec.nvls_channels` channels (fewer if the schedule caps them), which
    spends :attr:`CommKernelSpec.nvls_latency` before its transfers start. No reduce kernel; each transfer puts
    :func:`nvls_wire` times its slice on the links, so a rank's links carry what NVLS moves."""
    n = b.num_gpus
    size = rows * cols * b.elem(dtype) * nvls_wire(n)
    kern = [b.comm_kernel(f"{prefix}.k{g}", g, label="all-reduce (NVLS)",
                          channels=min(b.gpu.comm_kernel.nvls_channels, b.channels),
                          setup=b.gpu.comm_kernel.nvls_latency).id for g in range(n)]
    into: list[list[str]] = [[] for _ in range(n)]
    for h in range(n):          # the slice g owns, read from every peer h's copy (made in h's turn)
        for g in staggered(h, n):
            sl = row_slice(buffer, g * rows, rows)
            into[g].append(b.sm_transfer(f"{prefix}.red{h}-{g}", h, g, size, (kern[h], kern[g]), step=(prefix, 1),
                                         reduce=True, label="NVLS reduce", io={"src": sl, "dst": sl}).id)
    for g in range(n):          # the reduced slice, multicast to every peer
        sl = row_slice(buffer, g * rows, rows)
        for h in staggered(g, n):
            b.sm_transfer(f"{prefix}.mc{g}-{h}", g, h, size, (kern[g], kern[h]), step=(prefix, 2), deps=into[g],
                          label="NVLS multicast", io={"src": sl, "dst": sl})
    return [[k] for k in kern]


def send_recv(b: GraphBuilder, prefix: str, rows: int, cols: int, dtype: str, *, buffer: str,
              engine: str) -> list[list[str]]:
    """Rank 0 sends ``rows`` rows to rank 1."""
    e = rows * cols * b.elem(dtype)
    io = {"src": row_slice(buffer, 0, rows), "dst": row_slice(buffer, 0, rows)}
    if engine == "sm":
        k0 = b.comm_kernel(f"{prefix}.k0", 0, label="send").id
        k1 = b.comm_kernel(f"{prefix}.k1", 1, label="recv").id
        b.sm_transfer(f"{prefix}.0-1", 0, 1, e, (k0, k1), step=(prefix,), label="send/recv", io=io, tune=p2p_tuning(b))
        return [[k0], [k1]]
    t = b.dma_transfer(f"{prefix}.0-1", 1, 0, 1, e, step=(prefix,), label="send/recv", io=io).id
    return [[t], [t]]
