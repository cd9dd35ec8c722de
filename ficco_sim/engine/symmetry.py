"""GPU symmetry for the closed-form engine: on symmetric topologies a rotation-symmetric
schedule gives every GPU the same times, so the estimator evaluates one task per class of
equivalent tasks and copies the answer (results are identical to the full evaluation; the
tests check it node by node).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from ..topology import Topology
from ..workload import Scenario
from .closed_form import Template
from .closed_form_overlap import groups


def rotation_symmetric(sc: Scenario, topo: Topology) -> bool:
    """Whether rotating GPU ids may map ``sc`` on ``topo`` onto itself (then :func:`quotient`
    tests each template): fully connected and switched topologies, uniform routing. Not
    rings: ties between the two directions are routed one way, which breaks the symmetry."""
    uniform = sc.routing is None or len({x for row in sc.routing for x in row}) == 1
    return topo.kind in ("fc", "switch") and topo.num_gpus == sc.gpus and uniform


def quotient(tpl: Template, stride: int, gpus: int) -> tuple[Template | None, np.ndarray | None]:
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
    """
    N = tpl.num_nodes
    gpu, dst, kind = tpl.gpu_of.tolist(), tpl.dst_of.tolist(), tpl.kind.tolist()
    const, coef, rbytes, shape = tpl.const.tolist(), tpl.coef.tolist(), tpl.ref_bytes.tolist(), tpl.gemm_shape.tolist()
    grid = [0.0] * N
    for i, g in zip(tpl.comm_nodes.tolist(), tpl.comm_grid.tolist()):
        grid[i] = g
    if min(gpu, default=0) < 0:
        return None, None
    keys: dict[tuple, int] = {}
    cls = [0] * N
    for ids, pad in tpl.levels:
        for i, row in zip(ids.tolist(), pad.tolist()):
            g = gpu[i]
            ins = tuple(sorted((cls[j], (gpu[j] - g) % gpus) for j in row if j != N))
            key = (g // stride, kind[i], const[i], coef[i], rbytes[i], shape[i], grid[i],
                   (dst[i] - g) % gpus if dst[i] >= 0 else -1, ins)
            cls[i] = keys.setdefault(key, len(keys))
    block_gpu: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, g in enumerate(gpu):
        block_gpu[g // stride][g % stride].append(cls[i])
    q = len(keys)
    for b, per in block_gpu.items():
        counts = [sorted(per.get(u, [])) for u in range(gpus)]
        if len(per) > gpus or any(c != counts[0] for c in counts[1:]):
            for i, g in enumerate(gpu):      # not symmetric: every node its own class
                if g // stride == b:
                    cls[i], q = q, q + 1
    orbit = np.unique(np.array(cls, dtype=np.int64), return_inverse=True)[1].reshape(-1)
    Q = int(orbit.max(initial=-1)) + 1
    if Q == N:
        return None, None
    orbit = np.append(orbit, Q)
    rep = np.unique(orbit[:-1], return_index=True)[1]          # first node of each class
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
        ref_bytes=tpl.ref_bytes[rep], gemm_shape=tpl.gemm_shape[rep], shapes=tpl.shapes, gpu_of=tpl.gpu_of[rep],
        dst_of=tpl.dst_of[rep], gemm_nodes=orbit[tpl.gemm_nodes], gemm_begin=orbit[tpl.gemm_begin],
        comm_nodes=orbit[tpl.comm_nodes], comm_begin=orbit[tpl.comm_begin], comm_grid=tpl.comm_grid,
        xfer_nodes=orbit[x_nodes], xfer_begin=orbit[tpl.xfer_begin],
        launch=tpl.launch, comm_launch=tpl.comm_launch, comm_scale=tpl.comm_scale, gemm_targets=gemm_targets,
        xfer_targets=xfer_targets, link_bw=tpl.link_bw, xfer_links=tpl.xfer_links, xfer_cap=tpl.xfer_cap,
        link_members=tpl.link_members, mem=dataclasses.replace(tpl.mem, nodes=orbit[tpl.mem.nodes],
                                                               begin=orbit[tpl.mem.begin]),
        comm_kernels=tpl.comm_kernels,
        source=None if tpl.source is None else np.where(tpl.source[rep] >= 0, orbit[tpl.source[rep]], -1),
        groups=groups(g_all[tpl.gemm_nodes], g_all[tpl.comm_nodes], tpl.comm_grid, g_all[x_nodes],
                       tpl.dst_of[x_nodes], gemm_targets, xfer_targets))
    return quot, orbit
