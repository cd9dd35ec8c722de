"""The closed form's nodes (:mod:`.closed_form`): their kinds, and the nodes a task makes.

A kernel makes a ``CONST`` node (its launch) and its work: a ``GEMM`` (its time from its
shape, with fused epilogue stores), ``MEM`` / ``FIXED`` (a memory or other kernel's isolated
time) or ``ZERO`` (a communication kernel, which ends with the transfers it drives, its
``CONST`` armed node where they may start); a GEMM whose rows wait to arrive makes a ``GATE``
node per awaited band between them. A transfer makes its ready node, a begin node (an SM
transfer's, once its kernels are armed) and ``XFER`` / ``SMX`` (copy engine / SM). ``SIG``
nodes (tile signals) are made by the graph's compiler, beside the task that waits on them.
"""

from __future__ import annotations

from ..errors import InputError
from ..gemm_model import blocks_per_sm, waves_time
from ..hardware import GpuProfile
from ..taskgraph import Kernel
from ..topology import Topology
from .closed_form_tables import NO_TUNE
from .closed_form_tiles import store_coef
from .launch import persistent

ZERO, CONST, GEMM, XFER, MEM, FIXED, SMX, SIG, GATE = range(9)   # SMX: an SM transfer (XFER + its wire protocol)


def kernel_isolated_time(gpu: GpuProfile, k: Kernel, *, launch: bool = True) -> float:
    """Closed-form time (s) of one compute/memory kernel alone on its GPU (waves of its blocks)."""
    sms = k.sms[1] - k.sms[0] if k.sms else None
    t = waves_time(gpu, k.grid, blocks_per_sm(gpu.sm, k.block), k.block_time, k.block_hbm_bytes, sms=sms,
                   gemm=k.kind == "gemm", tail=k.gemm is not None and not persistent(k, gpu))   # trace: measured
    return float(t) + (gpu.launch_overhead if launch else 0.0)


def task_rows(t, gpu: GpuProfile, topo: Topology, cost: tuple | None, rows: list, shapes: dict, alone: dict,
              launch: dict, storing=None) -> tuple[int, int, int, int | None]:
    """Append task ``t``'s nodes (see module docstring) to ``rows`` as (kind, GPU, const, coef,
    bytes, shape, dst); return its (ready, begin, end, armed) nodes (armed: a communication
    kernel's, where its transfers start; else None). ``cost``: a transfer's
    :func:`transfer_costs` entry; ``shapes``, ``alone``: GEMM shape indices and isolated
    kernel times, shared by the whole template; ``launch``: :func:`.launch.launch_delays`;
    ``storing``: the GPUs with a GEMM storing to peers (None: every GPU, :func:`.closed_form_tiles.store_coef`)."""
    def node(kind: int, gpu_id: int, const: float = 0.0, coef: float = 0.0, nb: float = 0.0, shape: int = -1,
             dst: int = -1, tune: tuple = NO_TUNE) -> int:
        rows.append((kind, gpu_id, const, coef, nb, shape, dst, tune))
        return len(rows) - 1

    if isinstance(t, Kernel):
        begin = node(CONST, t.gpu, launch[t.id])
        if t.kind == "gemm" and t.gemm is not None:
            coef, remote, first, drain, alike = store_coef(t, topo, gpu, storing)   # fused stores, per output element
            shape = shapes.setdefault(t.gemm, len(shapes))
            # rows waiting to arrive: a GATE node per awaited band, right after the begin node, that
            # ends when the band lands less the GEMM's time before the wave of its first row, so the
            # GEMM (which ends its inputs' latest plus its time) runs the rest after the band lands
            before = [0.0] + [r for r, _ in t.waits[:-1]]
            for lo, (_, tid) in zip(before, t.waits):
                if tid:
                    node(GATE, t.gpu, coef=lo, shape=shape)
            return begin, begin, node(GEMM, t.gpu, coef=coef, nb=remote, tune=(first, drain, alike, 0.0, 0.0),
                                      shape=shape), None
        if t.kind == "host":      # a trace's launch pace: the discrete-event engine's alone
            raise InputError("engine", None, f"{t.id}: host time is run by the discrete-event engine only")
        if t.kind == "comm":
            armed = node(CONST, t.gpu, gpu.handshake_of("comm") + t.setup)   # transfers start here
            return begin, begin, node(ZERO, t.gpu), armed
        key = (t.grid, t.block, t.block_time, t.block_hbm_bytes)
        if key not in alone:
            alone[key] = kernel_isolated_time(gpu, t, launch=False)
        return begin, begin, node(MEM if t.kind == "memory" else FIXED, t.gpu, alone[key]), None
    ready = node(ZERO, t.src, dst=t.dst)
    begin = node(ZERO, t.src, dst=t.dst) if t.engine == "sm" else ready
    return ready, begin, node(SMX if t.engine == "sm" else XFER, t.src, cost[0], cost[1], t.nbytes, dst=t.dst,
                              tune=cost[4]), None
