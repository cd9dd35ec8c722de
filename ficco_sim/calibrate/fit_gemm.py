"""Fit the GEMM cost model's free parameters to measured GEMM times.

The model is :mod:`ficco_sim.gemm_model` (tiles -> blocks, per-block time
``o * 2 tm tn (k + k_overhead) / (peak_per_sm * efficiency)``, wave quantization, HBM
bound, launch overhead). Its free parameters are ``gemm.efficiency[dtype]``,
``gemm.k_overhead`` and, optionally, ``launch_overhead``. :func:`predict_times`
evaluates the same model vectorised over a table (tens of thousands of rows per
evaluation), and :func:`fit_gemm` minimises the error in log time with bounded
scipy least squares, so that a 10 us GEMM and a 10 ms GEMM count alike.

Hold-out is by *group* (a whole transformer model, or a whole shape family), never by
row: rows of one model share shapes, and a row split would leak them.

>>> from ficco_sim.hardware import load_gpu
>>> import pandas as pd
>>> gpu = load_gpu("h100")
>>> rows = pd.DataFrame({"m": [8192], "n": [8192], "k": [8192], "dtype": ["float16"]})
>>> from ficco_sim.gemm_model import gemm_time
>>> bool(abs(predict_times(gpu, rows)[0] - gemm_time(gpu, 8192, 8192, 8192)) < 1e-12)
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..gemm_model import gemm_times
from ..hardware import GpuProfile

# Bounds keep the fit physical: efficiency is a fraction of peak, k_overhead a few K-tiles,
# launch overhead a few tens of microseconds at most.
BOUNDS = {"efficiency": (0.02, 1.0), "k_overhead": (0.0, 4096.0), "launch_overhead": (0.0, 100e-6),
          "roofline_exponent": (1 / 64, 1.0)}          # fitted as 1 / p: 1/64 ~ the plain roofline, 1 the sum
SCALE = {"launch_overhead": 1e-5, "roofline_exponent": 1.0}


def with_gemm_params(gpu: GpuProfile, efficiency: dict[str, float] | None = None,
                     k_overhead: float | None = None, launch_overhead: float | None = None,
                     roofline_exponent: float | None = None) -> GpuProfile:
    """A copy of ``gpu`` with new GEMM-model parameters (efficiency merged per dtype)."""
    eff = dict(gpu.gemm.efficiency)
    eff.update(efficiency or {})
    gemm = dataclasses.replace(gpu.gemm, efficiency=eff,
                               k_overhead=gpu.gemm.k_overhead if k_overhead is None else float(k_overhead),
                               roofline_exponent=gpu.gemm.roofline_exponent if roofline_exponent is None
                               else float(roofline_exponent))
    lo = gpu.launch_overhead if launch_overhead is None else float(launch_overhead)
    return dataclasses.replace(gpu, gemm=gemm, launch_overhead=lo)


def predict_times(gpu: GpuProfile, rows: pd.DataFrame) -> np.ndarray:
    """Model time (s) of every row (columns ``m, n, k, dtype``), launch overhead included:
    :func:`ficco_sim.gemm_model.gemm_times`, one vector call per dtype."""
    m, n, k = (rows[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    dtypes = rows["dtype"].to_numpy()
    out = np.full(len(rows), np.inf)
    for dtype in rows["dtype"].unique():
        sel = dtypes == dtype
        out[sel] = gemm_times(gpu, m[sel], n[sel], k[sel], dtype) + gpu.launch_overhead
    return out


def pinned(params: dict[str, float]) -> list[str]:
    """Profile paths of the fitted GEMM parameters (:func:`fit_gemm`'s ``params``) that ended on a
    bound of :data:`BOUNDS`: the rows pressed the model past what that parameter can mean
    (:func:`.fit_nccl.at_bounds`, the one rule).

    >>> pinned({"efficiency.float16": 0.02, "k_overhead": 30.0, "launch_overhead": 1e-4})
    ['gemm.efficiency.float16', 'launch_overhead_us']
    """
    from .fit_nccl import at_bounds
    key = {n: n.split(".")[0] for n in params}
    values = {n: (1.0 / v if key[n] == "roofline_exponent" else v) for n, v in params.items()}   # fitted as 1 / p
    paths = {n: "launch_overhead_us" if n == "launch_overhead" else f"gemm.{n}" for n in params}
    return at_bounds(values, bounds={n: BOUNDS[key[n]] for n in params if key[n] in BOUNDS}, paths=paths)


@dataclass
class GemmFit:
    """Result of :func:`fit_gemm`: parameters, the profile carrying them, and per-row predictions."""

    gpu: GpuProfile
    params: dict[str, float]
    train_groups: list[str]
    test_groups: list[str]
    rows: pd.DataFrame  # input rows + predicted_s, rel_error, split
    cost: float = 0.0
    fitted: list[str] = field(default_factory=list)


def split_groups(groups: Sequence[str], holdout: str | Sequence[str] | None = "auto") -> tuple[list[str], list[str]]:
    """(train, test) group lists. ``"auto"``: every third group in sorted order, starting with
    the second, is held out (deterministic, and at least one group on each side when there
    are two or more). ``None`` or ``[]``: no hold-out. A list names the held-out groups.

    >>> split_groups(["a", "b", "c", "d"])
    (['a', 'c', 'd'], ['b'])
    """
    uniq = sorted(set(groups))
    if holdout == "auto":
        test = [g for i, g in enumerate(uniq) if i % 3 == 1] if len(uniq) > 1 else []
    elif holdout is None:
        test = []
    else:
        test = [holdout] if isinstance(holdout, str) else list(holdout)
        missing = [g for g in test if g not in uniq]
        if missing:
            raise InputError("--holdout", None, f"no such group(s) {missing}; the data has: {', '.join(uniq)}")
    train = [g for g in uniq if g not in test]
    if not train:
        raise InputError("--holdout", None, "holding out every group leaves nothing to fit on")
    return train, test


class TooFewShapes(InputError):
    """Fewer GEMM shapes than the fit has parameters: nothing can be fitted (timings can still
    be kept, ``calibrate --keep-times``)."""


def fit_gemm(gpu: GpuProfile, rows: pd.DataFrame, *, holdout: str | Sequence[str] | None = "auto",
             fit_launch: bool = True, dtypes: Sequence[str] | None = None, fit_roofline: bool = False) -> GemmFit:
    """Fit ``efficiency[dtype]`` (for each dtype in the rows), ``k_overhead`` and optionally
    ``launch_overhead`` and ``roofline_exponent`` on the training groups; predict every row.
    The exponent is fitted as ``1 / p`` in [1/64, 1] (how much of a wave's HBM time its math
    does not hide): only rows on both sides of the ridge point (memory- and math-bound
    shapes) tell it apart from the efficiency.

    ``rows``: columns ``group, m, n, k, dtype, time_s`` (see :mod:`.measurements`).
    """
    from scipy.optimize import least_squares  # scipy is needed only to fit

    if rows.empty:
        raise InputError("calibrate", None, "no GEMM rows to fit")
    train_g, test_g = split_groups(rows["group"].astype(str).tolist(), holdout)
    train = rows[rows["group"].isin(train_g)]
    dtypes = list(dtypes or sorted(rows["dtype"].unique()))
    for d in dtypes:
        if d not in gpu.peak_flops:
            raise InputError(gpu.path or gpu.name, "peak_tflops", f"no peak for dtype {d!r} found in the data")
    extra = (["launch_overhead"] if fit_launch else []) + (["roofline_exponent"] if fit_roofline else [])
    names = [f"efficiency.{d}" for d in dtypes] + ["k_overhead"] + extra
    shapes = len(train[["m", "n", "k", "dtype"]].drop_duplicates())
    if shapes < len(names):
        raise TooFewShapes("--from", None, f"{shapes} GEMM shape(s) to fit on cannot pin {len(names)} parameters "
                           f"({', '.join(names)}): time more shapes (a range of sizes)"
                           + (", or keep the launch overhead (--no-launch)" if fit_launch else "")
                           + ("; --holdout with no group fits on every one" if test_g else ""))
    lo = [BOUNDS["efficiency"][0]] * len(dtypes) + [BOUNDS["k_overhead"][0]] + [BOUNDS[e][0] for e in extra]
    hi = [BOUNDS["efficiency"][1]] * len(dtypes) + [BOUNDS["k_overhead"][1]] + [BOUNDS[e][1] for e in extra]
    # Parameters in units of order 1 so the finite-difference steps mean the same for each.
    scale = np.array([1.0] * len(dtypes) + [100.0] + [SCALE[e] for e in extra])

    def params(x: np.ndarray) -> dict[str, float]:
        out = dict(zip(names, (x * scale).tolist()))
        if fit_roofline:
            out["roofline_exponent"] = 1.0 / out["roofline_exponent"]      # fitted as 1 / p
        return out

    def profile(x: np.ndarray) -> GpuProfile:
        p = params(x)
        return with_gemm_params(gpu, {d: p[f"efficiency.{d}"] for d in dtypes}, p["k_overhead"],
                                p.get("launch_overhead"), p.get("roofline_exponent"))

    log_meas = np.log(train["time_s"].to_numpy())

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(predict_times(profile(x), train)) - log_meas

    # The model is piecewise (tile choice, waves, HBM bound): start from a few points, keep the best.
    best = None
    q0 = 1.0 / gpu.gemm.roofline_exponent if math.isfinite(gpu.gemm.roofline_exponent) else 1 / 3
    for e0, k0, l0 in ((0.7, 64, 5e-6), (0.5, 256, 10e-6), (0.9, 16, 2e-6)):
        x0 = np.array([e0] * len(dtypes) + [k0] + ([l0] if fit_launch else []) + ([q0] if fit_roofline else [])) / scale
        x0 = np.clip(x0, np.array(lo) / scale, np.array(hi) / scale)
        res = least_squares(residual, x0, bounds=(np.array(lo) / scale, np.array(hi) / scale),
                            loss="soft_l1", f_scale=0.1, diff_step=1e-3, max_nfev=200)
        if best is None or res.cost < best.cost:
            best = res
    fitted_gpu = profile(best.x)
    out = rows.copy()
    out["predicted_s"] = predict_times(fitted_gpu, rows)
    out["rel_error"] = out["predicted_s"] / out["time_s"] - 1.0
    out["split"] = np.where(out["group"].isin(test_g), "test", "train")
    return GemmFit(fitted_gpu, params(best.x), train_g, test_g, out, float(best.cost), names)
