"""Plots of an explore study (matplotlib, Agg backend): PNG files in the output folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..files import save_figure


MAX_BARS = 12    # schedules per speedup chart (tab20 tells no more apart)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _bars(plt, table: pd.DataFrame, title: str, xlabel: str, path: Path, *, stacked: bool = False,
          ref: float | None = None) -> Path:
    """Horizontal bars, one row per index entry (scenario names are long), legend outside."""
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * len(table) * (1 if stacked else max(1, table.shape[1] / 3))))
    table.iloc[::-1].plot.barh(ax=ax, stacked=stacked, width=0.8, colormap="tab20" if table.shape[1] > 10 else None)
    if ref is not None:
        ax.axvline(ref, color="k", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def write_plots(points: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[Path]:
    """Speedup per scenario and schedule, loss breakdown, best-schedule map, topologies side by side."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    files = []
    ok = points[points["status"] == "ok"]
    # one number per point: the DES's where it confirmed the closed form's (never their mean)
    ok = ok.assign(_des=ok["engine"] != "des").sort_values("_des", kind="stable").drop_duplicates(
        ["gpu", "topology", "scenario_id", "schedule"])
    for (gpu, topo), grp in ok.groupby(["gpu", "topology"], sort=False):
        piv = grp.pivot_table(index="scenario", columns="schedule", values="speedup", sort=False)
        keep = piv.max().nlargest(MAX_BARS).index       # a full space has ~90 schedules: its fastest, readable
        title = f"Speedup per scenario and schedule ({gpu}, {topo})" + (
            f": the {MAX_BARS} fastest of {piv.shape[1]}" if piv.shape[1] > MAX_BARS else "")
        files.append(_bars(plt, piv[[c for c in piv.columns if c in keep]], title, "speedup over none",
                           out / f"speedup_{gpu}_{topo.replace(':', '')}.png", ref=1.0))
    if len(summary):
        losses = ["dil_compute", "cil_compute", "cil_comm"]
        lab = summary["scenario"] + " | " + summary["gpu"] + " " + summary["topology"]
        files.append(_bars(plt, summary.set_index(lab)[losses], "Losses of the best schedule",
                           "loss (fraction of isolated time)", out / "losses.png", stacked=True))

        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        piece = summary["piece_rows"].clip(lower=1)
        for name, grp in summary.groupby("best", sort=True):
            ax.scatter(grp["t_comm_iso"] / grp["t_comp_iso"], piece[grp.index], label=name, s=30)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("comm / compute ratio (isolated)")
        ax.set_ylabel("the scenario's FiCCO piece (rows of M or K / GPUs^2)")
        ax.set_title("Best schedule over (comm/compute, piece size)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        fig.tight_layout()
        files.append(save_figure(fig, out / "best_map.png"))

        piv = summary.assign(hw=summary["gpu"] + " " + summary["topology"]).pivot_table(
            index="scenario", columns="hw", values="speedup", sort=False)
        files.append(_bars(plt, piv, "Best speedup over no overlap, side by side", "speedup over none",
                           out / "topologies.png", ref=1.0))
    return files
