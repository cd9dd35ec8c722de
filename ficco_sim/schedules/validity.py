"""Which schedules a scenario can run on a GPU and topology, and why not: the one check
:func:`~ficco_sim.schedules.lowering.lower`, the schedule space and ``recommend`` share."""

from __future__ import annotations

from ..gemm_model import blocks_per_sm
from ..hardware import GpuProfile
from ..topology import Topology
from ..workload import Scenario
from .schedule import Schedule


def invalid_reason(scenario: Scenario, schedule: Schedule, gpu: GpuProfile, topology: Topology) -> str | None:
    """Why this schedule cannot run this scenario here, or None if it can."""
    if topology.num_gpus != scenario.gpus:
        return f"topology has {topology.num_gpus} GPUs but the scenario needs {scenario.gpus}"
    if scenario.spec.independent and schedule.granularity in ("shard", "ficco"):
        return (f"{scenario.kind}: the GEMM does not wait for the collective, so there is nothing to decompose; "
                "run them side by side (par-sm, par-sm-hi, par-dma, ...) or one after the other (none)")
    if schedule.granularity == "fused" and scenario.kind not in ("gemm-rs", "ag-gemm"):
        return (f"{scenario.kind}: a fused kernel is lowered for GEMM -> reduce-scatter (tile signals from the "
                "producing GEMM) and all-gather -> GEMM (a GEMM whose tiles wait for their rows) only")
    if schedule.granularity == "fused" and scenario.kind == "ag-gemm" and schedule.engine != "dma":
        return ("a fused all-gather GEMM is lowered with copy engines bringing its rows (fused-dma), as Flux and "
                "PyTorch symmetric memory do; not beside a communication kernel on the SMs, nor with epilogue stores")
    if schedule.granularity == "fused" and scenario.kind == "ag-gemm" and gpu.host is not None:
        return ("a host device's ranks post their copies from the thread that runs their GEMMs: a GEMM waiting on "
                "its copies would hold that thread (use shard-p2p-dma)")
    if schedule.granularity == "fused" and scenario.kind == "ag-gemm" and scenario.shard_dim != "M":
        return "a fused all-gather GEMM waits for gathered rows (A sharded along M)"
    if schedule.granularity == "fused" and (schedule.group > 1 or schedule.dim != "M"):
        return "fused runs one GEMM over every row: no pieces to group, decomposed along M"
    if not scenario.spec.independent and schedule.granularity == "par":
        return (f"{scenario.kind}: the GEMM {'needs' if scenario.kind != 'gemm-rs' else 'produces'} the "
                "collective's data, so the two cannot simply run side by side; decompose (shard-*, ficco-*)")
    if schedule.granularity == "par" and (schedule.group > 1 or schedule.dim != "M"):
        return "par runs the whole GEMM beside the whole collective: no pieces to group or decompose"
    if schedule.dim != "M" and not schedule.overlapped:
        return "the decomposition dimension applies to overlapped schedules only"
    if schedule.overlapped and schedule.dim != scenario.shard_dim:
        if schedule.dim == "N":
            return "decomposition along N is not lowered (no communicated tensor is split along N)"
        return f"{scenario.kind} with A sharded along {scenario.shard_dim}: {scenario.spec.dim_reason}"
    if schedule.granularity == "ficco" and not scenario.spec.independent and scenario.kind != "a2a-gemm":
        shard = {"M": scenario.m, "K": scenario.k, "N": scenario.n}[scenario.shard_dim] // scenario.gpus
        g = max(1, schedule.group)
        # the pieces share the rows evenly (some of 0 rows: a transfer of nothing is fine); a compute
        # group's GEMM needs one row at least: the last group gets none when rows <= (groups - 1) x g
        if shard <= (-(-scenario.gpus // g) - 1) * g:
            return (f"ficco cuts each GPU's {shard} {scenario.shard_dim}-rows into {scenario.gpus} pieces computed "
                    f"{g} at a time: its last GEMM would have no row (shard-* moves whole shards)")
    if schedule.smem and not schedule.overlapped:
        return "shared-memory shaping only matters when compute overlaps communication"
    if schedule.priority == "high" and schedule.engine == "dma":
        return "copy engines ignore stream priority"
    if schedule.channels is not None and schedule.engine == "dma":
        if schedule.granularity == "fused" or schedule.pattern == "p2p":
            return (f"c{schedule.channels} on copy engines sets the engines a collective's copies queue on; "
                    f"{schedule.name.split('-c')[0]} already moves one peer's rows at a time on one engine")
        if schedule.channels > gpu.dma.engines:
            return (f"c{schedule.channels} on copy engines queues the copies on {schedule.channels} engines, and "
                    f"{gpu.name} has {gpu.dma.engines} (dma.engines)")
    elif schedule.channels is not None and schedule.engine != "sm":
        return "a fused-st GEMM stores from its own blocks: it has no channels or copy engines to set"
    elif schedule.channels is not None:
        room = gpu.num_sms * max(1, blocks_per_sm(gpu.sm, gpu.comm_kernel.block))
        if schedule.channels > room:
            return (f"{schedule.channels} channels: a collective's channel blocks run all at once, and {gpu.name} "
                    f"holds at most {room} of them")
    if schedule.priority == "high" and schedule.engine == "st":
        return "a fused GEMM stores from its own blocks: there is no communication stream to prioritise"
    if schedule.margin and (schedule.engine != "sm" or not schedule.overlapped):
        return "an SM margin keeps SMs free for SM communication running beside the GEMM"
    if schedule.margin >= gpu.num_sms:
        return f"an SM margin of {schedule.margin} leaves none of the {gpu.num_sms} SMs to the GEMM"
    if schedule.margin:
        need = margin_for(gpu, schedule.channels)
        if schedule.margin < need:
            return (f"an SM margin of {schedule.margin} cannot hold the communication kernel's "
                    f"{schedule.channels or gpu.comm_kernel.channels} channels (needs {need} SMs)")
    if schedule.group > 1 and not schedule.overlapped:
        return "grouping applies to overlapped schedules only"
    return None


def margin_for(gpu: GpuProfile, channels: int | None = None) -> int:
    """The fewest SMs that hold every block of the communication kernel (one per channel)."""
    per = max(1, blocks_per_sm(gpu.sm, gpu.comm_kernel.block))
    return -(-(channels or gpu.comm_kernel.channels) // per)
