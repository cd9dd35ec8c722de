"""Trace-driven simulation: import measured traces, replay them, ask what-if, export timelines.

Formats in: Kineto / PyTorch-profiler Chrome JSON (one file per rank, the primary
input), MLCommons Chakra ``.et`` protobuf and Chakra-style JSON ET with durations.
Out: Chrome-trace JSON for Perfetto and Gantt PNGs of any :class:`~ficco_sim.timeline.Timeline`.

>>> from pathlib import Path
>>> t = load_trace([Path(__file__).parents[2] / "traces" / "cpu_mm_chain.json.gz"])
>>> t.fmt, t.num_ranks
('kineto', 1)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import InputError
from .export import to_chrome_trace, write_chrome_trace, write_gantt
from .graph import trace_to_graph
from .kineto import load_kineto, read_json
from .ops import Trace, TraceOp, classify_kernel
from .replay import find_pairs, pair_whatif, replay, whatif


def trace_format(path: str | Path) -> str:
    """``kineto``, ``et`` (JSON with ``nodes``) or ``chakra`` (protobuf ``.et``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), None, "no such trace file")
    head = p.read_bytes()[:4096]
    if p.suffix == ".et" or (head[:1] not in (b"{", b"[", b"\x1f") and not head.lstrip()[:1] in (b"{", b"[")):
        return "chakra"
    if head[:2] == b"\x1f\x8b":
        data = read_json(p)
        return "et" if isinstance(data, dict) and "nodes" in data else "kineto"
    return "et" if b'"nodes"' in head and b'"traceEvents"' not in head else "kineto"


def load_trace(paths: Sequence[str | Path]) -> Trace:
    """Import trace files (one per rank) of one format, detected from their content."""
    if not paths:
        raise InputError("trace", None, "no trace files given")
    fmts = {trace_format(p) for p in paths}
    if len(fmts) > 1:
        raise InputError(str(paths[0]), None, f"mixed trace formats: {', '.join(sorted(fmts))}")
    fmt = fmts.pop()
    if fmt == "kineto":
        return load_kineto(paths)
    from .chakra import load_chakra, load_et_json
    return load_chakra(paths) if fmt == "chakra" else load_et_json(paths)


__all__ = ["Trace", "TraceOp", "classify_kernel", "find_pairs", "load_kineto", "load_trace", "pair_whatif",
           "replay", "to_chrome_trace", "trace_to_graph", "whatif", "write_chrome_trace", "write_gantt"]
