"""A small helper that assembles task graphs: streams on demand, GEMM / reduce / comm
kernels sized from the GPU profile, SM and DMA transfers. Lowerings use it so that
every kernel gets its footprint and cost from one place.
"""

from __future__ import annotations

import functools
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from ..gemm_model import GemmShape, blocks_per_sm, plan_gemm
from ..hardware import DTYPE_BYTES, BlockShape, GpuProfile
from ..taskgraph import Buffer, Kernel, Slice, Stream, TaskGraph, Transfer

# An elementwise reduction kernel: 256 threads, few registers, no shared memory.
REDUCE_BLOCK = BlockShape(threads=256, registers=32, smem=0)

COMPUTE = "compute"
COMM = "comm"


class TaskRef(NamedTuple):
    """What a folding builder returns for another GPU's task: its id only (lowerings name
    tasks by id)."""

    id: str


class GraphBuilder:
    """Accumulates streams and tasks for one task graph (:meth:`build` checks it: ids unique,
    dependencies known and earlier).

    ``fold=True`` keeps GPU 0's tasks only, for a lowering that is rotation symmetric by
    construction (every GPU makes the same sequence of tasks, turned: its i-th task is GPU
    0's i-th turned by its index); :meth:`build_folded` then gives GPU 0's share of the graph
    without making the others' tasks (:func:`ficco_sim.engine.fold.prefolded`), or None
    when the sequences do not match. Every task is described relative to its GPU (its work,
    its peers, and the tasks it names as (GPU offset, place in that GPU's sequence)), so the
    check is as strict as :func:`~ficco_sim.engine.fold.folding`'s, task by task."""

    def __init__(self, gpu: GpuProfile, num_gpus: int, *, comm_priority: int = 0, extra_smem: int = 0,
                 channels: int | None = None, sm_margin: int = 0, fold: bool = False, copy_engines: int | None = None):
        self.gpu = gpu
        # an SM margin: GEMMs on the first SMs, communication kernels on the last ``sm_margin``
        self.gemm_sms = gpu.num_sms - sm_margin if sm_margin else 0
        self.comm_range = (self.gemm_sms, gpu.num_sms) if sm_margin else None
        self.num_gpus = num_gpus
        self.comm_priority = comm_priority
        self.extra_smem = extra_smem
        self.channels = channels or gpu.comm_kernel.channels
        self.copy_engines = copy_engines or gpu.dma.engines    # the engines copy commands are queued on
        self.streams: dict[tuple[int, str], Stream] = {}
        self.tasks: list = []
        self.buffers: dict[str, Buffer] = {}
        self.meta: dict = {}
        self._steps: dict[tuple, int] = {}
        self.rings: list[tuple[int, ...]] = [tuple(range(num_gpus))]   # ring collectives' GPU orders
        self.fold = fold
        self._made = [0] * num_gpus                # fold: tasks made per GPU so far
        self._where: dict[str, tuple[int, int]] = {}   # fold: a task -> (its GPU, its place in that GPU's sequence)
        self._sigs: list[tuple] = []               # fold: GPU 0's tasks described relative to it, in order
        self._later: list[tuple[int, tuple]] = []      # fold: another GPU's task made before GPU 0's alike
        self._mismatch = False                         # fold: a task unlike GPU 0's at its place
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

    def makes(self, gpu: int) -> bool:
        """Whether a task of ``gpu`` is made (fold mode describes the other GPUs' only: what
        only the executor reads, such as ``io``, need not be built for them)."""
        return not self.fold or gpu == 0

    def _add(self, task):
        if self.fold:
            return self._folding(task.id, task.gpu, self._describe(task), task)
        self.tasks.append(task)     # (a repeated id is refused by TaskGraph.build)
        return task

    def _folding(self, id: str, gpu: int, sig: tuple, task=None):
        """Fold mode: keep GPU 0's task, remember another GPU's by its place in that GPU's sequence."""
        i = self._made[gpu]
        self._made[gpu] = i + 1
        self._where[id] = (gpu, i)
        if gpu == 0:
            self.tasks.append(task)
            self._sigs.append(sig)
            return task
        self._compare(i, sig)
        return TaskRef(id)

    def _compare(self, i: int, sig: tuple) -> None:
        """Fold mode: another GPU's ``i``-th task against GPU 0's (later if GPU 0's is not made yet)."""
        sigs = self._sigs
        if i < len(sigs):
            if sigs[i] != sig:
                self._mismatch = True
        else:
            self._later.append((i, sig))

    def _rel(self, ids, g: int, *, unordered: bool = False) -> tuple:
        """Fold mode: the tasks ``ids`` as GPU ``g`` sees them: (GPU offset, place in that GPU's
        sequence); ``unordered``: as a set (dependencies), sorted."""
        n, where = self.num_gpus, self._where
        if len(ids) == 2 and not unordered:     # (the common case first: an SM transfer's kernel pair)
            (h, i), (k, j) = where[ids[0]], where[ids[1]]
            return (((h - g) % n, i), ((k - g) % n, j))
        if len(ids) == 1:
            h, i = where[ids[0]]
            return (((h - g) % n, i),)
        if not ids:
            return ()
        out = [((h - g) % n, i) for h, i in map(where.__getitem__, ids)]
        if unordered:
            out.sort()
        return tuple(out)

    def _describe(self, task) -> tuple:
        """Fold mode: a task as its GPU sees it (peers and named tasks relative to it): what
        must agree between GPU 0's i-th task and every other GPU's i-th."""
        g, n = task.gpu, self.num_gpus
        if isinstance(task, Kernel):
            return self._kernel_sig(g, task.kind, task.stream, task.grid, task.block, task.block_time,
                                    task.block_hbm_bytes, task.elems, task.gemm, task.sms, task.stores, task.signals,
                                    task.deps, task.setup)
        return ("T", task.engine, (task.src - g) % n, (task.dst - g) % n, task.nbytes, task.step, task.reduce,
                task.dma_engine, self._rel(task.drivers, g), self._rel(task.deps, g, unordered=True),
                self._rel_signals(task.signals, g), task.tune)

    def _rel_signals(self, signals, g: int) -> tuple:
        return tuple(zip(self._rel([k for k, _ in signals], g), [r for _, r in signals])) if signals else ()

    def _kernel_sig(self, g: int, kind: str, stream: str, grid: int, block, block_time: float, hbm: float, elems,
                    gemm, sms, stores, signals, deps, setup: float = 0.0) -> tuple:
        """Fold mode: a kernel of GPU ``g`` as that GPU sees it (see :meth:`_describe`)."""
        n = self.num_gpus
        return ("K", kind, stream, grid, block, block_time, hbm, elems, gemm, sms,
                tuple((r, (d - g) % n) for r, d in stores), self._rel_signals(signals, g),
                self._rel(deps, g, unordered=True), setup)

    def _kernel(self, id: str, gpu: int, make, *sig):
        """A kernel made by ``make()``; in fold mode another GPU's is only described (``sig``:
        :meth:`_kernel_sig`'s fields after the GPU), never made."""
        if self.fold and gpu != 0:
            return self._folding(id, gpu, self._kernel_sig(gpu, *sig))
        return self._add(make())

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
             stores: tuple = (), waits: tuple = ()) -> Kernel:
        """A GEMM kernel (its tiles may signal or store as they finish, or wait for their rows
        to arrive: a fused kernel), persistent where the profile's ``gemm.kernel`` says so. A
        graph with rows waiting to arrive is built whole, never folded (the folding does not
        turn them)."""
        if waits and self.fold:
            self._mismatch = True
        plan = plan_gemm(self.gpu, m, n, k, dtype, extra_smem=self.extra_smem, accumulate=accumulate,
                         sms=self.gemm_sms)
        shape = GemmShape(m, n, k, dtype, accumulate, self.extra_smem, self.gemm_sms,
                          self.gpu.gemm.persistent_for(dtype))
        sms = (0, self.gemm_sms) if self.gemm_sms else None
        return self._kernel(id, gpu, lambda: Kernel(
            id, gpu, stream, "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes, tuple(deps),
            "compute", label or f"gemm {m}x{n}x{k}", dict(io or {}, accumulate=accumulate), gemm=shape, sms=sms,
            stores=tuple(stores), waits=tuple(waits)), "gemm", stream, plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes, None,
            shape, sms, tuple(stores), (), deps)

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
        return self._kernel(id, gpu, lambda: Kernel(
            id, gpu, stream, "memory", grid, block, block_time, per_block, tuple(deps), "comm",
            label or f"reduce x{inputs}", dict(io or {}, rows=rows, cols=cols, dtype=dtype), elems=elems,
            signals=tuple(signals)), "memory", stream, grid, block, block_time, per_block, elems, None, None, (),
            tuple(signals), deps)

    def comm_kernel(self, id: str, gpu: int, *, deps: Sequence[str] = (), label: str = "",
                    signals: Sequence = (), channels: int = 0, setup: float = 0.0) -> Kernel:
        block, grid = self.gpu.comm_kernel.block, channels or self.channels
        return self._kernel(id, gpu, lambda: Kernel(
            id, gpu, COMM, "comm", grid, block, 0.0, 0.0, tuple(deps), "comm", label or "comm", sms=self.comm_range,
            signals=tuple(signals), setup=setup), "comm", COMM, grid, block, 0.0, 0.0, None, None, self.comm_range, (),
            tuple(signals), deps, setup)

    # -- transfers ---------------------------------------------------------------------
    def sm_transfer(self, id: str, src: int, dst: int, nbytes: float, drivers: Iterable[str], *, step: tuple,
                    deps: Sequence[str] = (), reduce: bool = False, label: str = "",
                    io: dict | None = None, tune: tuple = ()) -> Transfer:
        """``nbytes`` from ``src`` to ``dst`` moved by the comm kernels ``drivers``, in the
        concurrency step named ``step``; ``tune``: the collective call it is a step of
        (:attr:`~ficco_sim.taskgraph.Transfer.tune`)."""
        # (``io`` is the caller's own mapping, kept as given: lowerings build one per task)
        if self.fold and src != 0:      # another GPU's: described, never made (_folding, inlined: the bulk)
            n, where, made = self.num_gpus, self._where, self._made
            i = made[src]
            made[src] = i + 1
            where[id] = (src, i)
            if len(deps) == 1:
                h, j = where[deps[0]]
                rel_deps = (((h - src) % n, j),)
            else:
                rel_deps = self._rel(deps, src, unordered=True)
            self._compare(i, ("T", "sm", 0, (dst - src) % n, float(nbytes),
                              self._steps.setdefault(step, len(self._steps)), reduce, 0, self._rel(drivers, src),
                              rel_deps, (), tune))
            return TaskRef(id)
        t = Transfer(id, src, dst, float(nbytes), "sm", src, None, tuple(drivers), 0, reduce, tuple(deps), "comm",
                     label or f"{src}->{dst}", {} if io is None else io, self._steps.setdefault(step, len(self._steps)),
                     (), tune)
        if self.fold:
            return self._folding(id, 0, self._describe(t), t)
        self.tasks.append(t)
        return t

    def dma_transfer(self, id: str, issuer: int, src: int, dst: int, nbytes: float, *, step: tuple,
                     deps: Sequence[str] = (), engine: int | None = None, label: str = "",
                     io: dict | None = None, signals: Sequence = ()) -> Transfer:
        """A copy command on copy engine ``engine`` of GPU ``issuer``, queued on that engine's
        own stream. By default peers at ring offset 1, 2, 3, ... go to engines 0, 1, 2, ...
        round robin, so concurrent commands spread over engines and over peers; on at most
        ``copy_engines`` of them (a library with one copy stream a rank: one, its peers' copies
        one after the other)."""
        peer = dst if issuer == src else src
        offset = (peer - issuer - 1) % self.num_gpus
        e = (offset if engine is None else engine) % self.copy_engines
        if self.fold and issuer != 0:
            n = self.num_gpus
            return self._folding(id, issuer, ("T", "dma", (src - issuer) % n, (dst - issuer) % n, float(nbytes),
                                              self.step(*step), False, e, (),
                                              self._rel(deps, issuer, unordered=True),
                                              self._rel_signals(tuple(signals), issuer), ()))
        stream = self.stream(issuer, f"copy{e}", 0)
        return self._add(Transfer(id, src, dst, float(nbytes), "dma", issuer, stream, (), e, False,
                                  tuple(deps), "comm", label or f"{src}->{dst}", dict(io or {}), self.step(*step),
                                  tuple(signals)))

    def build(self) -> TaskGraph:
        if self.fold:
            raise ValueError("a folding builder makes GPU 0's share only: use build_folded")
        streams = sorted(self.streams.values(), key=lambda s: (s.gpu, s.name))
        return TaskGraph.build(self.num_gpus, streams, self.tasks, buffers=self.buffers, meta=self.meta)

    def _symmetric(self) -> bool:
        """Fold mode: every GPU made GPU 0's sequence of tasks, turned."""
        sigs = self._sigs
        return not self._mismatch and len(set(self._made)) == 1 and all(sigs[i] == sig for i, sig in self._later)

    def build_share(self):
        """Fold mode: GPU 0's tasks as made and where every task sits
        (:class:`~ficco_sim.engine.fold.Share`, what the closed form compiles a whole graph
        from), or None when the GPUs did not make the same sequence of tasks turned."""
        from ..engine.fold import Share
        if not self.fold:
            raise ValueError("build_share needs GraphBuilder(fold=True)")
        if not self._symmetric():
            return None
        return Share(self.num_gpus, tuple(sorted((s for s in self.streams.values() if s.gpu == 0),
                                                 key=lambda s: s.name)), tuple(self.tasks), self._where)

    def build_folded(self, unfold):
        """Fold mode: GPU 0's share (:class:`~ficco_sim.engine.fold.Folded`), or None when the
        GPUs did not make the same sequence of tasks turned. ``unfold()``: the whole graph,
        built only if every task's record is asked for."""
        from ..engine.fold import prefolded
        if not self.fold:
            raise ValueError("build_folded needs GraphBuilder(fold=True)")
        if not self._symmetric():
            return None
        streams = sorted((s for s in self.streams.values() if s.gpu == 0), key=lambda s: s.name)
        return prefolded(self.num_gpus, streams, self.tasks, self._where, unfold, buffers=self.buffers,
                         meta=self.meta)



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
