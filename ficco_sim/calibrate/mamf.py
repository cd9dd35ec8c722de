"""The output of the Maximum Achievable Matmul FLOPS finder (``mamf-finder.py`` of
stas00/ml-engineering), read as GEMM timings: one row per shape it tried.

It prints, per shape, the TFLOPS (10**12 FLOP/s) a ``torch.mm`` reached over its timed
iterations (each after an L2-flushing write, since late 2024), never a time; the time is
``2 m n k / flops``. Three line formats, by version:

* since 2025-01-04: ``  20 |  808.5(mean)  810.5(median)  829.5(max) @ 1024x2048x5120 | best: ...``,
  the shape ``MxNxK`` (the last number is the reduction);
* before (v2, 2024-12 to 2025-01): ``... 829.5(max)  810.5(median) ... @ 1024x5120x2048 | best:
  ...``, the middle number the reduction;
* v1 (2024-08): ``  20 |  829.5 TFLOPS @ 1024x5120x2048 | best: ...``, the fastest iteration only,
  the middle number the reduction.

The median is kept where the line has one (the fastest iteration otherwise). The dtype comes
from ``** Dtype: torch.bfloat16``, the device from ``_CudaDeviceProperties(name='...')``. The
``best:`` columns (a running maximum over shapes) and the summary block are not read. Lines
may end in ``\\r`` or ``\\x1b[K`` (a terminal capture) instead of ``\\n``.

>>> text = '''** Dtype: torch.bfloat16
... _CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0)
...      1 |  134.8(mean)  134.9(median)  140.1(max) @ 1024x1024x1024       | best:  134.8(mean) TFLOPS
...      2 |  204.9(mean)  205.4(median)  210.4(max) @ 1024x2048x4096       | best:  204.9(mean) TFLOPS
... '''
>>> d = parse(text, "mamf.txt")
>>> d[["m", "n", "k", "dtype"]].values.tolist(), round(float(d["time_s"].iloc[1]) * 1e6, 1)
([[1024, 1024, 1024, 'bfloat16'], [1024, 2048, 4096, 'bfloat16']], 83.6)
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..files import read_text

_NEW = re.compile(r"^\s*\d+\s*\|\s*([\d.]+)\(mean\)\s+([\d.]+)\(median\)\s+([\d.]+)\(max\)\s*@\s*(\d+)x(\d+)x(\d+)")
_V2 = re.compile(r"^\s*\d+\s*\|\s*([\d.]+)\(max\)\s*/?\s*([\d.]+)\(median\)(?:\s+[\d.]+\(mean\))?\s*(?:TFLOPS\s*)?"
                 r"@\s*(\d+)x(\d+)x(\d+)")
_V1 = re.compile(r"^\s*\d+\s*\|\s*([\d.]+)\s+TFLOPS\s*@\s*(\d+)x(\d+)x(\d+)")
_DTYPE = re.compile(r"\*\*\s*Dtype:\s*torch\.(\w+)")
_DEVICE = re.compile(r"_CudaDeviceProperties\(name='([^']*)'")
# mamf-finder's dtype names -> ficco-sim's
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32",
          "float": "float32", "float8_e4m3fn": "float8", "float8_e5m2": "float8", "float8_e4m3fnuz": "float8"}
COLUMNS = ["kind", "m", "n", "k", "dtype", "time_s", "group", "device"]


def looks_like(path: str | Path) -> bool:
    """Whether a file is mamf-finder output (by its first 256 KiB: a dtype header and a shape line)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256 << 10).decode("utf-8", errors="replace")
    except OSError:
        return False
    lines = re.split(r"\r\n|\r|\n|\x1b\[K", head)
    return bool(_DTYPE.search(head)) and any(p.match(x) for x in lines for p in (_NEW, _V2, _V1))


def read(path: str | Path) -> pd.DataFrame:
    return parse(read_text(path), str(path))


def parse(text: str, where: str) -> pd.DataFrame:
    """Rows ``kind`` (gemm), ``m, n, k`` (``k`` the reduction), ``dtype``, ``time_s``, ``group``
    (``m=<m>``: the fit holds out whole families of shapes), ``device``."""
    m = _DTYPE.search(text)
    if not m:
        raise InputError(where, "Dtype", "no '** Dtype: torch.<dtype>' line: not mamf-finder output, or cut short")
    dtype = DTYPES.get(m.group(1))
    if dtype is None:
        raise InputError(where, "Dtype", f"torch.{m.group(1)}: no ficco-sim dtype for it (it reads "
                         f"{', '.join(sorted(DTYPES))})")
    dev = _DEVICE.search(text)
    device = dev.group(1) if dev else ""
    rows = []
    for line in re.split(r"\r\n|\r|\n|\x1b\[K", text):
        if (hit := _NEW.match(line)) is not None:
            tflops, (a, b, c) = float(hit.group(2)), (int(x) for x in hit.group(4, 5, 6))
            mm, nn, kk = a, b, c                 # MxNxK
        elif (hit := _V2.match(line)) is not None:
            tflops, (a, b, c) = float(hit.group(2)), (int(x) for x in hit.group(3, 4, 5))
            mm, kk, nn = a, b, c                 # the middle number is the reduction
        elif (hit := _V1.match(line)) is not None:
            tflops, (a, b, c) = float(hit.group(1)), (int(x) for x in hit.group(2, 3, 4))
            mm, kk, nn = a, b, c
        else:
            continue
        if tflops <= 0 or min(mm, nn, kk) <= 0:
            continue                              # printed as 0.0: too slow for one decimal, no time to read
        rows.append(("gemm", mm, nn, kk, dtype, 2.0 * mm * nn * kk / (tflops * 1e12), f"m={mm}", device))
    if not rows:
        raise InputError(where, None, "no shape lines ('  N | ... @ MxNxK | best: ...'): the run printed none")
    return pd.DataFrame(rows, columns=COLUMNS)


def note_device(cal, rows: pd.DataFrame, base) -> None:
    """Say so in ``cal.notes`` when the sweep ran on another GPU than ``base`` describes."""
    from .nccl_tests import device_mismatch
    other = device_mismatch(rows["device"], base)
    if other:
        cal.notes.append(other.replace("the runs' GPU", "the sweep's GPU").replace(
            "its links and channels are then fitted to another GPU's runs", "its GEMM model is then fitted to "
            "another GPU's timings"))
