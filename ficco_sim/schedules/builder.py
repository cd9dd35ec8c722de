"""A small helper that assembles task graphs: streams on demand, GEMM / reduce / comm
kernels sized from the GPU profile, SM and DMA transfers. Lowerings use it so that
every kernel gets its footprint and cost from one place.
"""

from __future__ import annotations

import functools
from typing import Iterable, Sequence

import numpy as np

from ..gemm_model import GemmShape, blocks_per_sm, plan_gemm
from ..hardware import DTYPE_BYTES, BlockShape, GpuProfile
from ..taskgraph import Buffer, Kernel, Slice, Stream, TaskGraph, Transfer

# An elementwise reduction kernel: 256 threads, few registers, no shared memory.
REDUCE_BLOCK = BlockShape(threads=256, registers=32, smem=0)

COMPUTE = "compute"
COMM = "comm"


class GraphBuilder:
    """Accumulates streams and tasks for one task graph (:meth:`build` checks it: ids unique,
    dependencies known and earlier)."""

    def __init__(self, gpu: GpuProfile, num_gpus: int, *, comm_priority: int = 0, extra_smem: int = 0,
                 channels: int | None = None, sm_margin: int = 0):
        self.gpu = gpu
        # an SM margin: GEMMs on the first SMs, communication kernels on the last ``sm_margin``
        self.gemm_sms = gpu.num_sms - sm_margin if sm_margin else 0
        self.comm_range = (self.gemm_sms, gpu.num_sms) if sm_margin else None
        self.num_gpus = num_gpus
        self.comm_priority = comm_priority
        self.extra_smem = extra_smem
        self.channels = channels or gpu.comm_kernel.channels
        self.streams: dict[tuple[int, str], Stream] = {}
        self.tasks: list = []
        self.buffers: dict[str, Buffer] = {}
        self.meta: dict = {}
        self._steps: dict[tuple, int] = {}
        self.rings: list[tuple[int, ...]] = [tuple(range(num_gpus))]   # ring collectives' GPU orders
        for g in range(num_gpus):
            self.stream(g, COMPUTE, 0)
            self.stream(g, COMM, comm_priority)

    @property
    def reduce_block(self) -> BlockShape:
        """The elementwise kernel's block, shrunk to fit small 'SMs' (the cpu profile)."""
        sm = self.gpu.sm
        threads = min(REDUCE_BLOCK.threads, sm.max_threads)
        return BlockShape(threads, min(REDUCE_BLOCK.registers, sm.registers // threads), 0)

    def stream(self, gpu: int, name: str, priority: int = 0) -> str:
        self.streams.setdefault((gpu, name), Stream(gpu, name, priority))
        return name

    def _add(self, task):
        self.tasks.append(task)     # (a repeated id is refused by TaskGraph.build)
        return task

    def step(self, *key: object) -> int:
        """The concurrency step named ``key`` (e.g. ``("ag", 3)``) as a number, the same for
        every transfer of that step (:attr:`ficco_sim.taskgraph.Transfer.step`)."""
        return self._steps.setdefault(key, len(self._steps))     # (sm_transfer inlines this)

    def elem(self, dtype: str) -> int:
        return DTYPE_BYTES[dtype]

    def buffer(self, name: str, rows: int, cols: int, dtype: str) -> None:
        self.buffers[name] = Buffer(rows, cols, dtype)

    # -- kernels -----------------------------------------------------------------------
    def gemm(self, id: str, gpu: int, m: int, n: int, k: int, dtype: str, *, deps: Sequence[str] = (),
             stream: str = COMPUTE, label: str = "", accumulate: bool = False, io: dict | None = None,
             stores: tuple = ()) -> Kernel:
        plan = plan_gemm(self.gpu, m, n, k, dtype, extra_smem=self.extra_smem, accumulate=accumulate,
                         sms=self.gemm_sms)
        shape = GemmShape(m, n, k, dtype, accumulate, self.extra_smem, self.gemm_sms)
        return self._add(Kernel(id, gpu, stream, "gemm", plan.grid, plan.block, plan.block_time,
                                plan.block_hbm_bytes, tuple(deps), "compute", label or f"gemm {m}x{n}x{k}",
                                dict(io or {}, accumulate=accumulate), gemm=shape,
                                sms=(0, self.gemm_sms) if self.gemm_sms else None, stores=tuple(stores)))

    def reduce(self, id: str, gpu: int, rows: int, cols: int, dtype: str, inputs: int, *,
               deps: Sequence[str] = (), stream: str = COMM, label: str = "", io: dict | None = None,
               signals: Sequence = ()) -> Kernel:
        """Elementwise sum of ``inputs`` tensors of rows x cols into one: reads ``inputs``
        tensors and writes one, HBM-bound. Sized as one wave over all SMs."""
        elems = rows * cols
        total_bytes = elems * DTYPE_BYTES[dtype] * (inputs + 1)
        block = self.reduce_block
        grid = _reduce_grid_of(self.gpu, block, elems)
        per_block = total_bytes / grid
        # One wave of `grid` blocks moving total_bytes at the full effective HBM rate.
        block_time = total_bytes / self.gpu.hbm_effective
        return self._add(Kernel(id, gpu, stream, "memory", grid, block, block_time, per_block,
                                tuple(deps), "comm", label or f"reduce x{inputs}",
                                dict(io or {}, rows=rows, cols=cols, dtype=dtype), elems=elems,
                                signals=tuple(signals)))

    def comm_kernel(self, id: str, gpu: int, *, deps: Sequence[str] = (), label: str = "",
                    signals: Sequence = (), channels: int = 0) -> Kernel:
        spec = self.gpu.comm_kernel
        return self._add(Kernel(id, gpu, COMM, "comm", channels or self.channels, spec.block, 0.0, 0.0, tuple(deps),
                                "comm", label or "comm", sms=self.comm_range, signals=tuple(signals)))

    # -- transfers ---------------------------------------------------------------------
    def sm_transfer(self, id: str, src: int, dst: int, nbytes: float, drivers: Iterable[str], *, step: tuple,
                    deps: Sequence[str] = (), reduce: bool = False, label: str = "",
                    io: dict | None = None) -> Transfer:
        """``nbytes`` from ``src`` to ``dst`` moved by the comm kernels ``drivers``, in the
        concurrency step named ``step``."""
        # (``io`` is the caller's own mapping, kept as given: lowerings build one per task)
        t = Transfer(id, src, dst, float(nbytes), "sm", src, None, tuple(drivers), 0, reduce, tuple(deps), "comm",
                     label or f"{src}->{dst}", {} if io is None else io, self._steps.setdefault(step, len(self._steps)))
        self.tasks.append(t)
        return t

    def dma_transfer(self, id: str, issuer: int, src: int, dst: int, nbytes: float, *, step: tuple,
                     deps: Sequence[str] = (), engine: int | None = None, label: str = "",
                     io: dict | None = None, signals: Sequence = ()) -> Transfer:
        """A copy command on copy engine ``engine`` of GPU ``issuer``, queued on that engine's
        own stream. By default peers at ring offset 1, 2, 3, ... go to engines 0, 1, 2, ...
        round robin, so concurrent commands spread over engines and over peers."""
        peer = dst if issuer == src else src
        offset = (peer - issuer - 1) % self.num_gpus
        e = (offset if engine is None else engine) % self.gpu.dma.engines
        stream = self.stream(issuer, f"copy{e}", 0)
        return self._add(Transfer(id, src, dst, float(nbytes), "dma", issuer, stream, (), e, False,
                                  tuple(deps), "comm", label or f"{src}->{dst}", dict(io or {}), self.step(*step),
                                  tuple(signals)))

    def build(self) -> TaskGraph:
        streams = sorted(self.streams.values(), key=lambda s: (s.gpu, s.name))
        return TaskGraph.build(self.num_gpus, streams, self.tasks, buffers=self.buffers, meta=self.meta)


def reduce_grid(gpu: GpuProfile, block: BlockShape, elems):
    """Blocks of an elementwise reduction of ``elems`` elements per input (a number or an
    array): 8 elements per thread, at most one wave over all SMs."""
    return np.maximum(1, np.minimum(gpu.num_sms * blocks_per_sm(gpu.sm, block),
                                    np.ceil(np.asarray(elems, dtype=float) / (block.threads * 8))))


_GRIDS: dict[tuple, int] = {}


def _reduce_grid_of(gpu: GpuProfile, block: BlockShape, elems: int) -> int:
    """:func:`reduce_grid` of one kernel, memoized (lowerings size thousands of equal reductions)."""
    key = (gpu.num_sms, gpu.sm, block, elems)      # all reduce_grid depends on
    hit = _GRIDS.get(key)
    if hit is None:
        if len(_GRIDS) > 100_000:
            _GRIDS.clear()
        hit = _GRIDS[key] = int(reduce_grid(gpu, block, elems))
    return hit


@functools.lru_cache(maxsize=1 << 16)
def row_slice(buffer: str, start: int, rows: int) -> Slice:
    """Rows ``[start, start + rows)`` of ``buffer`` (slices are immutable: a lowering's
    thousands of equal ones are one object)."""
    return Slice(buffer, start, start + rows)
