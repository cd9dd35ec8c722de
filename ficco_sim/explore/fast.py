"""A vectorized closed-form estimator: the analytical model over many sizes at once.

:func:`ficco_sim.analytical.analytical_timeline` walks one task graph in Python, a few
milliseconds per schedule point: too slow for sweeps of 10^5 points. This module
compiles a task graph once per (structure, GPU, topology) into a **template**, a
max-plus DAG whose nodes are task begin/end times, then evaluates it for an array of
scenario sizes with numpy, one vector operation per DAG level:

* a kernel begins ``launch`` after its dependencies and its stream predecessor end;
  a GEMM ends its closed-form isolated time later (vectorized tile choice, waves, HBM
  bound: :func:`gemm_times`), a reduce its bytes over HBM, a communication kernel
  when the transfers it drives end;
* a transfer takes ``fixed + latency + bytes / bandwidth``, the bandwidth being the
  same structural share the analytical model computes (it does not depend on sizes);
* piece sizes scale with the scenario: rows with M (or K), bytes with M x K (M x N for
  reduce-scatter).

A second pass applies the analytical model's contention factors (SM loss to resident
communication channels, HBM interference both ways), from the overlaps of the first
pass. On the scenario a template was built from, the result is the analytical model's
makespan (tested); on other sizes of the same structure, piece rows are rounded.

>>> from ficco_sim.workload import Scenario
>>> sc = [Scenario("ag-gemm", 4, m, 4096, 4096) for m in (4096, 8192, 16384)]
>>> rows = estimate_many(sc, ["none", "ficco-a2a-dma"], "h100", "switch:4")
>>> [round(r["speedup"], 2) > 0 for r in rows][:2]
[True, True]
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..analytical import _Pass
from ..gemm_model import blocks_per_sm
from ..hardware import DTYPE_BYTES, GpuProfile, load_gpu
from ..metrics import comm_only_graph, kernel_isolated_time
from ..schedules import Schedule, lower, parse_schedule
from ..taskgraph import Kernel, TaskGraph
from ..topology import Topology, load_topology
from ..workload import Scenario

ZERO, CONST, GEMM, XFER, MEM = range(5)


# ----------------------------------------------------------------------------------------
# GEMM times, vectorized over shapes

def gemm_times(gpu: GpuProfile, m, n, k, dtype: str = "float16", *, extra_smem: int = 0,
               accumulate: bool = False) -> np.ndarray:
    """Isolated GEMM times (s, launch excluded) for arrays of shapes: the tile a library
    picks without shaping, then ``extra_smem`` applied (as :func:`~ficco_sim.gemm_model.plan_gemm`).

    >>> from ficco_sim.gemm_model import gemm_time
    >>> g = load_gpu("h100")
    >>> t = gemm_times(g, np.array([8192]), np.array([8192]), np.array([8192]))[0]
    >>> bool(abs(t + g.launch_overhead - gemm_time(g, 8192, 8192, 8192)) < 1e-12)
    True
    """
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    size = DTYPE_BYTES[dtype]
    eff = gpu.gemm.efficiency[dtype]
    fps = gpu.flops_per_sm(dtype)
    hbm = (m * k + k * n) * size + m * n * size * (2 if accumulate else 1)

    def timed(tile, extra: int) -> np.ndarray:
        from dataclasses import replace
        block = replace(tile.block, smem=tile.block.smem + extra)
        occ = blocks_per_sm(gpu.sm, block)
        grid = np.ceil(m / tile.m) * np.ceil(n / tile.n)
        bt = occ * 2.0 * tile.m * tile.n * (k + gpu.gemm.k_overhead) / (fps * eff)
        per_block = hbm / grid
        slots = gpu.num_sms * max(1, occ)
        full, rest = np.floor(grid / slots), np.mod(grid, slots)
        wave_full = np.maximum(bt, slots * per_block / gpu.hbm_effective)
        wave_rest = np.maximum(bt, rest * per_block / gpu.hbm_effective)
        return full * wave_full + np.where(rest > 0, wave_rest, 0.0)

    tiles = gpu.gemm.tiles
    iso = np.stack([timed(t, 0) for t in tiles])          # (tiles, P)
    best = np.argmin(iso, axis=0)                          # first minimum, as min() picks
    if not extra_smem:
        return iso[best, np.arange(iso.shape[1])]
    shaped = np.stack([timed(t, extra_smem) for t in tiles])
    return shaped[best, np.arange(shaped.shape[1])]


# ----------------------------------------------------------------------------------------
# Templates

@dataclass
class Template:
    """A task graph compiled into a levelled max-plus DAG (see module docstring)."""

    ref: Scenario
    num_nodes: int
    levels: list[tuple[np.ndarray, np.ndarray]]   # (node ids, padded input ids) per level
    kind: np.ndarray           # node -> ZERO | CONST | GEMM | XFER | MEM
    const: np.ndarray          # CONST: launch; XFER: fixed + latency; MEM: ref duration
    coef: np.ndarray           # XFER: s per byte at ref; GEMM: unused
    ref_bytes: np.ndarray      # XFER: ref bytes
    gemm_shape: np.ndarray     # GEMM node -> index into shapes
    shapes: list[tuple[int, int, int, bool, int]]   # (m, n, k, accumulate, extra shared memory) at ref
    gpu_of: np.ndarray         # node -> GPU (kernels: their GPU; transfers: src)
    dst_of: np.ndarray         # transfers: dst, else -1
    begin_of: dict             # task index -> begin node
    gemm_nodes: np.ndarray     # end nodes of GEMMs
    gemm_begin: np.ndarray
    comm_nodes: np.ndarray     # end nodes of comm kernels
    comm_begin: np.ndarray
    comm_grid: np.ndarray
    xfer_nodes: np.ndarray
    xfer_begin: np.ndarray
    xfer_ready: np.ndarray
    launch: float
    groups: "Groups | None" = None
    gemm_targets: np.ndarray | None = None   # GEMMs (xfers) whose slowdown the contention pass computes;
    xfer_targets: np.ndarray | None = None   # None: all (a quotient computes one per class)
    quotient: "Template | None" = None       # evaluated instead when set (:func:`ficco_sim.explore.symmetry.quotient`)
    orbit: np.ndarray | None = None          # node (and sentinel) -> quotient node


def compile_graph(graph: TaskGraph, scenario: Scenario, gpu: GpuProfile, topo: Topology, extra_smem: int = 0
                  ) -> Template:
    """The template of ``graph`` (lowered from ``scenario``)."""
    p = _Pass(graph, gpu, topo, {})
    nodes: list[dict] = []

    def node(kind: int, **kw) -> int:
        nodes.append({"kind": kind, "inputs": [], "const": 0.0, "coef": 0.0, "bytes": 0.0, "shape": -1, "gpu": -1,
                      "dst": -1, **kw})
        return len(nodes) - 1

    begin, end, ready = {}, {}, {}
    latency: dict[tuple[int, int], float] = {}     # path latencies, computed once per pair
    shapes: dict[tuple, int] = {}
    prev: dict[str, str | None] = {}
    last: dict = {}
    for t in graph.tasks:
        key = graph.stream_of(t)
        prev[t.id] = last.get(key) if key else None
        if key:
            last[key] = t.id
    for t in graph.tasks:
        if isinstance(t, Kernel):
            begin[t.id] = node(CONST, const=gpu.launch_overhead, gpu=t.gpu)
            if t.kind == "gemm":
                io = t.io
                sh = (int(io["m"]), int(io["n"]), int(io["k"]), bool(io.get("accumulate")), extra_smem)
                end[t.id] = node(GEMM, shape=shapes.setdefault(sh, len(shapes)), gpu=t.gpu)
            elif t.kind == "comm":
                end[t.id] = node(ZERO, gpu=t.gpu)
            else:
                end[t.id] = node(MEM, const=kernel_isolated_time(gpu, t, launch=False), gpu=t.gpu)
        else:
            ready[t.id] = node(ZERO, gpu=t.src, dst=t.dst)
            begin[t.id] = node(ZERO, gpu=t.src, dst=t.dst) if t.engine == "sm" else ready[t.id]
            full = p.transfer_time(t)
            if (t.src, t.dst) not in latency:
                latency[(t.src, t.dst)] = topo.path_latency(t.src, t.dst)
            fixed = (gpu.dma.command_overhead if t.engine == "dma" else 0.0) + latency[(t.src, t.dst)]
            end[t.id] = node(XFER, const=fixed, coef=(full - fixed) / t.nbytes if t.nbytes else 0.0,
                             bytes=t.nbytes, gpu=t.src, dst=t.dst)
    for t in graph.tasks:
        pre = [end[d] for d in t.deps] + ([end[prev[t.id]]] if prev[t.id] else [])
        if isinstance(t, Kernel):
            nodes[begin[t.id]]["inputs"] = pre
            nodes[end[t.id]]["inputs"] = [begin[t.id]] + ([end[x] for x in p.driven[t.id]] if t.kind == "comm" else [])
        else:
            nodes[ready[t.id]]["inputs"] = pre
            if t.engine == "sm":
                nodes[begin[t.id]]["inputs"] = [ready[t.id]] + [begin[k] for k in t.drivers]
            nodes[end[t.id]]["inputs"] = [begin[t.id]]
    n = len(nodes)
    level = _levels(nodes)
    levels = []
    for lv in range(1, int(level.max()) + 1 if n else 1):
        ids = np.flatnonzero(level == lv)
        width = max(len(nodes[i]["inputs"]) for i in ids)
        pad = np.full((len(ids), max(1, width)), n, dtype=np.int64)   # n: the zero source
        for r, i in enumerate(ids):
            pad[r, :len(nodes[i]["inputs"])] = nodes[i]["inputs"]
        levels.append((ids, pad))
    arr = lambda f, dt=float: np.array([x[f] for x in nodes], dtype=dt)  # noqa: E731
    kernels = [t for t in graph.tasks if isinstance(t, Kernel)]
    gemms = [t for t in kernels if t.kind == "gemm"]
    comms = [t for t in kernels if t.kind == "comm"]
    xfers = graph.transfers
    ix = lambda d, ts: np.array([d[t.id] for t in ts], dtype=np.int64)  # noqa: E731
    return Template(
        ref=scenario, num_nodes=n, levels=levels, kind=arr("kind", np.int64), const=arr("const"), coef=arr("coef"),
        ref_bytes=arr("bytes"), gemm_shape=arr("shape", np.int64), shapes=list(shapes),
        gpu_of=arr("gpu", np.int64), dst_of=arr("dst", np.int64), begin_of=begin,
        gemm_nodes=ix(end, gemms), gemm_begin=ix(begin, gemms), comm_nodes=ix(end, comms),
        comm_begin=ix(begin, comms), comm_grid=np.array([k.grid for k in comms], dtype=float),
        xfer_nodes=ix(end, xfers), xfer_begin=ix(begin, xfers), xfer_ready=ix(ready, xfers),
        launch=gpu.launch_overhead,
        groups=_groups(np.array([t.gpu for t in gemms], dtype=np.int64), np.array([k.gpu for k in comms], dtype=np.int64),
                       np.array([k.grid for k in comms], dtype=float), np.array([t.src for t in xfers], dtype=np.int64),
                       np.array([t.dst for t in xfers], dtype=np.int64)))


def merge(tpls: Sequence[Template], *, rotations: bool = False) -> tuple[Template, np.ndarray]:
    """Templates of one scenario shape as one block-diagonal template (one evaluation for
    all: numpy's per-call cost is paid once), and each one's first node (plus the total).
    With ``rotations``, templates found symmetric under rotation of GPU ids are evaluated
    one task per class (:func:`ficco_sim.explore.symmetry.quotient`).

    GPUs (and source/destination pairs) of different templates stay apart in the
    contention pass: they are renumbered ``gpu + i * G`` for template ``i``. All must be
    built from the same reference scenario (sizes scale from it)."""
    assert all(t.ref == tpls[0].ref for t in tpls), "templates of different reference scenarios"
    offs = np.cumsum([0] + [t.num_nodes for t in tpls])
    N = int(offs[-1])
    shapes: dict[tuple, int] = {}
    remap = [np.array([shapes.setdefault(sh, len(shapes)) for sh in t.shapes] + [-1], dtype=np.int64) for t in tpls]
    depth = max(len(t.levels) for t in tpls)
    levels = []
    for lv in range(depth):
        got = [(t.levels[lv], o) for t, o in zip(tpls, offs) if lv < len(t.levels)]
        width = max(pad.shape[1] for (_, pad), _ in got)
        ids = np.concatenate([i + o for (i, _), o in got])
        pad = np.full((len(ids), width), N, dtype=np.int64)
        r = 0
        for ((i, p), o), t in zip(got, [t for t in tpls if lv < len(t.levels)]):
            pad[r:r + len(i), :p.shape[1]] = np.where(p == t.num_nodes, N, p + o)
            r += len(i)
        levels.append((ids, pad))
    cat = lambda f: np.concatenate([getattr(t, f) for t in tpls])  # noqa: E731
    at = lambda f: np.concatenate([getattr(t, f) + o for t, o in zip(tpls, offs)])  # noqa: E731
    G = max(tpls[0].ref.gpus, 1 + max(int(max(t.gpu_of.max(initial=0), t.dst_of.max(initial=0))) for t in tpls))
    gpu_of = np.concatenate([np.where(t.gpu_of >= 0, t.gpu_of + i * G, -1) for i, t in enumerate(tpls)])
    dst_of = np.concatenate([np.where(t.dst_of >= 0, t.dst_of + i * G, -1) for i, t in enumerate(tpls)])
    gemm_nodes, comm_nodes, xfer_nodes = at("gemm_nodes"), at("comm_nodes"), at("xfer_nodes")
    comm_grid = cat("comm_grid")
    out = Template(
        ref=tpls[0].ref, num_nodes=N, levels=levels, kind=cat("kind"), const=cat("const"), coef=cat("coef"),
        ref_bytes=cat("ref_bytes"), gemm_shape=np.concatenate([r[t.gemm_shape] for r, t in zip(remap, tpls)]),
        shapes=list(shapes), gpu_of=gpu_of, dst_of=dst_of, begin_of={}, gemm_nodes=gemm_nodes,
        gemm_begin=at("gemm_begin"), comm_nodes=comm_nodes, comm_begin=at("comm_begin"), comm_grid=comm_grid,
        xfer_nodes=xfer_nodes, xfer_begin=at("xfer_begin"), xfer_ready=at("xfer_ready"), launch=tpls[0].launch,
        groups=_groups(gpu_of[gemm_nodes], gpu_of[comm_nodes], comm_grid, gpu_of[xfer_nodes], dst_of[xfer_nodes]))
    if rotations:
        from .symmetry import quotient
        out.quotient, out.orbit = quotient(out, G, tpls[0].ref.gpus)
    return out, offs


def _part(ev: dict, a: int, b: int) -> dict[str, np.ndarray]:
    """One template's share of a merged evaluation (nodes ``a:b``, sentinel column kept)."""
    cols = np.r_[a:b, ev["vals"].shape[1] - 1]
    part = {k: ev[k][:, cols] for k in ("vals", "add", "base", "nbytes")}
    part["makespan"] = ev["vals"][:, a:b].max(axis=1)
    return part


def _levels(nodes: list[dict]) -> np.ndarray:
    """Longest-path depth of every node (inputs first), by Kahn's algorithm (plain lists:
    numpy scalar indexing would dominate template building)."""
    n = len(nodes)
    outs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, x in enumerate(nodes):
        for j in x["inputs"]:
            outs[j].append(i)
        indeg[i] = len(x["inputs"])
    level = [1] * n
    stack = [i for i in range(n) if indeg[i] == 0]
    while stack:
        i = stack.pop()
        li = level[i] + 1
        for j in outs[i]:
            if level[j] < li:
                level[j] = li
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return np.array(level, dtype=np.int64)


# ----------------------------------------------------------------------------------------
# Evaluation

def _scales(tpl: Template, scenarios: Sequence[Scenario]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = tpl.ref
    return (np.array([s.m / r.m for s in scenarios]), np.array([s.n / r.n for s in scenarios]),
            np.array([s.k / r.k for s in scenarios]))


def _durations(tpl: Template, gpu: GpuProfile, scenarios: Sequence[Scenario]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P, nodes) base durations, per-node byte counts (transfers), (P, GEMMs) HBM bytes."""
    fm, fn, fk = _scales(tpl, scenarios)
    P = len(scenarios)
    dur = np.zeros((P, tpl.num_nodes + 1))
    nbytes = np.zeros((P, tpl.num_nodes + 1))
    kind = tpl.kind
    dur[:, :-1] = np.where(kind == CONST, tpl.const, 0.0)
    gemm_hbm = np.zeros((P, len(tpl.gemm_nodes)))
    if tpl.shapes:
        dt = tpl.ref.dtype
        e = DTYPE_BYTES[dt]
        times, traffic = [], []
        for m, n, k, acc, smem in tpl.shapes:
            m, n, k = (np.maximum(1, np.round(x * f)) for x, f in ((m, fm), (n, fn), (k, fk)))
            times.append(gemm_times(gpu, m, n, k, dt, extra_smem=smem, accumulate=acc))
            traffic.append(((m * k + k * n) + m * n * (2 if acc else 1)) * e)
        times, traffic = np.stack(times, axis=1), np.stack(traffic, axis=1)   # (P, shapes)
        g = np.flatnonzero(kind == GEMM)
        dur[:, g] = times[:, tpl.gemm_shape[g]]
        gemm_hbm = traffic[:, tpl.gemm_shape[tpl.gemm_nodes]]
    other = fn if tpl.ref.kind == "gemm-rs" else fk
    x = np.flatnonzero(kind == XFER)
    nbytes[:, x] = tpl.ref_bytes[x] * (fm * other)[:, None]
    mm = np.flatnonzero(kind == MEM)
    dur[:, mm] = tpl.const[mm] * (fm * fn)[:, None]
    return dur, nbytes, gemm_hbm


def _run(tpl: Template, add: np.ndarray) -> np.ndarray:
    vals = np.zeros_like(add)
    for ids, pad in tpl.levels:
        vals[:, ids] = vals[:, pad].max(axis=2) + add[:, ids]
    return vals


def _disjoint(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans (..., B) rewritten as disjoint spans with the same union (sorted, empty ones
    allowed): span i keeps only what lies past the ends of the spans before it."""
    order = np.argsort(starts, axis=-1)
    a = np.take_along_axis(starts, order, -1)
    b = np.take_along_axis(ends, order, -1)
    run = np.maximum.accumulate(b, axis=-1)
    prev = np.concatenate([np.full(a[..., :1].shape, -np.inf), run[..., :-1]], axis=-1)
    return np.maximum(a, prev), np.maximum(b, prev)


def _covered(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (P, A): fraction of [s, e) covered by disjoint spans (P, A, B)."""
    cov = np.maximum(0.0, np.minimum(e[..., None], hi) - np.maximum(s[..., None], lo)).sum(-1)
    width = e - s
    return np.where(width > 0, cov / np.where(width > 0, width, 1.0), 0.0)


def _members(member: np.ndarray) -> np.ndarray:
    """Row r's member columns of a boolean (R, B) matrix, padded with B (a sentinel column).

    >>> _members(np.array([[True, False, True], [False, True, False]])).tolist()
    [[0, 2], [1, 3]]
    """
    width = max(1, int(member.sum(1).max())) if member.size else 1
    out = np.full((member.shape[0], width), member.shape[1], dtype=np.int64)
    for r, row in enumerate(member):
        ids = np.flatnonzero(row)
        out[r, :len(ids)] = ids
    return out


def _pad(x: np.ndarray, fill: float) -> np.ndarray:
    """``x`` (P, B) with one more column of ``fill`` (what sentinel indices gather)."""
    return np.concatenate([x, np.full((x.shape[0], 1), fill)], axis=1)


def _contention(tpl: Template, gpu: GpuProfile, vals: np.ndarray, add: np.ndarray, nbytes: np.ndarray,
                gemm_hbm: np.ndarray) -> np.ndarray:
    """(P, nodes) slowdown factors from the overlaps of a contention-free pass.

    All GPUs at once: a GEMM (transfer) meets only the spans of its GPU (of its source and
    destination), gathered through the template's padded member lists (:class:`Groups`);
    padding gathers an empty span at +inf. The spans are merged into disjoint spans once
    per GPU (per source/destination pair)."""
    slow = np.ones_like(add)
    grp = tpl.groups
    if grp is None:
        return slow
    ct = gpu.contention
    inf = np.inf
    tg = slice(None) if tpl.gemm_targets is None else tpl.gemm_targets
    tx = slice(None) if tpl.xfer_targets is None else tpl.xfer_targets
    gs_all, ge_all = vals[:, tpl.gemm_begin], vals[:, tpl.gemm_nodes]
    xs_all, xe_all = vals[:, tpl.xfer_begin], vals[:, tpl.xfer_nodes]
    xmask = xe_all > xs_all
    xrate = np.where(xmask, nbytes[:, tpl.xfer_nodes] / np.where(xmask, xe_all - xs_all, 1.0), 0.0)
    grate = np.where(ge_all > gs_all, gemm_hbm / np.where(ge_all > gs_all, ge_all - gs_all, 1.0), 0.0)
    gs, ge = gs_all[:, tg], ge_all[:, tg]
    xs, xe = xs_all[:, tx], xe_all[:, tx]
    row = grp.row
    s, e = gs[..., None], ge[..., None]                                   # (P, G, 1)
    f_sm = loss = 0.0
    if len(tpl.comm_nodes):
        a = _pad(vals[:, tpl.comm_begin], inf)[:, grp.comm]               # (P, U, Wc)
        b = _pad(vals[:, tpl.comm_nodes], inf)[:, grp.comm]
        lo, hi = _disjoint(a, b)
        f_sm = _covered(gs, ge, lo[:, row], hi[:, row])
        over = (a[:, row] < e) & (b[:, row] > s)
        loss = np.minimum(0.9, np.where(over, grp.comm_grid[row], 0.0).max(-1) / gpu.num_sms)
    f_hbm = rate = 0.0
    if len(tpl.xfer_nodes):
        a = _pad(np.where(xmask, xs_all, inf), inf)[:, grp.near]          # (P, U, Wx)
        b = _pad(np.where(xmask, xe_all, inf), inf)[:, grp.near]
        lo, hi = _disjoint(a, b)
        f_hbm = _covered(gs, ge, lo[:, row], hi[:, row])
        over = (a[:, row] < e) & (b[:, row] > s)
        rate = np.where(over, _pad(xrate, 0.0)[:, grp.near][:, row], 0.0).max(-1)
    slow[:, tpl.gemm_nodes[tg]] = 1.0 + f_sm * loss / (1.0 - loss) + f_hbm * ct.compute_per_hbm_util * rate / \
        gpu.hbm_bandwidth
    if len(tpl.xfer_nodes):
        # a transfer meets the GEMMs of its source and of its destination
        prow = grp.pair_row
        a = _pad(gs_all, inf)[:, grp.pair_gemms]                          # (P, pairs, Wg)
        b = _pad(ge_all, inf)[:, grp.pair_gemms]
        lo, hi = _disjoint(a, b)
        f = _covered(xs, xe, lo[:, prow], hi[:, prow])
        over = (a[:, prow] < xe[..., None]) & (b[:, prow] > xs[..., None])
        rate = np.where(over, _pad(grate, 0.0)[:, grp.pair_gemms][:, prow], 0.0).max(-1)
        slow[:, tpl.xfer_nodes[tx]] = 1.0 + f * ct.comm_per_hbm_util * rate / gpu.hbm_bandwidth
    return slow


@dataclass
class Groups:
    """Who meets whom in the contention pass, as padded index lists (sentinel: the count).

    ``row``: GEMM -> GPU row; ``comm`` (U, Wc): comm kernels per GPU row; ``near`` (U, Wx):
    transfers from or to each GPU row; ``pair_gemms`` (pairs, Wg): GEMMs on the source or
    destination of each (src, dst) pair; ``pair_row``: transfer -> pair."""

    row: np.ndarray
    comm: np.ndarray
    comm_grid: np.ndarray      # (U, Wc) grid of each listed comm kernel, 0 for padding
    near: np.ndarray
    pair_gemms: np.ndarray
    pair_row: np.ndarray


def _groups(gemm_gpu: np.ndarray, comm_gpu: np.ndarray, comm_grid: np.ndarray, x_src: np.ndarray,
            x_dst: np.ndarray, gemm_targets: np.ndarray | None = None, xfer_targets: np.ndarray | None = None
            ) -> Groups | None:
    """Rows for the target GEMMs and transfers (default: all); member lists over all."""
    if not len(gemm_gpu):
        return None
    tg = slice(None) if gemm_targets is None else gemm_targets
    tx = slice(None) if xfer_targets is None else xfer_targets
    gpus = np.unique(gemm_gpu[tg])
    comm = _members(gpus[:, None] == comm_gpu[None, :])
    near = _members((gpus[:, None] == x_src[None, :]) | (gpus[:, None] == x_dst[None, :]))
    pairs, prow = np.unique(np.stack([x_src[tx], x_dst[tx]], 1).reshape(-1, 2), axis=0, return_inverse=True)
    pair_gemms = _members((pairs[:, :1] == gemm_gpu[None, :]) | (pairs[:, 1:] == gemm_gpu[None, :]))
    return Groups(row=np.searchsorted(gpus, gemm_gpu[tg]), comm=comm,
                  comm_grid=np.append(comm_grid, 0.0)[comm], near=near, pair_gemms=pair_gemms,
                  pair_row=prow.reshape(-1))


def evaluate(tpl: Template, gpu: GpuProfile, scenarios: Sequence[Scenario], *, contention: bool = True
             ) -> dict[str, np.ndarray]:
    """Makespan and per-task times for every scenario (arrays over scenarios)."""
    if tpl.quotient is not None:
        ev = evaluate(tpl.quotient, gpu, scenarios, contention=contention)
        out = {k: ev[k][:, tpl.orbit] for k in ("vals", "add", "base", "nbytes")}
        return {**out, "makespan": ev["makespan"]}
    base, nbytes, gemm_hbm = _durations(tpl, gpu, scenarios)
    xfer = np.flatnonzero(tpl.kind == XFER)
    add = base.copy()
    add[:, xfer] = tpl.const[xfer] + tpl.coef[xfer] * nbytes[:, xfer]
    vals = _run(tpl, add)
    if contention:
        slow = _contention(tpl, gpu, vals, add, nbytes, gemm_hbm)
        add = base * slow
        add[:, xfer] = tpl.const[xfer] + tpl.coef[xfer] * nbytes[:, xfer] * slow[:, xfer]
        vals = _run(tpl, add)
    return {"vals": vals, "add": add, "base": base, "nbytes": nbytes, "makespan": vals[:, :-1].max(axis=1)}


# ----------------------------------------------------------------------------------------
# Sweeps

_CACHE: dict = {}


def _key(sc: Scenario) -> tuple:
    r = None
    if sc.routing is not None:
        r = tuple(tuple(round(x / sc.m, 3) for x in row) for row in sc.routing)
    return sc.kind, sc.gpus, sc.dtype, r


def template(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile, topo: Topology, *,
             comm_only: bool = False) -> Template:
    """The (cached) template of ``schedule`` for scenarios shaped like ``scenario``."""
    schedule = parse_schedule(schedule)
    key = (_key(scenario), schedule.name, gpu.name, id(gpu), topo.name, comm_only)
    if key not in _CACHE:
        gkey = ("graph", *key[:-1])      # the comm-only template reuses the lowered graph
        graph = _CACHE.pop(gkey, None) or lower(scenario, schedule, gpu, topo)
        if not comm_only and schedule.name == "none":
            _CACHE[gkey] = graph
        if comm_only:
            graph = comm_only_graph(graph)
        # the profile is kept with its template: while it lives, its id() names no other profile
        _CACHE[key] = (gpu, compile_graph(graph, scenario, gpu, topo, schedule.smem))
    return _CACHE[key][1]


def estimate_many(scenarios: Sequence[Scenario], schedules: Sequence[Schedule | str], gpu: GpuProfile | str,
                  topology: Topology | str) -> list[dict]:
    """Rows like :meth:`ficco_sim.Result.row` (engine ``fast``) for every scenario x schedule,
    scenario-major. Scenarios of one kind, GPU count, dtype and routing share templates."""
    from .symmetry import rotation_symmetric
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    schedules = [parse_schedule(s) for s in schedules]
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, sc in enumerate(scenarios):
        groups[_key(sc)].append(i)
    out: list[dict | None] = [None] * (len(scenarios) * len(schedules))
    for idx in groups.values():
        scs = [scenarios[i] for i in idx]
        ref = scs[0]
        # the slowest GPU's whole GEMM, all scenarios in one vector call
        shapes = [[g for g in s.gemm_shapes() if g.m] for s in scs]
        flat = np.array([(g.m, g.n, g.k) for gs in shapes for g in gs], dtype=float).reshape(-1, 3)
        times = gemm_times(gpu, flat[:, 0], flat[:, 1], flat[:, 2], ref.dtype)
        bounds = np.cumsum([0] + [len(gs) for gs in shapes])
        t_comp = np.array([times[a:b].max() for a, b in zip(bounds[:-1], bounds[1:])]) + gpu.launch_overhead
        tpls = [template(ref, "none", gpu, topo), template(ref, "none", gpu, topo, comm_only=True)] + \
            [template(ref, sch, gpu, topo) for sch in schedules]
        if all(t.ref == tpls[0].ref for t in tpls):
            mkey = ("merged", *(id(t) for t in tpls))
            if mkey not in _CACHE:
                _CACHE[mkey] = merge(tpls, rotations=rotation_symmetric(ref, topo))
            merged, offs = _CACHE[mkey]
            ev = evaluate(merged, gpu, scs)
            parts = [_part(ev, a, b) for a, b in zip(offs[:-1], offs[1:])]
        else:   # built from differently sized scenarios: sizes scale differently
            parts = [evaluate(t, gpu, scs) for t in tpls]
        t_none, t_comm = parts[0]["makespan"], parts[1]["makespan"]
        for j, sch in enumerate(schedules):
            metrics = {k: v.tolist() for k, v in _metrics(tpls[2 + j], gpu, parts[2 + j], t_comp, t_comm,
                                                           t_none).items()}
            for a, i in enumerate(idx):
                s = scenarios[i]
                out[i * len(schedules) + j] = {
                    "scenario": s.label(), "kind": s.kind, "gpus": s.gpus, "m": s.m, "n": s.n, "k": s.k,
                    "dtype": s.dtype, "gpu": gpu.name, "topology": topo.name, "schedule": sch.name, "engine": "fast",
                    **{k: v[a] for k, v in metrics.items()}}
    return out  # type: ignore[return-value]


def _metrics(tpl: Template, gpu: GpuProfile, ev: dict, t_comp, t_comm, t_none) -> dict[str, np.ndarray]:
    vals, base = ev["vals"], ev["base"]
    mk = ev["makespan"]
    serial = t_comp + t_comm
    ideal = np.maximum(t_comp, t_comm)
    g_gpu = tpl.gpu_of[tpl.gemm_nodes]
    dil = np.zeros(len(mk))
    cil_c = np.zeros(len(mk))
    exposed = np.zeros(len(mk))
    for g in np.unique(tpl.gpu_of[tpl.gpu_of >= 0]):
        gi = np.flatnonzero(g_gpu == g)
        if len(gi):
            iso = base[:, tpl.gemm_nodes[gi]].sum(1) + tpl.launch * len(gi)
            ready = vals[:, tpl.gemm_begin[gi]] - tpl.launch
            actual = (vals[:, tpl.gemm_nodes[gi]] - ready).sum(1)
            dil = np.maximum(dil, iso / t_comp - 1.0)
            cil_c = np.maximum(cil_c, actual / iso - 1.0)
            busy = (vals[:, tpl.gemm_nodes[gi]] - vals[:, tpl.gemm_begin[gi]]).sum(1)
        else:
            busy = 0.0
        exposed = np.maximum(exposed, mk - busy)
    x = tpl.xfer_nodes
    if len(x):
        # approximation of the analytical cil_comm: time from ready to end over the
        # contention-free durations (queueing behind other commands counts as contention)
        num = (vals[:, x] - vals[:, tpl.xfer_ready]).sum(1)
        den = (tpl.const[x] + tpl.coef[x] * ev["nbytes"][:, x]).sum(1)
        cil_m = np.where(den > 0, num / np.where(den > 0, den, 1.0) - 1.0, 0.0)
    else:
        cil_m = np.zeros(len(mk))
    gain = serial - ideal
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"makespan": mk, "t_comp_iso": t_comp, "t_comm_iso": t_comm, "serial": serial, "ideal": ideal,
                "ideal_speedup": serial / ideal, "speedup": t_none / mk,
                "of_ideal": np.where(gain > 0, (serial - mk) / np.where(gain > 0, gain, 1.0), math.nan),
                "dil_compute": dil, "cil_compute": cil_c, "cil_comm": cil_m, "exposed_comm": exposed}
