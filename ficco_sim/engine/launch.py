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
    out: dict[str, float] = {}
    seen: set = set()               # (GPU, stream) that already issued a kernel
    latest: dict[int, float] = {}   # per GPU: the latest arrival of a kernel issued with nothing to wait for
    for t in tasks:
        if not isinstance(t, Kernel):
            if t.engine == "dma":           # a copy command holds its stream's turn too
                seen.add((t.gpu, t.stream))
            continue
        key = (t.gpu, t.stream)
        delay = gpu.launch_of(t.kind)
        if key not in seen and not t.deps and not t.signals:
            delay = max(delay, latest.get(t.gpu, 0.0))
            latest[t.gpu] = delay
        seen.add(key)
        out[t.id] = delay
    return out
