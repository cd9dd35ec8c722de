"""What a DES run's tasks cross and what it records: the resources a transfer uses per byte
(route links, HBM at both ends, a host's cores), the real GPUs of a folded run's tasks, and
the counter series of a recorded run.

:class:`Wiring` is the part of :class:`~ficco_sim.engine.des.Simulation` that reads them; it
keeps the caches and counter series it writes, and reads the simulation's ``gpu``, ``topo``,
``fluid``, ``folded``, ``pairs``, ``env`` and ``record``, set up by ``Simulation.__init__``. It
also retires a GEMM cohort's blocks (their SMs, then their tiles: signals, the kernel's end),
through the simulation's ``pools``, ``tiled``, ``resident``, ``blocks_done``, ``records`` and ``done``,
and opens a GEMM's tiles as their input rows arrive.
"""

from __future__ import annotations

import numpy as np

from ..gemm_model import blocks_per_sm, tile_prefix_blocks, under_occupied
from ..taskgraph import Kernel, Transfer
from .dispatcher import Waiting
from .launch import persistent


class Wiring:
    """Routes, per-byte usage and counters of a :class:`~ficco_sim.engine.des.Simulation`."""

    def __init__(self) -> None:
        self.counters: dict[str, list[tuple[float, float]]] = {}
        self._paths: dict[tuple[int, int], tuple[dict[str, float], float]] = {}
        self.link_counters: dict[str, None] = {}     # link resources ever crossed, in first-use order
        self.kernel_sms: dict[str, np.ndarray] = {}  # a GEMM's blocks resident per SM (_occupied)
        self._link_names: list[str] = []             # (their names, as last listed)
        self._link_at = np.zeros(0, dtype=np.int64)   # their fluid resource indices
        self._link_last = np.zeros(0)                # and the loads last recorded

    def transfer_usage(self, src: int, dst: int, reduce: bool) -> dict[str, float]:
        """What a transfer from GPU ``src`` to ``dst`` uses per byte: the route's links, HBM
        read at the source and written at the destination (a reduce also reads the
        destination's own chunk and writes the sum: 3 bytes), and on a host device the
        library threads' cores at both ends (half each). Copies and SM transfers alike."""
        usage = dict(self._path(src, dst)[0])
        a, b = self.rank(src), self.rank(dst)
        usage[f"hbm{a}"] = usage.get(f"hbm{a}", 0.0) + 1.0
        usage[f"hbm{b}"] = usage.get(f"hbm{b}", 0.0) + (3.0 if reduce else 1.0)
        if self.gpu.host is not None:
            half = self.gpu.host.core_s_per_byte / 2
            usage[f"host{a}"] = usage.get(f"host{a}", 0.0) + half
            usage[f"host{b}"] = usage.get(f"host{b}", 0.0) + half
        return usage

    def rank(self, g: int) -> int:
        """The GPU whose resources stand for GPU ``g``'s (a folded run has only GPU 0's)."""
        return 0 if self.folded else g

    def pair(self, t: Transfer) -> tuple[int, int]:
        """The GPUs ``t`` really joins (a folded graph's transfers are all local)."""
        return self.pairs.get(t.id) or (t.src, t.dst)

    def _path(self, src: int, dst: int) -> tuple[dict[str, float], float]:
        """({link resource: times crossed} along the route, path latency) from ``src`` to ``dst``."""
        hit = self._paths.get((src, dst))
        if hit is None:
            usage: dict[str, float] = {}
            edges = self.topo.graph.edges
            for u, v in self.topo.path_links(src, dst):
                name = self.folded.link(u, v) if self.folded else f"link:{u}->{v}"
                if name not in self.fluid.res:      # a link's capacity, when a route first crosses it
                    self.fluid.set_capacity(name, edges[u, v]["bandwidth"])
                usage[name] = usage.get(name, 0.0) + 1.0
            hit = self._paths[(src, dst)] = (usage, self.topo.path_latency(src, dst))
        return hit

    # -- counters ----------------------------------------------------------------------------
    def _count(self, name: str, delta: float) -> None:
        if not self.record:
            return
        series = self.counters.setdefault(name, [(0.0, 0.0)])
        t, v = series[-1]
        if t == self.env.now:
            series[-1] = (t, v + delta)
        else:
            series.append((self.env.now, v + delta))

    def _record_links(self) -> None:
        """A point on each crossed link's load series where the load changed."""
        names = self._link_names
        if len(names) != len(self.link_counters):      # links crossed for the first time
            names = self._link_names = list(self.link_counters)
            self._link_at = np.array([self.fluid.res[r] for r in names], dtype=np.int64)
            self._link_last = np.concatenate([self._link_last, np.zeros(len(names) - len(self._link_last))])
            for r in names:
                self.counters.setdefault(r, [(0.0, 0.0)])
        loads = self.fluid.link_loads()[self._link_at]
        changed = np.flatnonzero(loads != self._link_last)
        if not len(changed):
            return
        self._link_last = loads
        now = self.env.now
        for i in changed.tolist():
            series, value = self.counters[names[i]], float(loads[i])
            if series[-1][0] == now:
                series[-1] = (now, value)
            else:
                series.append((now, value))

    def _occupied(self, k: Kernel, counts: np.ndarray) -> float:
        """Factor on the block time of a GEMM cohort just placed (per-SM ``counts``) of a grid the
        GPU holds in less than one wave: its kernel's blocks resident on the busiest of its SMs once
        it is, against the occupancy its block time assumes (:func:`~ficco_sim.gemm_model.under_occupied`:
        fewer per SM, faster); 1 for other kernels (a persistent one's blocks take tiles as SMs free;
        a trace's: as measured)."""
        if k.kind != "gemm" or k.gemm is None or persistent(k, self.gpu):
            return 1.0
        occ = blocks_per_sm(self.gpu.sm, k.block)
        if k.grid >= (k.sms[1] - k.sms[0] if k.sms else len(counts)) * occ:
            return 1.0
        res = self.kernel_sms.setdefault(k.id, np.zeros(len(counts), dtype=np.int64))
        res += counts
        return float(under_occupied(self.gpu, int(res[counts > 0].max()), occ))

    def _vacate(self, k: Kernel, counts: np.ndarray) -> None:
        """A cohort's blocks (per-SM ``counts``) retire from their SMs (and from :meth:`_occupied`'s count)."""
        self.pools[k.gpu].retire(k.block, counts, k.id)
        if k.id in self.kernel_sms:
            self.kernel_sms[k.id] -= counts

    def _cohort_done(self, k: Kernel, counts: np.ndarray, first: int = 0) -> None:
        self._release(k, counts)
        self._landed(k, counts, first)

    def _release(self, k: Kernel, counts: np.ndarray) -> None:
        """A cohort's blocks leave their SMs."""
        n = int(counts.sum())
        self._vacate(k, counts)
        self.resident[k.id] -= n
        self._count(f"gpu{k.gpu}.blocks.{k.role}", -n)
        self._dirty(k.gpu)

    def _landed(self, k: Kernel, counts: np.ndarray, first: int) -> None:
        """A cohort's tiles are done (computed, their stores landed): their signals go, and the
        kernel ends with its last."""
        n = int(counts.sum())
        order = self.tiled.get(k.id)
        if order is not None:
            for latency, ev in order.retire(first, n):
                if latency:
                    self.env.timeout(latency).callbacks.append(lambda _e, ev=ev: ev.succeed())
                else:
                    ev.succeed()
        self.blocks_done[k.id] += n
        if self.blocks_done[k.id] == k.grid:
            self.records[k.id].end = self.env.now
            self.done[k.id].succeed()

    def _gate(self, k: Kernel, w: Waiting) -> None:
        """``w.open``: the tiles of ``k`` whose rows have arrived (:attr:`~ficco_sim.taskgraph.Kernel.waits`,
        in tile order); each arrival still awaited opens more and wakes the dispatcher."""
        share = 0.0
        for rows, tid in k.waits:
            if tid and not self.done[tid].triggered:
                self.done[tid].callbacks.append(lambda _e: (self._gate(k, w), self._dirty(k.gpu)))
                break
            share = rows
        tile = self._tile_order(k).tile
        w.open = min(k.grid, int(tile_prefix_blocks(tile, k.gemm.m, k.gemm.n, share, within=True)))
