"""Metrics of a simulated schedule (DESIGN.md's definitions), one vectorized implementation
for single simulations (one row) and sweeps (one row per scenario) alike.

With isolated, undecomposed compute ``T_comp`` and communication ``T_comm``:

* ``serial`` = T_comp + T_comm; ``ideal`` = max(T_comp, T_comm); ``ideal_speedup`` = serial / ideal.
* ``speedup`` = makespan of the ``none`` schedule / this makespan.
* ``of_ideal``: the share of the ideal gain reached, (serial - makespan) / (serial - ideal).
* ``dil_compute`` (decomposition inefficiency): sum of the GEMM pieces' isolated times /
  the whole GEMM's isolated time - 1 (the worst GPU). Shaping costs show up here too,
  since a piece is timed as lowered.
* ``cil_compute`` (contention inefficiency of compute): sum over pieces of (end - ready)
  / sum of isolated piece times - 1 (the worst GPU); waiting for SMs held by
  communication counts.
* ``cil_comm``: the time some transfer of a GPU is under way (ready to end: the union of
  their spans, summed over GPUs) / the same with no compute in the graph
  (:func:`comm_only_graph`, same engine) - 1. A union, not a sum of spans: transfers a
  GEMM's tiles release one at a time would, alone, all be ready at once and queue behind
  one another, and a sum would count that queueing as time overlap saved.
* ``exposed_comm``: makespan minus the time some compute kernel runs, on the worst GPU.

All times in seconds.
"""

from __future__ import annotations

import numpy as np

from .engine.closed_form_overlap import disjoint
from .taskgraph import Kernel, TaskGraph, evolve
from .timeline import Timeline

NAMES = ("makespan", "t_comp_iso", "t_comm_iso", "serial", "ideal", "ideal_speedup", "speedup", "of_ideal",
         "dil_compute", "cil_compute", "cil_comm", "exposed_comm")


def _div(a, b):
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), np.nan)


def union_lengths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of the union of spans (P, B) per row (empty spans allowed).

    >>> union_lengths(np.array([[0.0, 1.0, 5.0]]), np.array([[2.0, 3.0, 6.0]])).tolist()
    [4.0]
    """
    if starts.shape[-1] == 0:
        return np.zeros(starts.shape[:-1])
    lo, hi = disjoint(starts, ends)
    return (hi - lo).sum(-1)


def schedule_metrics(*, makespan, t_comp, t_comm, t_none, num_gpus: int, gemm_gpu, gemm_ready, gemm_start,
                     gemm_end, gemm_iso, xfer_gpu, xfer_ready, xfer_end, xfer_ready_alone,
                     xfer_end_alone) -> dict[str, np.ndarray]:
    """Every metric for P rows at once. ``makespan, t_comp, t_comm, t_none``: (P,);
    ``gemm_*``: (P, G) per GEMM kernel (``gemm_gpu``: (G,) GPU ids; ``gemm_iso``: isolated
    time, launch included); ``xfer_ready, xfer_end``: (P, X) of each transfer (``xfer_gpu``:
    (X,) its source GPU), and ``*_alone`` the same transfers in the communication-only run."""
    makespan, t_comp, t_comm, t_none = (np.asarray(x, dtype=float) for x in (makespan, t_comp, t_comm, t_none))
    P = makespan.shape[0]
    serial = t_comp + t_comm
    ideal = np.maximum(t_comp, t_comm)
    dil, cil_c, exposed = np.zeros(P), np.zeros(P), np.zeros(P)
    for g in range(num_gpus):
        gi = np.flatnonzero(gemm_gpu == g)
        if len(gi):
            iso = gemm_iso[:, gi].sum(1)
            actual = (gemm_end[:, gi] - gemm_ready[:, gi]).sum(1)
            dil = np.maximum(dil, np.where(t_comp > 0, iso / np.where(t_comp > 0, t_comp, 1.0) - 1.0, 0.0))
            cil_c = np.maximum(cil_c, actual / iso - 1.0)
        busy = union_lengths(gemm_start[:, gi], gemm_end[:, gi])
        exposed = np.maximum(exposed, makespan - busy)
    num, den = np.zeros(P), np.zeros(P)
    for g in np.unique(np.asarray(xfer_gpu, dtype=np.int64)):
        xi = np.flatnonzero(xfer_gpu == g)
        num = num + union_lengths(xfer_ready[:, xi], xfer_end[:, xi])
        den = den + union_lengths(xfer_ready_alone[:, xi], xfer_end_alone[:, xi])
    cil_m = np.where(den > 0, num / np.where(den > 0, den, 1.0) - 1.0, 0.0)
    gain = serial - ideal
    of_ideal = np.where(gain > 0, (serial - makespan) / np.where(gain > 0, gain, 1.0), np.nan)
    return {"makespan": makespan, "t_comp_iso": t_comp, "t_comm_iso": t_comm, "serial": serial, "ideal": ideal,
            "ideal_speedup": _div(serial, ideal), "speedup": _div(t_none, makespan), "of_ideal": _snapped(of_ideal),
            "dil_compute": _snapped(dil), "cil_compute": _snapped(cil_c), "cil_comm": _snapped(cil_m),
            "exposed_comm": exposed}


def _snapped(ratio: np.ndarray) -> np.ndarray:
    """A ratio with rounding error (|x| < 1e-9: sums of times that cancel) as exactly 0, so a
    schedule that loses nothing does not print -0.000 or -0%."""
    return np.where(np.abs(ratio) < 1e-9, 0.0, ratio)


def compute_metrics(graph: TaskGraph, timeline: Timeline, gemm_iso: dict[str, float], *, t_comp: float,
                    t_comm: float, t_none: float | None, comm_only: Timeline | None) -> dict[str, float]:
    """:func:`schedule_metrics` of one simulated graph (floats). ``gemm_iso``: isolated time
    (launch included) of each GEMM kernel, by id."""
    recs = timeline.by_id()
    gemms = [k for k in graph.kernels if k.kind == "gemm"]
    row = lambda vals: np.array([vals], dtype=float).reshape(1, -1)  # noqa: E731
    alone = comm_only.by_id() if comm_only is not None else {}
    xs = [t for t in graph.transfers if t.id in alone]
    out = schedule_metrics(
        makespan=[timeline.makespan], t_comp=[t_comp], t_comm=[t_comm], t_none=[t_none or np.nan],
        num_gpus=graph.num_gpus, gemm_gpu=np.array([k.gpu for k in gemms], dtype=np.int64),
        gemm_ready=row([recs[k.id].ready for k in gemms]), gemm_start=row([recs[k.id].start for k in gemms]),
        gemm_end=row([recs[k.id].end for k in gemms]), gemm_iso=row([gemm_iso[k.id] for k in gemms]),
        xfer_gpu=np.array([t.src for t in xs], dtype=np.int64),
        xfer_ready=row([recs[t.id].ready for t in xs]), xfer_end=row([recs[t.id].end for t in xs]),
        xfer_ready_alone=row([alone[t.id].ready for t in xs]), xfer_end_alone=row([alone[t.id].end for t in xs]))
    return {k: float(v[0]) for k, v in out.items()}


def comm_only_graph(graph: TaskGraph) -> TaskGraph:
    """The graph with compute (GEMM) kernels removed and dependencies (and tile signals)
    through them dropped: communication as it would run alone (a fused GEMM's epilogue
    stores go with it)."""
    drop = {k.id for k in graph.kernels if k.kind == "gemm"}
    tasks = [t if drop.isdisjoint(t.deps) and not t.signals else
             evolve(t, deps=tuple(d for d in t.deps if d not in drop),
                                 signals=tuple(s for s in t.signals if s[0] not in drop))
             for t in graph.tasks if t.id not in drop]
    return TaskGraph.build(graph.num_gpus, graph.streams, tasks, buffers=graph.buffers, meta=graph.meta)


def comm_only_key(graph: TaskGraph) -> tuple:
    """A key equal for two graphs whose :func:`comm_only_graph` are equal (it may tell
    apart some that are: it keeps the removed kernels' ids in the dependencies of tasks
    that had them). Many schedules of one scenario differ only on the compute side (tile
    order, split-K, priorities, shared-memory shaping) and share their communication alone:
    sweeps compile it once (:func:`ficco_sim.explore.estimate.template`)."""
    tasks = tuple(t for t in graph.tasks if not (isinstance(t, Kernel) and t.kind == "gemm"))
    return graph.num_gpus, len(tasks), hash((graph.streams, tasks))
