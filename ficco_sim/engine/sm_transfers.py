"""The SM transfers of one simulation, handled as arrays.

An SM transfer rides on its driver kernels: it may start once its dependencies are done,
its drivers have a resident block and its tile signals have fired; after the path and
protocol latency its bytes join the fluid pool; when they have crossed, its dependents
count down and its drivers may retire. A collective at hundreds of GPUs has tens of
thousands of such transfers, and symmetric ranks make many of them ready, start and
finish at the same instant, so this module does each of those steps for a whole batch
at once: dependency counts, dependents and drivers are index arrays (CSR), the fluid
incidence of every transfer is built once at set-up, and a batch ready at one instant
waits for its latency on one simpy timeout per distinct latency.

The answers are those of handling the transfers one by one (the order in which a batch
enters the fluid pool is the order its transfers became ready).
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from ..taskgraph import UNTUNED
from ..timeline import TaskRecord

NAN = float("nan")
_EMPTY = np.zeros(0, dtype=np.int64)


def csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(pointer, indices) of a list of index lists."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    flat = [i for r in rows for i in r]
    return ptr, np.asarray(flat, dtype=np.int64)


def _by_row(rows: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (pointer, values) of ``values`` grouped by ``rows`` in ``0..n-1``, each row's in their order."""
    order = np.argsort(rows, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr, values[order]


def _rows(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions ``ptr[i] .. ptr[i + 1]`` of each ``i`` in ``rows``, concatenated in row order."""
    lo = ptr[rows]
    cnt = ptr[rows + 1] - lo
    total = int(cnt.sum())
    if not total:
        return _EMPTY
    return np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)


def gather(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The indices of ``rows`` of a CSR array, concatenated in row order."""
    return idx[_rows(ptr, rows)]


def last_occurrences(a: np.ndarray) -> np.ndarray:
    """``a`` without repeats, each value kept where it last occurs."""
    if len(a) < 2:
        return a
    s = np.sort(a)
    if not (s[1:] == s[:-1]).any():
        return a
    rev = a[::-1]
    _, first = np.unique(rev, return_index=True)
    return rev[np.sort(first)][::-1]


class SmTransfers:
    """Every SM transfer of a :class:`~ficco_sim.engine.des.Simulation`, as arrays."""

    def __init__(self, sim, transfers: list, posts: np.ndarray | None = None) -> None:
        """``posts``: per transfer, the posts it also waits for (a host device's issuing
        threads post each message at both its ends; the simulation releases them)."""
        self.sim = sim
        self.tasks = transfers
        n = len(transfers)
        # one pass over the task objects, then columns
        ids, src, dst, nbytes, reduce, deps_of, drivers_of, signals, tunes = zip(*map(attrgetter(
            "id", "src", "dst", "nbytes", "reduce", "deps", "drivers", "signals", "tune"), transfers)) if n else [()] * 9
        index = dict(zip(ids, range(n)))
        ndeps = np.fromiter(map(len, deps_of), np.int64, n)
        ndrivers = np.fromiter(map(len, drivers_of), np.int64, n)
        # the waits each has left: dependencies, drivers' first blocks, tile signals
        self.need = ndeps + ndrivers + np.fromiter(map(len, signals), np.int64, n)
        if posts is not None:
            self.need += posts
        self.ready = np.full(n, NAN)
        self.end = np.full(n, NAN)
        self.nbytes = np.array(nbytes, dtype=float)
        self.src = np.array(src, dtype=np.int64)
        self.dst = np.array(dst, dtype=np.int64)
        self.reduce = np.array(reduce, dtype=bool)
        # dependents: of SM transfers as CSR by transfer; of kernels and copies by their id
        flat = list(chain.from_iterable(deps_of))
        on_sm = np.fromiter(map(index.get, flat, repeat(-1)), np.int64, len(flat))
        dependent = np.repeat(np.arange(n, dtype=np.int64), ndeps)
        self.dep_ptr, self.dep_idx = _by_row(on_sm[on_sm >= 0], dependent[on_sm >= 0], n)
        others: dict[str, list[int]] = {}
        for i in np.flatnonzero(on_sm < 0).tolist():
            others.setdefault(flat[i], []).append(int(dependent[i]))
        # drivers: each distinct driver of a transfer holds it open until its bytes have crossed
        flat = list(chain.from_iterable(drivers_of))
        kidx = {k: i for i, k in enumerate(dict.fromkeys(flat))}
        self.kernels = list(kidx)
        self.kidx = kidx
        dk = np.fromiter(map(kidx.__getitem__, flat), np.int64, len(flat))
        dj = np.repeat(np.arange(n, dtype=np.int64), ndrivers)
        nk = max(len(kidx), 1)
        pairs = np.sort(dj * nk + dk)
        keep = np.ones(len(pairs), dtype=bool)
        keep[1:] = pairs[1:] != pairs[:-1]
        distinct = pairs[keep]                       # (transfer, driver) pairs without repeats
        self.drv_ptr, self.drv_idx = _by_row(distinct // nk, distinct % nk, n)
        self.open = np.bincount(self.drv_idx, minlength=len(self.kernels)).astype(np.int64)
        self._incidence(transfers, dk, dj, tunes)
        # the simpy events they wait on: one callback per event, for all its dependents
        env = sim.env
        for tid, js in others.items():
            sim.done[tid].callbacks.append(lambda _e, js=np.asarray(js, dtype=np.int64): self.release(js))
        start_ptr, start_idx = _by_row(dk, dj, len(self.kernels))
        for i, kid in enumerate(self.kernels):
            js = start_idx[start_ptr[i]:start_ptr[i + 1]]
            sim.started[kid].callbacks.append(lambda _e, js=js: self.release(js))
        for tid, events in sim.signal_events.items():
            j = index.get(tid)
            if j is not None:
                for ev in events:
                    ev.callbacks.append(lambda _e, js=np.array([j], dtype=np.int64): self.release(js))
        self.watched = np.zeros(n, dtype=bool)          # some stream task waits on its done event
        self.watched[[index[tid] for tid in sim.done if tid in index]] = True
        free = np.flatnonzero(self.need == 0)
        if len(free):
            env.timeout(0).callbacks.append(lambda _e: self._ready(free))

    def _incidence(self, transfers: list, dk: np.ndarray, dj: np.ndarray, tunes: tuple) -> None:
        """Each transfer's fluid work and resources, built once: per distinct (real source,
        real destination, reduce) what :meth:`Simulation.transfer_usage` says, plus its first
        and last drivers' channels; its wire protocol and the channels NCCL's tuner gives it
        (:meth:`~ficco_sim.hardware.CommKernelSpec.tuned`: a byte on fewer than its kernel's
        channels takes that many more of their capacity)."""
        sim, fluid = self.sim, self.sim.fluid
        n = len(transfers)
        ngpu = sim.g.num_gpus
        rsrc, rdst = self.src, self.dst
        if sim.pairs:       # a folded rank: its transfers are local, their links those of the real peers
            ngpu = sim.folded.ranks
            real = np.array([sim.pairs[t.id] for t in transfers], dtype=np.int64).reshape(n, 2)
            rsrc, rdst = real[:, 0], real[:, 1]
        keys, self.pair = np.unique((rsrc * ngpu + rdst) * 2 + self.reduce, return_inverse=True)
        pair_cols, pair_vals, pair_latency, self.pair_links = [], [], [], []
        for key in keys.tolist():
            src, dst = divmod(key // 2, ngpu)
            usage = sim.transfer_usage(src, dst, bool(key % 2))
            self.pair_links.append([r for r in usage if r.startswith("link:")])
            pair_cols.append([fluid.resource(r) for r in usage])
            pair_vals.append(list(usage.values()))
            pair_latency.append(sim._path(src, dst)[1])
        self.pair_ptr, self.pair_cols = csr(pair_cols)
        self.pair_vals = np.array([v for row in pair_vals for v in row], dtype=float)
        send = np.array([fluid.resource(f"send:{k}") for k in self.kernels], dtype=np.int64)
        recv = np.array([fluid.resource(f"recv:{k}") for k in self.kernels], dtype=np.int64)
        # each transfer's first and last driver (``driven`` runs by transfer, drivers in order)
        first = dk[np.searchsorted(dj, np.arange(n), side="left")] if n else dk
        last = dk[np.searchsorted(dj, np.arange(n), side="right") - 1] if n else dk
        spec = sim.gpu.comm_kernel
        grid = np.array([sim.g.kernel(k).grid for k in self.kernels], dtype=float)[first] if n else np.zeros(0)
        tuned = np.array([tu or UNTUNED for tu in tunes], dtype=float).reshape(n, 3)
        p, channels = spec.tuned(self.nbytes, tuned[:, 0], tuned[:, 1], grid, tuned[:, 2])
        self.wire = self.nbytes / np.array([q.efficiency for q in spec.protocols])[p]
        self.latency = (np.asarray(pair_latency)[self.pair] + np.array([q.latency for q in spec.protocols])[p]
                        + spec.p2p_fill(self.wire, tuned[:, 0], tuned[:, 1], channels))
        # a ring step's fewer channels are the ones its next step reuses: its bytes take grid / channels
        # of its kernels' capacity; a grouped send's are its own (NCCL gives each peer other channels):
        # a cap of its own, its bytes taking their share of the kernels like any other
        sends = spec.grouped(tuned[:, 0], tuned[:, 1]) & (channels < grid)
        self.chan_use = np.where(sends, 1.0, grid / channels) if n else np.zeros(0)
        self.cap = np.where(sends, channels * spec.channel_bandwidth, np.inf) if n else np.zeros(0)
        self.channels = np.stack([send[first], recv[last]], axis=1) if n else np.zeros((0, 2), dtype=np.int64)

    # -- the steps of a batch --------------------------------------------------------------
    def open_of(self, kid: str) -> int:
        """Transfers driven by kernel ``kid`` still moving or to come."""
        i = self.kidx.get(kid)
        return 0 if i is None else int(self.open[i])

    def release(self, js: np.ndarray) -> None:
        """One wait of each of ``js`` (with repeats) is over; those with none left are ready."""
        if not len(js):
            return
        np.subtract.at(self.need, js, 1)
        go = js[self.need[js] == 0]
        if len(go):
            self._ready(last_occurrences(go))

    def _ready(self, js: np.ndarray) -> None:
        """``js`` may begin now: after their latency (one timeout per distinct latency) they start."""
        env = self.sim.env
        self.ready[js] = env.now
        lat = self.latency[js]
        same = lat.min() == lat.max()          # (a symmetric batch: one latency)
        for value, group in ([(lat[0], js)] if same else [(v, js[lat == v]) for v in np.unique(lat)]):
            if value:
                env.timeout(float(value)).callbacks.append(lambda _e, g=group: self._start(g))
            else:
                self._start(group)

    def _start(self, js: np.ndarray) -> None:
        """The bytes of ``js`` start moving."""
        sim = self.sim
        moving = self.nbytes[js] > 0
        go = js[moving]
        if len(go):
            sim._advance()
            fluid = sim.fluid
            pairs = self.pair[go]
            at = _rows(self.pair_ptr, pairs)
            per = self.pair_ptr[pairs + 1] - self.pair_ptr[pairs]
            k = len(go)
            rel = np.concatenate([np.repeat(np.arange(k), per), np.repeat(np.arange(k), 2)])
            cols = np.concatenate([self.pair_cols[at], self.channels[go].ravel()])
            vals = np.concatenate([self.pair_vals[at], np.repeat(self.chan_use[go], 2)])
            fluid.add_many(self.wire[go], self.dst[go], self.src[go], self.dst[go], rel, cols, vals, go, self.cap[go])
            if sim.record:
                for p in dict.fromkeys(pairs.tolist()):
                    sim.link_counters.update((r, None) for r in self.pair_links[p])
            sim._request_settle()
        if not moving.all():
            self.finish(js[~moving])

    def finish(self, js: np.ndarray) -> None:
        """The bytes of ``js`` have crossed: waiters are told, drivers may retire, dependents count down."""
        sim = self.sim
        self.end[js] = sim.env.now
        for j in js[self.watched[js]]:
            sim.done[self.tasks[j].id].succeed()
        drv = gather(self.drv_ptr, self.drv_idx, js)
        if len(drv):
            np.subtract.at(self.open, drv, 1)
            for i in dict.fromkeys(drv[self.open[drv] == 0].tolist()):
                kid = self.kernels[i]
                if sim.resident[kid]:
                    sim._finish_comm(kid)
        after = gather(self.dep_ptr, self.dep_idx, js)
        if len(after):      # told as a done event would tell them: later in this instant
            ev = sim.env.event()
            ev.callbacks.append(lambda _e: self.release(after))
            ev.succeed()

    def stuck(self) -> list[str]:
        return [self.tasks[j].id for j in np.flatnonzero(np.isnan(self.end))]

    def records(self) -> list[TaskRecord]:
        """One record per transfer, in order: ready = start (the latency is part of a transfer), end."""
        return [TaskRecord(t.id, t.gpu, "sm-transfers", "transfer", t.role, t.label, ready, ready, end, t.engine,
                           t.src, t.dst, t.nbytes)
                for t, ready, end in zip(self.tasks, self.ready.tolist(), self.end.tolist())]
