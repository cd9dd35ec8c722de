"""Measured timings as tidy tables, whatever file they came from.

Two formats are read, both CSV:

* **vidur** (``../shared/measurements/vidur/``): ``gemm_times.csv`` with columns
  ``gpu, model, op, tp, m, n, k, dtype, time_ms_median, ...`` and ``collective_times.csv``
  with ``setup, collective, num_workers, devices_per_node, bytes, time_ms_median, ...``.
* **bench** (written by :func:`ficco_sim.calibrate.bench.run_benchmarks`): one row per
  measured point with ``kind, group, m, n, k, dtype, bytes, time_s, ...``.

Every reader returns a pandas DataFrame in SI units with the columns the fitters need:
GEMM tables ``gpu, group, m, n, k, dtype, time_s`` (``group`` is what hold-out splits on:
the transformer model for vidur rows, the shape family for bench rows).

>>> import io
>>> df = read_gemm_table(io.StringIO("gpu,model,op,tp,m,n,k,dtype,time_ms_median\\n"
...                                  "a100,x,attn_post_proj,1,64,64,64,float16,0.01\\n"), where="mem")
>>> df[["group", "m", "time_s"]].values.tolist()
[['x', 64, 1e-05]]
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ..errors import InputError

GEMM_COLUMNS = ["gpu", "group", "m", "n", "k", "dtype", "time_s"]
VIDUR_GEMM = {"gpu", "model", "m", "n", "k", "dtype", "time_ms_median"}
VIDUR_COLL = {"setup", "collective", "num_workers", "devices_per_node", "bytes", "time_ms_median"}
BENCH = {"kind", "time_s"}


def read_csv(path: str | Path | io.IOBase, where: str | None = None) -> pd.DataFrame:
    """Read a CSV (``#`` lines are comments), turning any failure into :class:`InputError`."""
    where = where or str(path)
    if isinstance(path, (str, Path)) and not Path(path).exists():
        raise InputError(where, None, "no such measurement file")
    try:
        df = pd.read_csv(path, comment="#", keep_default_na=False, na_values=[""])
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(where, None, f"not a readable CSV table ({type(exc).__name__})") from None
    if df.empty:
        raise InputError(where, None, "no rows")
    return df


def file_format(df: pd.DataFrame) -> str:
    """``vidur_gemm``, ``vidur_collective``, ``bench`` or ``unknown``."""
    cols = set(df.columns)
    if VIDUR_GEMM <= cols:
        return "vidur_gemm"
    if VIDUR_COLL <= cols:
        return "vidur_collective"
    if BENCH <= cols:
        return "bench"
    return "unknown"


LIMITS = {"m": 2 ** 31, "n": 2 ** 31, "k": 2 ** 31, "num_workers": 65536, "bytes": 2.0 ** 50,
          "time_ms_median": 3.6e6, "time_s": 3.6e3}     # beyond these a row is a typo, not a measurement
INTEGERS = {"m", "n", "k", "num_workers", "bytes"}


def _positive(df: pd.DataFrame, cols: Iterable[str], where: str) -> None:
    """Every value of ``cols`` a finite positive number (an integer for sizes and counts) below
    its :data:`LIMITS`; else an error naming the row and column."""
    for c in cols:
        raw = df[c]
        v = pd.to_numeric(raw.where(~raw.map(lambda x: isinstance(x, bool) or str(x).strip().lower()
                                             in ("true", "false"))), errors="coerce")
        bad = v.isna() | ~(v > 0) | ~np.isfinite(v.astype(float)) | (v > LIMITS.get(c, np.inf))
        if c in INTEGERS:
            bad |= v.fillna(0) != np.floor(v.fillna(0))
        if bad.any():
            i = int(bad.to_numpy().argmax())
            what = "a positive integer" if c in INTEGERS else "a positive number"
            limit = f" up to {LIMITS[c]:.3g}" if c in LIMITS else ""
            got = raw.iloc[i]
            got = got.item() if isinstance(got, np.generic) else got     # -0.001, not np.float64(-0.001)
            raise InputError(where, f"row {i + 2}: {c}", f"must be {what}{limit}, got {got!r}")


def _text(df: pd.DataFrame, cols: Iterable[str], where: str) -> None:
    """Every value of ``cols`` a non-empty name."""
    for c in cols:
        bad = df[c].isna() | (df[c].astype(str).str.strip() == "")
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise InputError(where, f"row {i + 2}: {c}", f"must be a name, got {df[c].iloc[i]!r}")


def _dtypes(df: pd.DataFrame, where: str) -> None:
    from ..gemm_model import DTYPE_BYTES
    bad = ~df["dtype"].astype(str).isin(list(DTYPE_BYTES))
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise InputError(where, f"row {i + 2}: dtype", f"unknown {df['dtype'].iloc[i]!r}; known: "
                         f"{', '.join(DTYPE_BYTES)}")


def read_gemm_table(path: str | Path | io.IOBase, gpu: str | None = None, *, where: str | None = None) -> pd.DataFrame:
    """GEMM rows (optionally only ``gpu``'s) as ``gpu, group, m, n, k, dtype, time_s``."""
    where = where or str(path)
    df = read_csv(path, where)
    return gemm_rows(df, where, gpu)


def gemm_rows(df: pd.DataFrame, where: str, gpu: str | None = None) -> pd.DataFrame:
    fmt = file_format(df)
    if fmt == "vidur_gemm":
        _positive(df, ["m", "n", "k", "time_ms_median"], where)
        _text(df, ["gpu", "model", "dtype"], where)
        _dtypes(df, where)
        out = pd.DataFrame({
            "gpu": df["gpu"].astype(str).str.lower(), "group": df["model"].astype(str),
            "m": df["m"].astype(int), "n": df["n"].astype(int), "k": df["k"].astype(int),
            "dtype": df["dtype"].astype(str), "time_s": df["time_ms_median"].astype(float) * 1e-3,
        })
    elif fmt == "bench":
        g = df[df["kind"] == "gemm"].copy()
        if g.empty:
            raise InputError(where, "kind", "no gemm rows in this benchmark file")
        missing = [c for c in ("m", "n", "k", "dtype") if c not in g]
        if missing:
            raise InputError(where, missing[0], f"its gemm rows need the column {missing[0]!r}")
        if "group" not in g:        # a user's own timings: one family of shapes
            g["group"] = "timings"
        _positive(g, ["m", "n", "k", "time_s"], where)
        _text(g, ["group", "dtype"], where)
        _dtypes(g, where)
        out = pd.DataFrame({
            "gpu": g.get("gpu", pd.Series("local", index=g.index)).astype(str).str.lower(),
            "group": g["group"].astype(str), "m": g["m"].astype(int), "n": g["n"].astype(int),
            "k": g["k"].astype(int), "dtype": g["dtype"].astype(str), "time_s": g["time_s"].astype(float),
        })
    else:
        raise InputError(where, None, "not a GEMM timing table: expected vidur gemm_times.csv columns "
                         f"({', '.join(sorted(VIDUR_GEMM))}) or a ficco-sim benchmark CSV")
    if gpu is not None:
        have = sorted(out["gpu"].unique())
        gpu = gpu.removesuffix(":sustained")        # the rows of the GPU; the regime is the base's
        out = out[out["gpu"] == gpu.lower()]
        if out.empty:
            raise InputError(where, "gpu", f"no rows for gpu {gpu!r}; the file has {', '.join(have)}")
    return out.reset_index(drop=True)


def read_collective_table(path: str | Path | io.IOBase, *, where: str | None = None) -> pd.DataFrame:
    """Collective rows as ``setup, collective, num_workers, devices_per_node, bytes, time_s``."""
    where = where or str(path)
    df = read_csv(path, where)
    if file_format(df) != "vidur_collective":
        raise InputError(where, None, "not a collective timing table: expected columns "
                         + ", ".join(sorted(VIDUR_COLL)))
    _positive(df, ["bytes", "time_ms_median", "num_workers"], where)
    out = df[["setup", "collective", "num_workers", "devices_per_node", "bytes"]].copy()
    out["bytes"] = out["bytes"].astype(float)
    out["time_s"] = df["time_ms_median"].astype(float) * 1e-3
    return out.reset_index(drop=True)


def read_bench_table(path: str | Path | io.IOBase, *, where: str | None = None) -> pd.DataFrame:
    """A ficco-sim benchmark CSV as written (all kinds, skipped rows included)."""
    where = where or str(path)
    df = read_csv(path, where)
    if file_format(df) != "bench":
        raise InputError(where, None, "not a ficco-sim benchmark CSV (needs columns kind and time_s)")
    return df
