"""Plots of an explore study (matplotlib, Agg backend): PNG files in the output folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_plots(points: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[Path]:
    """Speedup per scenario and schedule, loss breakdown, best-schedule map, topologies side by side."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    files = []
    ok = points[points["status"] == "ok"]
    for (gpu, topo), grp in ok.groupby(["gpu", "topology"], sort=False):
        piv = grp.pivot_table(index="scenario", columns="schedule", values="speedup", sort=False)
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(piv)), 4.5))
        piv.plot.bar(ax=ax, width=0.85)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel("speedup over none")
        ax.set_title(f"Speedup per scenario and schedule ({gpu}, {topo})")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        files.append(out / f"speedup_{gpu}_{topo.replace(':', '')}.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    if len(summary):
        losses = ["dil_compute", "cil_compute", "cil_comm"]
        lab = summary["scenario"] + " | " + summary["topology"]
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(summary)), 4.5))
        summary.set_index(lab)[losses].plot.bar(ax=ax, stacked=True)
        ax.set_ylabel("loss (fraction of isolated time)")
        ax.set_title("Loss breakdown of the best schedule")
        fig.tight_layout()
        files.append(out / "losses.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        piece = summary["piece_rows"].clip(lower=1)
        for name, grp in summary.groupby("best", sort=True):
            ax.scatter(grp["t_comm_iso"] / grp["t_comp_iso"], piece[grp.index], label=name, s=30)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("comm / compute ratio (isolated)")
        ax.set_ylabel("FiCCO piece size (rows of M or K)")
        ax.set_title("Best schedule over (comm/compute, piece size)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(out / "best_map.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)

        piv = summary.pivot_table(index="scenario", columns="topology", values="speedup", sort=False)
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(piv)), 4.5))
        piv.plot.bar(ax=ax)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel("best speedup over none")
        ax.set_title("Topologies side by side")
        fig.tight_layout()
        files.append(out / "topologies.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files
