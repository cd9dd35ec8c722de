"""How a trace's GEMM kernels hold SMs, for ``calibrate --from trace`` (``gemm.kernel``).

A library GEMM kernel is either one block per output tile (``waves``: blocks retire and hand
their SMs back wave after wave) or persistent (at most a wave of blocks, each looping over
tiles: cuBLAS's ``nvjet`` kernels on Hopper). A trace records each kernel's grid and block,
and the op's input shapes give its output: a block that computes more outputs than the
largest tile any library uses (:data:`MAX_TILE`) loops over tiles (persistent); a grid
larger than the GPU can hold at once (its SMs times the blocks of that footprint one SM
takes) is not persistent (waves). Other kernels say neither (a small GEMM fits one wave
either way). The kind is the one that covers most of the measured GEMM time.

>>> from ficco_sim.hardware import BlockShape, load_gpu
>>> from ficco_sim.traces.ops import TraceOp
>>> nvjet = TraceOp("g", 0, "7", "nvjet_sm90_tst_256x128", "compute", "gemm", 0.0, 1e-3, grid=132,
...                 block=BlockShape(384, 168, 213188), shapes=[[4096, 4096], [4096, 4096]])
>>> gemm_kind([nvjet], load_gpu("h200"))[:3]
('persistent', 0.001, 0.0)
"""

from __future__ import annotations

from typing import Sequence

from ..gemm_model import blocks_per_sm
from ..hardware import GpuProfile
from .ops import TraceOp
from .replay import gemm_mnk

# Output elements of the largest tile a library GEMM block computes at once (256 x 256:
# cuBLAS / CUTLASS / hipBLASLt tiles are at most 256 on a side per block).
MAX_TILE = 256 * 256


def gemm_kind(ops: Sequence[TraceOp], gpu: GpuProfile) -> tuple[str, float, float, int] | None:
    """(``persistent`` or ``waves``, GEMM seconds read as persistent, as waves, kernels that
    told) over the GEMM kernels of ``ops`` on ``gpu`` (its SM count and limits); None when no
    kernel tells (no grid, block or shapes recorded, or every GEMM fits one wave)."""
    persistent = waves = 0.0
    told = 0
    for o in ops:
        if o.kind != "gemm" or o.category != "compute" or not o.grid or o.block is None:
            continue
        mnk = gemm_mnk(o.shapes)
        if mnk is not None and mnk[0] * mnk[1] > MAX_TILE * o.grid:
            persistent += o.dur
        elif o.grid > gpu.num_sms * max(1, blocks_per_sm(gpu.sm, o.block)):
            waves += o.dur
        else:
            continue
        told += 1
    if not told:
        return None
    return ("persistent" if persistent > waves else "waves"), persistent, waves, told
