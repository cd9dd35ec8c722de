"""GPU symmetry for the closed-form engine: on symmetric topologies a rotation-symmetric
schedule gives every GPU the same times, so the estimator evaluates one task per class of
equivalent tasks and copies the answer (results are identical to the full evaluation; the
tests check it node by node).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..topology import Topology
from ..workload import Scenario
from .closed_form import Template
from .dag_levels import padded_levels
from .closed_form_tables import groups


def rotation_symmetric(sc: Scenario, topo: Topology) -> bool:
    """Whether rotating GPU ids may map ``sc`` on ``topo`` onto itself (then :func:`quotient`
    tests each template): fully connected and switched topologies, uniform routing. Not
    rings: there a multi-hop route shares links with other GPUs' transfers, and GPUs holding
    the same classes (the test :func:`quotient` makes) need not see the same contention
    (gemm-rs on ring:6 differs by 1%)."""
    uniform = sc.routing is None or len({x for row in sc.routing for x in row}) == 1
    return topo.kind in ("fc", "switch") and topo.num_gpus == sc.gpus and uniform


def quotient(tpl: Template, stride: int, gpus: int, known: np.ndarray | None = None
             ) -> tuple[Template | None, np.ndarray | None]:
    """Nodes of ``tpl`` collapsed into classes that provably get the same times, and the
    node -> class map (None, None when nothing collapses).

    A node's class is its kind, durations, destination and input classes, with GPU ids
    relative to its own GPU (``gpus`` of them; block ``b`` of a merged template holds GPUs
    ``b * stride ...``): nodes of one class get the same contention-free time (same
    unfolded max-plus DAG). A block whose GPUs all hold the same multiset of classes (a
    rotation-symmetric schedule on a symmetric topology) also sees the same spans from
    every GPU in the contention pass, so slowdowns, hence final times, follow the class
    too: the contention pass runs for one GEMM and one transfer per class. Blocks that
    fail this test keep one class per node (the full evaluation).

    ``known`` (>= 0) gives the class of nodes whose block was compiled from a share
    (:mod:`.closed_form_turned`): GPU g's node is GPU 0's turned, so its class is GPU 0's
    node (numbered apart from the others'; -1: work it out).
    """
    N = tpl.num_nodes
    if tpl.gpu_of.min(initial=0) < 0:
        return None, None
    if known is not None and (known >= 0).all():
        cls = known             # every block a share: each of its GPUs holds GPU 0's classes, turned
    else:
        cls = _symmetric_blocks(tpl, _classes(tpl, stride, gpus, known), stride, gpus)
    orbit = np.unique(cls, return_inverse=True)[1].reshape(-1)
    Q = int(orbit.max(initial=-1)) + 1
    if Q == N:
        return None, None
    orbit = np.append(orbit, Q)
    rep = np.unique(orbit[:-1], return_index=True)[1]          # first node of each class
    if tpl.share_dag is not None and known is not None and np.array_equal(orbit[:-1], known):
        levels = padded_levels(*tpl.share_dag)     # every class GPU 0's node of a share: the shares' DAG
    else:
        levels = []
        for ids, pad in tpl.levels:
            keep = rep[orbit[ids]] == ids
            if keep.any():
                levels.append((orbit[ids[keep]], orbit[pad[keep]]))
    gemm_targets = np.flatnonzero(rep[orbit[tpl.gemm_nodes]] == tpl.gemm_nodes)
    xfer_targets = np.flatnonzero(rep[orbit[tpl.xfer_nodes]] == tpl.xfer_nodes)
    g_all, x_nodes = tpl.gpu_of, tpl.xfer_nodes
    quot = Template(
        ref=tpl.ref, num_nodes=Q, levels=levels, kind=tpl.kind[rep], const=tpl.const[rep], coef=tpl.coef[rep],
        ref_bytes=tpl.ref_bytes[rep], tune=tpl.tune[rep], gemm_shape=tpl.gemm_shape[rep], shapes=tpl.shapes, gpu_of=tpl.gpu_of[rep],
        dst_of=tpl.dst_of[rep], gemm_nodes=orbit[tpl.gemm_nodes], gemm_begin=orbit[tpl.gemm_begin],
        comm_nodes=orbit[tpl.comm_nodes], comm_begin=orbit[tpl.comm_begin], comm_grid=tpl.comm_grid,
        xfer_nodes=orbit[x_nodes], xfer_begin=orbit[tpl.xfer_begin],
        comm_scale=tpl.comm_scale, gemm_targets=gemm_targets,
        xfer_targets=xfer_targets, link_bw=tpl.link_bw, xfer_links=tpl.xfer_links, xfer_cap=tpl.xfer_cap,
        mem=_one_per_class(tpl.mem, rep, orbit, ("nodes", "begin"), shared=("blocks", "gpu_gemms")),
        comm_kernels=_one_per_class(tpl.comm_kernels, rep, orbit, ("begin",),
                                    shared=("gemm_priority", "gemm_order", "gemm_persistent", "gemm_issued",
                                            "gemm_queued")),
        source=None if tpl.source is None else np.where(tpl.source[rep] >= 0, orbit[tpl.source[rep]], -1),
        groups=groups(g_all[tpl.gemm_nodes], g_all[tpl.comm_nodes], tpl.comm_grid, g_all[x_nodes],
                       tpl.dst_of[x_nodes], gemm_targets, xfer_targets))
    return quot, orbit


def _symmetric_blocks(tpl: Template, cls: np.ndarray, stride: int, gpus: int) -> np.ndarray:
    """``cls`` with every node of a block whose GPUs do not all hold the same multiset of
    classes given a class of its own (see :func:`quotient`)."""
    gpu = tpl.gpu_of
    order = np.lexsort((cls, gpu))          # by GPU, then class: each GPU's multiset of classes
    sorted_gpu, sorted_cls = gpu[order], cls[order]
    cuts = np.flatnonzero(np.diff(sorted_gpu)) + 1
    firsts = np.concatenate([[0], cuts])
    blocks: dict[int, dict[int, np.ndarray]] = {}          # block -> its GPU -> that GPU's classes
    for g, run in zip(sorted_gpu[firsts].tolist(), np.split(sorted_cls, cuts)):
        blocks.setdefault(g // stride, {})[g % stride] = run
    q = int(cls.max(initial=-1)) + 1
    empty = np.zeros(0, dtype=np.int64)
    for b, per in sorted(blocks.items()):
        counts = [per.get(u, empty) for u in range(gpus)]
        if len(per) > gpus or any(not np.array_equal(c, counts[0]) for c in counts[1:]):
            mine = np.flatnonzero(gpu // stride == b)     # not symmetric: every node its own class
            cls[mine] = q + np.arange(len(mine))
            q += len(mine)
    return cls


def _one_per_class(kernels, rep: np.ndarray, orbit: np.ndarray, nodes: tuple[str, ...], shared: tuple[str, ...]):
    """Kernel rows (:class:`~.closed_form_overlap.MemKernels` or ``CommKernels``) of the first
    node of each class only (the others would get the same hold), their ``nodes`` fields
    renumbered as classes; ``shared`` fields are not per kernel."""
    if kernels is None:
        return None
    first = getattr(kernels, nodes[0])
    keep = rep[orbit[first]] == first
    return dataclasses.replace(kernels, **{f.name: (orbit[v] if f.name in nodes else v)[keep]
                                           for f in dataclasses.fields(kernels) if f.name not in shared
                                           for v in [getattr(kernels, f.name)]})


def _issued_before(tpl: Template) -> np.ndarray:
    """Per node: for a communication kernel's end, how many GEMMs of its GPU the host issued
    before it; for a GEMM's, how many communication kernels (0 elsewhere). Two GPUs issuing
    alike in another order (``par-*-mix``) are then not alike."""
    out = np.zeros(tpl.num_nodes, dtype=np.int64)
    ck = tpl.comm_kernels
    if ck is None or not len(tpl.gemm_nodes) or not len(tpl.comm_nodes):
        return out
    nodes = np.concatenate([tpl.comm_nodes, tpl.gemm_nodes])
    is_gemm = np.arange(len(nodes)) >= len(tpl.comm_nodes)
    g = tpl.gpu_of[nodes]
    idx = np.lexsort((np.concatenate([ck.order, ck.gemm_order]), g))     # by GPU, then issue order
    gs, gemm_sorted = g[idx], is_gemm[idx]
    start = np.searchsorted(gs, gs, "left")                                 # each one's GPU's first place
    gemms_before = np.cumsum(gemm_sorted) - gemm_sorted
    comms_before = np.cumsum(~gemm_sorted) - ~gemm_sorted
    before = np.where(gemm_sorted, comms_before - comms_before[start], gemms_before - gemms_before[start])
    out[nodes[idx]] = before
    return out


def _classes(tpl: Template, stride: int, gpus: int, known: np.ndarray | None = None) -> np.ndarray:
    """Each node's class (see :func:`quotient`), level by level: its block, kind, durations,
    relative destination and the multiset of (input class, input GPU relative to its own).
    Nodes alike share a level (their inputs do), so classes are numbered per level; a
    ``known`` class comes after all of those (a block's inputs are its own)."""
    N = tpl.num_nodes
    unknown = None if known is None else known < 0
    gpu = tpl.gpu_of
    grid = np.zeros(N)
    grid[tpl.comm_nodes] = tpl.comm_grid
    bits = lambda x: np.ascontiguousarray(x, dtype=float).view(np.int64)  # noqa: E731  (exact equality)
    attrs = np.stack([gpu // stride, tpl.kind, bits(tpl.const), bits(tpl.coef), bits(tpl.ref_bytes),
                      tpl.gemm_shape, bits(grid), np.where(tpl.dst_of >= 0, (tpl.dst_of - gpu) % gpus, -1),
                      _issued_before(tpl)], axis=1)
    cls = np.full(N + 1, -1, dtype=np.int64)       # the sentinel input N has class -1
    gpu_ext = np.append(gpu, 0)
    count = 0
    for ids, pad in tpl.levels:
        if unknown is not None:
            here = unknown[ids]
            cls[ids[~here]] = N + known[ids[~here]]
            ids, pad = ids[here], pad[here]
            if not len(ids):
                continue
        code = np.where(pad != N, cls[pad] * gpus + (gpu_ext[pad] - gpu[ids][:, None]) % gpus, -1)
        rows = np.concatenate([attrs[ids], np.sort(code, axis=1)], axis=1)
        uniq, inv = np.unique(rows, axis=0, return_inverse=True)
        cls[ids] = count + inv.reshape(-1)
        count += len(uniq)
    return cls[:N]
