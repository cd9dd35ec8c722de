"""The SMs a measured kernel had while it ran: what its block time is read against.

A trace gives a kernel's duration, not the SMs it ran on. When other kernels of its rank ran
beside it (other streams) and their blocks leave no room for its own on the SMs they hold,
it ran on the rest: a 4,096-block cast kernel that ran for 349 us inside a grouped GEMM of
112 SM-filling blocks (DeepSeek's published H800 training trace) had 20 SMs, not 132. Its
block time, read as if it had had them all, came out 6.6x too long, and a replay that lets
kernels share SMs again stretched it so.

:func:`free_sms` gives, per kernel, the SMs the others did not hold, averaged over its run.
A kernel holds SMs against it when it was already running when this one started and all its
blocks fit on the GPU at once (one wave: a persistent GEMM, a collective's channels; a kernel
of many waves hands its SMs round as its blocks retire): ``min(grid, SMs)`` of them (blocks go
one per SM first) where one of its blocks leaves no room for one of this kernel's
(:func:`~ficco_sim.gemm_model.blocks_beside`), weighted by the share of this kernel's run it
covered. At least one SM is always left.

>>> from ficco_sim.hardware import load_gpu, BlockShape
>>> from ficco_sim.traces.ops import TraceOp
>>> g = load_gpu("h100")
>>> gemm = TraceOp("g", 0, "7", "grouped_gemm", "compute", "gemm", 0.0, 1500e-6, grid=112,
...                block=BlockShape(384, 168, 218052))
>>> cast = TraceOp("c", 0, "27", "cast", "compute", "opaque", 100e-6, 349e-6, grid=4096, block=BlockShape(128, 31, 0))
>>> free = free_sms([gemm, cast], g)
>>> round(free["c"]), "g" in free        # the cast had the 20 SMs the GEMM left; the GEMM had every one
(20, False)
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Sequence

from ..gemm_model import block_needs, blocks_beside, blocks_per_sm
from ..hardware import GpuProfile
from .ops import TraceOp


def free_sms(ops: Sequence[TraceOp], gpu: GpuProfile) -> dict[str, float]:
    """``{op id: SMs}`` for the ops with a launch footprint (grid and block) that others of
    their rank held SMs beside; an op not in it had every SM (see module docstring)."""
    lim, sms = gpu.sm, gpu.num_sms
    by_rank: dict[int, list[TraceOp]] = defaultdict(list)
    for o in ops:
        if o.grid and o.block and o.dur > 0 and o.category in ("compute", "comm"):
            by_rank[o.rank].append(o)
    out: dict[str, float] = {}
    for rank_ops in by_rank.values():
        rank_ops.sort(key=lambda o: o.start)
        starts = [o.start for o in rank_ops]
        longest = max(o.dur for o in rank_ops)
        for o in rank_ops:
            end = o.start + o.dur
            lo = bisect.bisect_left(starts, o.start - longest)
            hi = bisect.bisect_left(starts, end)
            need = block_needs(lim, o.block)
            held = 0.0
            for other in rank_ops[lo:hi]:
                if other is o or other.stream == o.stream or other.start > o.start or \
                        other.grid > sms * max(1, blocks_per_sm(lim, other.block)):
                    continue
                cover = min(end, other.start + other.dur) - max(o.start, other.start)
                if cover <= 0:
                    continue
                if int(blocks_beside(lim, need, block_needs(lim, other.block), 1)) == 0:
                    held += min(other.grid, sms) * cover / o.dur
            if held > 0:
                out[o.id] = max(1.0, sms - held)
    return out
