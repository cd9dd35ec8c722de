"""Metrics of a simulated schedule (DESIGN.md's definitions, written out).

With isolated, undecomposed compute ``T_comp`` and communication ``T_comm``:

* ``serial`` = T_comp + T_comm; ``ideal`` = max(T_comp, T_comm); ``ideal_speedup`` = serial / ideal.
* ``speedup`` = makespan of the ``none`` schedule / this makespan.
* ``of_ideal``: the share of the ideal gain reached, (serial - makespan) / (serial - ideal).
* ``dil_compute`` (decomposition inefficiency): sum of the GEMM pieces' isolated times /
  the whole GEMM's isolated time - 1 (the worst GPU). Shaping costs show up here too,
  since a piece is timed as lowered.
* ``cil_compute`` (contention inefficiency of compute): sum over pieces of (end - launch)
  / sum of isolated piece times - 1; waiting for SMs held by communication counts.
* ``cil_comm``: sum of transfer durations (ready to end) / the same transfers' durations
  with no compute in the graph - 1.
* ``exposed_comm``: makespan minus the time some compute kernel runs, on the worst GPU.

All times in seconds.
"""

from __future__ import annotations

import dataclasses
import math

from .gemm_model import blocks_per_sm, waves_time
from .hardware import GpuProfile
from .taskgraph import Kernel, TaskGraph
from .timeline import Timeline, union_length


def kernel_isolated_time(gpu: GpuProfile, k: Kernel, *, launch: bool = True) -> float:
    """Closed-form time of one compute/memory kernel alone on its GPU (waves x wave time)."""
    t = waves_time(gpu, k.grid, blocks_per_sm(gpu.sm, k.block), k.block_time, k.block_hbm_bytes)
    return t + (gpu.launch_overhead if launch else 0.0)


def compute_metrics(graph: TaskGraph, timeline: Timeline, gpu: GpuProfile, *, t_comp: float, t_comm: float,
                    t_none: float | None, comm_only: Timeline | None) -> dict[str, float]:
    makespan = timeline.makespan
    serial = t_comp + t_comm
    ideal = max(t_comp, t_comm)
    recs = timeline.by_id()
    dil, cil_c, exposed = 0.0, 0.0, 0.0
    for g in range(graph.num_gpus):
        gemms = [k for k in graph.kernels if k.gpu == g and k.kind == "gemm"]
        if gemms:
            iso = sum(kernel_isolated_time(gpu, k) for k in gemms)
            actual = sum(recs[k.id].end - recs[k.id].ready for k in gemms)
            dil = max(dil, iso / t_comp - 1.0 if t_comp else 0.0)
            cil_c = max(cil_c, actual / iso - 1.0)
        busy = union_length([(recs[k.id].start, recs[k.id].end) for k in gemms])
        exposed = max(exposed, makespan - busy)
    cil_m = 0.0
    if comm_only is not None:
        alone = comm_only.by_id()
        num = sum(recs[t.id].end - recs[t.id].ready for t in graph.transfers if t.id in alone)
        den = sum(alone[t.id].end - alone[t.id].ready for t in graph.transfers if t.id in alone)
        cil_m = num / den - 1.0 if den > 0 else 0.0
    gain = serial - ideal
    return {
        "makespan": makespan,
        "t_comp_iso": t_comp,
        "t_comm_iso": t_comm,
        "serial": serial,
        "ideal": ideal,
        "ideal_speedup": serial / ideal if ideal else math.nan,
        "speedup": (t_none / makespan) if t_none else math.nan,
        "of_ideal": (serial - makespan) / gain if gain > 0 else math.nan,
        "dil_compute": dil,
        "cil_compute": cil_c,
        "cil_comm": cil_m,
        "exposed_comm": exposed,
    }


def comm_only_graph(graph: TaskGraph) -> TaskGraph:
    """The graph with compute (GEMM) kernels removed and dependencies through them dropped:
    communication as it would run alone."""
    drop = {k.id for k in graph.kernels if k.kind == "gemm"}
    tasks = [dataclasses.replace(t, deps=tuple(d for d in t.deps if d not in drop))
             for t in graph.tasks if t.id not in drop]
    return TaskGraph.build(graph.num_gpus, graph.streams, tasks, buffers=graph.buffers, meta=graph.meta)
