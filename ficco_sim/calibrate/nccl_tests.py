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
are read as rows and skipped as logging. What a launcher puts before every line is taken off
first: Open MPI's ``--tag-output`` tags (``[1,0]<stdout>:``, which it may also put in the middle of
a row) and ``srun -l``'s rank numbers (``0: ``).

Columns, as in ``../shared/measurements/nccl-tests/``: ``collective`` (``all_reduce``, ...),
``gpus``, ``hosts`` (machines the ranks ran on), ``size_bytes`` (nccl-tests' ``size``: the total array for all-gather and
reduce-scatter), ``count``, ``type``, ``time_us_oop``, ``algbw_oop``, ``busbw_oop``, ``device``,
``source`` (file and run), ``gpus_per_thread`` (the header's ``nGpus``: GPUs one thread drives)
``nccl_version`` (from ``nccl-library=22902`` or ``NCCL version 2.29.2`` in the run, rccl-tests'
``rccl-library=22707`` or ``RCCL version : 2.27.7``; empty when the run does not print it) and
``wrong_oop`` (the out-of-place ``#wrong`` count: a row whose results were wrong is not a
measurement to fit; 0 where the run does not print it).

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
from ..files import read_text
from ..hardware import GpuProfile, profile_for_device

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")
KIND = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
        "alltoall": "all-to-all", "sendrecv": "send-recv"}         # what ficco-sim models, by its name
COLUMNS = ["collective", "gpus", "hosts", "size_bytes", "count", "type", "time_us_oop", "algbw_oop", "busbw_oop",
           "device", "source", "gpus_per_thread", "nccl_version", "wrong_oop"]
_VERSION = re.compile(r"[NR]CCL version\s*:?\s*(\d+\.\d+\.\d+)|[nr]ccl-library=(\d{5})")
# what launchers put before (or inside) every line: Open MPI's --tag-output, srun -l
_MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
_SRUN = re.compile(r"^[ \t]*\d+:[ \t]", re.M)
HEAD = 4 << 20          # bytes looks_like reads: NCCL_DEBUG=INFO can print hundreds of KiB before the table
_START = re.compile(r"#\s*Collective test starting:\s*(\w+?)_perf")
# "#  Rank  0 Group  0 Pid 1 on host device  0 [0x1] NVIDIA H100 80GB HBM3" (no Group before nccl-tests 2.11)
_RANK = re.compile(r"#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_LOG = ("NCCL INFO", "NCCL WARN", "RCCL INFO", "RCCL WARN")
_END = ("# Out of bounds", "# Avg bus bandwidth", "# Errors with asterisks", "# Collective test concluded")
_COMMAND = re.compile(r"\b([a-z_]+?)_perf\b")
# an instrumented fork's tagged lines: "[STAT]:  96  3  float ..." is a table row, "[INIT]: ..." its own log
_TAGGED = re.compile(r"\s*\[([A-Z_]+)\]:\s*")


def looks_like(path: str | Path) -> bool:
    """Whether a file is nccl-tests / rccl-tests output (by its first :data:`HEAD` bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "# nThread" in head and ("out-of-place" in head or "#wrong" in head)


def table_without_header(path: str | Path) -> bool:
    """Whether a file holds an nccl-tests table (``algbw`` / ``busbw`` columns) but not the
    output around it (no ``# nThread`` header): a pasted or edited copy."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "busbw" in head and "algbw" in head and "# nThread" not in head


def unprefixed(text: str) -> str:
    """``text`` without what launchers add to its lines (Open MPI's ``[1,0]<stdout>:`` tags,
    wherever they stand, and ``srun -l``'s ``0: ``).

    >>> unprefixed("[1,0]<stdout>:# nThread 1\\n0: #  Rank  0\\n  8  2 float sum -1[1,0]<stdout>:  85.1")
    '# nThread 1\\n#  Rank  0\\n  8  2 float sum -1  85.1'
    """
    return _SRUN.sub("", _MPI_TAG.sub("", text))


def read(path: str | Path) -> pd.DataFrame:
    """Every out-of-place row of every run in the file (see module docstring)."""
    return parse(read_text(path), str(path))


def parse(text: str, where: str) -> pd.DataFrame:
    lines = unprefixed(text).splitlines()
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
    >>> _version(["# rccl-tests version 2.17.9 rccl-headers=22803 rccl-library=22707"]), _version(["RCCL version : 2.27.7-HEAD"])
    ('2.27.7', '2.27.7')
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
    path = Path(where)
    first = None
    for part in (path.name, *(q.name for q in path.parents)):     # the file's name, then its folders', nearest first
        found = _named(part)
        if first is None:
            first = found
        if len(found) == 1:
            return found[0]
        if found:
            break               # a name naming two: ambiguous, whatever the folders say
    found = first or []
    what = f"names {' and '.join(found)}" if found else "names no collective"
    raise InputError(where, None, "cannot tell which collective this run measured: no '# Collective test starting' "
                     f"line, no *_perf command before it, and the file name {what} (name it after one of: "
                     f"{', '.join(COLLECTIVES)})")


def _named(name: str) -> list[str]:
    """The collectives a file or folder name names, written with or without ``_`` / ``-``
    (``all_reduce.txt``, ``allreduce/``, ``all-gather.log``).

    >>> _named("allreduce"), _named("my_reduce.txt"), _named("ag_vs_reduce-scatter"), _named("job08.sh.7280517.nccl")
    (['all_reduce'], ['reduce'], ['reduce_scatter'], [])
    """
    flat = name.lower().replace("-", "").replace("_", "")
    found = [c for c in COLLECTIVES if c.replace("_", "") in flat]
    if len(found) > 1:          # "reduce" is inside all_reduce and reduce_scatter
        found = [c for c in found if c != "reduce"]
    return found


def _run(lines: list[str], pre: list[str], where: str, number: int, version: str = "") -> list[dict]:
    coll = _collective(pre, where)
    per = re.search(r"nGpus\s+(\d+)", lines[0])
    per_thread = int(per.group(1)) if per and int(per.group(1)) > 0 else 1
    at = next((i for i, line in enumerate(lines)
               if line.startswith("#") and "size" in line and "count" in line and "time" in line), None)
    if at is None:
        raise InputError(where, f"run {number}", "no column header ('# size count type ... time algbw busbw')")
    # the run's own rank lines stand between its header and its table (a file may go on with another run's)
    ranks = [m for m in map(_RANK.match, lines[:at]) if m]
    devices = [m.group(2).strip() for m in ranks]
    hosts = {m.group(1) for m in ranks}
    gpus = len(devices)
    if gpus == 0:
        m = re.search(r"nGpus\s+(\d+)", lines[0])
        gpus = int(m.group(1)) if m else 0
    if gpus < 1:
        raise InputError(where, f"run {number}", "no '#  Rank' lines and no nGpus: the GPU count is unknown")
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
    col = {name: header.index(name) for name in ("size", "count", "type", "time", "algbw", "busbw", "#wrong")
           if name in header}
    wrong_at = col.pop("#wrong", None)      # the out-of-place one (the in-place one comes after it)
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
                    "gpus_per_thread": per_thread, "nccl_version": version,
                    "wrong_oop": _count(row[wrong_at]) if wrong_at is not None else 0})
    if len(tokens) % width:
        rest = tokens[len(tokens) - len(tokens) % width:]
        raise InputError(where, f"run {number}", f"its table ends with {len(rest)} of a row's {width} values "
                         f"({' '.join(rest[:3])} ...): the output was cut short (a job stopped while printing?), or "
                         "its rows do not have the header's columns")
    return out


def _count(value: str) -> int:
    """A ``#wrong`` cell: its count (``N/A``, a check not run: 0).

    >>> _count("0"), _count("N/A"), _count("4")
    (0, 0, 4)
    """
    try:
        return max(0, int(float(value)))
    except ValueError:
        return 0


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


def device_mismatch(devices: pd.Series, base: GpuProfile, what: str = "runs",
                    fitted: str = "its links and channels are") -> str:
    """A note when the runs' GPU (the ``#  Rank`` lines' device) is a built-in profile other
    than ``base``'s, or of the other vendor; "" when they agree or the runs do not say.
    ``what`` names the inputs (runs, traces), ``fitted`` what of the profile they set.

    >>> from ficco_sim.hardware import load_gpu
    >>> device_mismatch(pd.Series(["NVIDIA H100 80GB HBM3"]), load_gpu("h100"))
    ''
    >>> device_mismatch(pd.Series(["AMD Instinct MI300X"]), load_gpu("h100"))[:40]
    "the runs' GPU is 'AMD Instinct MI300X' ("
    """
    names = [d for d in devices.dropna().astype(str).unique() if d.strip()]
    if not names:
        return ""
    device = names[0]
    match = profile_for_device(device)
    family = base.name.split(":")[0]            # h100:sustained is an h100
    amd = any(w in device.lower() for w in ("amd", "instinct", "radeon"))
    base_amd = "amd" in family.lower() or family.lower().startswith("mi")
    if match is not None and match == family:
        return ""
    if match is None and amd == base_amd:
        return ""
    said = f"built-in profile {match}" if match else ("AMD" if amd else "NVIDIA")
    return (f"the {what}' GPU is {device!r} ({said}), the profile fitted is {base.name}'s: {fitted} then fitted "
            f"to another GPU's {what}")
