"""The closed-form engine's contention rule (:mod:`ficco_sim.contention`), from the overlaps
of a pass: the slowdown of every GEMM and transfer. A GEMM meets the communication kernels
and transfers of its GPU: it is charged the SMs held by the widest communication kernel
overlapping it, over the share of its run some communication kernel covers, and at every
instant transfers cover it the factor for the HBM bytes all of them move, integrated over
the run it stretches (:func:`~ficco_sim.contention.slowed_time`). A transfer meets the GEMMs
at its source and destination. All GPUs at once, through the padded member lists of
:class:`~.closed_form_tables.Groups`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..contention import Weights, comm_slowdown, compute_slowdown, covered_excess, slowed_time
from ..hardware import GpuProfile
from .closed_form_overlap import _pad, covered, disjoint

if TYPE_CHECKING:
    from .closed_form import Template


def slowdowns(tpl: "Template", gpu: GpuProfile, vals: np.ndarray, nbytes: np.ndarray, gemm_hbm: np.ndarray,
              weights: Weights, base: np.ndarray | None = None, before: np.ndarray | None = None) -> np.ndarray:
    """(P, nodes + 1) slowdown factors from the overlaps of a pass ``vals`` without HBM
    contention (the GEMMs' runs are their durations there, or ``base`` when given); or, given
    the factors ``before`` that made ``vals`` too, the GEMMs' again from that pass (where
    everything already moved as contention moves it), the transfers' kept."""
    slow = np.ones_like(vals) if before is None else before.copy()
    grp = tpl.contention_groups()
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
    f_sm, held = 0.0, 0.0
    if len(tpl.comm_nodes):
        a = _pad(vals[:, tpl.comm_begin], inf)[:, grp.comm]               # (P, U, Wc)
        b = _pad(vals[:, tpl.comm_nodes], inf)[:, grp.comm]
        lo, hi = disjoint(a, b)
        f_sm = covered(gs, ge, lo[:, row], hi[:, row])
        over = (a[:, row] < e) & (b[:, row] > s)
        held = np.where(over, grp.comm_grid[row], 0.0).max(-1)
    other = compute_slowdown(gpu, 0.0, held_sms=np.asarray(held, dtype=float), sm_cover=f_sm, resident_cover=f_sm,
                             weights=weights) - 1.0
    slow[:, tpl.gemm_nodes[tg]] = 1.0 + other
    if len(tpl.xfer_nodes):
        a = _pad(np.where(xmask, xs_all, inf), inf)[:, grp.near]          # (P, U, Wx)
        b = _pad(np.where(xmask, xe_all, inf), inf)[:, grp.near]
        union = [x[:, row] for x in disjoint(a, b, sorted_starts=True)]      # (P, G, Wx) each
        run = None if base is None else base[:, tpl.gemm_nodes[tg]]     # (the pass may have SM terms)
        slow[:, tpl.gemm_nodes[tg]] = _hbm_slowed(gpu, gs, ge, other, a[:, row], b[:, row],
                                                  _pad(xrate, 0.0)[:, grp.near][:, row], union, weights, run)
    if len(tpl.xfer_nodes) and before is None:
        prow = grp.pair_row
        a = _pad(gs_all, inf)[:, grp.pair_gemms]                          # (P, pairs, Wg)
        b = _pad(ge_all, inf)[:, grp.pair_gemms]
        lo, hi = disjoint(a, b)
        f = covered(xs, xe, lo[:, prow], hi[:, prow])
        over = (a[:, prow] < xe[..., None]) & (b[:, prow] > xs[..., None])
        rate = np.where(over, _pad(grate, 0.0)[:, grp.pair_gemms][:, prow], 0.0).max(-1)
        bx = comm_slowdown(gpu, rate, weights=weights) - 1.0
        lo, hi = lo[:, prow], hi[:, prow]
        slow[:, tpl.xfer_nodes[tx]] = _factor(xs, xe, np.where(f > 0, bx, 0.0), 0.0, lambda t: covered_excess(
            covered(xs, xs + t, lo, hi) * t, bx))
    return slow


def _factor(s: np.ndarray, e: np.ndarray, b_max, other, excess) -> np.ndarray:
    """Slowdown factors of runs that need ``e - s`` seconds alone, starting at ``s``, under
    :func:`~ficco_sim.contention.slowed_time`."""
    base = e - s
    with np.errstate(invalid="ignore", divide="ignore"):
        t = slowed_time(base, other, b_max, excess)
    return np.where(base > 0, t / np.where(base > 0, base, 1.0), 1.0 + other)


def _hbm_slowed(gpu: GpuProfile, s, e, other, a, b, r, union, weights: Weights, run=None) -> np.ndarray:
    """Slowdown factors of GEMM runs [s, e) (P, G) beside the transfers of their GPU (spans
    ``a, b``, mean rates ``r``: (P, G, W); ``union``: :func:`disjoint` of them with the sorted
    starts): at each covered instant the rule's factor for the HBM bytes all of them move
    there, taken at their mean rate over the covered time of the slowed run. Only transfers
    under way before the run ends in the pass count: they go on as they were while it
    stretches; a later one may wait for it (one that starts as the run ends, its dependent,
    is not under way)."""
    end = e[..., None] * (1 - 1e-9)
    early = a < end
    out = np.broadcast_to(1.0 + other, s.shape).copy()
    on = (early & (b > s[..., None])).any(-1)           # runs some transfer overlaps: the others keep 1 + other
    if not on.any():
        return out
    lo, hi, first = (x[on] for x in union)
    keep = first < end[on]                              # the union of the early ones: a prefix of it
    lo, hi = np.where(keep, lo, np.inf), np.where(keep, hi, np.inf)
    a, b, r, s1 = np.where(early[on], a[on], np.inf), np.where(early[on], b[on], np.inf), r[on], s[on]

    def excess(t):
        end = s1 + t
        w = covered(s1, end, lo, hi) * t
        moved = (np.maximum(0.0, np.minimum(end[..., None], b) - np.maximum(s1[..., None], a)) * r).sum(-1)
        f = compute_slowdown(gpu, np.where(w > 0, moved / np.where(w > 0, w, 1.0), 0.0), weights=weights)
        return covered_excess(w, f - 1.0)
    b_max = compute_slowdown(gpu, np.where(np.isfinite(a), r, 0.0).sum(-1), weights=weights) - 1.0
    stop = (e if run is None else s + run)[on]
    out[on] = _factor(s1, stop, b_max, np.broadcast_to(other, s.shape)[on], excess)
    return out
