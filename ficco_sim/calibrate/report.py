"""Fit reports: error statistics, a per-point CSV and a predicted-vs-measured plot.

Errors are relative, ``predicted / measured - 1``; summaries quote the median and the 90th
percentile of their absolute value, for all points and for points of at least 1 ms.

>>> import pandas as pd
>>> df = pd.DataFrame({"time_s": [1e-3, 2e-3], "predicted_s": [1.1e-3, 1.8e-3], "split": ["test"] * 2})
>>> s = error_summary(df.assign(rel_error=df.predicted_s / df.time_s - 1))
>>> round(float(s.loc[0, "median_abs_err"]), 3)
0.1
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..files import atomic_path, save_figure, write_text_atomic

LONG_S = 1e-3  # "GEMMs >= 1 ms"


def error_summary(points: pd.DataFrame, by: str = "split") -> pd.DataFrame:
    """Median and p90 absolute relative error per ``by`` value, all points and >= 1 ms."""
    out = []
    for key, g in points.groupby(by, sort=True):
        for label, sel in (("all", g), (">=1ms", g[g["time_s"] >= LONG_S])):
            e = sel["rel_error"].abs()
            out.append({by: key, "subset": label, "points": len(sel),
                        "median_abs_err": float(e.median()) if len(e) else float("nan"),
                        "p90_abs_err": float(e.quantile(0.9)) if len(e) else float("nan"),
                        "median_signed_err": float(sel["rel_error"].median()) if len(e) else float("nan")})
    return pd.DataFrame(out)


def held_out_line(summary: pd.DataFrame) -> str:
    """One line for a profile's ``source``: the held-out errors (or training, without a hold-out)."""
    split = "test" if (summary["split"] == "test").any() else "train"
    parts = []
    for label in ("all", ">=1ms"):
        r = summary[(summary["split"] == split) & (summary["subset"] == label)]
        if len(r) and r["points"].iloc[0]:
            parts.append(f"{label} median {100 * r['median_abs_err'].iloc[0]:.1f}% "
                         f"p90 {100 * r['p90_abs_err'].iloc[0]:.1f}% (n={int(r['points'].iloc[0])})")
    return f"{'held-out' if split == 'test' else 'training (no hold-out)'} |error| " + "; ".join(parts)


def write_points_csv(points: pd.DataFrame, path: str | Path, *, force: bool = True) -> Path:
    """Per-point report: the inputs plus measured_s, predicted_s, rel_error, split (gzip when
    the name ends in ``.gz``; pandas reads either)."""
    df = points.rename(columns={"time_s": "measured_s"})
    p = Path(path)
    if not p.name.endswith(".gz"):
        return write_text_atomic(p, df.to_csv(index=False, float_format="%.5g"), force=force)
    import gzip
    with atomic_path(p, force=force) as tmp:
        with gzip.open(tmp, "wt", compresslevel=9) as fh:
            df.to_csv(fh, index=False, float_format="%.5g")
    return p


def plot_predicted_vs_measured(points: pd.DataFrame, path: str | Path, title: str) -> Path:
    """Log-log scatter of predicted vs measured time, one colour per split, with y = x and +-10%."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for split, g in points.groupby("split"):
        ax.scatter(g["time_s"] * 1e3, g["predicted_s"] * 1e3, s=4, alpha=0.4, label=f"{split} ({len(g)})")
    lo = float(np.nanmin(points[["time_s", "predicted_s"]].to_numpy())) * 1e3
    hi = float(np.nanmax(points[["time_s", "predicted_s"]].to_numpy())) * 1e3
    xs = np.array([lo, hi])
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.plot(xs, xs * 1.1, "k:", lw=0.6)
    ax.plot(xs, xs * 0.9, "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)", title=title)
    ax.legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    return save_figure(fig, path)
