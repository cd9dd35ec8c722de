"""Fluid bandwidth sharing: one mechanism for links, HBM, copy engines and channels.

An :class:`Activity` makes progress at a rate; each unit of progress consumes
``usage[r]`` units of resource ``r`` (bytes, for every resource here). Rates follow
weighted max-min fairness (progressive filling): a common level rises, every
unfrozen activity gets ``rate = weight * level`` until it reaches its own ``cap`` or one
of its resources saturates; then it freezes and the rest keep rising. With
``weight = 1 / (bytes per unit of progress)`` the fairness is on bytes per second,
so a transfer and a GEMM wave asking for the same HBM get the same share of it.

>>> a = Activity("a", remaining=1.0, usage={"link": 1.0})
>>> b = Activity("b", remaining=1.0, usage={"link": 1.0})
>>> max_min_rates([a, b], {"link": 10.0})
{'a': 5.0, 'b': 5.0}
>>> c = Activity("c", remaining=1.0, usage={"link": 1.0}, cap=2.0)
>>> max_min_rates([a, c], {"link": 10.0})
{'a': 8.0, 'c': 2.0}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np


@dataclass(eq=False)
class Activity:
    """Something that progresses at a shared rate: ``remaining`` units of work (bytes for
    transfers, seconds of isolated block time for compute waves)."""

    id: str
    remaining: float
    usage: Mapping[str, float]
    cap: float = math.inf
    weight: float = 1.0
    gpu: int = -1
    kind: str = "transfer"          # transfer | compute
    ends: tuple[int, ...] = ()      # a transfer's source and destination GPUs
    rate: float = 0.0
    on_done: Callable[[], None] | None = field(default=None, repr=False)
    hbm: list = field(default_factory=list, repr=False)     # (gpu, bytes per unit), filled by the engine
    links: list = field(default_factory=list, repr=False)   # link resources it crosses


def max_min_rates(activities: list[Activity], capacity: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair rates by progressive filling (see module docstring)."""
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
