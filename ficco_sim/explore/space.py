"""The schedule space of one scenario on one GPU and topology: every point, valid or not.

Dimensions (DESIGN.md, "The design space of schedules"): granularity, pattern, compute
grouping (1, 2, 4, ... communication steps per GEMM, up to the whole), decomposition
dimension, engine (SM with the profile's channel count and with half of it; DMA),
communication priority, shared-memory shaping (0 and the extra bytes per compute block
that lower the GEMM's resident blocks per SM by one, two, ...), and order (local shard
first, arrival order: the only order lowered). A point that cannot run keeps its reason.

>>> from ficco_sim.workload import Scenario
>>> pts = enumerate_space(Scenario("ag-gemm", 4, 4096, 4096, 4096), "h100", "switch:4")
>>> any(p.reason is None for p in pts) and any(p.reason for p in pts)
True
>>> [p.schedule.name for p in pts if p.reason is None][:2]
['none', 'none-dma']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..errors import InputError
from ..gemm_model import block_needs, blocks_beside, blocks_per_sm, hands_off, plan_gemm
from ..hardware import GpuProfile, load_gpu
from ..schedules import Schedule, basic_schedules, invalid_reason, parse_schedule
from ..schedules.validity import margin_for
from ..topology import Topology, load_topology
from ..workload import Scenario

ORDER = "local-first"
LEVELS = ("basic", "candidates", "full", "presets")


@dataclass(frozen=True)
class Point:
    """One schedule of the space; ``reason`` says why it cannot run (None: it can)."""

    schedule: Schedule
    reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.reason is None


def steps_of(scenario: Scenario, schedule: Schedule) -> int:
    """Communication steps (compute grouping units) the lowering makes for ``schedule``."""
    return scenario.spec.steps(scenario, schedule.granularity, schedule.pattern or "")


def group_sizes(steps: int) -> list[int]:
    """1, 2, 4, ... below ``steps``, then ``steps`` itself (the whole GEMM after the local part).

    >>> group_sizes(7), group_sizes(8), group_sizes(1)
    ([1, 2, 4, 7], [1, 2, 4, 8], [1])
    """
    out = [g for g in (2 ** i for i in range(0, 16)) if g < steps]
    return out + [steps]


def fits_every_tile(gpu: GpuProfile, extra: int) -> str | None:
    """Why ``extra`` bytes cannot be added to every GEMM tile the library may pick, or None
    (a piece may pick any tile of the profile; and a GEMM beside a collective is evaluated
    from a template compiled at another size of its structure, whose tile may differ)."""
    for tile in gpu.gemm.tiles:
        smem = tile.block.smem + extra
        if smem > gpu.sm.max_smem_per_block or blocks_per_sm(gpu.sm, replace(tile.block, smem=smem)) < 1:
            return f"{extra // 1024} KiB extra leaves no room for the {tile.m}x{tile.n} GEMM block"
    return None


def _shaping_to(gpu: GpuProfile, base, target: int) -> int | None:
    """The least extra shared memory (whole KiB) that leaves blocks like ``base`` ``target``
    per SM, or None (no whole KiB lands there within the block limit)."""
    need = gpu.sm.smem // (target + 1) + 1 - base.smem - gpu.sm.reserved_smem_per_block
    x = max(1024, math.ceil(need / 1024) * 1024)
    fits = base.smem + x <= gpu.sm.max_smem_per_block
    return x if fits and blocks_per_sm(gpu.sm, replace(base, smem=base.smem + x)) == target else None


def smem_sizes(scenario: Scenario, gpu: GpuProfile) -> list[int]:
    """Extra shared memory per compute block (bytes, whole KiB) that lowers the whole
    GEMM's resident blocks per SM to each smaller count (from the profile's limits): the
    two least, and the least after which a retiring GEMM block hands its SM to the
    communication kernel (:func:`handoff_shaping`) where that is a third every tile holds
    (33 KiB on V100).

    >>> smem_sizes(Scenario("ag-gemm", 8, 1024, 1024, 1024), load_gpu("h100"))
    [16384]
    """
    shape = max(scenario.gemm_shapes(), key=lambda g: g.m)
    if not shape.m:
        return []
    # The whole GEMM's tile and a FiCCO piece's (m / N^2 rows), which may pick a smaller tile;
    # a GEMM beside an independent collective is never cut: its own tile alone.
    piece_m = max(1, shape.m // scenario.gpus ** 2)
    sizes: set[int] = set()
    for m in (shape.m,) if scenario.spec.independent else (shape.m, piece_m):
        plan = plan_gemm(gpu, m, shape.n, shape.k, shape.dtype)
        for target in range(plan.occupancy - 1, 0, -1):
            x = _shaping_to(gpu, plan.block, target)
            if x is not None:
                sizes.add(x)
    least, room = sorted(sizes)[:2], handoff_shaping(scenario, gpu)
    keep = room and room not in least and fits_every_tile(gpu, room) is None
    return sorted(least + ([room] if keep else []))


def handoff_shaping(scenario: Scenario, gpu: GpuProfile) -> int | None:
    """The least extra shared memory per GEMM block (bytes, whole KiB) after which one of the
    whole GEMM's blocks retiring from a full SM leaves room for a block of the communication
    kernel, which a higher-priority collective then takes before the GEMM's next block (the
    resource-aware shaping of Cui & Pericas; :func:`~ficco_sim.gemm_model.hands_off`, the
    engines' rule); 0 when the unshaped GEMM leaves room already (an SM it does not fill, or
    a retiring block's), None when no shaping makes any (a persistent GEMM never hands off).

    >>> s = Scenario("ar-par-gemm", 8, 2048, 2048, 2048, "bfloat16")
    >>> [handoff_shaping(s, load_gpu(g)) for g in ("mi250x", "a100", "h100")]
    [6144, 2048, None]
    """
    shape = max(scenario.gemm_shapes(), key=lambda g: g.m)
    if not shape.m or gpu.gemm.persistent_for(shape.dtype):
        return None
    plan = plan_gemm(gpu, shape.m, shape.n, shape.k, shape.dtype)
    comm, need = block_needs(gpu.sm, gpu.comm_kernel.block), block_needs(gpu.sm, plan.block)
    lightest = min(plan.occupancy, plan.grid // gpu.num_sms)     # blocks on the SMs it fills least
    if blocks_beside(gpu.sm, comm, need, lightest) >= 1 or hands_off(gpu.sm, comm, need, plan.occupancy):
        return 0
    for target in range(plan.occupancy - 1, 0, -1):
        x = _shaping_to(gpu, plan.block, target)
        if x is not None and hands_off(gpu.sm, comm, block_needs(gpu.sm, replace(plan.block, smem=plan.block.smem + x)),
                                       target):
            return x
    return None


def _own_reason(scenario: Scenario, s: Schedule, gpu: GpuProfile, steps: int, shaping: list[int]) -> str | None:
    if s.overlapped and s.group > steps:
        return f"group of {s.group} steps exceeds the {steps} steps of {s.granularity}-{s.pattern}"
    if s.smem and s.engine == "dma":
        return "shaping makes room for SM communication blocks; copy engines use no SM"
    if s.smem:
        return fits_every_tile(gpu, s.smem) or (
            None if s.smem in shaping else "this extra shared memory does not change the GEMM's resident blocks per SM")
    if s.channels is not None and s.channels >= gpu.comm_kernel.channels:
        return f"channels must be below the default {gpu.comm_kernel.channels} to be a distinct point"
    return None


def enumerate_space(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str, *,
                    level: str = "full") -> list[Point]:
    """Every schedule point for ``scenario`` (``level="basic"``: :func:`basic_schedules`),
    in a deterministic order, each with its reason when invalid."""
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    if level not in LEVELS:
        raise InputError("--space", None, f"unknown level {level!r}; known: {', '.join(LEVELS)}")
    if level == "presets":      # what the libraries run here (schedules.presets), each as it maps
        from ..schedules.presets import applicable
        got = [Schedule("none")] + [s for s in applicable(scenario, gpu, topo).values() if isinstance(s, Schedule)]
        return [Point(s, invalid_reason(scenario, s, gpu, topo)) for s in {s.name: s for s in got}.values()]
    if level == "basic":
        cands = [replace(s, dim=scenario.shard_dim) if s.pattern else s for s in basic_schedules(scenario)]
    elif level == "candidates":
        cands = _heuristic_candidates(scenario, gpu)
    else:
        cands = _candidates(scenario, gpu)
    shaping = smem_sizes(scenario, gpu) if any(s.smem for s in cands) else []     # (only shaped points ask)
    out, seen = [], set()
    for s in cands:
        if s.name in seen:
            continue
        seen.add(s.name)
        reason = invalid_reason(scenario, s, gpu, topo) or _own_reason(scenario, s, gpu, steps_of(scenario, s),
                                                                        shaping)
        out.append(Point(s, reason))
    return out


def _candidates(scenario: Scenario, gpu: GpuProfile) -> list[Schedule]:
    small = max(1, gpu.comm_kernel.channels // 2)
    shaping = smem_sizes(scenario, gpu) or [64 * 1024]   # listed (invalid) even when nothing changes
    out = [Schedule("none"), Schedule("none", engine="dma"), Schedule("none", dim="K")]
    if scenario.spec.independent:    # side by side: no pattern, grouping or decomposition dimension
        for channels in (None, small):
            for prio in ("normal", "high"):
                for smem in [0] + shaping:
                    out.append(Schedule("par", engine="sm", channels=channels, priority=prio, smem=smem))
                out.append(Schedule("par", engine="sm", channels=channels, priority=prio,
                                    margin=margin_for(gpu, channels)))
        return out + [Schedule("par", engine="dma"), Schedule("par", engine="dma", priority="high"),
                      Schedule("par", engine="dma", smem=shaping[0]), Schedule("shard", "p2p")]
    for gran in ("shard", "ficco"):
        for pattern in ("p2p", "a2a"):
            probe = Schedule(gran, pattern)
            for group in group_sizes(steps_of(scenario, probe)) + [steps_of(scenario, probe) * 2]:
                for dim in ("M", "K", "N"):
                    base = dict(granularity=gran, pattern=pattern, group=group, dim=dim)
                    for channels in (None, small):
                        for prio in ("normal", "high"):
                            for smem in [0] + shaping:
                                out.append(Schedule(engine="sm", channels=channels, priority=prio, smem=smem, **base))
                    out.append(Schedule(engine="dma", **base))
                    out.append(Schedule(engine="dma", priority="high", **base))
                    out.append(Schedule(engine="dma", smem=shaping[0], **base))
    # one GEMM whose tiles signal each peer's rows out (gemm-rs; refused with a reason elsewhere)
    out += [Schedule("fused", engine="sm"), Schedule("fused", engine="sm", priority="high"),
            Schedule("fused", engine="dma"), Schedule("fused", engine="st")]
    return out


def _heuristic_candidates(scenario: Scenario, gpu: GpuProfile) -> list[Schedule]:
    """What ``recommend`` chooses among: no overlap; shard-level p2p and a2a and FiCCO a2a, on
    SMs at normal and high priority and on copy engines, FiCCO at every compute grouping; all
    decomposed along the scenario's shard dimension; for GEMM -> reduce-scatter, the fused
    kernel sending each tile as it is done, by an SM kernel or a copy engine, and for
    all-gather -> GEMM the fused one whose tiles wait for copy engines to bring their rows. A GEMM
    beside an independent collective: side by side on SMs (normal and high priority, alone,
    with the GEMM shaped by extra shared memory, or kept off the SMs the collective needs)
    or on copy engines. (Shaping, margins and channel counts are left out of the dependent
    schedules: the DES's best over them too is within 5% of these candidates' in every one of
    the library's 312 cases, ``benchmarks/recommend_space.py``.)"""
    out = [Schedule("none")]
    if scenario.spec.independent:
        margin = margin_for(gpu)
        for prio in ("normal", "high"):
            out.append(Schedule("par", engine="sm", priority=prio))
            out += [Schedule("par", engine="sm", priority=prio, smem=z) for z in smem_sizes(scenario, gpu)]
            out.append(Schedule("par", engine="sm", priority=prio, margin=margin))
        return out + [Schedule("par", engine="dma")]
    dim = scenario.shard_dim
    if scenario.kind == "gemm-rs":
        # (not fused-st, the GEMM's own blocks storing: it is the DES's best in 3 of the library's 312
        # cases, within 8% of the rest's best)
        out += [parse_schedule(n) for n in ("fused-sm", "fused-dma")]
    if scenario.kind == "ag-gemm" and dim == "M":      # one GEMM whose tiles wait for copy engines to bring their rows
        out.append(parse_schedule("fused-dma"))
    for gran, pattern in (("shard", "p2p"), ("shard", "a2a"), ("ficco", "a2a")):
        groups = [1] if gran == "shard" else group_sizes(steps_of(scenario, Schedule(gran, pattern)))
        for group in groups:
            for engine, prio in (("sm", "normal"), ("sm", "high"), ("dma", "normal")):
                out.append(Schedule(gran, pattern, engine, prio, group=group, dim=dim))
    return out


def valid_schedules(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str, *,
                    level: str = "full") -> list[Schedule]:
    """The schedules of :func:`enumerate_space` that can run."""
    return [p.schedule for p in enumerate_space(scenario, gpu, topology, level=level) if p.valid]
