"""Timelines out: Chrome-trace JSON (opens in Perfetto / chrome://tracing) and a Gantt PNG.

:func:`to_chrome_trace` writes one process per GPU and one thread per stream (kernels
and copy commands), SM transfers on their own "transfers" tracks (lanes so that bars
never overlap), and counters (``ph: "C"``): resident blocks per role, busy copy
engines, and link load in GB/s (one "links" process). Times are microseconds.

Kernels are written the way Kineto writes them (``cat: "kernel"``, ``args.grid``,
``args.block``, ``registers per thread``, ``shared memory``, ``stream``, ``priority``
with CUDA's sign) plus ``ficco kind`` / ``ficco role``; copies as ``gpu_memcpy`` with
``bytes``; explicit dependencies as flow events. So an exported timeline imports back
with :func:`ficco_sim.traces.kineto.load_kineto` (the round trip the tests check).

>>> from ficco_sim.timeline import Timeline, TaskRecord
>>> tl = Timeline([TaskRecord("a", 0, "compute", "gemm", "compute", "gemm", 0.0, 0.0, 2e-3)])
>>> doc = to_chrome_trace(tl)
>>> [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
['gemm']
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from ..errors import InputError
from ..files import atomic_path, save_figure
from ..taskgraph import Kernel, TaskGraph
from ..timeline import TaskRecord, Timeline

US = 1e6


def _is_idle(r: TaskRecord) -> bool:
    """An idle gap or a host thread's pace between launches (:mod:`.graph`): no GPU work."""
    return r.kind == "host" or (r.id.endswith(".idle") and r.label == "idle")


def _lanes(records: list[TaskRecord]) -> dict[str, int]:
    """Greedy interval colouring: transfer id -> lane, no two overlapping in a lane."""
    ends: list[float] = []
    out = {}
    for r in sorted(records, key=lambda r: (r.start, r.end)):
        for i, e in enumerate(ends):
            if e <= r.start + 1e-15:
                ends[i] = r.end
                out[r.id] = i
                break
        else:
            ends.append(r.end)
            out[r.id] = len(ends) - 1
    return out


def to_chrome_trace(timeline: Timeline, graph: TaskGraph | None = None, *, include_idle: bool = False,
                    title: str = "ficco-sim") -> dict:
    """A Chrome-trace document (a dict; see module docstring). ``graph`` adds footprints,
    priorities and dependency arrows."""
    recs = [r for r in timeline.records if not math.isnan(r.start) and (include_idle or not _is_idle(r))]
    gpus = sorted({r.gpu for r in recs} | {int(n[3:].split(".")[0]) for n in timeline.counters
                                            if n.startswith("gpu") and n[3:].split(".")[0].isdigit()})
    links_pid = (max(gpus) + 1 if gpus else 0) + 1000
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}
    prio = {(s.gpu, s.name): s.priority for s in graph.streams} if graph is not None else {}
    tasks = {t.id: t for t in graph.tasks} if graph is not None else {}
    order = {t.id: i for i, t in enumerate(graph.tasks)} if graph is not None else {}

    def tid(gpu: int, track: str) -> int:
        key = (gpu, track)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == gpu]) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": gpu, "tid": tids[key], "args": {"name": track}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": gpu, "tid": tids[key],
                           "args": {"sort_index": tids[key]}})
        return tids[key]

    for g in gpus:
        events.append({"ph": "M", "name": "process_name", "pid": g, "tid": 0, "args": {"name": f"GPU {g}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": g, "tid": 0, "args": {"sort_index": g}})
    sm_transfers = [r for r in recs if r.kind == "transfer" and r.engine == "sm"]
    lanes = _lanes(sm_transfers)
    where: dict[str, tuple[int, int, float, float]] = {}
    for i, r in enumerate(sorted(recs, key=lambda r: (r.start, order.get(r.id, 0)))):
        base = {"ts": r.start * US, "dur": max(0.0, r.end - r.start) * US}
        if r.kind == "transfer" and r.engine == "sm":
            t = tid(r.src, f"transfers (SM) {lanes[r.id]}")
            ev = {"ph": "X", "cat": "ficco_transfer", "name": r.label or r.id, "pid": r.src, "tid": t, **base,
                  "args": {"ficco id": r.id, "src": r.src, "dst": r.dst, "bytes": r.nbytes, "engine": "sm"}}
        elif r.kind == "transfer":
            t = tid(r.gpu, r.stream)
            direction = "PtoP" if r.src != r.dst else "DtoD"
            ev = {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {direction} (Device {r.src} -> Device {r.dst})",
                  "pid": r.gpu, "tid": t, **base,
                  "args": {"device": r.gpu, "stream": t, "correlation": order.get(r.id, i), "bytes": r.nbytes,
                           "fromDevice": r.src, "toDevice": r.dst, "ficco id": r.id, "label": r.label,
                           "ficco dma engine": getattr(tasks.get(r.id), "dma_engine", None),
                           "memory bandwidth (GB/s)": r.nbytes / max(r.end - r.start, 1e-15) / 1e9}}
        elif _is_idle(r):       # (--idle) time the GPU waited: drawn, but no kernel a re-import would run
            ev = {"ph": "X", "cat": "ficco_idle", "name": r.label, "pid": r.gpu, "tid": tid(r.gpu, r.stream), **base,
                  "args": {"ficco id": r.id}}
        else:
            t = tid(r.gpu, r.stream)
            args = {"device": r.gpu, "stream": t, "correlation": order.get(r.id, i), "ficco id": r.id,
                    "ficco kind": r.kind, "ficco role": r.role, "grid": [r.grid, 1, 1]}
            k = tasks.get(r.id)
            if isinstance(k, Kernel):
                args.update({"block": [k.block.threads, 1, 1], "registers per thread": k.block.registers,
                             "shared memory": k.block.smem})
            if (r.gpu, r.stream) in prio:
                args["priority"] = -prio[(r.gpu, r.stream)]  # CUDA sign: lower is more urgent
            ev = {"ph": "X", "cat": "kernel", "name": r.label or r.id, "pid": r.gpu, "tid": t, **base, "args": args}
        where[r.id] = (ev["pid"], ev["tid"], r.start, r.end)
        events.append(ev)
    flow = 0

    def shown(d: str) -> list[str]:
        # Dependencies through tasks that are not drawn (idle gaps) point at their own deps.
        if d in where or d not in tasks:
            return [d]
        return [x for dd in tasks[d].deps for x in shown(dd)]

    for t in (graph.tasks if graph is not None else []):
        if t.id not in where or (getattr(t, "engine", "") == "sm"):
            continue
        for d in dict.fromkeys(x for dep in t.deps for x in shown(dep)):
            if d not in where or tasks.get(d) is None or getattr(tasks[d], "engine", "") == "sm":
                continue
            if graph.stream_of(tasks[d]) == graph.stream_of(t):
                continue   # stream order needs no arrow
            flow += 1
            (p0, t0, s0, e0), (p1, t1, s1, e1) = where[d], where[t.id]
            # Midpoints bind each end to exactly one slice (ends touch their neighbours).
            events.append({"ph": "s", "cat": "ficco_dep", "name": "dep", "id": flow, "pid": p0, "tid": t0,
                           "ts": (s0 + e0) / 2 * US})
            events.append({"ph": "f", "bp": "e", "cat": "ficco_dep", "name": "dep", "id": flow, "pid": p1, "tid": t1,
                           "ts": (s1 + e1) / 2 * US})
    has_links = False
    for name, series in sorted(timeline.counters.items()):
        if name.startswith("link:"):
            pid, label, factor = links_pid, name[5:] + " GB/s", 1e-9
            has_links = True
        elif name.startswith("gpu"):
            head, _, rest = name.partition(".")
            pid, label, factor = int(head[3:]), rest, 1.0
        else:
            pid, label, factor = links_pid, name, 1.0
        for t, v in series:
            events.append({"ph": "C", "name": label, "pid": pid, "ts": t * US, "args": {"value": v * factor}})
    if has_links:
        events.append({"ph": "M", "name": "process_name", "pid": links_pid, "tid": 0, "args": {"name": "links"}})
    meta = {k: v for k, v in (graph.meta.items() if graph is not None else []) if isinstance(v, (str, int, float))}
    return {"traceEvents": events, "displayTimeUnit": "ms", "schemaVersion": 1,
            "otherData": {"generator": title, "makespan_us": timeline.makespan * US, **meta}}


def write_chrome_trace(timeline: Timeline, path: str | Path, graph: TaskGraph | None = None, **kw) -> Path:
    """Write :func:`to_chrome_trace` to ``path`` (gzipped when it ends in ``.gz``)."""
    p = Path(path)
    text = json.dumps(to_chrome_trace(timeline, graph, **kw), separators=(",", ":"))
    try:
        with atomic_path(p) as tmp:
            if p.suffix == ".gz":
                with gzip.open(tmp, "wt") as f:
                    f.write(text)
            else:
                tmp.write_text(text)
    except OSError as exc:
        raise InputError(str(p), None, f"cannot write: {exc.strerror}") from None
    return p


COLORS = {"gemm": "#4C72B0", "opaque": "#8C8C8C", "memory": "#937860", "comm": "#DD8452",
          "transfer-sm": "#C44E52", "transfer-dma": "#55A868", "idle": "#EEEEEE"}


def write_gantt(timeline: Timeline, path: str | Path, *, title: str = "", include_idle: bool = False) -> Path:
    """A Gantt chart of ``timeline`` (one row per GPU stream, SM transfers on lanes per
    source GPU; x in ms) as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    recs = [r for r in timeline.records if not math.isnan(r.start) and (include_idle or not _is_idle(r))]
    lanes = _lanes([r for r in recs if r.kind == "transfer" and r.engine == "sm"])
    rows: dict[tuple, int] = {}

    def row(r: TaskRecord) -> tuple:
        if r.kind == "transfer" and r.engine == "sm":
            return (r.src, 1, f"gpu{r.src} xfer {lanes[r.id]}")
        return (r.gpu, 0, f"gpu{r.gpu} {r.stream}")

    for key in sorted({row(r) for r in recs}):
        rows[key] = len(rows)
    fig, ax = plt.subplots(figsize=(12, max(2.0, 0.35 * len(rows) + 1.2)))
    for r in recs:
        if r.kind == "transfer":
            color = COLORS[f"transfer-{r.engine or 'dma'}"]
        else:
            key = "comm" if r.role == "comm" and r.kind in ("comm", "opaque") else r.kind
            color = COLORS["idle"] if _is_idle(r) else COLORS.get(key, COLORS["opaque"])
        ax.barh(rows[row(r)], (r.end - r.start) * 1e3, left=r.start * 1e3, height=0.8, color=color,
                edgecolor="black", linewidth=0.2)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([k[2] for k in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"makespan {timeline.makespan * 1e3:.3f} ms")
    # beside the chart, top-aligned: in the picture however many rows the chart has
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items() if k != "idle" or include_idle],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    p = Path(path)
    try:
        return save_figure(fig, p)
    except OSError as exc:
        raise InputError(str(p), None, f"cannot write: {exc.strerror}") from None
