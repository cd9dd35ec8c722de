"""A plain dense progressive filling: the oracle for :class:`ficco_sim.engine.fluid.FluidPool`
(the engine's sparse, array-based filling must give the same rates)."""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ficco_sim.engine.fluid import Activity


def dense_max_min(activities: list[Activity], capacity: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair rates: activities x resources as a dense matrix, filled level by level."""
    if not activities:
        return {}
    ridx: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for i, a in enumerate(activities):
        for r, u in a.usage.items():
            rows.append(i)
            cols.append(ridx.setdefault(r, len(ridx)))
            vals.append(u)
    res = list(ridx)
    n, m = len(activities), len(res)
    use = np.zeros((n, m))
    use[rows, cols] = vals
    w = np.fromiter((a.weight for a in activities), float, n)
    cap = np.fromiter((a.cap for a in activities), float, n)
    full = np.fromiter((capacity.get(r, 0.0) for r in res), float, m)
    slack = full.copy()
    tol = 1e-9 * np.maximum(1.0, full)
    if np.isfinite(cap).all() and (use.T @ cap <= full + tol).all():
        return {a.id: float(c) for a, c in zip(activities, cap)}   # nothing saturates: all at cap
    rate = np.zeros(n)
    live = cap > 0
    # Zero-capacity resources stop their users at once.
    dead_res = slack <= 0
    if dead_res.any():
        live &= ~(use[:, dead_res] > 0).any(axis=1)
    for _ in range(n + m + 1):
        if not live.any():
            break
        grow = use[live].T @ w[live]                    # resource consumption per unit level
        with np.errstate(divide="ignore", invalid="ignore"):
            by_res = np.where(grow > 1e-300, slack / grow, np.inf)
            by_cap = (cap[live] - rate[live]) / w[live]
        step = min(by_res.min(initial=np.inf), by_cap.min(initial=np.inf))
        if not math.isfinite(step):
            raise RuntimeError("unbounded activity: no cap and no resource limits it")
        step = max(step, 0.0)
        rate[live] += w[live] * step
        slack -= grow * step
        saturated = slack <= tol
        frozen = rate >= cap * (1 - 1e-12)
        if saturated.any():
            frozen |= (use[:, saturated] > 0).any(axis=1)
        live &= ~frozen
    return {a.id: float(rate[i]) for i, a in enumerate(activities)}
