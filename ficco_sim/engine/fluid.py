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

The engine keeps its live activities in a :class:`FluidPool`: the same filling on arrays
(activities x resources as a sparse incidence list), so a recomputation costs in
proportion to the (activity, resource) pairs in flight, not to activities x resources.
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
    roofline: float = 0.0           # a GEMM cohort's HBM bytes/s at full speed (its waves' roofline)
    rate: float = 0.0
    on_done: Callable[[], None] | None = field(default=None, repr=False)


def max_min_rates(activities: list[Activity], capacity: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fair rates by progressive filling (see module docstring): the
    filling of :meth:`FluidPool.rates`, for a list of activities."""
    pool = FluidPool()
    for name, value in capacity.items():
        pool.set_capacity(name, value)
    for act in activities:
        pool.add(act)
    pool.rates()
    return {act.id: float(pool.rate[i]) for i, act in enumerate(activities)}


class FluidPool:
    """The live activities of a simulation as arrays, with :meth:`rates` (the filling of
    :func:`max_min_rates`, vectorized over a sparse incidence list), :meth:`advance` and
    :meth:`finished`. Resources are named as in ``usage``; their capacities are set with
    :meth:`set_capacity` (unknown resources have none)."""

    def __init__(self) -> None:
        self.solves = 0         # calls of rates(): max-min solves (benchmarks count them)
        self.res: dict[str, int] = {}
        self.capacity = np.zeros(16)
        self.res_gpu = np.full(16, -1, dtype=np.int64)     # the GPU of an hbm<i> resource, else -1
        self.is_link = np.zeros(16, dtype=bool)
        self.acts: list[Activity | None] = []
        size = 64
        self.remaining = np.zeros(size)
        self.rate = np.zeros(size)
        self.cap = np.zeros(size)
        self.weight = np.zeros(size)
        self.alive = np.zeros(size, dtype=bool)
        self.compute = np.zeros(size, dtype=bool)
        self.roofline = np.zeros(size)
        self.gpu = np.zeros(size, dtype=np.int64)
        self.ends = np.zeros((size, 2), dtype=np.int64)
        self.owner = np.full(size, -1, dtype=np.int64)     # a batch's own index of the slot; -1: an Activity
        self._inc: list[np.ndarray] = [np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)]
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []    # batches' entries, in order
        self._pending: tuple[list, list, list] = ([], [], [])
        self._slots: np.ndarray | None = None
        self.live = 0

    def __len__(self) -> int:
        return self.live

    # -- resources --------------------------------------------------------------------------
    def resource(self, name: str) -> int:
        i = self.res.get(name)
        if i is None:
            i = self.res[name] = len(self.res)
            if i >= len(self.capacity):
                grow = len(self.capacity)
                self.capacity = np.concatenate([self.capacity, np.zeros(grow)])
                self.res_gpu = np.concatenate([self.res_gpu, np.full(grow, -1, dtype=np.int64)])
                self.is_link = np.concatenate([self.is_link, np.zeros(grow, dtype=bool)])
            if name.startswith("hbm"):
                self.res_gpu[i] = int(name[3:])
            self.is_link[i] = name.startswith("link:")
        return i

    def set_capacity(self, name: str, value: float) -> None:
        i = self.resource(name)          # (may grow the arrays: index after)
        self.capacity[i] = value

    # -- activities -------------------------------------------------------------------------
    def add(self, a: Activity) -> None:
        slot = len(self.acts)
        if slot >= len(self.remaining):
            self._grow()
        self.acts.append(a)
        self.remaining[slot], self.rate[slot], self.cap[slot], self.weight[slot] = a.remaining, 0.0, a.cap, a.weight
        self.alive[slot], self.compute[slot], self.gpu[slot] = True, a.kind == "compute", a.gpu
        self.roofline[slot] = a.roofline
        self._slots = None
        self.ends[slot] = (a.ends[0], a.ends[-1]) if a.ends else (a.gpu, a.gpu)
        self.owner[slot] = -1
        rows, cols, vals = self._pending
        known = self.res
        for r, u in a.usage.items():
            i = known.get(r)
            rows.append(slot)
            cols.append(self.resource(r) if i is None else i)
            vals.append(u)
        self.live += 1

    def add_many(self, remaining: np.ndarray, gpu: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 rel: np.ndarray, cols: np.ndarray, vals: np.ndarray, owner: np.ndarray, cap=np.inf) -> None:
        """Add a batch of transfers (weight 1, capped at ``cap``: one or one per member) at
        once: entry ``e`` of the incidence is batch member ``rel[e]`` using ``vals[e]`` of
        resource ``cols[e]`` (members in order); ``owner`` is each member's index as
        :meth:`finished` returns it."""
        k = len(remaining)
        slot = len(self.acts)
        while slot + k > len(self.remaining):
            self._grow()
        self._flush()
        sl = slice(slot, slot + k)
        self.acts.extend([None] * k)
        self.remaining[sl], self.rate[sl], self.cap[sl], self.weight[sl] = remaining, 0.0, cap, 1.0
        self.alive[sl], self.compute[sl], self.gpu[sl] = True, False, gpu
        self.roofline[sl] = 0.0
        self._slots = None
        self.ends[sl, 0], self.ends[sl, 1] = src, dst
        self.owner[sl] = owner
        self._chunks.append((rel + slot, cols, vals))
        self.live += k

    def _grow(self) -> None:
        for name in ("remaining", "rate", "cap", "weight", "alive", "compute", "roofline", "gpu", "ends", "owner"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))

    def _flush(self) -> None:
        rows, cols, vals = self._pending
        if rows:
            self._chunks.append((np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64),
                                 np.array(vals, dtype=float)))
            self._pending = ([], [], [])

    def incidence(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(activity slot, resource, usage) of every live activity's resources."""
        self._flush()
        if self._chunks:
            parts = [tuple(self._inc)] + self._chunks
            self._inc = [np.concatenate([p[i] for p in parts]) for i in range(3)]
            self._chunks = []
        a, r, u = self._inc
        if len(a) and not self.alive[a].all():
            keep = self.alive[a]
            self._inc = [a[keep], r[keep], u[keep]]
        return self._inc[0], self._inc[1], self._inc[2]

    def slots(self) -> np.ndarray:
        """The live slots (kept until an activity comes or goes)."""
        if self._slots is None:
            self._slots = np.flatnonzero(self.alive[:len(self.acts)])
        return self._slots

    def advance(self, dt: float) -> None:
        n = len(self.acts)
        self.remaining[:n] -= self.rate[:n] * dt * self.alive[:n]

    def next_finish(self) -> float:
        s = self.slots()
        r = self.rate[s]
        moving = r > 0
        return float((self.remaining[s][moving] / r[moving]).min(initial=math.inf))

    def finished(self) -> tuple[list[Activity], np.ndarray]:
        """Remove and return the activities that are done: those added one by one (in the
        order they were added), and the owner indices of batch members (likewise)."""
        s = self.slots()
        done = s[self.remaining[s] <= self.rate[s] * 1e-10 + 1e-18]
        own = self.owner[done]
        out = [self.acts[i] for i in done[own < 0]], own[own >= 0]
        self.alive[done] = False
        if len(done):
            self._slots = None
        for i in done:
            self.acts[i] = None
        self.live -= len(done)
        if len(self.acts) > 1024 and self.live < len(self.acts) // 4:
            self._compact()
        return out

    def _compact(self) -> None:
        s = self.slots()
        remap = np.full(len(self.acts), -1, dtype=np.int64)
        remap[s] = np.arange(len(s))
        a, r, u = self.incidence()
        self._inc = [remap[a], r, u]
        for name in ("remaining", "rate", "cap", "weight", "alive", "compute", "roofline", "gpu", "ends", "owner"):
            arr = getattr(self, name)
            kept = arr[s]
            fresh = np.zeros_like(arr)
            fresh[:len(s)] = kept
            setattr(self, name, fresh)
        self.acts = [self.acts[i] for i in s]
        self._slots = None

    # -- rates ------------------------------------------------------------------------------
    def rates(self) -> None:
        """Weighted max-min fair rates of the live activities into :attr:`rate` (the
        progressive filling of :func:`max_min_rates`)."""
        self.solves += 1
        n = len(self.acts)
        a, r, u = self.incidence()
        self.rate[:n] = 0.0
        s = self.slots()
        if not len(s):
            return
        m = len(self.res)
        full = self.capacity[:m]
        w, cap = self.weight[:n], self.cap[:n]
        tol = 1e-9 * np.maximum(1.0, full)
        if np.isfinite(cap[s]).all() and \
                (np.bincount(r, weights=u * cap[a], minlength=m) <= full + tol).all():
            self.rate[s] = cap[s]
            return
        rate = np.zeros(n)
        live = self.alive[:n].copy()
        live &= cap > 0
        slack = full.copy()
        dead_res = slack <= 0
        if dead_res.any():
            live[a[dead_res[r] & (u > 0)]] = False
        wu = u * w[a]
        on = live[a]
        a, r, u, wu = a[on], r[on], u[on], wu[on]       # entries of unfrozen activities only
        for _ in range(len(s) + m + 1):
            if not live.any():
                break
            grow = np.bincount(r, weights=wu, minlength=m)
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
            hit = saturated[r] & (u > 0)
            if hit.any():
                frozen[a[hit]] = True
            live &= ~frozen
            on = live[a]
            if not on.all():
                a, r, u, wu = a[on], r[on], u[on], wu[on]
        self.rate[:n] = rate * self.alive[:n]

    def hbm_rates(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes/s on each GPU's HBM by live compute activities, and by live transfers, at :attr:`rate`."""
        a, r, u = self.incidence()
        g = self.res_gpu[r]
        on = g >= 0
        a, g = a[on], g[on]
        load = self.rate[a] * u[on]
        comp = self.compute[a]
        size = max(int(self.res_gpu.max(initial=-1)) + 1, 1)       # every GPU with an hbm resource
        return (np.bincount(g[comp], weights=load[comp], minlength=size),
                np.bincount(g[~comp], weights=load[~comp], minlength=size))

    def link_loads(self) -> np.ndarray:
        """Bytes/s on each resource that is a link (rate times crossings, summed over the
        activities), indexed as :attr:`res`; 0 for other resources."""
        a, r, u = self.incidence()
        pick = self.is_link[r]
        return np.bincount(r[pick], weights=self.rate[a[pick]] * u[pick], minlength=len(self.res))
