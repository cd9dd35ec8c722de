"""Templates of one scenario structure merged into one block-diagonal template, so a sweep
evaluates them all in one call of :func:`~ficco_sim.engine.closed_form.evaluate` (numpy's
per-call cost is paid once)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..gemm_model import GemmShape
from .closed_form import Template
from .dag_levels import LazyLevels
from .closed_form_tables import merged_comm, merged_links, merged_mem


def merge(tpls: Sequence[Template]) -> tuple[Template, np.ndarray]:
    """Templates of one scenario structure as one block-diagonal template (one evaluation for
    all: numpy's per-call cost is paid once), and each one's first node (plus the total).

    GPUs (and source/destination pairs) of different templates stay apart in the
    contention pass: they are renumbered ``gpu + i * G`` for template ``i``. All must be
    compiled from the same reference scenario (sizes rescale from it)."""
    if any(t.ref != tpls[0].ref for t in tpls):
        raise ValueError("merging templates compiled from different reference scenarios")
    offs = np.cumsum([0] + [t.num_nodes for t in tpls])
    N = int(offs[-1])
    shapes: dict[GemmShape, int] = {}
    remap = [np.array([shapes.setdefault(sh, len(shapes)) for sh in t.shapes] + [-1], dtype=np.int64) for t in tpls]
    levels = LazyLevels(lambda: _merged_levels(tpls, offs))
    share_dag = None
    if all(t.share_dag is not None for t in tpls):      # the shares' DAGs side by side (nodes numbered on)
        base = np.cumsum([0] + [len(t.share_dag[0]) for t in tpls])
        share_dag = (np.concatenate([t.share_dag[0] for t in tpls]),
                     np.concatenate([t.share_dag[1] + b for t, b in zip(tpls, base)]),
                     np.concatenate([t.share_dag[2] for t in tpls]))
    cat = lambda f: np.concatenate([getattr(t, f) for t in tpls])  # noqa: E731
    at = lambda f: np.concatenate([getattr(t, f) + o for t, o in zip(tpls, offs)])  # noqa: E731
    G = 1 + max(int(max(t.gpu_of.max(initial=0), t.dst_of.max(initial=0))) for t in tpls)
    gpu_of = np.concatenate([np.where(t.gpu_of >= 0, t.gpu_of + i * G, -1) for i, t in enumerate(tpls)])
    dst_of = np.concatenate([np.where(t.dst_of >= 0, t.dst_of + i * G, -1) for i, t in enumerate(tpls)])
    gemm_nodes, comm_nodes, xfer_nodes = at("gemm_nodes"), at("comm_nodes"), at("xfer_nodes")
    comm_grid = cat("comm_grid")
    out = Template(
        ref=tpls[0].ref, num_nodes=N, levels=levels, kind=cat("kind"), const=cat("const"), coef=cat("coef"),
        ref_bytes=cat("ref_bytes"), tune=np.concatenate([t.tune for t in tpls]), gemm_shape=np.concatenate([r[t.gemm_shape] for r, t in zip(remap, tpls)]),
        shapes=list(shapes), gpu_of=gpu_of, dst_of=dst_of, gemm_nodes=gemm_nodes, gemm_begin=at("gemm_begin"),
        comm_nodes=comm_nodes, comm_begin=at("comm_begin"), comm_grid=comm_grid, xfer_nodes=xfer_nodes,
        xfer_begin=at("xfer_begin"), comm_scale=tpls[0].comm_scale,
        **merged_links(tpls), mem=merged_mem(tpls, offs), comm_kernels=merged_comm(tpls, offs),
        source=None if all(t.source is None for t in tpls) else np.concatenate(
            [np.full(t.num_nodes, -1, dtype=np.int64) if t.source is None else np.where(t.source >= 0, t.source + o, -1)
             for t, o in zip(tpls, offs[:-1])]), share_dag=share_dag)
    return out, offs


def _merged_levels(tpls: Sequence[Template], offs: np.ndarray) -> list:
    """Level by level, the templates' levels side by side, each template's nodes shifted by
    its offset in ``offs`` and its padding the merged sentinel ``offs[-1]``."""
    N = int(offs[-1])
    sizes = np.diff(offs)
    per = [t.levels for t in tpls]
    out = []
    for lv in range(max(len(x) for x in per)):
        got = [(x[lv], o, size) for x, o, size in zip(per, offs, sizes) if lv < len(x)]
        width = max(p.shape[1] for (_, p), _, _ in got)
        ids = np.concatenate([i + o for (i, _), o, _ in got])
        pad = np.full((len(ids), width), N, dtype=np.int64)
        r = 0
        for (i, p), o, size in got:
            pad[r:r + len(i), :p.shape[1]] = np.where(p == size, N, p + o)
            r += len(i)
        out.append((ids, pad))
    return out
