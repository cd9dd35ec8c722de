"""Accuracy of predictions against measurements: error, MAPE, ranking agreement.

All functions take plain numbers. The table form (:func:`summarize`) takes a pandas
DataFrame with columns ``scenario``, ``schedule``, ``predicted_s``, ``measured_s`` and
returns, per scenario, the MAPE, Kendall's tau between the predicted and measured
ranking of its schedules, and whether the predicted best schedule is the measured best
(top-1), plus the same over all rows.

>>> round(mape([1.0, 2.0], [1.1, 1.6]), 4)
0.1705
>>> kendall_tau([1, 2, 3], [10, 20, 30]), kendall_tau([1, 2, 3], [30, 20, 10])
(1.0, -1.0)
>>> top1_match([3.0, 1.0, 2.0], [2.5, 0.9, 3.0])
True
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd


def rel_error(predicted: float, measured: float) -> float:
    """Signed relative error (predicted - measured) / measured; NaN if unmeasurable."""
    if not measured or measured != measured:
        return float("nan")
    return (predicted - measured) / measured


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error as a fraction (0.1 = 10 %), over pairs with a
    positive measurement."""
    errs = [abs(rel_error(p, m)) for p, m in zip(predicted, measured) if m and m == m and p == p]
    return sum(errs) / len(errs) if errs else float("nan")


def median_notch(times: Sequence[float]) -> float:
    """Half-width of the 95% notch of a median of repeated timings, ``1.58 IQR / sqrt(n)``
    (McGill, Tukey and Larsen 1978, "Variations of box plots"): two medians whose notches
    overlap are not told apart by the measurement. NaN with fewer than 2 timings.

    >>> round(median_notch([1.0, 2.0, 3.0, 4.0]), 4)
    1.185
    """
    t = np.asarray(times, dtype=float)
    if len(t) < 2:
        return float("nan")
    q1, q3 = np.percentile(t, [25, 75])
    return float(1.58 * (q3 - q1) / np.sqrt(len(t)))


def _apart(y: Sequence[float], tol: Sequence[float] | None, i: int, j: int) -> int:
    """The sign of ``y[i] - y[j]``, 0 when their notches ``tol`` overlap (a measured tie)."""
    if tol is not None and abs(y[i] - y[j]) <= tol[i] + tol[j]:
        return 0
    return (y[i] > y[j]) - (y[i] < y[j])


def kendall_tau(x: Sequence[float], y: Sequence[float], y_tol: Sequence[float] | None = None) -> float:
    """Kendall's tau-b between two orderings (ties handled); NaN with fewer than 2 items
    or when one side is all ties. ``y_tol``: half-widths of the ``y`` values' notches
    (:func:`median_notch`); pairs whose notches overlap count as ties (differences the
    measurement cannot resolve are not a ranking).

    >>> kendall_tau([1, 1, 2], [1, 2, 3])
    0.8165
    >>> kendall_tau([1, 2, 3], [10, 10.5, 20]), kendall_tau([1, 2, 3], [10, 10.5, 20], [1, 1, 1])
    (1.0, 0.8165)
    """
    n = len(x)
    if n != len(y):
        raise ValueError("kendall_tau needs two sequences of the same length")
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (x[i] > x[j]) - (x[i] < x[j])
            dy = _apart(y, y_tol, i, j)
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return round((conc - disc) / denom, 4) if denom else float("nan")


TIE = 1e-9     # predictions this close (relative) are one prediction: the model ranks neither first


def top1_match(predicted: Sequence[float], measured: Sequence[float], tol: Sequence[float] | None = None) -> bool:
    """Whether the fastest measured item is one the prediction ranks first: the fastest
    predicted, or any predicted the same (to :data:`TIE`; a tie is no ranking, as in
    :func:`kendall_tau`); ``tol``: or one that measures within the notches of the fastest
    measured (:func:`median_notch`).

    >>> top1_match([2.0, 2.0, 3.0], [1.1, 1.0, 1.2]), top1_match([2.0, 2.1, 3.0], [1.1, 1.0, 1.2])
    (True, False)
    """
    if not predicted:
        return False
    low = min(predicted)
    best_m = min(range(len(measured)), key=lambda i: measured[i])
    firsts = [i for i, p in enumerate(predicted) if p <= low * (1 + TIE)]
    return best_m in firsts or any(_apart(measured, tol, i, best_m) == 0 for i in firsts)


def halves(times: Sequence[float]) -> tuple[float, float]:
    """Medians of the even and of the odd repeats (in the order they ran): two measurements
    of one run, each spanning all of it (NaN with fewer than 2 repeats).

    >>> halves([1.0, 5.0, 2.0, 6.0, 3.0])
    (2.0, 5.5)
    """
    t = list(times)
    if len(t) < 2:
        return float("nan"), float("nan")
    return float(np.median(t[0::2])), float(np.median(t[1::2]))


def summarize(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per-scenario accuracy (scenario, schedules, MAPE, tau, top1, predicted/measured
    best) and overall figures (rows, MAPE, mean tau, top-1 rate). With a
    ``measured_notch_s`` column (:func:`median_notch`), also tau and top-1 counting only the
    differences the measurement resolves (``kendall_tau_resolved``, ``top1_resolved``). With
    ``measured_even_s`` and ``measured_odd_s`` (:func:`halves`), also how far the measurement
    agrees with itself: tau between the two halves' medians and whether their fastest is the
    same (``kendall_tau_self``, ``top1_self``): a ranking the run does not reproduce is one no
    prediction can be held to."""
    rows = []
    for scen, g in df.groupby("scenario", sort=False):
        g = g.dropna(subset=["predicted_s", "measured_s"])
        if g.empty:
            continue
        p, m = list(g["predicted_s"]), list(g["measured_s"])
        tol = list(g["measured_notch_s"].fillna(0.0)) if "measured_notch_s" in g else None
        rows.append({
            "scenario": scen, "schedules": len(g), "mape": mape(p, m),
            "kendall_tau": kendall_tau(p, m) if len(g) > 1 else float("nan"),
            "top1": top1_match(p, m) if len(g) > 1 else float("nan"),
            "kendall_tau_resolved": kendall_tau(p, m, tol) if len(g) > 1 and tol else float("nan"),
            "top1_resolved": top1_match(p, m, tol) if len(g) > 1 and tol else float("nan"),
            **_self_agreement(g),
            "predicted_best": " = ".join(g["schedule"].iloc[i] for i in range(len(p)) if p[i] <= min(p) * (1 + TIE)),
            "measured_best": g["schedule"].iloc[min(range(len(m)), key=m.__getitem__)],
        })
    per = pd.DataFrame(rows, columns=["scenario", "schedules", "mape", "kendall_tau", "top1", "predicted_best",
                                      "measured_best", "kendall_tau_resolved", "top1_resolved", "kendall_tau_self",
                                      "top1_self"])
    ranked = per[per["schedules"] > 1]
    taus = ranked.dropna(subset=["kendall_tau"])
    overall = {
        "rows": int(df.dropna(subset=["predicted_s", "measured_s"]).shape[0]),
        "mape": mape(list(df["predicted_s"]), list(df["measured_s"])),
        "mean_kendall_tau": float(taus["kendall_tau"].mean()) if not taus.empty else float("nan"),
        "top1_rate": float(ranked["top1"].astype(float).mean()) if not ranked.empty else float("nan"),
        "mean_kendall_tau_resolved": float(ranked["kendall_tau_resolved"].dropna().mean())
        if ranked["kendall_tau_resolved"].notna().any() else float("nan"),
        "top1_resolved_rate": float(ranked["top1_resolved"].dropna().astype(float).mean())
        if ranked["top1_resolved"].notna().any() else float("nan"),
        "scenarios_ranked": int(ranked.shape[0]),
        "mean_kendall_tau_self": float(ranked["kendall_tau_self"].dropna().mean())
        if ranked["kendall_tau_self"].notna().any() else float("nan"),
        "top1_self_rate": float(ranked["top1_self"].dropna().astype(float).mean())
        if ranked["top1_self"].notna().any() else float("nan"),
    }
    return per, overall


def _self_agreement(g: pd.DataFrame) -> dict:
    """One scenario's ``kendall_tau_self`` and ``top1_self`` (see :func:`summarize`)."""
    if len(g) < 2 or "measured_even_s" not in g or "measured_odd_s" not in g:
        return {"kendall_tau_self": float("nan"), "top1_self": float("nan")}
    h = g.dropna(subset=["measured_even_s", "measured_odd_s"])
    if len(h) < 2:
        return {"kendall_tau_self": float("nan"), "top1_self": float("nan")}
    a, b = list(h["measured_even_s"]), list(h["measured_odd_s"])
    return {"kendall_tau_self": kendall_tau(a, b), "top1_self": min(range(len(a)), key=a.__getitem__)
            == min(range(len(b)), key=b.__getitem__)}
