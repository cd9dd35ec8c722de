"""The task graph: the one format the simulator, the analytical model and the
PyTorch executor all consume.

A :class:`TaskGraph` holds, for ``num_gpus`` GPUs:

* **streams** (:class:`Stream`): per GPU, a name and a priority. Larger numbers are
  *more urgent* (CUDA's sign is the opposite; the executor maps it). Tasks on one stream
  start in the order they appear in ``tasks``.
* **kernels** (:class:`Kernel`): a grid of identical thread blocks on one stream. Each
  block asks ``threads``, ``registers`` (per thread) and ``smem`` (bytes) of an SM and,
  for compute kernels, runs ``block_time`` seconds at full speed while moving
  ``block_hbm_bytes`` through HBM. Communication kernels (``kind="comm"``) hold their
  blocks (channels) until every transfer they drive is done.
* **transfers** (:class:`Transfer`): ``nbytes`` from GPU ``src`` to GPU ``dst``, either
  driven by SM communication kernels (``engine="sm"``, ``drivers`` = the kernel ids at
  both ends, no stream of its own) or issued as a copy command on a DMA engine
  (``engine="dma"``, on a stream of GPU ``gpu``, queued on copy engine ``dma_engine``).
  ``reduce=True`` (SM only) means the destination adds the data into its own rows, as a
  reduce-scatter step inside an NCCL kernel does; it costs extra HBM traffic there.
* **dependencies**: each task's ``deps`` (ids that must finish first; the executor
  records an event after each and waits on it), on top of stream order.

Typed model inputs, set by the lowering and read by the engines:

* ``Kernel.gemm``: the GEMM a ``gemm`` kernel computes (:class:`~ficco_sim.gemm_model.GemmShape`),
  so the closed-form engine can cost it at other sizes; kernels without one (trace
  imports) are costed from their blocks.
* ``Transfer.tune``: the collective call an SM transfer is a step of, as NCCL's tuner sees
  it: ``(bytes of the call per byte of the transfer, ranks, ring steps of the call)``; the
  engines pick its wire protocol and channels on it
  (:meth:`~ficco_sim.hardware.CommKernelSpec.tuned`). ``(0, ranks, 0)``: one send of a grouped point-to-point call among ``ranks`` ranks (an
  all-to-all's, a send-recv's), on the channels NCCL's p2p rule gives it
  (:class:`~ficco_sim.hardware.P2pRule`). Empty: a message no library call tunes (its own
  bytes, every channel of its kernels).
* ``Kernel.setup``: seconds a communication kernel spends after its call floor before its
  transfers start (an NVLS call's multicast setup).
* ``Transfer.step``: the concurrency step of a transfer. Transfers of one step are issued
  together and share links, copy engines and channels in the closed-form engine (the DES
  shares whatever actually overlaps). ``None``: a step of its own.
* ``signals`` (any task): tile-level signalling. ``(kernel, rows)``: the task may start
  once GEMM ``kernel`` has finished the tiles covering the first ``rows`` share (0-1] of
  its output rows, in its own tile order (row band by row band, see
  :func:`~ficco_sim.gemm_model.tile_prefix_blocks`), and the flag has crossed from the
  producer's GPU to the task's (one path latency), as fused kernels signal per tile
  (Flux, TransformerEngine's atomic GEMM, Triton-distributed). On top of ``deps``.
* ``Kernel.stores``: a fused GEMM whose blocks write their output tile to a peer from
  their epilogue before retiring (Flux's GEMM + reduce-scatter). ``(rows, dst)`` pairs,
  in tile order: the rows up to share ``rows`` go to GPU ``dst`` (the kernel's own GPU:
  stored locally, nothing crosses a link). A block holds its SM until its tile has landed.
* ``Kernel.waits``: a fused GEMM whose tiles wait for their input rows to arrive (an
  all-gather GEMM: Flux's, PyTorch symmetric memory's, spinning on per-chunk flags while
  copies bring the chunks). ``(rows, task)`` pairs in tile order: the rows up to share
  ``rows`` may start once ``task`` has ended (``""``: at once). The kernel starts as one; its
  blocks past the arrived rows are not dispatched until theirs arrive.

``io`` on a task names the data it touches for the executor (buffer name and row range,
see :class:`Slice`); no engine reads it. ``label`` is for people (traces, tables); no
engine reads it either. ``role`` (``"compute"`` or ``"comm"``) is for metrics.

>>> g = TaskGraph.build(1, [Stream(0, "compute", 0)], [
...     Kernel("k0", gpu=0, stream="compute", kind="gemm", grid=4, block=BlockShape(128, 32, 0),
...            block_time=1e-6)])
>>> g.kernel("k0").grid
4
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Union

from .gemm_model import GemmShape
from .hardware import BlockShape

UNTUNED = (0.0, 0.0, 0.0)     # Transfer.tune of a message no library call tunes

KERNEL_KINDS = ("gemm", "comm", "memory", "opaque", "host")    # host: time on the host, no SM (a trace's launch pace)
ROLES = ("compute", "comm")


@dataclass(frozen=True)
class Stream:
    """A stream (queue) on one GPU. ``priority``: larger = more urgent; 0 is normal."""

    gpu: int
    name: str
    priority: int = 0


@dataclass(frozen=True)
class Slice:
    """Rows ``[start, stop)`` of a named 2-D buffer (all columns)."""

    buffer: str
    start: int
    stop: int


@dataclass(frozen=True)
class Kernel:
    """A grid of ``grid`` identical blocks on ``stream`` of GPU ``gpu``."""

    id: str
    gpu: int
    stream: str
    kind: str
    grid: int
    block: BlockShape
    block_time: float = 0.0
    block_hbm_bytes: float = 0.0
    deps: tuple[str, ...] = ()
    role: str = "compute"
    label: str = ""
    io: Mapping[str, object] = field(default_factory=dict, compare=False)
    gemm: GemmShape | None = None
    elems: int | None = None     # a reduction's elements per input (the closed form rescales its grid)
    sms: tuple[int, int] | None = None   # the SMs [lo, hi) its blocks may use (None: every SM)
    signals: tuple[tuple[str, float], ...] = ()    # (GEMM kernel, rows share) tile signals it waits on
    stores: tuple[tuple[float, int], ...] = ()     # fused epilogue stores: (rows share up to, dst GPU)
    setup: float = 0.0           # comm kernels: s after the call floor before its transfers start
    waits: tuple[tuple[float, str], ...] = ()      # (rows share up to, task they wait for; "": none)


@dataclass(frozen=True)
class Transfer:
    """``nbytes`` from ``src`` to ``dst`` on SM kernels (``drivers``) or a DMA engine."""

    id: str
    src: int
    dst: int
    nbytes: float
    engine: str
    gpu: int
    stream: str | None = None
    drivers: tuple[str, ...] = ()
    dma_engine: int = 0
    reduce: bool = False
    deps: tuple[str, ...] = ()
    role: str = "comm"
    label: str = ""
    io: Mapping[str, object] = field(default_factory=dict, compare=False)
    step: int | None = None
    signals: tuple[tuple[str, float], ...] = ()    # (GEMM kernel, rows share) tile signals it waits on
    tune: tuple = ()     # SM: (call bytes per byte, ranks, ring steps) of its call; (0, ranks, 0): a grouped send


def _quick_init(cls: type) -> type:
    """Give a frozen dataclass an ``__init__`` with the same signature that fills the
    instance dict in one step. The generated one sets every field through
    ``object.__setattr__`` (2.3 us for a transfer; a 256-GPU all-reduce lowers 130,000 of
    them); equality, hashing, ``replace`` and immutability after construction are unchanged."""
    params, body, ns = [], [], {"MISSING": dataclasses.MISSING}
    names = [f.name for f in dataclasses.fields(cls)]
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            ns[f"d_{f.name}"] = f.default
            params.append(f"{f.name}=d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            body.append(f"    if {f.name} is MISSING:\n        {f.name} = f_{f.name}()\n")
        else:
            params.append(f.name)
    src = (f"def __init__(self, {', '.join(params)}):\n" + "".join(body) +
           f"    self.__dict__.update({{{', '.join(f'{n!r}: {n}' for n in names)}}})\n")
    exec(src, ns)   # noqa: S102  (source built above from the class's own field names)
    ns["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = ns["__init__"]   # type: ignore[misc]
    return cls


_quick_init(Kernel)
_quick_init(Transfer)


def evolve(task, **changes):
    """``dataclasses.replace`` of a task without re-running its ``__init__`` (a tenth of the
    time: the folded templates copy hundreds of tasks with fewer dependencies); the task
    types have no ``__post_init__`` to skip.

    >>> t = Transfer("t", 0, 1, 8.0, "sm", 0, None, ("k",), deps=("a", "b"))
    >>> evolve(t, deps=("a",)) == dataclasses.replace(t, deps=("a",))
    True
    """
    new = object.__new__(type(task))
    new.__dict__.update(task.__dict__)
    new.__dict__.update(changes)
    return new

Task = Union[Kernel, Transfer]


@dataclass(frozen=True)
class Buffer:
    """A 2-D buffer every GPU holds one of (rows x cols of ``dtype``)."""

    rows: int
    cols: int
    dtype: str


@dataclass(frozen=True)
class TaskGraph:
    """Streams, tasks in issue order, and graph-level metadata (see module docstring)."""

    num_gpus: int
    streams: tuple[Stream, ...]
    tasks: tuple[Task, ...]
    buffers: Mapping[str, Buffer] = field(default_factory=dict, compare=False)
    meta: Mapping[str, object] = field(default_factory=dict, compare=False)
    _index: Mapping[str, Task] = field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:   # a summary: the whole graph is thousands of tasks (see .tasks)
        kernels = [t for t in self.tasks if isinstance(t, Kernel)]
        return (f"TaskGraph({self.num_gpus} GPUs, {len(self.streams)} streams, {len(kernels)} kernels, "
                f"{len(self.tasks) - len(kernels)} transfers, meta={dict(self.meta)})")

    @staticmethod
    def build(num_gpus: int, streams: Iterable[Stream], tasks: Iterable[Task], *,
              buffers: Mapping[str, Buffer] | None = None, meta: Mapping[str, object] | None = None) -> "TaskGraph":
        """Assemble and check a graph: unique ids, known streams, deps that exist and come first."""
        streams = tuple(streams)
        tasks = tuple(tasks)
        index: dict[str, Task] = {}
        known_streams = {(s.gpu, s.name) for s in streams}
        if len(known_streams) != len(streams):
            raise ValueError("duplicate stream")
        for t in tasks:
            if t.id in index:
                raise ValueError(f"duplicate task id {t.id!r}")
            for d in t.deps:
                if d not in index:
                    raise ValueError(f"task {t.id!r} depends on {d!r}, which is unknown or comes later")
            if t.__class__ is Transfer and t.engine == "sm" and not t.signals and t.nbytes >= 0 and \
                    len(t.drivers) == 2 and t.drivers[0] in index and t.drivers[1] in index:
                index[t.id] = t        # the bulk of a large graph: an SM transfer that passes every check below
                continue
            for d, rows in t.signals:
                src = index.get(d)
                if not isinstance(src, Kernel) or src.gemm is None:
                    raise ValueError(f"task {t.id!r} waits on a tile signal of {d!r}, which is not an earlier GEMM")
                if not 0.0 < rows <= 1.0:
                    raise ValueError(f"task {t.id!r}: a tile signal covers a share of rows in (0, 1], got {rows}")
            if isinstance(t, Kernel):
                if t.kind not in KERNEL_KINDS:
                    raise ValueError(f"kernel {t.id!r}: unknown kind {t.kind!r}")
                if (t.gpu, t.stream) not in known_streams:
                    raise ValueError(f"kernel {t.id!r}: unknown stream {t.stream!r} on GPU {t.gpu}")
                if t.grid < 1:
                    raise ValueError(f"kernel {t.id!r}: empty grid")
                if t.gemm is not None and t.kind != "gemm":
                    raise ValueError(f"kernel {t.id!r}: a GEMM shape on a {t.kind} kernel")
                if t.stores:
                    shares = [r for r, _ in t.stores]
                    if t.gemm is None or shares != sorted(shares) or shares[-1] != 1.0 or shares[0] <= 0:
                        raise ValueError(f"kernel {t.id!r}: epilogue stores need a GEMM and row shares "
                                         "rising to 1")
                if t.waits:
                    shares = [r for r, _ in t.waits]
                    if t.gemm is None or shares != sorted(shares) or shares[-1] != 1.0 or shares[0] <= 0:
                        raise ValueError(f"kernel {t.id!r}: rows waiting to arrive need a GEMM and row shares "
                                         "rising to 1")
                    late = [w for _, w in t.waits if w and w not in index]
                    if late:
                        raise ValueError(f"kernel {t.id!r}: its rows wait for {late[0]!r}, which is unknown or "
                                         "comes later")
            else:
                if t.engine == "dma" and t.reduce:
                    raise ValueError(f"transfer {t.id!r}: copy engines cannot reduce")
                if t.engine == "dma":
                    if (t.gpu, t.stream) not in known_streams:
                        raise ValueError(f"transfer {t.id!r}: unknown stream {t.stream!r} on GPU {t.gpu}")
                elif t.engine == "sm":
                    if not t.drivers or any(d not in index for d in t.drivers):
                        raise ValueError(f"transfer {t.id!r}: its driver kernels must come before it")
                else:
                    raise ValueError(f"transfer {t.id!r}: unknown engine {t.engine!r}")
                if t.nbytes < 0:
                    raise ValueError(f"transfer {t.id!r}: negative size")
            index[t.id] = t
        return TaskGraph(num_gpus, streams, tasks, dict(buffers or {}), dict(meta or {}), index)

    def task(self, task_id: str) -> Task:
        return self._index[task_id]

    def kernel(self, task_id: str) -> Kernel:
        t = self._index[task_id]
        assert isinstance(t, Kernel)
        return t

    @property
    def kernels(self) -> list[Kernel]:
        return [t for t in self.tasks if isinstance(t, Kernel)]

    @property
    def transfers(self) -> list[Transfer]:
        return [t for t in self.tasks if isinstance(t, Transfer)]

    def stream(self, gpu: int, name: str) -> Stream:
        for s in self.streams:
            if s.gpu == gpu and s.name == name:
                return s
        raise KeyError((gpu, name))

    def stream_of(self, task: Task) -> tuple[int, str] | None:
        """(gpu, stream) a task is queued on; None for SM transfers (they ride on kernels)."""
        if isinstance(task, Kernel):
            return task.gpu, task.stream
        return (task.gpu, task.stream) if task.engine == "dma" else None

    def driven_by(self, kernel_id: str) -> list[Transfer]:
        """The SM transfers a communication kernel drives."""
        return [t for t in self.transfers if kernel_id in t.drivers]

    def total_bytes(self) -> float:
        return sum(t.nbytes for t in self.transfers)

    def folded(self) -> "TaskGraph":
        """The same graph with every rank on GPU 0, as a single-GPU replay runs it: each rank
        keeps its own streams (named ``<stream>@r<rank>``), and every transfer becomes a local
        copy of the same bytes on the same engine (through HBM, on GPU 0's SMs or copy engines).

        >>> from ficco_sim.schedules import lower
        >>> from ficco_sim.workload import Scenario
        >>> g = lower(Scenario("ag-gemm", 2, 1024, 512, 512), "shard-p2p-dma", "h100", "switch:2").folded()
        >>> g.num_gpus, {(t.src, t.dst) for t in g.transfers}
        (1, {(0, 0)})
        """
        def name(stream: str | None, rank: int) -> str | None:
            return None if stream is None else f"{stream}@r{rank}"

        streams = [replace(s, gpu=0, name=name(s.name, s.gpu)) for s in self.streams]
        tasks: list[Task] = []
        for t in self.tasks:
            if isinstance(t, Kernel):
                tasks.append(replace(t, gpu=0, stream=name(t.stream, t.gpu)))
            else:
                tasks.append(replace(t, gpu=0, src=0, dst=0, stream=name(t.stream, t.gpu)))
        meta = dict(self.meta, folded_from=self.num_gpus)
        return TaskGraph.build(1, streams, tasks, buffers=self.buffers, meta=meta)
