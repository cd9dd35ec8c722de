"""The closed-form engine's per-template tables beyond the max-plus DAG, built when a graph
is compiled (:func:`~ficco_sim.engine.closed_form.compile_graph`) and concatenated when
templates are merged (:func:`~ficco_sim.engine.closed_form_merge.merge`): the links each
transfer crosses (for :func:`.closed_form_overlap.link_coefs`),
and the memory and communication kernels with the GEMMs that may share their GPU's SMs
(for :func:`.closed_form_overlap.memory_hold` and :func:`.closed_form_overlap.comm_release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..gemm_model import block_needs, blocks_per_sm
from ..hardware import GpuProfile
from ..taskgraph import UNTUNED, Kernel, TaskGraph
from ..topology import Topology
from .closed_form_overlap import CommKernels, MemKernels, join_either, join_keys, padded_lists
from .launch import host_issued, persistent, queued_turns

if TYPE_CHECKING:
    from .closed_form import Template


NO_TUNE = (0.0, 0.0, 0.0, 0.0, 0.0)


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


def groups(gemm_gpu: np.ndarray, comm_gpu: np.ndarray, comm_grid: np.ndarray, x_src: np.ndarray,
           x_dst: np.ndarray, gemm_targets: np.ndarray | None = None, xfer_targets: np.ndarray | None = None
           ) -> Groups | None:
    """Rows for the target GEMMs and transfers (default: all); member lists over all (joins
    by GPU through sorting: merged templates hold thousands of GPUs and transfers)."""
    if not len(gemm_gpu):
        return None
    tg = slice(None) if gemm_targets is None else gemm_targets
    tx = slice(None) if xfer_targets is None else xfer_targets
    gpus = np.unique(gemm_gpu[tg])
    comm = padded_lists(*join_keys(gpus, comm_gpu), len(gpus), len(comm_gpu))
    near = padded_lists(*join_either(gpus, x_src, x_dst), len(gpus), len(x_src))
    span = int(max(x_src.max(initial=0), x_dst.max(initial=0))) + 1
    keys, prow = np.unique(x_src[tx] * span + x_dst[tx], return_inverse=True)   # pairs, in (src, dst) order
    pairs = np.stack([keys // span, keys % span], 1)
    pair_gemms = padded_lists(*join_either(gemm_gpu, pairs[:, 0], pairs[:, 1], by_col=False), len(pairs), len(gemm_gpu))
    return Groups(row=np.searchsorted(gpus, gemm_gpu[tg]), comm=comm,
                  comm_grid=np.append(comm_grid, 0.0)[comm], near=near, pair_gemms=pair_gemms,
                  pair_row=prow.reshape(-1))


def transfer_cost(t, gpu: GpuProfile, links: list, latency: float, link_rates: list[float], blocks: int,
                  shared: int) -> tuple[float, float, float, list, tuple]:
    """(fixed s, s per byte, cap B/s, ``links``, tuning) of transfer ``t``: a copy engine's
    rate (a command's fixed cost), or the driving kernel's ``blocks`` channels divided among
    the ``shared`` transfers of its step; at most HBM's (half within one GPU); at most each
    link's rate as the first pass shares it (``link_rates``). Tuning (:attr:`Template.tune`):
    an SM transfer's collective call (``t.tune``), its channel cap and its kernel's channels,
    from which the evaluation picks its protocol and channels at each size."""
    if t.engine == "dma":
        cap, fixed = gpu.dma.cap(t.src, t.dst), gpu.dma.command_overhead
    else:
        cap, fixed = blocks * gpu.comm_kernel.channel_bandwidth / shared, 0.0
    chan = cap
    cap = min(cap, gpu.hbm_effective / (2 if t.src == t.dst else 1))
    tune = ((*(t.tune or UNTUNED), chan, float(blocks)) if t.engine == "sm" else NO_TUNE)
    return fixed + latency, 1.0 / min(link_rates + [cap]), cap, links, tune


def tuned_terms(gpu: GpuProfile, payload: np.ndarray, tune: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per SM transfer (columns of ``payload``, its bytes per scenario; ``tune`` its rows of
    :attr:`Template.tune`): the latency and payload share of the protocol NCCL's tuner picks
    and the least seconds per wire byte its channels allow
    (:meth:`~ficco_sim.hardware.CommKernelSpec.tuned`; 0 where it has every channel): a ring
    step's share of its kernel on fewer channels, a grouped send's own channels (as the DES,
    :mod:`.sm_transfers`); a grouped send's latency includes its pipeline's last chunk
    (:meth:`~ficco_sim.hardware.CommKernelSpec.p2p_fill`)."""
    spec = gpu.comm_kernel
    call, ranks, steps, chan, grid = (tune[:, i] for i in range(5))
    p, channels = spec.tuned(payload, call, ranks, grid, steps)
    eff = np.array([q.efficiency for q in spec.protocols])[p]
    lat = np.array([q.latency for q in spec.protocols])[p] + spec.p2p_fill(payload / eff, call, ranks, channels)
    own = spec.grouped(call, ranks)
    floor = np.where(channels < grid, np.where(own, 1.0 / spec.channel_bandwidth, grid / chan) / channels, 0.0)
    return lat, eff, floor


def comm_kernels(comms: list[Kernel], gemms: list[Kernel], gpu: GpuProfile, begin: np.ndarray, level: np.ndarray,
                 gemm_begin: np.ndarray, *, gpus: tuple[np.ndarray, np.ndarray], order: tuple[np.ndarray, np.ndarray],
                 priority: tuple[np.ndarray, np.ndarray], issued: set[str], queued: set[str]) -> CommKernels:
    """The GEMMs that may hold a communication kernel back are those of its GPU whose begin
    node lies at a shallower level of the DAG than its own (their begin time is known when its
    own is computed), or at the same level and issued before it (at one level both reach the
    SMs together, and the earlier issued is dispatched first). ``begin``, ``gemm_begin``: the
    kernels' begin nodes; ``level``: each node's. ``gpus``, ``order`` (place in issue order;
    compared within a GPU only) and ``priority`` (their streams'): of the communication
    kernels, then of the GEMMs; ``issued``: the ids of kernels the host issues with nothing to
    wait for (:func:`~ficco_sim.engine.launch.host_issued`); ``queued``: those whose turn comes as
    their stream predecessor ends (:func:`~ficco_sim.engine.launch.queued_turns`). Each GEMM also
    says whether it is persistent (:func:`~ficco_sim.engine.launch.persistent`)."""
    (comm_gpu, gemm_gpu), (comm_order, gemm_order) = gpus, order
    comm_level, gemm_level = level[begin], level[gemm_begin]
    r, c = join_keys(comm_gpu, gemm_gpu)
    first = (gemm_level[c] < comm_level[r]) | ((gemm_level[c] == comm_level[r]) & (gemm_order[c] < comm_order[r]))
    shape: dict = {}         # block shape -> (SM needs, occupancy): many kernels share one
    for k in comms:
        if k.block not in shape:
            shape[k.block] = (block_needs(gpu.sm, k.block), blocks_per_sm(gpu.sm, k.block))
    return CommKernels(
        begin=begin, need=np.array([shape[k.block][0] for k in comms], dtype=np.int64).reshape(-1, 4),
        occupancy=np.array([shape[k.block][1] for k in comms], dtype=np.int64),
        priority=priority[0], gemms=padded_lists(r[first], c[first], len(comms), len(gemms), ordered=True),
        gemm_priority=priority[1], order=comm_order, gemm_order=gemm_order,
        gemm_persistent=np.array([persistent(k, gpu) for k in gemms], dtype=bool),
        issued=np.array([k.id in issued for k in comms], dtype=bool),
        gemm_issued=np.array([k.id in issued for k in gemms], dtype=bool),
        queued=np.array([k.id in queued for k in comms], dtype=bool),
        gemm_queued=np.array([k.id in queued for k in gemms], dtype=bool))


def graph_comm_kernels(graph: TaskGraph, comms: list[Kernel], gemms: list[Kernel], gpu: GpuProfile,
                       begin: np.ndarray, level: np.ndarray, gemm_begin: np.ndarray) -> CommKernels:
    """:func:`comm_kernels` of a whole graph's kernels."""
    prio = {(s.gpu, s.name): s.priority for s in graph.streams}
    order = {t.id: i for i, t in enumerate(graph.tasks)}
    col = lambda ks, f: np.array([f(k) for k in ks], dtype=np.int64)  # noqa: E731
    return comm_kernels(comms, gemms, gpu, begin, level, gemm_begin,
                        gpus=(col(comms, lambda k: k.gpu), col(gemms, lambda k: k.gpu)),
                        order=(col(comms, lambda k: order[k.id]), col(gemms, lambda k: order[k.id])),
                        priority=(col(comms, lambda k: prio[(k.gpu, k.stream)]),
                                  col(gemms, lambda k: prio[(k.gpu, k.stream)])), issued=host_issued(graph.tasks),
                        queued=queued_turns(graph.tasks))


def memory_kernels(mems: list[Kernel], nodes: np.ndarray, begin: np.ndarray, gpu: GpuProfile, gpu_of: np.ndarray,
                   gemm_nodes: np.ndarray, level: np.ndarray, gemm_begin: np.ndarray) -> MemKernels:
    """The GEMMs that may share SMs with a memory kernel are those of its GPU whose begin
    node lies at a shallower level than the kernel's end (known when its end is computed);
    ``nodes``, ``begin``: the kernels' end and begin nodes."""
    r, c = join_keys(gpu_of[nodes], gpu_of[gemm_nodes])
    earlier = level[gemm_begin][c] < level[nodes][r]
    shapes = _distinct_blocks([k.block for k in mems])        # each distinct block's needs, once
    ix = shapes["block_ix"]
    return MemKernels(
        nodes=nodes, begin=begin,
        grid=np.array([k.grid for k in mems], dtype=float), block_time=np.array([k.block_time for k in mems]),
        block_hbm=np.array([k.block_hbm_bytes for k in mems]),
        need=np.array([block_needs(gpu.sm, b) for b in shapes["blocks"]], dtype=np.int64).reshape(-1, 4)[ix],
        occupancy=np.array([blocks_per_sm(gpu.sm, b) for b in shapes["blocks"]], dtype=np.int64)[ix],
        gemms=padded_lists(r[earlier], c[earlier], len(mems), len(gemm_nodes), ordered=True),
        **_gpu_gemms(gpu_of[nodes], gpu_of[gemm_nodes]),
        elems=np.array([np.nan if k.elems is None else k.elems for k in mems], dtype=float), **shapes)


def link_tables(paths: list[list], caps, topo: Topology, which: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The template's link fields (see :class:`Template`) for transfers crossing ``paths``
    (lists of link keys; transfers of one GPU pair share their route's list) with rate caps
    ``caps``; with ``which``, ``paths`` are distinct routes and transfer i crosses
    ``paths[which[i]]``."""
    if which is None:
        distinct: dict[int, int] = {}
        which = np.fromiter((distinct.setdefault(id(p), len(distinct)) for p in paths), dtype=np.int64,
                            count=len(paths))
        paths = list({id(p): p for p in paths}.values())
    ids: dict = {}
    rows = [[ids.setdefault(lk, len(ids)) for lk in p] for p in paths]
    L, X = len(ids), len(which)
    table = np.full((len(rows) + 1, max([1] + [len(r) for r in rows])), L, dtype=np.int64)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    edges = topo.graph.edges
    return {"link_bw": np.array([edges[lk]["bandwidth"] for lk in ids] + [np.inf]), "xfer_links": table[which],
            "xfer_cap": np.asarray(caps, dtype=float).reshape(X)}


def merged_comm(tpls: Sequence["Template"], offs: np.ndarray) -> CommKernels:
    """Communication kernels of block-diagonal templates (each meets its own template's GEMMs)."""
    cat = lambda f: np.concatenate([getattr(t.comm_kernels, f) for t in tpls])  # noqa: E731
    return CommKernels(begin=np.concatenate([t.comm_kernels.begin + o for t, o in zip(tpls, offs)]),
                       need=cat("need").reshape(-1, 4), occupancy=cat("occupancy"), priority=cat("priority"),
                       gemms=_stacked_gemms(tpls, [t.comm_kernels.gemms for t in tpls]),
                       gemm_priority=cat("gemm_priority"), order=cat("order"), gemm_order=cat("gemm_order"),
                       gemm_persistent=cat("gemm_persistent"), issued=cat("issued"), gemm_issued=cat("gemm_issued"),
                       queued=cat("queued"), gemm_queued=cat("gemm_queued"))


def _gpu_gemms(kernel_gpu: np.ndarray, gemm_gpu: np.ndarray) -> dict:
    """``gpu_row`` and ``gpu_gemms`` of :class:`MemKernels`: each kernel's GPU as a row of a
    table of every GEMM (position) on that GPU."""
    gpus, row = np.unique(kernel_gpu, return_inverse=True)
    r, c = join_keys(gpus, gemm_gpu)
    return {"gpu_row": row.reshape(-1), "gpu_gemms": padded_lists(r, c, len(gpus), len(gemm_gpu), ordered=True)}


def _stacked_gemms(tpls: Sequence["Template"], lists: list[np.ndarray]) -> np.ndarray:
    """Padded GEMM position lists of block-diagonal templates, one below the other: each
    template's positions shifted past the GEMMs before it, its padding the merged count."""
    go = np.cumsum([0] + [len(t.gemm_nodes) for t in tpls])
    G = int(go[-1])
    out = np.full((sum(len(x) for x in lists), max(x.shape[1] for x in lists)), G, dtype=np.int64)
    r = 0
    for t, g0, x in zip(tpls, go, lists):
        out[r:r + len(x), :x.shape[1]] = np.where(x == len(t.gemm_nodes), G, x + g0)
        r += len(x)
    return out


def merged_mem(tpls: Sequence["Template"], offs: np.ndarray) -> MemKernels:
    """Memory kernels of block-diagonal templates (each meets its own template's GEMMs)."""
    gemms = _stacked_gemms(tpls, [t.mem.gemms for t in tpls])
    cat = lambda f: np.concatenate([getattr(t.mem, f) for t in tpls])  # noqa: E731
    return MemKernels(nodes=np.concatenate([t.mem.nodes + o for t, o in zip(tpls, offs)]),
                      begin=np.concatenate([t.mem.begin + o for t, o in zip(tpls, offs)]), grid=cat("grid"),
                      block_time=cat("block_time"), block_hbm=cat("block_hbm"), need=cat("need").reshape(-1, 4),
                      occupancy=cat("occupancy"), gemms=gemms,
                      gpu_row=np.concatenate([t.mem.gpu_row + u for t, u in
                                              zip(tpls, np.cumsum([0] + [len(t.mem.gpu_gemms) for t in tpls]))]),
                      gpu_gemms=_stacked_gemms(tpls, [t.mem.gpu_gemms for t in tpls]), elems=cat("elems"),
                      **_distinct_blocks([t.mem.blocks[i] for t in tpls for i in t.mem.block_ix]))


def merged_links(tpls: Sequence["Template"]) -> dict[str, np.ndarray]:
    """Link fields of block-diagonal templates: every template keeps its own links."""
    nl = np.cumsum([0] + [len(t.link_bw) - 1 for t in tpls])
    nx = np.cumsum([0] + [len(t.xfer_nodes) for t in tpls])
    L, X = int(nl[-1]), int(nx[-1])
    lmax = max(t.xfer_links.shape[1] for t in tpls)
    xfer_links = np.full((X, lmax), L, dtype=np.int64)
    for t, a, b in zip(tpls, nl, nx):
        lk = t.xfer_links
        xfer_links[b:b + len(lk), :lk.shape[1]] = np.where(lk == len(t.link_bw) - 1, L, lk + a)
    return {"link_bw": np.concatenate([t.link_bw[:-1] for t in tpls] + [[np.inf]]), "xfer_links": xfer_links,
            "xfer_cap": np.concatenate([t.xfer_cap for t in tpls])}


def _distinct_blocks(per_kernel: list) -> dict:
    """``blocks`` (distinct shapes) and ``block_ix`` (each kernel's) of :class:`MemKernels`."""
    ids: dict = {}
    ix = np.array([ids.setdefault(b, len(ids)) for b in per_kernel], dtype=np.int64)
    return {"blocks": list(ids), "block_ix": ix}
