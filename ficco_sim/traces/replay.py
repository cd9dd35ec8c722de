"""Replay a measured trace, and ask what-if questions of it.

* :func:`replay`: simulate the imported graph with the measured durations (comm kernels
  held for their measured time, the trace's gaps kept, no launch overhead or extra
  contention) and compare the simulated makespan with the trace's own (first op start
  to last op end). A faithful import replays within a fraction of a percent; what is
  left is SM dispatch (kernels that overlapped in the trace now compete for SMs as the
  model says) and copy-engine times (copies are modelled from their bytes).
* :func:`whatif`: the same trace on another GPU profile (compute durations scaled by
  peak FLOP/s for GEMMs, by HBM bandwidth for other kernels; waves recomputed from the
  footprint), another topology or comm engine (communication is then *modelled* from
  its bytes; the report also shows that model on the original hardware, so the change
  is not confused with the model's error), or another comm-stream priority.
* :func:`find_pairs` / :func:`pair_whatif`: the data-dependent comm -> GEMM pairs of
  the trace (an all-gather followed by the GEMM that reads it, a GEMM followed by the
  reduce-scatter of its output, an all-to-all feeding an expert GEMM) as
  :class:`~ficco_sim.workload.Scenario` s, simulated under schedules of the design space.

>>> from pathlib import Path
>>> from ficco_sim.traces.kineto import load_kineto
>>> r = replay(load_kineto([Path(__file__).parents[2] / "traces" / "cpu_mm_chain.json.gz"]))
>>> abs(r.error) < 1e-6
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..engine.des import simulate_graph
from ..errors import InputError
from ..hardware import GpuProfile, available_profiles, load_gpu, profile_for_device
from ..taskgraph import TaskGraph
from ..timeline import Timeline
from ..topology import Topology, load_topology
from ..workload import Scenario
from .graph import replay_profile, trace_to_graph
from .ops import FLOP_CLASSES, Trace, TraceOp

DTYPES = {"float": "float32", "float32": "float32", "c10::Half": "float16", "half": "float16", "float16": "float16",
          "c10::BFloat16": "bfloat16", "bfloat16": "bfloat16", "BFloat16": "bfloat16", "Half": "float16"}
DEFAULT_PAIR_SCHEDULES = ("none", "shard-p2p-sm", "ficco-a2a-sm", "ficco-a2a-dma")


@dataclass
class ReplayResult:
    """Simulated vs traced makespan (seconds) and what produced them."""

    trace_makespan: float
    sim_makespan: float
    timeline: Timeline
    graph: TaskGraph
    gpu: str
    topology: str
    comm: str = "measured"

    rank_spans: dict[int, tuple[float, float]] = field(default_factory=dict)   # rank -> (trace s, simulated s)

    @property
    def error(self) -> float:
        """Relative error of the simulated makespan (sim / trace - 1)."""
        return self.sim_makespan / self.trace_makespan - 1 if self.trace_makespan > 0 else 0.0

    @property
    def rank_errors(self) -> dict[int, float]:
        """Per rank: relative error of its span (its first op's start to its last op's end)."""
        return {r: (s / t - 1 if t > 0 else 0.0) for r, (t, s) in sorted(self.rank_spans.items())}


def source_gpu(trace: Trace, gpu: str | GpuProfile | None = None) -> GpuProfile:
    """The profile of the GPU the trace ran on: ``gpu`` if given, else the built-in
    profile named in the trace's ``deviceProperties`` (e.g. "NVIDIA H100 80GB HBM3" ->
    h100, "Tesla V100-SXM2-32GB" -> v100). A GPU trace whose device matches no built-in
    profile, or names none, is an error naming ``--source-gpu``: replaying it on another
    GPU's profile would answer for the wrong hardware. CPU traces use h100's (the profile
    only hosts the measured operators, each one block of its measured time, and h100 has
    SMs enough that none waits for another)."""
    if gpu is not None:
        prof = load_gpu(gpu)
        if trace.on_gpu and prof.host is not None:
            raise InputError("--source-gpu", None, f"{prof.name} is a CPU replay rank; the trace ran on a GPU: name "
                             "the GPU it ran on")
        return prof
    if not trace.on_gpu:
        return load_gpu("h100")
    named = profile_for_device(trace.device)
    if named is not None:
        return load_gpu(named)
    if trace.device:
        said = f"ran on {trace.device!r}, which matches no built-in profile"
    elif trace.device_sms:      # deviceProperties with an empty name (vLLM's ROCm traces): say what they do give
        same = [p for p in available_profiles() if p != "cpu" and load_gpu(p).num_sms == trace.device_sms]
        said = (f"names no GPU (its deviceProperties give an empty name and {trace.device_sms} SMs"
                + (f"; built-in with as many: {', '.join(same)}" if same else "") + ")")
    elif trace.fmt == "chakra":
        said = "does not say which GPU it ran on (a Chakra .et records none)"
    else:
        said = "does not say which GPU it ran on (no deviceProperties)"
    files = f" ({Path(trace.sources[0]).name}{' ...' if len(trace.sources) > 1 else ''})" if trace.sources else ""
    raise InputError("--source-gpu", None, f"the trace{files} {said}; name the GPU it ran on (built-in: "
                     f"{', '.join(p for p in available_profiles() if p != 'cpu')}, or a profile YAML)")


def default_topology(trace: Trace, gpu: GpuProfile, topology: str | Topology | None = None) -> Topology:
    if topology is not None:
        topo = load_topology(topology, gpu)
        if topo.num_gpus < trace.num_ranks:
            raise InputError("--topology", None, f"{topo.name} has {topo.num_gpus} GPUs; the trace has "
                             f"{trace.num_ranks} ranks")
        return topo
    if trace.topology:   # a ficco-sim export: replay on what it was simulated on
        return load_topology(trace.topology, gpu)
    return load_topology(f"switch:{max(2, trace.num_ranks)}", gpu)


def _run(trace: Trace, graph: TaskGraph, gpu: GpuProfile, topo: Topology, comm: str) -> ReplayResult:
    tl = simulate_graph(graph, gpu, topo)
    measured: dict[int, list[float]] = {}
    for o in trace.ops:
        a = measured.setdefault(o.rank, [o.start, o.end])
        a[0], a[1] = min(a[0], o.start), max(a[1], o.end)
    sim: dict[int, list[float]] = {}
    for rec in tl.records:
        if rec.gpu in measured and rec.label != "idle" and rec.kind != "host" and rec.end == rec.end:
            a = sim.setdefault(rec.gpu, [rec.start, rec.end])
            a[0], a[1] = min(a[0], rec.start), max(a[1], rec.end)
    spans = {r: (m[1] - m[0], sim[r][1] - sim[r][0]) for r, m in measured.items() if r in sim}
    return ReplayResult(trace.makespan, tl.makespan, tl, graph, gpu.name, topo.name, comm, spans)


def replay(trace: Trace, gpu: str | GpuProfile | None = None, topology: str | Topology | None = None, *,
           comm: str = "measured", engine: str | None = None, footprints: bool = True) -> ReplayResult:
    """Replay-as-measured (see module docstring). ``footprints=False`` replays every kernel
    as one block of its measured duration (exact by construction: checks dependencies
    and gaps only)."""
    src = replay_profile(source_gpu(trace, gpu))
    topo = default_topology(trace, src, topology)
    return _run(trace, trace_to_graph(trace, src, comm=comm, engine=engine, footprints=footprints), src, topo, comm)


@dataclass
class WhatIf:
    """A what-if: the measured replay, the modelled baseline (when comm is modelled) and the variant."""

    changes: list[str]
    baseline: ReplayResult
    variant: ReplayResult
    model_baseline: ReplayResult | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        """Relative change of the makespan against the like-for-like baseline."""
        ref = self.model_baseline or self.baseline
        return self.variant.sim_makespan / ref.sim_makespan - 1


def compute_scale(src: GpuProfile, dst: GpuProfile, dtype: str = "float16") -> dict[str, float]:
    """Duration factors for measured kernels moved from ``src`` to ``dst``, per kernel
    class (:func:`~ficco_sim.traces.ops.kernel_class`): GEMMs, convolutions and attention
    by peak FLOP/s, everything else (element-wise, embeddings, memory, unknown kernels) by
    HBM bandwidth (most non-matrix kernels are memory-bound); host copies (``host-copy``) by
    the host link (PCIe), where both profiles give it.

    >>> compute_scale(load_gpu("h100"), load_gpu("h100"))["gemm"]
    1.0
    """
    d = dtype if dtype in src.peak_flops and dtype in dst.peak_flops else next(iter(src.peak_flops))
    flops = src.peak_flops[d] / dst.peak_flops.get(d, src.peak_flops[d])
    hbm = src.hbm_bandwidth / dst.hbm_bandwidth
    classes = ("gemm", "conv", "attention", "embedding", "elementwise", "memory", "opaque")
    out = {c: flops if c in FLOP_CLASSES else hbm for c in classes}
    # host copies (HtoD / DtoH) by the host link, where both profiles know it
    out["host-copy"] = src.host_bandwidth / dst.host_bandwidth if src.host_bandwidth and dst.host_bandwidth else 1.0
    return out


# a float32 GEMM on tensor cores runs TF32 (CUTLASS / cuBLAS names: tensorop_s1688, xmma_gemm_tf32, ...)
TF32_KERNEL = ("tensorop", "tf32", "1688")


def gemm_dtype(op) -> str | None:
    """The model's dtype of a traced GEMM kernel: its operator's input type, ``tfloat32`` where
    float32 operands ran on a tensor-core kernel (:data:`TF32_KERNEL`), None where unknown.

    >>> from ficco_sim.traces.ops import TraceOp
    >>> k = lambda name: TraceOp("g", 0, "7", name, "compute", "gemm", 0.0, 1e-5, dtype="float")
    >>> gemm_dtype(k("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>")), gemm_dtype(
    ...     k("ampere_sgemm_128x64_nn"))
    ('tfloat32', 'float32')
    """
    dtype = DTYPES.get(op.dtype)
    if dtype == "float32" and any(t in op.name.lower() for t in TF32_KERNEL):
        return "tfloat32"
    return dtype


def replanned_gemms(trace: Trace, src: GpuProfile, dst: GpuProfile) -> dict:
    """``{op id: (grid, block, duration)}`` for GEMMs whose shapes the trace gives: the
    target's tiling from the GEMM model, and the measured duration times the model's
    target / source ratio (so the source's calibration error cancels)."""
    from ..gemm_model import isolated_time, plan_gemm
    out = {}
    for o in trace.ops:
        mnk = gemm_mnk(o.shapes) if o.kind == "gemm" and o.category == "compute" else None
        dtype = gemm_dtype(o) or ""
        if mnk is None or dtype not in src.peak_flops or dtype not in dst.peak_flops:
            continue
        try:
            a, b = plan_gemm(src, *mnk, dtype), plan_gemm(dst, *mnk, dtype)
        except InputError:
            continue
        ratio = isolated_time(dst, b, launch=False) / isolated_time(src, a, launch=False)
        out[o.id] = (b.grid, b.block, o.dur * ratio)
    return out


def comm_streams(trace: Trace) -> set[tuple[int, str]]:
    return {(o.rank, o.stream) for o in trace.ops if o.role == "comm"}


PRIORITY_SPAN = 100      # --comm-priority: a stream priority is a level among a few, not a magnitude


def whatif(trace: Trace, *, source: str | GpuProfile | None = None, gpu: str | GpuProfile | None = None,
           topology: str | Topology | None = None, engine: str | None = None,
           comm_priority: int | None = None, model_comm: bool | None = None, footprints: bool = True) -> WhatIf:
    """Replay ``trace`` with some of: another ``gpu``, ``topology``, comm ``engine``
    (``sm``/``dma``) or ``comm_priority`` (larger = more urgent) for every stream that
    carries communication. Topology and engine changes need modelled communication."""
    if comm_priority is not None and not -PRIORITY_SPAN <= comm_priority <= PRIORITY_SPAN:
        raise InputError("--comm-priority", None, f"{comm_priority}: a stream priority orders a few levels "
                         f"(larger = more urgent); give one within +-{PRIORITY_SPAN}")
    src = replay_profile(source_gpu(trace, source))
    dst = replay_profile(load_gpu(gpu)) if gpu is not None else src
    if trace.on_gpu and dst.host is not None:
        raise InputError("--gpu", None, f"{dst.name} is a CPU replay rank; the trace ran on a GPU: move it to a GPU "
                         "profile")
    base_topo = default_topology(trace, src, None)
    baseline = _run(trace, trace_to_graph(trace, src, footprints=footprints), src, base_topo, "measured")
    topo = default_topology(trace, dst, topology)
    model = bool(model_comm) or topology is not None or engine is not None
    changes, notes = [], []
    scale = None
    overrides = None
    if gpu is not None:
        changes.append(f"gpu {src.name} -> {dst.name}")
        if trace.on_gpu:
            scale = compute_scale(src, dst)
            overrides = replanned_gemms(trace, src, dst)
            if overrides:
                notes.append(f"{len(overrides)} GEMM(s) with known shapes re-tiled for {dst.name}: measured time x "
                             "GEMM-model ratio")
        else:
            notes.append("CPU trace: operator durations are kept (no GPU to scale from)")
    if topology is not None:
        changes.append(f"topology {base_topo.name} -> {topo.name}")
    if engine is not None:
        changes.append(f"comm engine -> {engine}")
    prio = None
    if comm_priority is not None:
        prio = {key: comm_priority for key in comm_streams(trace)}
        changes.append(f"comm stream priority -> {comm_priority}")
    if not changes:
        changes.append("none (replay)")
    model_baseline = None
    comm = "model" if model else "measured"
    if model:
        model_baseline = _run(trace, trace_to_graph(trace, src, comm="model", footprints=footprints), src,
                              base_topo, "model")
        if not any(o.nbytes > 0 for o in trace.ops if o.category == "comm"):
            notes.append("no communication with known sizes: comm stays measured")
    variant = _run(trace, trace_to_graph(trace, dst, comm=comm, engine=engine, priorities=prio, scale=scale,
                                         footprints=footprints, overrides=overrides), dst, topo, comm)
    notes += [n for n in variant.graph.meta.get("notes", []) if n not in notes]
    return WhatIf(changes, baseline, variant, model_baseline, notes)


# ------------------------------------------------------------------------------------
# comm -> GEMM pairs

@dataclass
class Pair:
    """A data-dependent communication + GEMM pair found on one rank."""

    kind: str            # ag-gemm | gemm-rs | a2a-gemm
    rank: int
    comm: TraceOp
    gemm: TraceOp
    link: str            # how the dependency is known: dependency | stream | timing
    scenario: Scenario | None = None
    why_not: str = ""    # why no scenario could be built

    @property
    def measured(self) -> float:
        """Measured time of the pair on its rank: first start to last end (s), less the
        time its collective spent waiting for peers to arrive (:func:`~.ops.split_waits`),
        which no schedule of the pair changes."""
        span = max(self.comm.end, self.gemm.end) - min(self.comm.start, self.gemm.start)
        return span - (self.comm.wait or 0.0)


def gemm_mnk(shapes: list) -> tuple[int, int, int] | None:
    """(m, n, k) of a matrix product from its input dims (mm, addmm, linear).

    >>> gemm_mnk([[512, 384], [384, 256]]), gemm_mnk([[256], [512, 384], [384, 256]])
    ((512, 256, 384), (512, 256, 384))
    >>> gemm_mnk([[512, 384], [256, 384]])   # linear: weight is n x k
    (512, 256, 384)
    """
    mats = [d for d in shapes if isinstance(d, list) and len(d) == 2 and all(isinstance(x, int) for x in d)]
    for a, b in zip(mats, mats[1:]):
        if a[1] == b[0]:
            return a[0], b[1], a[1]
    for a, b in zip(mats, mats[1:]):
        if a[1] == b[1]:
            return a[0], b[0], a[1]
    return None


def _linked(comm: TraceOp, gemm: TraceOp) -> str:
    if comm.id in gemm.deps or gemm.id in comm.deps:
        return "dependency"
    if comm.stream == gemm.stream:
        return "stream"
    return "timing"


def find_pairs(trace: Trace) -> list[Pair]:
    """Comm -> GEMM pairs (see module docstring): for an all-gather / all-to-all, the first
    GEMM on the same rank that depends on it (else the first one starting after it);
    for a reduce-scatter, the last GEMM before it that it depends on (else the last one
    ending before it)."""
    pairs = []
    ops = sorted(trace.ops, key=lambda o: o.start)
    for c in ops:
        if c.category != "comm" or c.collective not in ("all-gather", "reduce-scatter", "all-to-all"):
            continue
        gemms = [o for o in ops if o.rank == c.rank and o.kind == "gemm" and o.category == "compute"]
        if c.collective == "reduce-scatter":
            before = [g for g in gemms if g.end <= c.start + 1e-9]
            dep = [g for g in before if g.id in c.deps]
            g = (dep or before or [None])[-1]
            kind = "gemm-rs"
        else:
            after = [g for g in gemms if g.start >= c.end - 1e-9]
            dep = [g for g in after if c.id in g.deps]
            g = (dep or after or [None])[0]
            kind = "ag-gemm" if c.collective == "all-gather" else "a2a-gemm"
        if g is None:
            continue
        p = Pair(kind, c.rank, c, g, _linked(c, g))
        _scenario(p)
        pairs.append(p)
    return pairs


def _scenario(p: Pair) -> None:
    mnk = gemm_mnk(p.gemm.shapes)
    n_gpus = len(p.comm.group)
    if mnk is None:
        p.why_not = "the GEMM's input shapes are not in the trace (record_shapes=True, or CPU ops, needed)"
        return
    if n_gpus < 2:
        p.why_not = "the collective's group is unknown"
        return
    m, n, k = mnk
    dtype = (gemm_dtype(p.gemm) if p.gemm.dtype else DTYPES.get(p.comm.dtype)) or "float16"
    try:
        p.scenario = Scenario(p.kind, n_gpus, m, n, k, dtype, name=f"rank{p.rank}:{p.comm.name[:30]}->"
                              f"{p.gemm.name[:30]}")
    except InputError as exc:
        p.why_not = exc.message


@dataclass
class PairResult:
    schedule: str
    makespan: float | None     # simulated, seconds (None: schedule invalid here)
    speedup: float | None      # over the "none" schedule
    projected: float | None    # the measured pair time, plus what the schedule saves or costs in simulation
    # (None where the pair is simulated on another GPU than the trace's: there is nothing to project onto)
    note: str = ""


def pair_whatif(pair: Pair, schedules=DEFAULT_PAIR_SCHEDULES, gpu: str | GpuProfile = "h100",
                topology: str | Topology | None = None, *, on_trace_gpu: bool = True) -> list[PairResult]:
    """Simulate the pair's scenario under ``schedules`` with the lead's lowering; the first
    row is always ``none`` (collective, then GEMM). ``projected``: the measured pair time
    plus the simulated difference to ``none`` (what the model does not explain, a host's
    gaps, stays as measured); not given when ``on_trace_gpu`` is False (the pair simulated on
    another GPU than the trace ran on) or where the saving exceeds the measured time."""
    from ..schedules import invalid_reason, lower
    from ..schedules.presets import resolve
    from ..schedules.selection import schedule_names, select_schedules
    if pair.scenario is None:
        raise InputError("trace", f"pair {pair.comm.id}", pair.why_not or "no scenario")
    sc = pair.scenario
    prof = load_gpu(gpu)
    topo = load_topology(topology if topology is not None else f"switch:{sc.gpus}", prof)
    picked, left_out = select_schedules(schedule_names(list(schedules)), sc, prof, topo)   # names, presets, all
    picked = ["none"] + [x for x in picked if (x if isinstance(x, str) else x.name) != "none"]
    out: list[PairResult] = []
    base = None
    for item in picked:
        label = item if isinstance(item, str) else item.name
        try:
            sch = resolve(sc, item, prof, topo)
        except InputError as e:          # a preset that does not apply to this pair
            out.append(PairResult(label, None, None, None, e.message))
            continue
        label = label if label == sch.name else f"{label} = {sch.name}"
        reason = invalid_reason(sc, sch, prof, topo)
        if reason:
            out.append(PairResult(label, None, None, None, reason))
            continue
        t = simulate_graph(lower(sc, sch, prof, topo), prof, topo).makespan
        base = t if base is None else base
        projected = pair.measured + (t - base)
        out.append(PairResult(label, t, base / t, projected if on_trace_gpu and projected > 0 else None))
    for item in left_out:               # what 'all' left out here, and why ("name (why)")
        name, _, why = item.partition(" (")
        out.append(PairResult(name, None, None, None, why.removesuffix(")")))
    return out
