"""Timelines: what every task did, and when, plus resource counters over time.

Both engines return a :class:`Timeline`. One :class:`TaskRecord` per task of the task
graph: ``ready`` (dependencies done and the task launched), ``start`` (first block
resident; for a copy, when its engine takes the command; for an SM transfer, when it may
begin, its path latency included), ``end``; for kernels the grid and peak resident
blocks; for transfers the endpoints, bytes and engine. ``counters`` holds step
functions ``name -> [(time, value), ...]`` such as ``gpu0.sm_blocks`` (resident blocks),
``gpu0.dma_busy`` (busy copy engines) and ``link.gpu0->sw0`` (bytes/s in flight).
Times are seconds from the start of the simulation.

>>> tl = Timeline([TaskRecord("a", 0, "compute", "gemm", "compute", "g", 0.0, 0.0, 2e-3)])
>>> tl.makespan
0.002
>>> list(tl.to_dataframe().columns)[:4]
['id', 'gpu', 'stream', 'kind']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass(slots=True)
class TaskRecord:
    id: str
    gpu: int
    stream: str
    kind: str          # gemm | comm | memory | opaque | transfer
    role: str          # compute | comm
    label: str
    ready: float
    start: float
    end: float
    engine: str = ""   # sm | dma (transfers)
    src: int = -1
    dst: int = -1
    nbytes: float = 0.0
    grid: int = 0
    peak_resident: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    records: list[TaskRecord]
    counters: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    events: int = 0  # simulation events processed (for benchmarks)
    solves: int = 0  # max-min fair rate solves of the flows (for benchmarks)

    @property
    def makespan(self) -> float:
        return max((r.end for r in self.records), default=0.0)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per task; times in seconds."""
        import pandas as pd      # only here: importing it costs a CLI run half a second
        cols = list(TaskRecord.__dataclass_fields__)
        return pd.DataFrame([asdict(r) for r in self.records], columns=cols)

    def by_id(self) -> dict[str, TaskRecord]:
        return {r.id: r for r in self.records}

    def of_role(self, role: str, gpu: int | None = None) -> list[TaskRecord]:
        return [r for r in self.records if r.role == role and (gpu is None or r.gpu == gpu)]


class LazyTimeline(Timeline):
    """A :class:`Timeline` whose records are made on first use: a folded run
    (:mod:`ficco_sim.engine.fold`) has one per task of the full graph, hundreds of thousands
    on a large collective, where a collective's time needs only the makespan."""

    def __init__(self, make, makespan: float, counters: dict, events: int, solves: int = 0):
        self._make, self._records, self._makespan = make, None, makespan
        self.counters, self.events, self.solves = counters, events, solves

    @property
    def records(self) -> list[TaskRecord]:   # type: ignore[override]
        if self._records is None:
            self._records, self._make = self._make(), None
        return self._records

    @property
    def makespan(self) -> float:
        return self._makespan

    def __reduce__(self):      # pickled (a sweep's worker, Ray) as the plain timeline it stands for
        return (Timeline, (self.records, self.counters, self.events, self.solves))


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end) intervals.

    >>> union_length([(0, 2), (1, 3), (5, 6)])
    4.0
    """
    total, cur_s, cur_e = 0.0, 0.0, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
