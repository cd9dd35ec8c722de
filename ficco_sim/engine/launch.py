"""When a kernel's blocks reach the GPU after its turn on its stream: the one rule both
engines use (:mod:`.des`, :mod:`.closed_form`).

A kernel's launch delay is its GPU's (:meth:`~ficco_sim.hardware.GpuProfile.launch_of`: a
communication kernel's is at most its collective call floor). The host issues one launch
at a time and the GPU's front end takes them in that order, so a kernel the host issues
with nothing to wait for (the first of its stream, with no dependencies or signals: its
turn comes at once) reaches the GPU no earlier than one issued before it on its GPU. So a
collective issued after a GEMM does not overtake it because its call floor is shorter than
a GEMM's launch (RCCL's 2 us against 6 us on AMD profiles): the GEMM reaches the SMs first,
as the program issued it (Cui & Pericas' naive case, ``par-sm-gf``). A kernel whose turn
comes later waits for what it depends on; launches issued long before are through by then.
"""

from __future__ import annotations

from typing import Iterable

from ..hardware import GpuProfile
from ..taskgraph import Kernel


def host_issued(tasks: Iterable) -> set[str]:
    """Ids of the kernels the host issues with nothing to wait for: the first of their stream
    (a copy command holds its stream's turn too), with no dependencies or signals, for
    ``tasks`` in the order the host issues them. Kernels like these that reach the GPU at one
    instant are dispatched in issue order; kernels released together by what they waited
    for, by priority (:meth:`~ficco_sim.engine.dispatcher.SmPool.settle`)."""
    out: set[str] = set()
    seen: set = set()
    for t in tasks:
        key = (t.gpu, t.stream)
        if isinstance(t, Kernel) and t.kind == "host":      # time on the host: nothing reaches the GPU
            continue
        if isinstance(t, Kernel):
            if key not in seen and not t.deps and not t.signals:
                out.add(t.id)
            seen.add(key)
        elif t.engine == "dma":
            seen.add(key)
    return out


def queued_turns(tasks: Iterable) -> set[str]:
    """Ids of the kernels whose turn always comes as their stream predecessor ends: not the first
    of their stream, no signals, every dependency on their own stream. Released at one instant
    with a kernel another stream's event wakes, such a kernel reaches the SMs first
    (:attr:`~ficco_sim.engine.dispatcher.Waiting.queued`; the discrete-event engine reads it off
    each run, the closed form from this)."""
    out: set[str] = set()
    seen: set = set()
    stream_of = {t.id: (t.gpu, t.stream) for t in tasks}
    for t in tasks:
        key = (t.gpu, t.stream)
        if isinstance(t, Kernel) and key in seen and not t.signals and all(stream_of.get(d) == key for d in t.deps):
            out.add(t.id)
        if isinstance(t, Kernel) or t.engine == "dma":
            seen.add(key)
    return out


def persistent(k: Kernel, gpu: GpuProfile) -> bool:
    """Whether ``k`` is a persistent GEMM: its blocks loop over tiles, so an SM one of them
    leaves goes to its next tile before any other kernel (:class:`~ficco_sim.engine.dispatcher.Waiting`).
    A lowered GEMM says so (:attr:`~ficco_sim.gemm_model.GemmShape.persistent`); a GEMM
    from a profiler trace (no shape) is its GPU's kind (``gemm.kernel``)."""
    return k.kind == "gemm" and (k.gemm.persistent if k.gemm is not None else gpu.gemm.persistent)


def launch_delays(tasks: Iterable, gpu: GpuProfile) -> dict[str, float]:
    """Seconds from each kernel's turn on its stream to its blocks being dispatchable, by
    kernel id, for ``tasks`` in the order the host issues them (a graph's task order).

    >>> from ficco_sim.hardware import load_gpu
    >>> from ficco_sim.schedules import lower
    >>> from ficco_sim.workload import Scenario
    >>> sc, mi250x = Scenario("ar-par-gemm", 8, 2048, 2048, 2048), load_gpu("mi250x")
    >>> d = launch_delays(lower(sc, "par-sm-gf", mi250x, "fc:8").tasks, mi250x)    # the GEMM issued first
    >>> round(d["gemm0"] * 1e6, 1), round(d["ar.rs.k0"] * 1e6, 1)
    (6.0, 6.0)
    >>> d = launch_delays(lower(sc, "par-sm", mi250x, "fc:8").tasks, mi250x)       # the collective first
    >>> round(d["gemm0"] * 1e6, 1), round(d["ar.rs.k0"] * 1e6, 1)
    (6.0, 2.0)
    """
    tasks = list(tasks)
    issued = host_issued(tasks)
    out: dict[str, float] = {}
    latest: dict[int, float] = {}   # per GPU: the latest arrival of a kernel issued with nothing to wait for
    for t in tasks:
        if not isinstance(t, Kernel):
            continue
        delay = 0.0 if t.kind == "host" else gpu.launch_of(t.kind)
        if t.id in issued:
            delay = max(delay, latest.get(t.gpu, 0.0))
            latest[t.gpu] = delay
        out[t.id] = delay
    return out
