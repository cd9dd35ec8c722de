"""The analytical model: closed-form times for the same task graphs the simulator runs.

Each task gets a closed-form duration:

* compute and memory kernels: waves x wave time (the GEMM cost model, HBM bound included);
* transfers: ``latency (+ DMA command cost) + bytes / bandwidth``, the bandwidth being the
  path's bottleneck link divided among the transfers of the same step that share it
  (alpha-beta), capped by the copy engine or by the driving kernel's channels;
* communication kernels: until the last transfer they drive is done.

Start times follow stream order and dependencies (a longest-path pass over the DAG).
A second pass applies contention where the first pass shows overlap: a compute kernel
overlapped by SM communication loses the SMs the channels hold and is slowed by the
communication's HBM traffic (the profile's coefficient); a transfer overlapped by
compute is slowed by the compute's HBM traffic. Without overlap the answer is exact
for isolated GEMMs and alpha-beta collectives, which the tests check against the DES.

>>> from ficco_sim.schedules import lower
>>> from ficco_sim.workload import Scenario
>>> g = lower(Scenario("ag-gemm", 2, 1024, 1024, 1024), "none", "h100", "switch:2")
>>> analytical_timeline(g, "h100", "switch:2").makespan > 0
True
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from .hardware import GpuProfile, load_gpu
from .metrics import kernel_isolated_time
from .taskgraph import Kernel, TaskGraph, Transfer
from .timeline import TaskRecord, Timeline
from .topology import Topology, load_topology


def _overlap(a0: float, a1: float, spans: list[tuple[float, float]]) -> float:
    """Fraction of [a0, a1) covered by any of ``spans``."""
    if a1 <= a0:
        return 0.0
    cov, cur = 0.0, a0
    for s, e in sorted(spans):
        s, e = max(s, cur), min(e, a1)
        if e > s:
            cov += e - s
            cur = e
    return cov / (a1 - a0)


class _Pass:
    def __init__(self, graph: TaskGraph, gpu: GpuProfile, topo: Topology, slow: dict[str, float]):
        self.g, self.gpu, self.topo, self.slow = graph, gpu, topo, slow
        self.start: dict[str, float] = {}
        self.end: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.prev: dict[str, str | None] = {}
        last: dict[tuple[int, str], str] = {}
        for t in graph.tasks:
            key = graph.stream_of(t)
            self.prev[t.id] = last.get(key) if key else None
            if key:
                last[key] = t.id
        self.driven: dict[str, list[str]] = defaultdict(list)
        share: Counter = Counter()
        chan: Counter = Counter()
        # Copy commands queue on their engine's stream: the r-th command of a step on each
        # engine runs in "round" r, beside the other engines' r-th commands only.
        position: Counter = Counter()
        self.round: dict[str, int] = {}
        for t in graph.transfers:
            for k in t.drivers:
                self.driven[k].append(t.id)
            r = 0
            if t.engine == "dma":
                r = position[(t.gpu, t.stream, t.label)]
                position[(t.gpu, t.stream, t.label)] += 1
            self.round[t.id] = r
            for link in topo.path_links(t.src, t.dst):
                share[(link, t.label, r)] += 1
            if t.engine == "sm":
                chan[(t.drivers[0], t.label)] += 1
        self.share, self.chan = share, chan

    def transfer_time(self, t: Transfer) -> float:
        bw = float("inf")
        for link in self.topo.path_links(t.src, t.dst):
            bw = min(bw, self.topo.graph.edges[link]["bandwidth"] / self.share[(link, t.label, self.round[t.id])])
        if t.engine == "dma":
            bw = min(bw, self.gpu.dma.bandwidth)
            fixed = self.gpu.dma.command_overhead
        else:
            k = self.g.kernel(t.drivers[0])
            bw = min(bw, k.grid * self.gpu.comm_kernel.channel_bandwidth / self.chan[(k.id, t.label)])
            fixed = 0.0
        hbm = self.gpu.hbm_effective / (2 if t.src == t.dst else 1)
        bw = min(bw, hbm)
        return fixed + self.topo.path_latency(t.src, t.dst) + t.nbytes / bw * self.slow.get(t.id, 1.0)

    def begin(self, tid: str) -> float:
        if tid in self.start:
            return self.start[tid]
        t = self.g.task(tid)
        ready = max([self.finish(d) for d in t.deps] + [0.0])
        p = self.prev[tid]
        if p is not None:
            ready = max(ready, self.finish(p))
        self.ready[tid] = ready
        if isinstance(t, Kernel):
            s = ready + self.gpu.launch_overhead
        elif t.engine == "sm":
            s = max([ready] + [self.begin(k) for k in t.drivers])
            self.ready[tid] = s
        else:
            s = ready
        self.start[tid] = s
        return s

    def finish(self, tid: str) -> float:
        if tid in self.end:
            return self.end[tid]
        t = self.g.task(tid)
        s = self.begin(tid)
        if isinstance(t, Kernel):
            if t.kind == "comm":
                e = max([s] + [self.finish(x) for x in self.driven[tid]])
            else:
                e = s + kernel_isolated_time(self.gpu, t, launch=False) * self.slow.get(tid, 1.0)
        else:
            e = s + self.transfer_time(t)
        self.end[tid] = e
        return e

    def run(self) -> None:
        for t in self.g.tasks:
            self.finish(t.id)


def _contention(graph: TaskGraph, gpu: GpuProfile, p: _Pass) -> dict[str, float]:
    """Slowdown factors from the overlaps of a contention-free pass."""
    slow: dict[str, float] = {}
    sm_comm: dict[int, list] = defaultdict(list)
    comm_rate: dict[int, list] = defaultdict(list)
    comp_spans: dict[int, list] = defaultdict(list)
    for t in graph.tasks:
        s, e = p.start[t.id], p.end[t.id]
        if isinstance(t, Kernel) and t.kind == "comm":
            sm_comm[t.gpu].append((s, e, t.grid))
        elif isinstance(t, Transfer) and e > s:
            rate = t.nbytes / (e - s)
            comm_rate[t.src].append((s, e, rate))
            comm_rate[t.dst].append((s, e, rate))
        elif isinstance(t, Kernel) and t.kind == "gemm":
            comp_spans[t.gpu].append((s, e, t.grid * t.block_hbm_bytes / max(e - s, 1e-12)))
    ct = gpu.contention
    for k in graph.kernels:
        if k.kind != "gemm":
            continue
        s, e = p.start[k.id], p.end[k.id]
        f_sm = _overlap(s, e, [(a, b) for a, b, _ in sm_comm[k.gpu]])
        channels = max([c for a, b, c in sm_comm[k.gpu] if a < e and b > s] + [0])
        f_hbm = _overlap(s, e, [(a, b) for a, b, _ in comm_rate[k.gpu]])
        rate = max([r for a, b, r in comm_rate[k.gpu] if a < e and b > s] + [0.0])
        sm_loss = min(0.9, channels / gpu.num_sms)
        slow[k.id] = 1.0 + f_sm * sm_loss / (1.0 - sm_loss) + f_hbm * ct.compute_per_hbm_util * rate / gpu.hbm_bandwidth
    for t in graph.transfers:
        s, e = p.start[t.id], p.end[t.id]
        spans = comp_spans[t.src] + comp_spans[t.dst]
        f = _overlap(s, e, [(a, b) for a, b, _ in spans])
        rate = max([r for a, b, r in spans if a < e and b > s] + [0.0])
        slow[t.id] = 1.0 + f * ct.comm_per_hbm_util * rate / gpu.hbm_bandwidth
    return slow


def analytical_timeline(graph: TaskGraph, gpu: GpuProfile | str, topology: Topology | str, *,
                        contention: bool = True) -> Timeline:
    """Closed-form timeline of ``graph`` (see module docstring)."""
    gpu = load_gpu(gpu)
    topology = load_topology(topology, gpu)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20 * len(graph.tasks) + 1000))
    try:
        p = _Pass(graph, gpu, topology, {})
        p.run()
        if contention:
            p = _Pass(graph, gpu, topology, _contention(graph, gpu, p))
            p.run()
    finally:
        sys.setrecursionlimit(limit)
    records = []
    for t in graph.tasks:
        key = graph.stream_of(t)
        if isinstance(t, Kernel):
            records.append(TaskRecord(t.id, t.gpu, t.stream, t.kind, t.role, t.label, p.ready[t.id], p.start[t.id],
                                      p.end[t.id], grid=t.grid))
        else:
            records.append(TaskRecord(t.id, t.gpu, key[1] if key else "sm-transfers", "transfer", t.role, t.label,
                                      p.ready[t.id], p.start[t.id], p.end[t.id], engine=t.engine, src=t.src,
                                      dst=t.dst, nbytes=t.nbytes))
    return Timeline(records, {}, len(records))
