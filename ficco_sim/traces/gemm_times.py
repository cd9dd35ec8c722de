"""What a trace's GEMMs took, shape by shape, for ``calibrate --from trace --keep-times``.

A matrix-product operator (``aten::mm``, ``aten::addmm`` ...) that recorded its input shapes
launches one or more kernels (a split-K GEMM's reduction, an epilogue): its time on the GPU
is the span from its first kernel's start to its last one's end. Only an operator whose span
no kernel of another stream of its rank covers for 1% or more counts (it ran alone, as a
benchmark times it); a GEMM beside a collective is :mod:`.interference`'s business.

>>> from ficco_sim.traces.ops import TraceOp
>>> a = TraceOp("g", 0, "7", "sm80_gemm", "compute", "gemm", 0.0, 90e-6, shapes=[[4096, 512], [512, 1024]],
...             dtype="float", call=(1, 0.0))
>>> b = TraceOp("r", 0, "7", "splitKreduce_kernel", "compute", "gemm", 90e-6, 10e-6, shapes=a.shapes,
...             dtype="float", call=(1, 0.0))
>>> t = gemm_timings([a, b])
>>> t[["m", "n", "k", "dtype", "kernels"]].values.tolist(), round(float(t["time_s"].iloc[0]) * 1e6, 1)
([[4096, 1024, 512, 'float32', 2]], 100.0)
>>> nccl = TraceOp("c", 0, "9", "ncclKernel_AllReduce", "comm", "comm", 50e-6, 80e-6)
>>> len(gemm_timings([a, b, nccl]))      # beside a collective: not a timing of the GEMM alone
0
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import pandas as pd

from ..timeline import union_length
from .ops import TraceOp
from .replay import gemm_dtype, gemm_mnk

ALONE = 0.01       # another stream's kernels covering less than this share of its span: alone

COLUMNS = ["rank", "m", "n", "k", "dtype", "time_s", "kernels", "name"]


def gemm_timings(ops: Sequence[TraceOp]) -> pd.DataFrame:
    """One row per matrix-product operator of ``ops`` that ran alone: ``rank, m, n, k, dtype``
    (the model's names), ``time_s`` (its kernels' span), ``kernels`` and the first kernel's
    ``name``; operators without shapes or of a dtype the model has no name for are left out."""
    calls: dict[tuple, list[TraceOp]] = defaultdict(list)
    for o in ops:
        if o.kind == "gemm" and o.category == "compute" and o.call:
            calls[(o.rank, o.call)].append(o)
    by_rank: dict[int, list[TraceOp]] = defaultdict(list)
    for o in ops:
        by_rank[o.rank].append(o)
    rows = []
    for (rank, _), kernels in calls.items():
        mnk, dtype = gemm_mnk(kernels[0].shapes), gemm_dtype(kernels[0])
        if mnk is None or dtype is None:
            continue
        start, end = min(k.start for k in kernels), max(k.end for k in kernels)
        mine = {id(k) for k in kernels}
        streams = {k.stream for k in kernels}
        other = [(max(o.start, start), min(o.end, end)) for o in by_rank[rank]
                 if id(o) not in mine and o.stream not in streams and o.end > start and o.start < end]
        if end <= start or union_length(other) >= ALONE * (end - start):
            continue
        rows.append(dict(rank=rank, m=mnk[0], n=mnk[1], k=mnk[2], dtype=dtype, time_s=end - start,
                         kernels=len(kernels), name=kernels[0].name))
    return pd.DataFrame(rows, columns=COLUMNS)
