"""The closed-form engine's per-template tables beyond the max-plus DAG, built when a graph
is compiled (:func:`~ficco_sim.engine.closed_form.compile_graph`) and concatenated when
templates are merged (:func:`~ficco_sim.engine.closed_form.merge`): the links each
transfer crosses and who else crosses them (for :func:`.closed_form_overlap.link_coefs`),
and the memory and communication kernels with the GEMMs that may share their GPU's SMs
(for :func:`.closed_form_overlap.memory_hold` and :func:`.closed_form_overlap.comm_release`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..gemm_model import block_needs, blocks_per_sm
from ..hardware import GpuProfile
from ..taskgraph import Kernel, TaskGraph
from ..topology import Topology
from .closed_form_overlap import CommKernels, MemKernels, join_keys, padded_lists

if TYPE_CHECKING:
    from .closed_form import Template


def comm_kernels(graph: TaskGraph, comms: list[Kernel], gemms: list[Kernel], gpu: GpuProfile,
                  comm_level: np.ndarray, gemm_level: np.ndarray) -> CommKernels:
    """The GEMMs that may hold a communication kernel back are those of its GPU whose begin
    node lies at a shallower level of the DAG than its own (their begin time is known when its
    own is computed), or at the same level and issued before it (at one level both reach the
    SMs together, and the earlier issued is dispatched first)."""
    prio = {(s.gpu, s.name): s.priority for s in graph.streams}
    order = {t.id: i for i, t in enumerate(graph.tasks)}
    comm_order = np.array([order[k.id] for k in comms], dtype=np.int64)
    gemm_order = np.array([order[k.id] for k in gemms], dtype=np.int64)
    r, c = join_keys(np.array([k.gpu for k in comms], dtype=np.int64), np.array([k.gpu for k in gemms], dtype=np.int64))
    first = (gemm_level[c] < comm_level[r]) | ((gemm_level[c] == comm_level[r]) & (gemm_order[c] < comm_order[r]))
    shape: dict = {}         # block shape -> (SM needs, occupancy): many kernels share one
    for k in comms:
        if k.block not in shape:
            shape[k.block] = (block_needs(gpu.sm, k.block), blocks_per_sm(gpu.sm, k.block))
    return CommKernels(
        need=np.array([shape[k.block][0] for k in comms], dtype=np.int64).reshape(-1, 4),
        occupancy=np.array([shape[k.block][1] for k in comms], dtype=np.int64),
        priority=np.array([prio[(k.gpu, k.stream)] for k in comms], dtype=np.int64),
        gemms=padded_lists(r[first], c[first], len(comms), len(gemms)),
        gemm_priority=np.array([prio[(k.gpu, k.stream)] for k in gemms], dtype=np.int64),
        order=comm_order, gemm_order=gemm_order)


def memory_kernels(mems: list[Kernel], begin: dict, end: dict, gpu: GpuProfile, gpu_of: np.ndarray,
                    gemm_nodes: np.ndarray, level: np.ndarray, gemm_begin: np.ndarray) -> MemKernels:
    """The GEMMs that may share SMs with a memory kernel are those of its GPU whose begin
    node lies at a shallower level than the kernel's end (known when its end is computed)."""
    nodes = np.array([end[k.id] for k in mems], dtype=np.int64)
    r, c = join_keys(gpu_of[nodes], gpu_of[gemm_nodes])
    earlier = level[gemm_begin][c] < level[nodes][r]
    return MemKernels(
        nodes=nodes, begin=np.array([begin[k.id] for k in mems], dtype=np.int64),
        grid=np.array([k.grid for k in mems], dtype=float), block_time=np.array([k.block_time for k in mems]),
        block_hbm=np.array([k.block_hbm_bytes for k in mems]),
        need=np.array([block_needs(gpu.sm, k.block) for k in mems], dtype=np.int64).reshape(-1, 4),
        occupancy=np.array([blocks_per_sm(gpu.sm, k.block) for k in mems], dtype=np.int64),
        gemms=padded_lists(r[earlier], c[earlier], len(mems), len(gemm_nodes)),
        elems=np.array([np.nan if k.elems is None else k.elems for k in mems], dtype=float),
        **_distinct_blocks([k.block for k in mems]))


def link_tables(xfers, costs: dict, topo: Topology) -> dict[str, np.ndarray]:
    """The template's link fields (see :class:`Template`) for transfers ``xfers``."""
    ids: dict = {}
    seen: dict = {}          # one list of link ids per route (transfers of a GPU pair share their route's list)

    def route(links: list) -> list[int]:
        hit = seen.get(id(links))
        if hit is None:
            hit = seen[id(links)] = [ids.setdefault(lk, len(ids)) for lk in links]
        return hit

    paths = [route(costs[t.id][3]) for t in xfers]
    L = len(ids)
    xfer_links = np.full((len(xfers), max([1] + [len(p) for p in paths])), L, dtype=np.int64)
    for i, p in enumerate(paths):
        xfer_links[i, :len(p)] = p
    rows = np.fromiter((lk for p in paths for lk in p), dtype=np.int64, count=sum(map(len, paths)))
    cols = np.repeat(np.arange(len(xfers)), [len(p) for p in paths])
    edges = topo.graph.edges
    return {"link_bw": np.array([edges[lk]["bandwidth"] for lk in ids] + [np.inf]), "xfer_links": xfer_links,
            "xfer_cap": np.array([costs[t.id][2] for t in xfers], dtype=float),
            "link_members": padded_lists(rows, cols, L + 1, len(xfers))}   # the sentinel link L: no members


def merged_comm(tpls: Sequence["Template"]) -> CommKernels:
    """Communication kernels of block-diagonal templates (each meets its own template's GEMMs)."""
    cat = lambda f: np.concatenate([getattr(t.comm_kernels, f) for t in tpls])  # noqa: E731
    return CommKernels(need=cat("need").reshape(-1, 4), occupancy=cat("occupancy"), priority=cat("priority"),
                       gemms=_stacked_gemms(tpls, [t.comm_kernels.gemms for t in tpls]),
                       gemm_priority=cat("gemm_priority"), order=cat("order"), gemm_order=cat("gemm_order"))


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
                      occupancy=cat("occupancy"), gemms=gemms, elems=cat("elems"),
                      **_distinct_blocks([t.mem.blocks[i] for t in tpls for i in t.mem.block_ix]))


def merged_links(tpls: Sequence["Template"]) -> dict[str, np.ndarray]:
    """Link fields of block-diagonal templates: every template keeps its own links."""
    nl = np.cumsum([0] + [len(t.link_bw) - 1 for t in tpls])
    nx = np.cumsum([0] + [len(t.xfer_nodes) for t in tpls])
    L, X = int(nl[-1]), int(nx[-1])
    lmax = max(t.xfer_links.shape[1] for t in tpls)
    wmax = max(t.link_members.shape[1] for t in tpls)
    xfer_links = np.full((X, lmax), L, dtype=np.int64)
    link_members = np.full((L + 1, wmax), X, dtype=np.int64)
    for t, a, b in zip(tpls, nl, nx):
        lk, mb = t.xfer_links, t.link_members[:-1]
        xfer_links[b:b + len(lk), :lk.shape[1]] = np.where(lk == len(t.link_bw) - 1, L, lk + a)
        link_members[a:a + len(mb), :mb.shape[1]] = np.where(mb == len(t.xfer_nodes), X, mb + b)
    return {"link_bw": np.concatenate([t.link_bw[:-1] for t in tpls] + [[np.inf]]), "xfer_links": xfer_links,
            "xfer_cap": np.concatenate([t.xfer_cap for t in tpls]), "link_members": link_members}


def _distinct_blocks(per_kernel: list) -> dict:
    """``blocks`` (distinct shapes) and ``block_ix`` (each kernel's) of :class:`MemKernels`."""
    ids: dict = {}
    ix = np.array([ids.setdefault(b, len(ids)) for b in per_kernel], dtype=np.int64)
    return {"blocks": list(ids), "block_ix": ix}
