"""Measured operations: what every importer produces, before it becomes a task graph.

An importer (Kineto JSON, PyTorch ET JSON, Chakra ``.et``) turns a trace into a
:class:`Trace`: a flat list of :class:`TraceOp`, one per GPU kernel, copy or (on CPU
traces) top-level operator, with its measured start and duration in seconds, its
rank and stream, and what it is:

* ``category="compute"``: a kernel; ``kind`` is ``gemm`` or ``opaque`` (or ``memory``
  for memsets), with the launch footprint (``grid``, ``block``) when the trace has it;
* ``category="comm"``: a communication kernel or collective (NCCL/RCCL on GPUs, gloo on
  CPUs), with ``collective``, bytes per rank and group ranks when the trace says so;
* ``category="copy"``: a copy-engine command (``gpu_memcpy``): ``direction`` one of
  ``PtoP``, ``DtoD``, ``HtoD``, ``DtoH``, with ``nbytes`` and source/destination GPU.

``deps`` are the cross-stream dependencies the importer could prove (events, flows,
data dependencies); stream order is implicit (ops on one stream run in start order).

The classification rules live here so every importer agrees:

>>> classify_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
('comm', 'comm')
>>> classify_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64")
('gemm', 'compute')
>>> classify_kernel("void at::native::vectorized_elementwise_kernel<4>")
('opaque', 'compute')
>>> collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")
'reduce-scatter'
>>> k = "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool*)"
>>> classify_kernel(k), collective_kind(k)     # DeepEP (DeepSeek's published training trace, H800)
(('comm', 'comm'), 'all-to-all')
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..hardware import BlockShape

# DeepEP's expert-parallel all-to-all (deep_ep::intranode / internode / internode_ll dispatch, combine and their
# notify kernels; dpsk::ep:: in DeepSeek's own published traces) moves tokens with SM kernels as NCCL does
DEEPEP = r"(deep_ep|dpsk::ep)::"
COMM_KERNEL = re.compile(r"^(void )?(nccl(Dev)?Kernel|ncclSymk|rccl|ncclKernel)|multimem_all_reduce|"
                         r"(one|two)_shot_all_reduce|cross_device_reduce|all_reduce_kernel|" + DEEPEP, re.IGNORECASE)
# Kernel-name families, first match wins (names as CUPTI/roctracer report them). What-ifs
# scale compute-bound classes by peak FLOP/s and memory-bound ones by HBM bandwidth.
KERNEL_CLASSES: list[tuple[str, re.Pattern]] = [
    ("embedding", re.compile(r"fbgemm|split_embedding|embedding_|embedding_bag|bounds_check_indices|"
                             r"linearize_index|permute_pooled_embs|jagged", re.I)),
    # attn_fwd(.kd): AMD's / Triton's flash attention (rocprofiler names the code object, ``.kd``)
    ("attention", re.compile(r"flash_?(fwd|bwd|attn)|flash::|fmha|attention|(^|_)attn_(fwd|bwd)|sdpa|xformers|mha_",
                             re.I)),
    ("conv", re.compile(r"conv|scudnn|winograd|implicit_gemm|fprop|dgrad|wgrad|fft2d", re.I)),
    ("gemm", re.compile(r"nvjet|^(void )?bmm_|gemm|cutlass|xmma|matmul|_mm_|triton_tem_fused_\w*mm|"
                        r"(volta|turing|ampere|ada|hopper|sm\d\d)_[sdhi]?\w*gemm|cublas|hipblaslt|Cijk_|"
                        r"magma_.gemm", re.I)),
    ("elementwise", re.compile(r"elementwise|reduce_kernel|splitKreduce|at::native|triton_|cub::|"
                               r"multi_tensor_apply|softmax|layer_?norm|rms_?norm|bn_|batch_?norm|"
                               r"nchwToNhwc|nhwcToNchw|gemv|index|scatter|gather|copy|fill|dropout", re.I)),
    ("memory", re.compile(r"memset|memcpy", re.I)),
]
FLOP_CLASSES = {"gemm", "conv", "attention"}


@functools.lru_cache(maxsize=1 << 16)
def kernel_class(name: str) -> str:
    """The family of a GPU kernel from its name: ``comm``, ``gemm``, ``conv``,
    ``attention``, ``embedding``, ``elementwise``, ``memory`` or ``opaque``.

    >>> [kernel_class(n) for n in ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "fbgemm_gpu::permute_2D_lengths_kernel",
    ...  "void at::native::vectorized_elementwise_kernel<4>", "flash_fwd_kernel", "Cijk_Alik_Bljk_HB_MT256x128",
    ...  "attn_fwd.kd")]
    ['gemm', 'embedding', 'elementwise', 'attention', 'gemm', 'attention']
    """
    name = name.strip()
    if COMM_KERNEL.search(name):
        return "comm"
    for cls, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return cls
    return "opaque"


CPU_GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::_scaled_mm", "aten::addmv", "aten::mv"}
CPU_COMM = re.compile(r"^(gloo|nccl|mpi|ucc):|^record_param_comms$|^nccl:", re.IGNORECASE)
_COLLECTIVES = [
    ("all-to-all", re.compile(DEEPEP, re.I)),
    ("all-gather", re.compile(r"all_?gather|allgather", re.I)),
    ("reduce-scatter", re.compile(r"reduce_?scatter|reducescatter", re.I)),
    ("all-reduce", re.compile(r"all_?reduce|allreduce", re.I)),
    ("all-to-all", re.compile(r"all_?to_?all|alltoall", re.I)),
    ("broadcast", re.compile(r"broadcast|bcast", re.I)),
    ("send-recv", re.compile(r"send|recv|sendrecv", re.I)),
]
DTYPE_SIZE = {"float": 4, "float32": 4, "Float": 4, "float16": 2, "half": 2, "Half": 2, "bfloat16": 2,
              "BFloat16": 2, "double": 8, "Double": 8, "int": 4, "Int": 4, "long": 8, "Long": 8, "int64": 8,
              "int32": 4, "c10::Half": 2, "c10::BFloat16": 2, "float8": 1, "Float8_e4m3fn": 1, "Byte": 1,
              "uint8": 1, "int8": 1, "Char": 1, "bool": 1, "Bool": 1, "long int": 8, "long long": 8,
              "unsigned char": 1, "signed char": 1, "short int": 2, "short": 2, "Short": 2,
              "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "Float8_e5m2": 1, "c10::complex<float>": 8}


def classify_kernel(name: str) -> tuple[str, str]:
    """(kernel kind, role) of a GPU kernel from its name (:func:`kernel_class`):
    NCCL/RCCL -> comm, GEMMs -> gemm, memsets -> memory, anything else -> opaque compute
    (never dropped)."""
    cls = kernel_class(name)
    if cls == "comm":
        return "comm", "comm"
    return (cls if cls in ("gemm", "memory") else "opaque"), "compute"


def classify_cpu_op(name: str) -> tuple[str, str]:
    """(kind, role) of a CPU-trace operator: gloo/nccl collectives -> comm, matrix
    products -> gemm, anything else -> opaque compute.

    >>> classify_cpu_op("gloo:all_gather"), classify_cpu_op("aten::mm"), classify_cpu_op("aten::add")
    (('comm', 'comm'), ('gemm', 'compute'), ('opaque', 'compute'))
    """
    if CPU_COMM.search(name):
        return "comm", "comm"
    if name in CPU_GEMM_OPS:
        return "gemm", "compute"
    return "opaque", "compute"


def collective_kind(text: str) -> str:
    """ficco-sim's collective name (``all-gather`` ...) from a kernel or op name; ``""``
    when none matches."""
    for kind, pattern in _COLLECTIVES:
        if pattern.search(text):
            return kind
    return ""


@dataclass
class TraceOp:
    """One measured operation (see module docstring). Times in seconds from the trace's start."""

    id: str
    rank: int
    stream: str
    name: str
    category: str                 # compute | comm | copy
    kind: str                     # gemm | comm | memory | opaque | transfer
    start: float
    dur: float
    priority: int = 0
    cls: str = ""                 # kernel family (:func:`kernel_class`); what-ifs scale by it
    grid: int = 0                 # 0: not known
    block: BlockShape | None = None
    collective: str = ""          # comm: all-gather | reduce-scatter | ...
    nbytes: float = 0.0           # comm: bytes per rank (input); copy: bytes moved (-1: not recorded)
    group: tuple[int, ...] = ()   # comm: ranks of the process group
    seq: int | None = None        # comm: sequence number in its group
    direction: str = ""           # copy: PtoP | DtoD | HtoD | DtoH
    src: int = -1                 # copy: source GPU (-1: host)
    dst: int = -1
    dma_engine: int | None = None  # copy: the copy engine, when the trace says
    deps: list[str] = field(default_factory=list)
    shapes: list = field(default_factory=list)   # input dims of the op (GEMM: [[m, k], [k, n]])
    dtype: str = ""
    launch: float | None = None   # host launch time (s), when known
    wait: float | None = None     # comm: the part of ``dur`` spent waiting for peers (:func:`split_waits`)
    order: int = 0                # launch order on its rank (correlation), for tie-breaks
    call: tuple = ()              # GEMM: (thread, start) of the matrix-product operator that launched it
    # the host's pace (:meth:`.host.Host.link`): (thread, the thread's previous launch's op id or "", seconds
    # since that launch, ops a synchronisation in between waited for, seconds since the later of the two)
    host: tuple = ()

    @property
    def end(self) -> float:
        return self.start + self.dur

    @property
    def role(self) -> str:
        return "comm" if self.category in ("comm", "copy") else "compute"


@dataclass
class Trace:
    """All ops of a (possibly multi-rank) trace, and where they came from."""

    ops: list[TraceOp]
    num_ranks: int
    sources: list[str]
    fmt: str                                   # kineto | et | chakra
    device: str = ""                           # deviceProperties name, when present
    on_gpu: bool = True                        # False: CPU trace (ops are host operators)
    stream_priority: dict = field(default_factory=dict)   # (rank, stream) -> priority
    notes: list[str] = field(default_factory=list)
    topology: str = ""                         # the topology a ficco-sim export was simulated on
    steps: dict = field(default_factory=dict)  # rank -> {N: (start, end) s of ProfilerStep#N, trace clock}
    device_sms: int = 0                        # deviceProperties' numSms where its name is empty (vLLM's ROCm traces)

    @property
    def span(self) -> tuple[float, float]:
        """(first start, last end) of the trace's ops, seconds."""
        if not self.ops:
            return 0.0, 0.0
        return min(o.start for o in self.ops), max(o.end for o in self.ops)

    @property
    def makespan(self) -> float:
        a, b = self.span
        return b - a

    def by_id(self) -> dict[str, TraceOp]:
        return {o.id: o for o in self.ops}

    def streams(self) -> list[tuple[int, str]]:
        seen: dict[tuple[int, str], None] = {}
        for o in sorted(self.ops, key=lambda o: (o.rank, o.start)):
            seen.setdefault((o.rank, o.stream), None)
        return list(seen)

    def summary(self) -> dict:
        cats: dict[str, int] = {}
        for o in self.ops:
            key = o.category if o.category != "compute" else f"compute/{o.kind}"
            cats[key] = cats.get(key, 0) + 1
        return {"format": self.fmt, "ranks": self.num_ranks, "ops": len(self.ops), "streams": len(self.streams()),
                "by_category": cats, "span_s": self.makespan, "on_gpu": self.on_gpu, "device": self.device,
                "cross_stream_deps": sum(len(o.deps) for o in self.ops),
                "comm_s": sum(o.dur for o in self.ops if o.category == "comm"),
                "comm_wait_s": sum(o.wait or 0.0 for o in self.ops if o.category == "comm"),
                "collectives": {k or "unknown": sum(1 for o in self.ops if o.category == "comm" and o.collective == k)
                                for k in sorted({o.collective for o in self.ops if o.category == "comm"})}}


def match_collectives(ops: list[TraceOp]) -> dict[str, tuple[int, list[TraceOp]]]:
    """op id -> (instance number, members): the k-th collective of a kind (or the one
    with sequence number k) in a group, on each of its ranks. Needs every rank present."""
    ranks = {o.rank for o in ops}
    groups: dict[tuple, list[TraceOp]] = {}
    counters: dict[tuple, int] = {}
    for o in ops:
        if o.category != "comm" or not o.collective:
            continue
        grp = o.group or tuple(sorted(ranks))
        base = (o.collective, grp)
        if o.seq is not None:
            n = o.seq
        else:
            n = counters.get((base, o.rank), 0)
            counters[(base, o.rank)] = n + 1
        groups.setdefault(base + (n,), []).append(o)
    out: dict[str, tuple[int, list[TraceOp]]] = {}
    for i, (key, members) in enumerate(groups.items()):
        grp = key[1]
        if sorted(m.rank for m in members) != sorted(grp) or len(grp) < 2:
            continue  # incomplete (a rank's file is missing): keep it measured
        for m in members:
            out[m.id] = (i, members)
    return out


CLOCK_SLACK = 1e-3     # s: ranks whose collectives end further apart than this are not on one clock


def clock_note(ops: list[TraceOp]) -> str | None:
    """A note where a rank's coupled collectives end, on the trace's clock, far from its peers'
    (they end together in a run): the median gap per rank against the lowest rank, and its
    spread over the instances: a steady gap is a clock offset (another host's clock), a scattered
    one files of different runs or windows. The replay couples them all the same."""
    ends: dict[int, list[float]] = {}
    seen: set[int] = set()
    for num, members in match_collectives(ops).values():
        if num in seen or members[0].collective in ("", "send-recv", *ROOTED):
            continue
        seen.add(num)
        ref = min(members, key=lambda m: m.rank)
        for m in members:
            if m is not ref:
                ends.setdefault(m.rank, []).append(m.end - ref.end)
    off = {r: (float(np.median(d)), float(np.percentile(d, 90) - np.percentile(d, 10))) for r, d in ends.items()}
    far = {r: v for r, v in off.items() if abs(v[0]) > CLOCK_SLACK}
    if not far:
        return None
    r, (gap, spread) = max(far.items(), key=lambda kv: abs(kv[1][0]))
    why = ("another host's clock (steady)" if spread <= CLOCK_SLACK else
           f"not one run or window? (it varies by {spread * 1e3:.3g} ms)")
    return (f"{len(far)} rank(s)' collectives end far from their peers' on the trace's clock (rank {r}: "
            f"{gap * 1e3:+.4g} ms, median over {len(ends[r])}): {why}; the replay ends each collective on all its "
            "ranks together, so per-rank errors there compare against that clock")


def unpaired_note(ops: list[TraceOp]) -> str | None:
    """A note where every rank of a group is in the trace but the ranks do not hold as many
    collectives of one kind in it: a rank's file cut short, or files of other runs or windows.
    The unpaired ones are replayed as measured (:func:`match_collectives` leaves them out)."""
    ranks = {o.rank for o in ops}
    counts: dict[tuple, dict[int, int]] = {}
    for o in ops:
        # point-to-point calls pair by sender and receiver, not by group: a pipeline's middle stage
        # holds twice its ends' sends and receives
        if o.category == "comm" and o.collective and o.collective != "send-recv":
            per = counts.setdefault((o.collective, o.group or tuple(sorted(ranks))), {})
            per[o.rank] = per.get(o.rank, 0) + 1
    for (kind, grp), per in counts.items():
        if len(grp) < 2 or not set(grp) <= ranks:
            continue
        have = {r: per.get(r, 0) for r in grp}
        lo, hi = min(have, key=have.get), max(have, key=have.get)
        if have[lo] != have[hi]:
            return (f"collectives do not pair up across ranks: rank {lo} holds {have[lo]} {kind} of its group, rank "
                    f"{hi} {have[hi]} (a rank's file cut short, or files of another run or window?); those without "
                    "all their peers keep their measured times")
    return None


MAX_SPAN_S = 3600.0   # a replay spans at most an hour of measured time (else: timestamps are broken)


def rebase(ops: list[TraceOp], where: str, field: str) -> None:
    """Put the trace's clock at its first op (whatever epoch it was recorded in: a simulation
    clock of 1.7e9 s cannot resolve microseconds), its ops spanning at most :data:`MAX_SPAN_S`."""
    if not ops:
        return
    t0 = min(o.start for o in ops)
    span = max(o.end for o in ops) - t0
    if span > MAX_SPAN_S:
        raise InputError(where, field, f"the ops span {span / 3600:.1f} h of measured time; a replay needs a window "
                         "(--steps N) or timestamps in microseconds")
    for o in ops:
        o.start -= t0
        if o.launch is not None:
            o.launch -= t0


# collectives with a root: the root's kernel may end before the others' begin (a small broadcast fits the
# peers' buffers), so their members neither end together nor wait for each other as the symmetric ones do
ROOTED = ("broadcast", "reduce")


def split_waits(ops: list[TraceOp]) -> int:
    """Split every symmetric collective whose ranks are all in the trace into waiting and transfer:
    a measured NCCL/RCCL kernel runs from its rank's arrival until the collective ends on
    all ranks, so the last rank to arrive waited least and its duration is the transfer;
    each member's ``wait`` is its duration minus that (seconds). Returns the instances
    split. (Durations, not cross-rank timestamps, are compared, so clock offsets between
    hosts do not matter.)"""
    instances = match_collectives(ops)
    seen: set[int] = set()
    for num, members in instances.values():
        if num in seen or members[0].collective in ("", "send-recv", *ROOTED):
            continue
        seen.add(num)
        transfer = min(m.dur for m in members)
        for m in members:
            m.wait = m.dur - transfer
    return len(seen)
