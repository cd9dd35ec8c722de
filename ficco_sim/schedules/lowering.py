"""Lowering: (scenario, schedule, GPU, topology) -> task graph.

Pieces and steps. Communication is cut into pieces ``(peer, sub)``: ``shard`` keeps one
piece per peer, ``ficco`` cuts each peer's piece again into ``gpus`` sub-pieces. The
pattern orders pieces into steps: ``p2p`` moves one piece per step (peers in ring
order), ``a2a`` moves sub-piece ``j`` of every peer in step ``j``. SM communication
runs one comm kernel per step per GPU (driving that step's sends and receives); DMA
issues one copy command per piece on the copy engine of its peer. Compute follows the
steps: the local part first (it needs no communication), then one GEMM per ``group``
steps. Data layout for the executor is in each task's ``io`` (row slices of named
buffers) and in ``graph.meta["reference"]``.

>>> from ficco_sim.workload import Scenario
>>> from ficco_sim.schedules.schedule import parse_schedule
>>> g = lower(Scenario("ag-gemm", 4, 4096, 1024, 1024), parse_schedule("ficco-a2a-dma"), "h100", "fc:4")
>>> sum(1 for t in g.transfers if t.dst == 0)
12
"""

from __future__ import annotations

from typing import Sequence

from ..engine.gcpause import paused_gc
from ..errors import InputError
from ..hardware import GpuProfile, load_gpu
from ..taskgraph import Slice, TaskGraph
from ..topology import Topology, load_topology
from ..workload import KINDS, Scenario
from . import collectives
from .builder import COMM, GraphBuilder, row_slice
from .collectives import split_rows
from .presets import resolve
from .schedule import Schedule
from .validity import invalid_reason, margin_for  # noqa: F401  (margin_for: where it lived before)


def lower(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile | str, topology: Topology | str, *,
          algorithm: str = "auto") -> TaskGraph:
    """The task graph of ``scenario`` under ``schedule`` (a schedule or a preset name; see
    module docstring)."""
    with paused_gc(kept=True):      # thousands of small frozen tasks: no collector passes over them
        return _lowered(scenario, schedule, gpu, topology, algorithm, fold=False).build()


def lower_share(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile | str, topology: Topology | str, *,
                algorithm: str = "auto"):
    """GPU 0's share of :func:`lower`'s graph (:class:`~ficco_sim.engine.fold.Share`), made
    without the other GPUs' tasks, or None when the lowering does not give every GPU the
    same tasks turned (then lower the whole graph)."""
    with paused_gc(kept=True):
        return _lowered(scenario, schedule, gpu, topology, algorithm, fold=True).build_share()


def _lowered(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile | str, topology: Topology | str,
             algorithm: str, *, fold: bool) -> GraphBuilder:
    gpu = load_gpu(gpu)
    topology = load_topology(topology, gpu)
    schedule = resolve(scenario, schedule, gpu, topology)
    reason = invalid_reason(scenario, schedule, gpu, topology)
    if reason:
        raise InputError("schedule", schedule.name, reason)
    b = GraphBuilder(gpu, scenario.gpus, comm_priority=1 if schedule.priority == "high" else 0,
                     extra_smem=schedule.smem, channels=schedule.channels if schedule.engine != "dma" else None,
                     copy_engines=schedule.channels if schedule.engine == "dma" else None, sm_margin=schedule.margin,
                     fold=fold)
    algo = collectives.pick_algorithm(algorithm, scenario.spec.collective, topology.kind, schedule.engine,
                                      gpus=scenario.gpus, spec=gpu.comm_kernel, nbytes=scenario.comm_bytes_per_rank)
    b.rings = collectives.ring_orders(topology)
    b.meta.update(scenario=scenario.label(), schedule=schedule.name, gpu=gpu.name, topology=topology.name)
    LOWERINGS[scenario.kind](b, scenario, schedule, topology, algo)
    return b


# ----------------------------------------------------------------------------------------
# Steps

def _steps(schedule: Schedule, n: int, g: int, subs: int) -> list[list[tuple[int, int]]]:
    """Pieces (peer, sub) GPU ``g`` receives, step by step (peers at ring distance 1, 2, ...)."""
    peers = [(g - t) % n for t in range(1, n)]
    if schedule.pattern == "a2a":
        return [[(p, j) for p in peers] for j in range(subs)]
    return [[(p, j)] for p in peers for j in range(subs)]


def _groups(items: Sequence, size: int) -> list[list]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _comm_kernels(b: GraphBuilder, prefix: str, nsteps: int, deps=None) -> list[list[str]]:
    """kern[g][s]: the comm kernel GPU g runs for step s (SM engine)."""
    return [[b.comm_kernel(f"{prefix}.k{g}.s{s}", g, deps=(deps(g, s) if deps else ()), label=f"comm step {s}").id
             for s in range(nsteps)] for g in range(b.num_gpus)]


# ----------------------------------------------------------------------------------------
# all-gather -> GEMM (gather A along M)

def _gather_pieces(b: GraphBuilder, sch: Schedule, topo: Topology, buffer: str, shard: int, row_bytes: int):
    """The all-gather half of an overlapped AG -> GEMM: every GPU's ``shard`` rows of ``buffer``
    cut into pieces (one per peer for shard, ``gpus`` per peer for ficco) and moved step by
    step (see :func:`_steps`); on a ring, p2p pieces are forwarded by the left neighbour.

    Returns ``steps[g][s]`` (pieces (owner, sub) GPU g receives at step s), the rows of each
    sub-piece, ``arrived[(gpu, owner, sub)]`` (the transfer that brings it) and
    ``piece(buffer, owner, sub)``, the rows of a piece in any buffer laid out like ``buffer``.
    """
    n = b.num_gpus
    subs = n if sch.granularity == "ficco" else 1
    sub_rows = split_rows(shard, subs)
    sub_off = [sum(sub_rows[:j]) for j in range(subs)]

    def piece(buf: str, owner: int, j: int) -> Slice:
        return row_slice(buf, owner * shard + sub_off[j], sub_rows[j])

    steps = [_steps(sch, n, g, subs) for g in range(n)]
    nsteps = len(steps[0])
    forward = sch.pattern == "p2p" and topo.kind == "ring"
    arrived: dict[tuple[int, int, int], str] = {}
    kern = _comm_kernels(b, "ag", nsteps) if sch.engine == "sm" else None
    one_engine = 0 if sch.pattern == "p2p" else None   # p2p: one peer per step, copies in step order
    for s in range(nsteps):
        # the k-th piece of every GPU, then the (k+1)-th: each sender makes its pieces of a step
        # to its peers in turned order (the next GPU's first), as every other sender does
        for owner, j, g in ((*steps[g][s][k], g) for k in range(len(steps[0][s])) for g in range(n)):
            src = (g - 1) % n if forward else owner
            deps = [arrived[(src, owner, j)]] if forward and src != owner else []
            tid = f"ag.s{s}.{owner}.{j}->{g}"
            # (the executor's buffers, for tasks that are made: a folding builder only describes the rest)
            io = {"src": piece(buffer, owner, j), "dst": piece(buffer, owner, j)} \
                if b.makes(src if sch.engine == "sm" else g) else None
            if sch.engine == "sm":
                b.sm_transfer(tid, src, g, sub_rows[j] * row_bytes, (kern[src][s], kern[g][s]), step=("ag", s), deps=deps,
                              label=f"AG step {s}", io=io)
            else:
                b.dma_transfer(tid, g, src, g, sub_rows[j] * row_bytes, step=("ag", s), deps=deps, engine=one_engine,
                               label=f"AG step {s}", io=io)
            arrived[(g, owner, j)] = tid
    return steps, sub_rows, arrived, piece


def _ag_gemm(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology, algo: str) -> None:
    n, S, dt = sc.gpus, sc.shard_rows, sc.dtype
    b.buffer("A", sc.m, sc.k, dt)
    b.buffer("B", sc.k, sc.n, dt)
    b.buffer("C", sc.m, sc.n, dt)
    b.meta["reference"] = {"kind": "ag-gemm", "A": "A", "B": "B", "C": "C", "shard_rows": S}
    if not sch.overlapped:
        done = collectives.all_gather(b, "ag", S, sc.k, dt, buffer="A", engine=sch.engine, algorithm=algo)
        for g in range(n):
            b.gemm(f"gemm{g}", g, sc.m, sc.n, sc.k, dt, deps=done[g], label="GEMM",
                   io={"a": [Slice("A", 0, sc.m)], "c": [Slice("C", 0, sc.m)]})
        return

    if sc.shard_dim == "K":
        _ag_gemm_k(b, sc, sch, topo)
        return
    if sch.granularity == "fused":
        _ag_gemm_fused(b, sc, sch, topo)
        return
    steps, sub_rows, arrived, piece = _gather_pieces(b, sch, topo, "A", S, sc.k * sc.element_bytes)
    nsteps = len(steps[0])

    for g in range(n):
        b.gemm(f"gemm{g}.local", g, S, sc.n, sc.k, dt, label="GEMM local",
               io={"a": [row_slice("A", g * S, S)], "c": [row_slice("C", g * S, S)]})
        for i, grp in enumerate(_groups(range(nsteps), sch.group)):
            pieces = [pc for s in grp for pc in steps[g][s]]
            rows = sum(sub_rows[j] for _, j in pieces)
            deps = [arrived[(g, o, j)] for o, j in pieces]
            b.gemm(f"gemm{g}.{i}", g, rows, sc.n, sc.k, dt, deps=deps, label=f"GEMM piece {i}",
                   io={"a": [piece("A", o, j) for o, j in pieces], "c": [piece("C", o, j) for o, j in pieces]})


def _ag_gemm_fused(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology) -> None:
    """One GEMM per GPU over every gathered row: its own shard's rows first, then each peer's
    in the order they arrive (moved step by step, one peer a step, as ``shard-p2p`` moves
    them), each band's tiles dispatched once its rows have landed: the GEMM spins on a flag per
    chunk while the chunks cross (Flux's all-gather GEMM, PyTorch symmetric memory's fused
    all-gather matmul). No piece GEMMs, so no decomposition loss."""
    n, S, dt = sc.gpus, sc.shard_rows, sc.dtype
    steps, _, arrived, _ = _gather_pieces(b, Schedule("shard", "p2p", engine=sch.engine), topo, "A", S,
                                          sc.k * sc.element_bytes)
    for g in range(n):
        pieces = [pc for step in steps[g] for pc in step]
        order = [g] + [o for o, _ in pieces]
        waits = ((1 / n, ""),) + tuple((min(1.0, (i + 2) / n), arrived[(g, o, j)]) for i, (o, j) in enumerate(pieces))
        b.gemm(f"gemm{g}", g, sc.m, sc.n, sc.k, dt, waits=waits, label="GEMM (fused, rows as they arrive)",
               io={"a": [row_slice("A", o * S, S) for o in order], "c": [row_slice("C", o * S, S) for o in order]})


def _ag_gemm_k(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology) -> None:
    """All-gather A along K (weight-gradient style: tokens are the reduction dim), overlapped.

    A is held transposed, ``At`` (k x m), so that a K shard is a row slice; GPU g owns rows
    ``[g*k/N, (g+1)*k/N)`` of ``At`` and the whole B (k x n). Every piece is a partial
    product over its K rows, accumulated into the whole C: the local piece writes C
    (``accumulate=False``), every later piece adds to it (``accumulate=True``, beta = 1), in
    stream order. Each piece's ``io`` names its rows of ``At`` (``a``) and of ``B`` (``b``)
    and the whole C (``c``).
    """
    n, dt = sc.gpus, sc.dtype
    S = sc.k // n
    b.buffer("At", sc.k, sc.m, dt)
    b.buffer("B", sc.k, sc.n, dt)
    b.buffer("C", sc.m, sc.n, dt)
    b.meta["reference"] = {"kind": "ag-gemm", "dim": "K", "At": "At", "B": "B", "C": "C", "shard_rows": S}
    steps, sub_rows, arrived, piece = _gather_pieces(b, sch, topo, "At", S, sc.m * sc.element_bytes)
    nsteps = len(steps[0])
    whole_c = [Slice("C", 0, sc.m)]
    for g in range(n):
        b.gemm(f"gemm{g}.local", g, sc.m, sc.n, S, dt, label="GEMM local (K shard)",
               io={"a": [row_slice("At", g * S, S)], "b": [row_slice("B", g * S, S)], "c": whole_c})
        for i, grp in enumerate(_groups(range(nsteps), sch.group)):
            pieces = [pc for s in grp for pc in steps[g][s]]
            krows = sum(sub_rows[j] for _, j in pieces)
            b.gemm(f"gemm{g}.{i}", g, sc.m, sc.n, krows, dt, deps=[arrived[(g, o, j)] for o, j in pieces],
                   label=f"GEMM piece {i} (K, accumulate)", accumulate=True,
                   io={"a": [piece("At", o, j) for o, j in pieces], "b": [piece("B", o, j) for o, j in pieces],
                       "c": whole_c})


# ----------------------------------------------------------------------------------------
# GEMM -> reduce-scatter (scatter C along M)

def _gemm_rs(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology, algo: str) -> None:
    n, S, dt, cols = sc.gpus, sc.shard_rows, sc.dtype, sc.n
    b.buffer("A", sc.m, sc.k, dt)
    b.buffer("B", sc.k, sc.n, dt)
    b.buffer("P", sc.m, sc.n, dt)   # partial C; rank g's rows [gS, (g+1)S) end up summed
    b.buffer("R", sc.m, sc.n, dt)   # receive staging
    b.meta["reference"] = {"kind": "gemm-rs", "A": "A", "B": "B", "out": "P", "shard_rows": S}
    if not sch.overlapped:
        gemms = [[b.gemm(f"gemm{g}", g, sc.m, sc.n, sc.k, dt, label="GEMM",
                         io={"a": [Slice("A", 0, sc.m)], "c": [Slice("P", 0, sc.m)]}).id] for g in range(n)]
        collectives.reduce_scatter(b, "rs", S, cols, dt, buffer="P", staging="R", engine=sch.engine,
                                   algorithm=algo, deps=gemms)
        return
    if sch.granularity == "fused":
        _gemm_rs_fused(b, sc, sch)
        return

    subs = n if sch.granularity == "ficco" else 1
    sub_rows = split_rows(S, subs)
    sub_off = [sum(sub_rows[:j]) for j in range(subs)]
    rows_of = lambda buf, chunk, j: row_slice(buf, chunk * S + sub_off[j], sub_rows[j])  # noqa: E731
    esize = cols * sc.element_bytes
    if sch.pattern == "p2p":
        _gemm_rs_ring(b, sc, sch, subs, sub_rows, rows_of, esize)
        return

    # a2a: step j computes sub-piece j of every chunk, sends each to its owner, owner sums.
    gemm_of_step = {}
    for g in range(n):
        for i, grp in enumerate(_groups(range(subs), sch.group)):
            io = None       # (the executor's slices: only for the GPUs a folding builder makes)
            if b.makes(g):
                slices = [rows_of("P", c, j) for j in grp for c in [(g + 1 + t) % n for t in range(n)]]
                io = {"a": [Slice("A", s.start, s.stop) for s in slices], "c": slices}
            gid = b.gemm(f"gemm{g}.{i}", g, n * sum(sub_rows[j] for j in grp), sc.n, sc.k, dt,
                         label=f"GEMM piece {i}", io=io).id
            for j in grp:
                gemm_of_step[(g, j)] = gid
    kern = _comm_kernels(b, "rs", subs, deps=lambda g, s: [gemm_of_step[(g, s)]]) if sch.engine == "sm" else None
    incoming: dict[tuple[int, int], list[str]] = {}
    for j in range(subs):
        for src in range(n):
            for dst in [(src + t) % n for t in range(1, n)]:    # peers in turned order: no incast
                tid = f"rs.s{j}.{src}->{dst}"
                # (the executor's buffers, for tasks that are made: a folding builder only describes the rest)
                io = {"src": rows_of("P", dst, j), "dst": rows_of("R", src, j)} if b.makes(src) else None
                if sch.engine == "sm":
                    b.sm_transfer(tid, src, dst, sub_rows[j] * esize, (kern[src][j], kern[dst][j]), step=("rs", j),
                                  deps=[gemm_of_step[(src, j)]], label=f"RS step {j}", io=io)
                    incoming.setdefault((dst, j), []).append(kern[dst][j])
                else:
                    b.dma_transfer(tid, src, src, dst, sub_rows[j] * esize, step=("rs", j), deps=[gemm_of_step[(src, j)]],
                                   label=f"RS step {j}", io=io)
                    incoming.setdefault((dst, j), []).append(tid)
        for g in range(n):
            io = {"inputs": [rows_of("R", p, j) for p in range(n) if p != g] + [rows_of("P", g, j)],
                  "out": rows_of("P", g, j)} if b.makes(g) else None
            b.reduce(f"rs.sum{g}.{j}", g, sub_rows[j], cols, dt, n,
                     deps=sorted(set(incoming[(g, j)])) + [gemm_of_step[(g, j)]], label=f"RS sum {j}", io=io)


def _gemm_rs_ring(b: GraphBuilder, sc: Scenario, sch: Schedule, subs: int, sub_rows: list[int], rows_of,
                  esize: int) -> None:
    """Ring reduce-scatter chained with the GEMM pieces: at step t GPU g computes its partial
    of chunk g-t, adds what g-1 sent (the running sum), and sends the sum to g+1; the
    last piece it computes is its own chunk."""
    n, dt, cols = sc.gpus, sc.dtype, sc.n
    # order[g] = (chunk, sub) pieces in compute order; the last N-1... per sub: chunks g-1, g-2, ..., g.
    order = [[((g - t) % n, j) for j in range(subs) for t in list(range(1, n)) + [n]] for g in range(n)]
    nsteps = subs * (n - 1)
    gemm_of: dict[tuple[int, int, int], str] = {}
    for g in range(n):
        for i, grp in enumerate(_groups(order[g], sch.group)):
            slices = [rows_of("P", c, j) for c, j in grp]
            gid = b.gemm(f"gemm{g}.{i}", g, sum(s.stop - s.start for s in slices), sc.n, sc.k, dt,
                         label=f"GEMM piece {i}",
                         io={"a": [Slice("A", s.start, s.stop) for s in slices], "c": slices}).id
            for c, j in grp:
                gemm_of[(g, c, j)] = gid
    # ready[(g, c, j)]: task after which GPU g holds its running sum of piece (c, j).
    ready = {key: gid for key, gid in gemm_of.items()}
    recv: dict[tuple[int, int, int], str] = {}
    step_of = lambda t, j: j * (n - 1) + (t - 1)  # noqa: E731
    kern = None
    if sch.engine == "sm":
        kern = [[None] * nsteps for _ in range(n)]
    for j in range(subs):
        for t in range(1, n):
            s = step_of(t, j)
            for g in range(n):   # comm kernels first: they drive both directions of step s
                if kern is not None:
                    c_send = (g - t) % n
                    kern[g][s] = b.comm_kernel(f"rs.k{g}.s{s}", g, deps=[ready[(g, c_send, j)]],
                                               label=f"comm step {s}").id
            for g in range(n):
                dst, c = (g + 1) % n, (g - t) % n
                tid = f"rs.s{s}.{g}->{dst}"
                io = {"src": rows_of("P", c, j), "dst": rows_of("R", c, j)} if b.makes(g) else None
                if kern is not None:
                    b.sm_transfer(tid, g, dst, sub_rows[j] * esize, (kern[g][s], kern[dst][s]), step=("rs", s),
                                  deps=[ready[(g, c, j)]], label=f"RS step {s}", io=io)
                    recv[(dst, c, j)] = kern[dst][s]
                else:
                    b.dma_transfer(tid, g, g, dst, sub_rows[j] * esize, step=("rs", s), deps=[ready[(g, c, j)]],
                                   label=f"RS step {s}", io=io)
                    recv[(dst, c, j)] = tid
            for g in range(n):
                c = (g - 1 - t) % n   # what g just received from g-1
                rid = b.reduce(f"rs.sum{g}.{c}.{j}", g, sub_rows[j], cols, dt, 2, stream=COMM,
                               deps=[recv[(g, c, j)], gemm_of[(g, c, j)]], label=f"RS add step {s}",
                               io={"inputs": [rows_of("R", c, j), rows_of("P", c, j)], "out": rows_of("P", c, j)}
                               if b.makes(g) else None).id
                ready[(g, c, j)] = rid


def _gemm_rs_fused(b: GraphBuilder, sc: Scenario, sch: Schedule) -> None:
    """One GEMM per GPU over all its rows, chunk by chunk in the order their owners are
    served (the next GPU's chunk first, its own last), each chunk leaving on the tile signal
    of its last row: by a communication kernel (``sm``), a copy command (``dma``) or the
    GEMM's own epilogue stores (``st``); each owner then sums the ``gpus`` partials of its
    chunk, once every peer's signal (or transfer) for it is in."""
    n, S, dt, cols = sc.gpus, sc.shard_rows, sc.dtype, sc.n
    esize = cols * sc.element_bytes
    chunk = lambda buf, c: row_slice(buf, c * S, S)  # noqa: E731
    order = [[(g + 1 + i) % n for i in range(n)] for g in range(n)]     # chunks in compute order
    share = lambda g, i: (i + 1) / n  # noqa: E731     rows of g's GEMM done once chunk order[g][i] is
    gemm = {}
    for g in range(n):
        stores = tuple((share(g, i), c) for i, c in enumerate(order[g])) if sch.engine == "st" else ()
        gemm[g] = b.gemm(f"gemm{g}", g, sc.m, sc.n, sc.k, dt, label="GEMM (fused, tile signals)", stores=stores,
                         io={"a": [chunk("A", c) for c in order[g]], "c": [chunk("P", c) for c in order[g]],
                             "stores": [(chunk("P", c), c, chunk("R", g)) for c in order[g] if c != g]}).id
    incoming: dict[int, list[str]] = {d: [] for d in range(n)}
    signals: dict[int, list[tuple[str, float]]] = {d: [] for d in range(n)}
    kern = None
    if sch.engine == "sm":   # step i: GPU g sends chunk order[g][i] and receives from g - 1 - i
        kern = [[b.comm_kernel(f"rs.k{g}.s{i}", g, signals=[(gemm[g], share(g, i))], label=f"comm step {i}").id
                 for i in range(n - 1)] for g in range(n)]
    for g in range(n):
        for i, d in enumerate(order[g][:-1]):
            io = {"src": chunk("P", d), "dst": chunk("R", g)}
            if sch.engine == "st":
                signals[d].append((gemm[g], share(g, i)))
            elif sch.engine == "sm":
                b.sm_transfer(f"rs.s{i}.{g}->{d}", g, d, S * esize, (kern[g][i], kern[d][i]), step=("rs", i),
                              label=f"RS step {i}", io=io)
                incoming[d].append(kern[d][i])
            else:
                incoming[d].append(b.dma_transfer(f"rs.s{i}.{g}->{d}", g, g, d, S * esize, step=("rs", i),
                                                  signals=[(gemm[g], share(g, i))], label=f"RS step {i}", io=io).id)
    for d in range(n):
        inputs = [chunk("R", p) for p in range(n) if p != d] + [chunk("P", d)]
        b.reduce(f"rs.sum{d}", d, S, cols, dt, n, deps=sorted(set(incoming[d])) + [gemm[d]], signals=signals[d],
                 label="RS sum", io={"inputs": inputs, "out": chunk("P", d)})


# ----------------------------------------------------------------------------------------
# all-to-all -> expert GEMM (MoE dispatch)

def _a2a_gemm(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology, algo: str) -> None:
    n, dt = sc.gpus, sc.dtype
    counts = sc.tokens()
    recv_rows = [sum(counts[p][q] for p in range(n) if p != q) for q in range(n)]
    out_rows = max(sc.expert_rows(q) for q in range(n))
    b.buffer("X", sc.m, sc.k, dt)                       # local tokens, grouped by destination
    b.buffer("Y", max(1, max(recv_rows)), sc.k, dt)     # received tokens, grouped by source
    b.buffer("W", sc.k, sc.n, dt)                       # this GPU's expert
    b.buffer("Z", out_rows, sc.n, dt)                   # expert output: local rows, then received rows
    b.meta["reference"] = {"kind": "a2a-gemm", "X": "X", "Y": "Y", "W": "W", "Z": "Z",
                           "counts": [list(r) for r in counts]}
    src_off = [[sum(counts[p][:q]) for q in range(n)] for p in range(n)]
    y_off = [[sum(counts[r][q] for r in range(p) if r != q) for q in range(n)] for p in range(n)]

    def local_gemm(g: int, deps=()) -> None:
        rows = counts[g][g]
        if rows:
            b.gemm(f"gemm{g}.local", g, rows, sc.n, sc.k, dt, deps=deps, label="expert GEMM local",
                   io={"a": [row_slice("X", src_off[g][g], rows)], "c": [row_slice("Z", 0, rows)]})

    if not sch.overlapped:
        done = collectives.all_to_all(b, "a2a", counts, sc.k, dt, src_buffer="X", dst_buffer="Y", engine=sch.engine)
        for g in range(n):
            rows, got = counts[g][g], recv_rows[g]
            a = ([row_slice("X", src_off[g][g], rows)] if rows else []) + ([row_slice("Y", 0, got)] if got else [])
            b.gemm(f"gemm{g}", g, rows + got, sc.n, sc.k, dt, deps=done[g], label="expert GEMM",
                   io={"a": a, "c": [row_slice("Z", 0, rows + got)]})
        return

    subs = n if sch.granularity == "ficco" else 1
    steps = [_steps(sch, n, g, subs) for g in range(n)]
    nsteps = len(steps[0])
    split = {(p, q): split_rows(counts[p][q], subs) for p in range(n) for q in range(n)}
    sub_off = lambda p, q, j: sum(split[(p, q)][:j])  # noqa: E731
    kern = _comm_kernels(b, "a2a", nsteps) if sch.engine == "sm" else None
    # p2p moves one peer per step: its copies queue on one engine, in step order.
    one_engine = 0 if sch.pattern == "p2p" else None
    arrived: dict[tuple[int, int, int], str] = {}
    for s in range(nsteps):
        # the k-th piece of every GPU, then the (k+1)-th: each sender makes its pieces of a step to
        # its peers in turned order, as every other sender does (so the graph folds: an SM transfer
        # is its sender's task); each receiver's copy commands keep their order
        for p, j, g in ((*steps[g][s][k], g) for k in range(len(steps[0][s])) for g in range(n)):
            rows = split[(p, g)][j]
            if rows == 0:
                continue
            tid = f"a2a.s{s}.{p}.{j}->{g}"
            io = {"src": row_slice("X", src_off[p][g] + sub_off(p, g, j), rows),
                  "dst": row_slice("Y", y_off[p][g] + sub_off(p, g, j), rows)}
            nbytes = rows * sc.k * sc.element_bytes
            if sch.engine == "sm":
                b.sm_transfer(tid, p, g, nbytes, (kern[p][s], kern[g][s]), step=("a2a", s), label=f"A2A step {s}", io=io)
            else:
                b.dma_transfer(tid, g, p, g, nbytes, step=("a2a", s), engine=one_engine, label=f"A2A step {s}", io=io)
            arrived[(g, p, j)] = tid
    for g in range(n):
        local_gemm(g)
        base = counts[g][g]
        for i, grp in enumerate(_groups(range(nsteps), sch.group)):
            pieces = [(p, j) for s in grp for p, j in steps[g][s] if (g, p, j) in arrived]
            if not pieces:
                continue
            ys = [row_slice("Y", y_off[p][g] + sub_off(p, g, j), split[(p, g)][j]) for p, j in pieces]
            b.gemm(f"gemm{g}.{i}", g, sum(y.stop - y.start for y in ys), sc.n, sc.k, dt,
                   deps=[arrived[(g, p, j)] for p, j in pieces], label=f"expert GEMM piece {i}",
                   io={"a": ys, "c": [Slice("Z", base + y.start, base + y.stop) for y in ys]})


# ----------------------------------------------------------------------------------------
# GEMM beside an independent collective

def _par(b: GraphBuilder, sc: Scenario, sch: Schedule, topo: Topology, algo: str) -> None:
    """Every GPU: C = A @ B, and the kind's collective on X (m x k; see
    :mod:`ficco_sim.workload`). ``none``: the GEMM after the collective; ``par``: both at
    once, the collective issued first (``gf``: the GEMM first; ``mix``: on the odd GPUs). A kernel reaches the SMs
    after its launch delay and kernels are dispatched in arrival order, so the one issued
    first takes the SMs it needs and the other gets what is left, then SMs as they free:
    a GEMM issued first keeps the SMs wave after wave and the collective waits for its
    last wave; ``hi`` and ``m<N>`` are the remedies."""
    n, dt, S = sc.gpus, sc.dtype, sc.shard_rows
    gemm = lambda g, deps: b.gemm(f"gemm{g}", g, sc.m, sc.n, sc.k, dt, deps=deps, label="GEMM",  # noqa: E731
                                  io={"a": [Slice("A", 0, sc.m)], "c": [Slice("C", 0, sc.m)]})
    first = [g for g in range(n) if sch.gemm_goes_first(g)]
    for g in first:
        gemm(g, ())
    coll = sc.spec.collective
    for name, rows, cols in (("A", sc.m, sc.k), ("B", sc.k, sc.n), ("C", sc.m, sc.n), ("X", sc.m, sc.k)):
        b.buffer(name, rows, cols, dt)
    ref = {"kind": sc.kind, "A": "A", "B": "B", "C": "C", "X": "X", "inputs": ["A", "B", "X"], "shard_rows": S}
    if coll == "all-gather":
        done = collectives.all_gather(b, "ag", S, sc.k, dt, buffer="X", engine=sch.engine, algorithm=algo)
    elif coll == "all-to-all":
        b.buffer("Y", sc.m, sc.k, dt)
        ref["Y"] = "Y"
        done = collectives.all_to_all(b, "a2a", sc.tokens(), sc.k, dt, src_buffer="X", dst_buffer="Y",
                                      engine=sch.engine)
    else:
        b.buffer("R", sc.m, sc.k, dt)
        done = collectives.all_reduce(b, "ar", S, sc.k, dt, buffer="X", staging="R", engine=sch.engine,
                                      algorithm=algo)
    b.meta["reference"] = ref
    for g in range(n):
        if g not in first:
            gemm(g, () if sch.overlapped else done[g])


# Every kind of the registry lowers; a kind without a lowering is a bug caught on import.
LOWERINGS = {"ag-gemm": _ag_gemm, "gemm-rs": _gemm_rs, "a2a-gemm": _a2a_gemm,
             "ag-par-gemm": _par, "a2a-par-gemm": _par, "ar-par-gemm": _par}
assert set(LOWERINGS) == set(KINDS), f"lowerings {sorted(LOWERINGS)} != scenario kinds {sorted(KINDS)}"
