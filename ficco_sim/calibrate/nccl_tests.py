"""Raw ``nccl-tests`` / ``rccl-tests`` output (what ``all_reduce_perf -b 8 -e 8G -f 2 -g 4``
prints) as a tidy table, whatever else the log holds.

A file may hold several runs (each from a ``# nThread`` header to the next); per run, the
collective comes from ``# Collective test starting: all_reduce_perf`` (older versions do
not print it: then from the command before it, ``... ./all_gather_perf -b 8 ...``, or from the
file's name, e.g. ``all_gather.txt``), the GPU count from the
``#  Rank`` lines (one per GPU), the device from them too, and the column layout from the
header line (``size count type redop root time algbw busbw #wrong ...``; ``root`` is absent
in older versions), and the table ends at ``# Out of bounds`` / ``# Avg bus bandwidth``. NCCL's own logging (``NCCL_DEBUG=INFO``) interleaves lines and even
starts them in the middle of a row (``... sum -1host:12:12 [0] NCCL INFO ...``): a log message
is cut off from the text before it (the hosts are named in the ``#  Rank`` lines), and the
table's numbers are read as one stream, a row every ``len(columns)`` values. An instrumented
fork's tagged lines (``[STAT]:`` before each row, ``[INIT]:`` / ``[SETTING]:`` lines of its own)
are read as rows and skipped as logging.

Columns, as in ``../shared/measurements/nccl-tests/``: ``collective`` (``all_reduce``, ...),
``gpus``, ``hosts`` (machines the ranks ran on), ``size_bytes`` (nccl-tests' ``size``: the total array for all-gather and
reduce-scatter), ``count``, ``type``, ``time_us_oop``, ``algbw_oop``, ``busbw_oop``, ``device``,
``source`` (file and run), ``gpus_per_thread`` (the header's ``nGpus``: GPUs one thread drives)
and ``nccl_version`` (from ``nccl-library=22902`` or ``NCCL version 2.29.2`` in the run; empty
when the run does not print it).

>>> text = '''# Collective test starting: all_reduce_perf
... # nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20
... #  Rank  0 Group  0 Pid 1 on h device  0 [0x1] NVIDIA H100 80GB HBM3
... #  Rank  1 Group  0 Pid 1 on h device  1 [0x2] NVIDIA H100 80GB HBM3
... #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
... #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
...            8             2     float     sum      -1    23.30    0.00    0.00       0    23.35    0.00    0.00       0
...           16             4     float     sum      -1    23.44    0.00    0.00       0    23.11    0.00    0.00       0
... '''
>>> parse(text, "x.txt")[["collective", "gpus", "size_bytes", "time_us_oop"]].values.tolist()
[['all_reduce', 2, 8, 23.3], ['all_reduce', 2, 16, 23.44]]
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ..errors import InputError

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")
KIND = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
        "alltoall": "all-to-all", "sendrecv": "send-recv"}         # what ficco-sim models, by its name
COLUMNS = ["collective", "gpus", "hosts", "size_bytes", "count", "type", "time_us_oop", "algbw_oop", "busbw_oop",
           "device", "source", "gpus_per_thread", "nccl_version"]
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)|nccl-library=(\d{5})")
_START = re.compile(r"#\s*Collective test starting:\s*(\w+?)_perf")
# "#  Rank  0 Group  0 Pid 1 on host device  0 [0x1] NVIDIA H100 80GB HBM3" (no Group before nccl-tests 2.11)
_RANK = re.compile(r"#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_LOG = ("NCCL INFO", "NCCL WARN", "RCCL INFO", "RCCL WARN")
_END = ("# Out of bounds", "# Avg bus bandwidth", "# Errors with asterisks", "# Collective test concluded")
_COMMAND = re.compile(r"\b([a-z_]+?)_perf\b")
# an instrumented fork's tagged lines: "[STAT]:  96  3  float ..." is a table row, "[INIT]: ..." its own log
_TAGGED = re.compile(r"\s*\[([A-Z_]+)\]:\s*")


def looks_like(path: str | Path) -> bool:
    """Whether a file is nccl-tests / rccl-tests output (by its first 64 KiB)."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "# nThread" in head and ("out-of-place" in head or "#wrong" in head)


def read(path: str | Path) -> pd.DataFrame:
    """Every out-of-place row of every run in the file (see module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(p), None, f"cannot read: {exc.strerror}") from None
    return parse(text, str(p))


def parse(text: str, where: str) -> pd.DataFrame:
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("# nThread")]
    if not starts:
        raise InputError(where, None, "no '# nThread' header: not nccl-tests / rccl-tests output")
    rows: list[dict] = []
    for r, a in enumerate(starts):
        b = starts[r + 1] if r + 1 < len(starts) else len(lines)
        # the "Collective test starting" line comes just before its run's header
        pre = lines[starts[r - 1] if r else 0:a + 1] if r else lines[:a + 1]
        rows += _run(lines[a:b], pre, where, r + 1, _version(pre + lines[a:b]))
    if not rows:
        raise InputError(where, None, "no measured rows (a header with no table under it)")
    return pd.DataFrame(rows, columns=COLUMNS)


def _version(lines: list[str]) -> str:
    """The NCCL version a run printed (``NCCL version 2.29.2``, or nccl-tests' header
    ``nccl-library=22902``), else "".

    >>> _version(["# nccl-tests version 2.18.3 nccl-headers=22902 nccl-library=22902"])
    '2.29.2'
    >>> _version(["h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]), _version(["# nThread 1 nGpus 8"])
    ('2.21.5', '')
    """
    for line in lines:
        m = _VERSION.search(line)
        if m:
            if m.group(1):
                return m.group(1)
            code = int(m.group(2))
            return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return ""


def _collective(pre: list[str], where: str) -> str:
    for line in reversed(pre):       # the test's own line, else the command that ran it
        m = _START.search(line) or _COMMAND.search(line)
        if m and m.group(1) in COLLECTIVES:
            return m.group(1)
    name = Path(where).name.lower().replace("-", "_")
    found = [c for c in COLLECTIVES if c in name]
    if len(found) > 1:          # "reduce" is inside all_reduce and reduce_scatter
        found = [c for c in found if c != "reduce"]
    if len(found) == 1:
        return found[0]
    what = f"names {' and '.join(found)}" if found else "names no collective"
    raise InputError(where, None, "cannot tell which collective this run measured: no '# Collective test starting' "
                     f"line, no *_perf command before it, and the file name {what} (name it after one of: "
                     f"{', '.join(COLLECTIVES)})")


def _run(lines: list[str], pre: list[str], where: str, number: int, version: str = "") -> list[dict]:
    coll = _collective(pre, where)
    per = re.search(r"nGpus\s+(\d+)", lines[0])
    per_thread = int(per.group(1)) if per and int(per.group(1)) > 0 else 1
    ranks = [m for m in map(_RANK.match, lines) if m]
    devices = [m.group(2).strip() for m in ranks]
    hosts = {m.group(1) for m in ranks}
    gpus = len(devices)
    if gpus == 0:
        m = re.search(r"nGpus\s+(\d+)", lines[0])
        gpus = int(m.group(1)) if m else 0
    if gpus < 1:
        raise InputError(where, f"run {number}", "no '#  Rank' lines and no nGpus: the GPU count is unknown")
    at = next((i for i, line in enumerate(lines)
               if line.startswith("#") and "size" in line and "count" in line and "time" in line), None)
    if at is None:
        raise InputError(where, f"run {number}", "no column header ('# size count type ... time algbw busbw')")
    header = lines[at].lstrip("#").split()
    tokens: list[str] = []
    for line in lines[at + 1:]:
        if line.lstrip().startswith(_END):
            break                   # the table is over (what follows may be anything: a README's prose)
        if any(x in line for x in _LOG):
            cut = [line.find(f"{h}:") for h in hosts if f"{h}:" in line]
            line = line[:min(cut)] if cut else ""
        tag = _TAGGED.match(line)
        if tag:
            line = line[tag.end():] if tag.group(1) == "STAT" else ""
        if line.lstrip().startswith("#") or not line.strip():
            continue
        tokens += line.split()
    header = _printed_columns(header, tokens)
    width = len(header)
    col = {name: header.index(name) for name in ("size", "count", "type", "time", "algbw", "busbw")
           if name in header}
    if len(col) < 6:
        raise InputError(where, f"run {number}", f"column header {' '.join(header)!r} lacks size, count, type, time, "
                         "algbw or busbw")
    out = []
    for i in range(0, len(tokens) - width + 1, width):
        row = tokens[i:i + width]
        try:
            size, count = int(row[col["size"]]), int(row[col["count"]])
            t, alg, bus = (float(row[col[k]]) for k in ("time", "algbw", "busbw"))
        except ValueError:
            raise InputError(where, f"run {number}", f"unreadable table row {' '.join(row)!r}") from None
        if size <= 0:
            continue            # nccl-tests' zero-size warm-up rows
        if not (math.isfinite(t) and t > 0) or size > 2 ** 50:
            raise InputError(where, f"run {number}: size {size}", f"time must be a positive number of us, got {t!r}")
        out.append({"collective": coll, "gpus": gpus, "hosts": max(1, len(hosts)), "size_bytes": size, "count": count, "type": row[col["type"]],
                    "time_us_oop": t, "algbw_oop": alg, "busbw_oop": bus,
                    "device": devices[0] if devices else "", "source": f"{where} (run {number})",
                    "gpus_per_thread": per_thread, "nccl_version": version})
    if len(tokens) % width:
        raise InputError(where, f"run {number}", f"{len(tokens) % width} values left over: the table's rows do not "
                         f"have the header's {width} columns")
    return out


def _printed_columns(header: list[str], tokens: list[str]) -> list[str]:
    """The header's columns that the rows print: older alltoall_perf leaves ``redop`` blank,
    so its rows have one value fewer than the header names (and a number where the op's name
    would stand). Decided on the table's values as one stream (rows may be split by log lines)."""
    if "redop" not in header or not tokens or len(tokens) % len(header) == 0:
        return header
    fewer = [h for h in header if h != "redop"]
    at = header.index("redop")
    if len(tokens) % len(fewer) == 0 and at < len(tokens) and not tokens[at].isalpha():
        return fewer
    return header           # (rows short otherwise are reported by the reader)
