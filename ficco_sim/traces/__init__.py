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

import gzip
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import InputError
from ..lazy import lazy_package

_EXPORTS = {"to_chrome_trace": ".export", "write_chrome_trace": ".export", "write_gantt": ".export",
            "trace_to_graph": ".graph", "load_kineto": ".kineto", "read_json": ".kineto_io", "Trace": ".ops",
            "TraceOp": ".ops", "classify_kernel": ".ops", "find_pairs": ".replay", "pair_whatif": ".replay",
            "replay": ".replay", "whatif": ".replay"}
lazy_package(__name__, _EXPORTS)
if TYPE_CHECKING:
    from .ops import Trace

TRACE_SUFFIXES = (".json", ".json.gz", ".et", ".pt.trace.json", ".pt.trace.json.gz")


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """The trace files named: a directory stands for the trace files in it (``*.json``,
    ``*.json.gz``, ``*.et``), in name order."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise InputError(str(p), None, "directory holds no trace files (*.json, *.json.gz, *.et)")
            out += found
        else:
            out.append(p)
    return out


def _text(head: bytes) -> bool:
    """Whether ``head`` reads as text (UTF-8, printable): a README, a log, a CSV; a Chakra
    protobuf holds binary varints and lengths from its first bytes."""
    s = head.decode("utf-8", errors="ignore")
    return bool(s) and len(s.encode()) >= 0.95 * len(head) and \
        sum(ch.isprintable() or ch in "\n\r\t" for ch in s) >= 0.98 * len(s)


def trace_format(path: str | Path) -> str:
    """``kineto``, ``et`` (JSON with ``nodes``) or ``chakra`` (protobuf ``.et``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), None, "no such trace file")
    if p.is_dir():
        raise InputError(str(p), None, "is a directory; give its trace files (or the directory to load_trace)")
    with open(p, "rb") as fh:
        head = fh.read(4096)
    if not head.strip():
        raise InputError(str(p), None, "empty file: a trace is a Kineto / execution-trace JSON or a Chakra .et")
    if p.suffix == ".et" or (head[:1] not in (b"{", b"[", b"\x1f") and not head.lstrip()[:1] in (b"{", b"[")):
        if p.suffix != ".et" and _text(head):
            raise InputError(str(p), None, "a text file, not a trace (a Kineto / execution-trace JSON, .json or "
                             ".json.gz, or a Chakra .et protobuf)")
        return "chakra"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(p, "rb") as fh:
                head = fh.read(65536)
        except (OSError, EOFError):
            raise InputError(str(p), None, "truncated or corrupt gzip data") from None
    if b'"workload_graph"' in head and b'"traceEvents"' not in head:
        raise InputError(str(p), "workload_graph", "a Chakra trace dumped as JSON (chakra_jsonizer) is not read: "
                         "give the .et files it was dumped from")
    return "et" if b'"nodes"' in head and b'"traceEvents"' not in head else "kineto"


def load_trace(paths: Sequence[str | Path], *, steps: Sequence[int] | None = None) -> Trace:
    """Import trace files (one per rank; a directory stands for the files in it) of one
    format, detected from their content. ``steps``: keep only the GPU work launched in
    those profiler steps (``ProfilerStep#N``; Kineto traces). Where the ranks' collectives
    do not pair up, the trace says so in its notes."""
    from .ops import clock_note, unpaired_note
    t = _load(paths, steps)
    for note in (unpaired_note(t.ops), clock_note(t.ops) if t.on_gpu else None):
        if note and note not in t.notes:
            t.notes.append(note)
    return t


def _load(paths: Sequence[str | Path], steps: Sequence[int] | None) -> Trace:
    if not paths:
        raise InputError("trace", None, "no trace files given")
    paths = expand_paths(paths)
    fmts = {trace_format(p) for p in paths}
    if fmts == {"et", "kineto"}:
        raise InputError(str(paths[0]), None, "an execution trace given with a Kineto trace: give the Kineto "
                         "trace alone (one per rank), or the two linked into one (chakra_trace_link)")
    if len(fmts) > 1:
        raise InputError(str(paths[0]), None, f"mixed trace formats: {', '.join(sorted(fmts))}")
    fmt = fmts.pop()
    if fmt == "kineto":
        from .kineto import load_kineto
        return load_kineto(paths, steps=steps)
    if fmt == "et":
        from .et_json import load_et_json
        return load_et_json(paths, steps=steps)
    if steps:
        raise InputError("--steps", None, f"profiler steps are a Kineto notion; {fmt} traces have none")
    from .chakra import load_chakra
    return load_chakra(paths)


__all__ = ["Trace", "TraceOp", "classify_kernel", "find_pairs", "load_kineto", "load_trace", "pair_whatif",
           "replay", "to_chrome_trace", "trace_to_graph", "whatif", "write_chrome_trace", "write_gantt"]
