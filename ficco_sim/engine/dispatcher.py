"""The block dispatcher: a capacity pool of SMs with a dispatch policy.

Every SM has four limits (blocks, threads, registers, shared memory). A launched kernel
waits with its unplaced blocks; whenever a kernel arrives or blocks retire, the
dispatcher walks the waiting kernels in policy order and places on each SM as many of
a kernel's blocks as the SM's free resources allow, spreading them evenly across SMs
(one per SM first, then a second, ...). Nothing is ever preempted.

Blocks the engine sees ending at one instant retire one at a time per SM, a dispatch pass
after each (:meth:`SmPool.settle`): real blocks never end in the same cycle, and the
dispatcher acts on every retirement. So a waiting kernel whose block needs more than one
retiring block frees (an NCCL block beside a GEMM's two per SM) is passed over while the
GEMM's pending blocks refill each freed slot, however its priority: the starvation that
occupancy shaping cures (one retiring shaped block frees a whole SM). Likewise, kernels the
host launched with nothing to wait for that arrive at one instant are dispatched one after
another in launch order (a host issues one launch at a time), so a GEMM launched before a
high-priority collective fills the SMs first. Of kernels released at one instant by what they
waited for, the one whose turn came on its own stream (its predecessor there just ended:
:attr:`Waiting.queued`) is dispatched before those another stream's event released, whatever
their priorities: a stream's next kernel is at the front end already, an event's waiter still
has to be woken (on the H200 a GEMM queued behind a GEMM took the SMs before a higher-priority
kernel waiting on the first GEMM's event, every time: validation/gpu/h200/2026-11-28); the
others go by priority. A persistent kernel (:attr:`Waiting.persistent`: its blocks loop over
tiles) takes the SM one of its blocks leaves for its next block before any other kernel, whatever
the policy and the priorities (only that SM: SMs others leave at the same instant go by the
policy); others get its SMs only as it runs out of blocks to place.

Policies (the default is the profile's ``dispatch``):

* ``backfill``: higher stream priority first, then launch order; a kernel whose
  next block fits nowhere does not stop later kernels from filling the gaps.
* ``strict``: the same order, but the first kernel that still has unplaced blocks stops
  everything behind it (head-of-line blocking): what the H200 does (a light kernel waited for
  the last block of a kernel of equal or higher priority ahead of it, in every repeat:
  validation/gpu/h200/2026-11-28/dispatch.csv). A persistent kernel has blocks to place only
  until all its blocks (as many as its SMs hold) are launched; its further tiles follow them.
* ``fifo``: launch order only, head-of-line blocking (``CUDA_DEVICE_MAX_CONNECTIONS=1``).

>>> from ficco_sim.hardware import SmLimits, BlockShape
>>> pool = SmPool(2, SmLimits(4, 1024, 65536, 1 << 16, 1 << 15, 0, 32))
>>> k = Waiting("k", BlockShape(256, 32, 0), blocks=10, priority=0, seq=0)
>>> [(w.id, int(c.sum())) for w, c in pool.dispatch([k])]
[('k', 8)]
>>> k.unplaced
2
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..gemm_model import block_needs, blocks_beside
from ..hardware import POLICIES, BlockShape, SmLimits  # noqa: F401


@dataclass(eq=False)
class Waiting:
    """A launched kernel with blocks still to place."""

    id: str
    block: BlockShape
    blocks: int
    priority: int
    seq: int
    sms: tuple[int, int] | None = None    # the SMs [lo, hi) the kernel may use (None: all)
    free: bool = False                    # takes no SM resources (a host library's threads)
    issued: bool = False                  # launched by the host with nothing to wait for
    queued: bool = False                  # its turn came as its stream predecessor ended (no event to wait for)
    persistent: bool = False              # its blocks loop over tiles: an SM one leaves takes its next one
    unplaced: int = field(init=False)
    launched: int = 0                     # a persistent kernel's blocks on SMs so far (its other tiles follow)
    grid: int = field(init=False)         # its blocks: as many as its SMs hold when empty (tiles: ``blocks``)
    open: int | None = None               # its tiles whose input rows have arrived (None: all)

    def __post_init__(self) -> None:
        self.unplaced = self.grid = self.blocks

    @property
    def pending(self) -> int:
        """Blocks still to reach an SM: a persistent kernel's tiles past its blocks' first ones
        go to the SMs its own blocks leave, so only its blocks not yet launched (while tiles are
        left for them) are pending."""
        ready = min(self.unplaced, self.grid - self.launched) if self.persistent else self.unplaced
        return min(ready, self.allowed)

    @property
    def allowed(self) -> int:
        """Tiles it may still place: those whose rows have arrived, less those placed."""
        return self.unplaced if self.open is None else max(0, self.open - (self.blocks - self.unplaced))


class SmPool:
    """Free resources of every SM of one GPU, as numpy arrays."""

    def __init__(self, num_sms: int, limits: SmLimits, policy: str = "backfill"):
        if policy not in POLICIES:
            raise ValueError(f"unknown dispatch policy {policy!r}; known: {', '.join(POLICIES)}")
        self.limits = limits
        self.policy = policy
        self.num_sms = num_sms
        self._needs: dict[BlockShape, np.ndarray] = {}
        self._retiring: list[tuple[BlockShape, np.ndarray, str | None]] = []
        self._arriving: list[Waiting] = []
        self.free = np.tile(np.array([limits.max_blocks, limits.max_threads, limits.registers, limits.smem],
                                     dtype=np.int64), (num_sms, 1))

    def need(self, block: BlockShape) -> np.ndarray:
        hit = self._needs.get(block)
        if hit is None:
            hit = self._needs[block] = block_needs(self.limits, block)
        return hit

    def fit(self, block: BlockShape) -> np.ndarray:
        """How many more blocks of this shape each SM can take now."""
        need = self.need(block)
        with np.errstate(divide="ignore"):
            per = np.where(need > 0, self.free // np.maximum(need, 1), np.iinfo(np.int64).max)
        return per.min(axis=1)

    def place(self, w: Waiting, only: np.ndarray | None = None, own: bool = False) -> np.ndarray | None:
        """Place as many of ``w``'s blocks as fit, spread evenly (``only``: on those SMs, a
        mask); returns per-SM counts. A persistent kernel places its blocks not yet launched
        (:attr:`Waiting.pending`), or its next tiles on the SMs its own blocks just left (``own``)."""
        if w.free:      # all at once, evenly, holding nothing
            lo, hi = w.sms or (0, self.num_sms)
            counts = np.zeros(self.num_sms, dtype=np.int64)
            counts[lo:hi] = w.unplaced // (hi - lo)
            counts[lo:lo + w.unplaced % (hi - lo)] += 1
            w.unplaced = 0
            return counts if counts.any() else None
        fit = self.fit(w.block)
        if w.sms:
            fit[:w.sms[0]] = 0
            fit[w.sms[1]:] = 0
        if only is not None:
            fit = np.where(only, fit, 0)
        total = int(fit.sum())
        want = min(w.pending if w.persistent and not own else w.unplaced, w.allowed)
        if total == 0 or want <= 0:
            return None
        if total <= want:
            counts = fit
        else:
            # Water-filling: level L with sum(min(fit, L)) <= want, then one more on the first SMs.
            lo, hi = 0, int(fit.max())
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int(np.minimum(fit, mid).sum()) <= want:
                    lo = mid
                else:
                    hi = mid - 1
            counts = np.minimum(fit, lo)
            extra = want - int(counts.sum())
            if extra:      # one more on the SMs with the most room left (the emptiest), in SM order among equals
                room = np.flatnonzero(fit > lo)
                room = room[np.argsort(-fit[room], kind="stable")[:extra]]
                counts = counts.copy()
                counts[room] += 1
        self.free -= np.outer(counts, self.need(w.block))
        assert (self.free >= 0).all(), "SM capacity exceeded"
        w.unplaced -= int(counts.sum())
        if w.persistent and not own:
            w.launched += int(counts.sum())
        return counts

    def release(self, block: BlockShape, counts: np.ndarray) -> None:
        self.free += np.outer(counts, self.need(block))

    def retire(self, block: BlockShape, counts: np.ndarray, owner: str | None = None) -> None:
        """Blocks ending now (per-SM ``counts``) of kernel ``owner``; their resources free in
        :meth:`settle`."""
        self._retiring.append((block, counts, owner))

    def arrive(self, w: Waiting) -> None:
        """A launched kernel reaches the GPU; :meth:`settle` adds it to the waiting list. A
        persistent kernel launches as many blocks as its SMs hold when empty."""
        if w.persistent:
            lo, hi = w.sms or (0, self.num_sms)
            empty = int(blocks_beside(self.limits, self.need(w.block), self.need(w.block), 0))
            w.grid = min(w.blocks, empty * (hi - lo))
        self._arriving.append(w)

    def settle(self, waiting: list[Waiting]) -> list[tuple[Waiting, np.ndarray]]:
        """Free what retired since the last settle, one block per SM at a time (each SM's
        retiring blocks in the order they were reported), with a dispatch pass after each;
        then add the kernels that arrived: those queued behind their stream predecessor
        (:attr:`Waiting.queued`) first, each group in launch order (``seq``), a dispatch pass after
        each one the host issued (:attr:`Waiting.issued`), after the queued ones and after the last.
        ``waiting``
        gains the arrivals; returns every placement made. With fewer than two kernels
        waiting the order of retirements cannot matter, and everything frees before one pass.

        >>> from ficco_sim.hardware import SmLimits, BlockShape
        >>> pool = SmPool(1, SmLimits(4, 2048, 65536, 100 << 10, 100 << 10, 0, 32))
        >>> gemm, comm = BlockShape(128, 32, 40 << 10), BlockShape(512, 32, 64 << 10)
        >>> g = Waiting("gemm", gemm, blocks=4, priority=0, seq=0)
        >>> [int(c.sum()) for _, c in pool.dispatch([g])]
        [2]
        >>> c = Waiting("comm", comm, blocks=1, priority=1, seq=1)     # higher priority
        >>> pool.retire(gemm, np.array([2]))
        >>> [(w.id, int(n.sum())) for w, n in pool.settle([c, g])]   # each freed slot refilled
        [('gemm', 1), ('gemm', 1)]
        >>> big = Waiting("gemm", BlockShape(128, 32, 90 << 10), blocks=2, priority=0, seq=2, persistent=True)
        >>> pool = SmPool(1, SmLimits(4, 2048, 65536, 100 << 10, 100 << 10, 0, 32))
        >>> [int(n.sum()) for _, n in pool.dispatch([big])]
        [1]
        >>> hi = Waiting("copy", BlockShape(128, 32, 0), blocks=8, priority=1, seq=3)
        >>> pool.retire(big.block, np.array([1]), "gemm")     # its freed SM goes to its next tile first
        >>> [(w.id, int(n.sum())) for w, n in pool.settle([hi, big])]
        [('gemm', 1), ('copy', 3)]
        >>> pool = SmPool(2, SmLimits(4, 2048, 65536, 100 << 10, 100 << 10, 0, 32))
        >>> big, other = (Waiting(i, BlockShape(128, 32, 90 << 10), blocks=3, priority=0, seq=s, persistent=i == "gemm")
        ...               for i, s in (("gemm", 0), ("other", 1)))
        >>> big.unplaced, other.unplaced = 2, 0                   # one block of each holds an SM
        >>> pool.free[:, 3] -= 90 << 10
        >>> hi = Waiting("copy", BlockShape(128, 32, 90 << 10), blocks=1, priority=1, seq=2)
        >>> pool.retire(big.block, np.array([1, 0]), "gemm")
        >>> pool.retire(other.block, np.array([0, 1]), "other")   # both leave at once: the GEMM takes its own SM
        >>> [(w.id, n.tolist()) for w, n in pool.settle([hi, big, other])]
        [('gemm', [1, 0]), ('copy', [0, 1])]
        >>> pool = SmPool(1, SmLimits(4, 2048, 65536, 100 << 10, 100 << 10, 0, 32))
        >>> pool.arrive(Waiting("comm", BlockShape(128, 32, 90 << 10), blocks=1, priority=1, seq=5))  # an event woke it
        >>> pool.arrive(Waiting("next", BlockShape(128, 32, 90 << 10), blocks=2, priority=0, seq=6, queued=True))
        >>> [(w.id, int(n.sum())) for w, n in pool.settle([])]    # the stream's next kernel first
        [('next', 1)]
        """
        arrived, self._arriving = sorted(self._arriving, key=lambda w: (not w.queued, w.seq)), []
        placed = self._retire(waiting) if self._retiring or not arrived else []
        for i, w in enumerate(arrived):
            waiting.append(w)
            if w.issued or i == len(arrived) - 1 or w.queued and not arrived[i + 1].queued:
                placed += self.dispatch(waiting)
        return placed

    def _retire(self, waiting: list[Waiting]) -> list[tuple[Waiting, np.ndarray]]:
        retired, self._retiring = self._retiring, []
        if not retired or len(waiting) < 2 and not any(w.persistent for w in waiting):
            for block, counts, _ in retired:
                self.release(block, counts)
            return self.dispatch(waiting)
        spans, before = [], np.zeros(self.num_sms, dtype=np.int64)
        for block, counts, owner in retired:
            spans.append((block, counts, before, owner))
            before = before + counts
        kept = {w.id: w for w in waiting if w.persistent}
        placed = []
        for j in range(int(before.max())):
            left = []
            for block, counts, start, owner in spans:
                one = ((start <= j) & (j < start + counts)).astype(np.int64)
                if one.any():
                    self.release(block, one)
                    w = kept.get(owner)
                    if w is not None and w.unplaced > 0:
                        left.append((w, one > 0))
            for w, sms in left:        # a persistent kernel's next blocks take the SMs its blocks just left
                counts = self.place(w, only=sms, own=True)
                if counts is not None:
                    placed.append((w, counts))
            placed += self.dispatch(waiting)
        return placed

    def order(self, waiting: list[Waiting]) -> list[Waiting]:
        if self.policy == "fifo":
            return sorted(waiting, key=lambda w: w.seq)
        return sorted(waiting, key=lambda w: (-w.priority, w.seq))

    def dispatch(self, waiting: list[Waiting]) -> list[tuple[Waiting, np.ndarray]]:
        """One dispatch pass over the waiting kernels; returns the placements made."""
        placed = []
        blocking = self.policy in ("strict", "fifo")
        for w in self.order(waiting):
            counts = self.place(w)
            if counts is not None:
                placed.append((w, counts))
            if blocking and w.pending > 0:
                break
        return placed

    @property
    def resident_blocks(self) -> int:
        return int((self.limits.max_blocks - self.free[:, 0]).sum())
