"""Validation outputs: the measured-runs CSV, a markdown accuracy report, a scatter plot.

Files go to ``<out>/<machine>/<date>.csv``, ``<date>.md`` and ``<date>.png`` where
``machine`` is the GPU's name (CUDA) or the host name (CPU), lower-cased with anything
but letters, digits and dashes replaced. CSV columns (times in seconds):

``scenario, schedule, predicted_s, measured_s, err, correct, not_honoured, torch,
device, date`` then ``kind, gpus, m, n, k, dtype, mode, world_size, gpu_profile,
topology, repeats, measured_min_s, measured_max_s, measured_notch_s, measured_even_s,
measured_odd_s`` (``err`` = (predicted - measured) / measured; ``not_honoured`` = the knobs the
device could not apply, ``;``-separated; ``measured_notch_s`` = the half-width of the median's
95% notch, :func:`~ficco_sim.validate.compare.median_notch`; ``measured_even_s`` /
``measured_odd_s``: the medians of the even and of the odd repeats,
:func:`~ficco_sim.validate.compare.halves`).

>>> sanitize("NVIDIA H100 80GB HBM3")
'nvidia-h100-80gb-hbm3'
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pandas as pd

from ..files import atomic_path, save_figure, write_text_atomic
from .compare import summarize

COLUMNS = ["scenario", "schedule", "predicted_s", "measured_s", "err", "correct", "not_honoured", "torch",
           "device", "date"]

CPU_GAP = (
    "The predictions use this host's own profile (`<out>/<machine>/cpu.yaml`, written by `ficco-sim calibrate "
    "--device cpu` on this host before the first replay; a profile measured on another host is never used). "
    "It describes one replay rank: one compute thread at its measured GEMM rate while every rank computes, gloo "
    "latency and one stream's rate from one-way messages, the host cores every byte a transfer moves costs "
    "(from all-ranks exchanges), the per-op issue cost of the Python loop, what posting a message costs the "
    "issuing thread (from both ranks posting, then computing), and the ranks' start spread, which the measured "
    "span includes. The engine's host model: a rank's compute ops and message posts take turns on its one "
    "issuing thread, and a computing thread and a message's thread split the rank's cores evenly, so on a host "
    "with no spare core overlap moves bytes only by slowing compute as much. "
    "`gap` names which part of a rank's time (compute, issue, wait on messages, imbalance: the span beyond "
    "the mean rank's own run) is furthest from its prediction, from the runner's own per-op clocks. "
    "`measured_min_s` / `measured_max_s` in the CSV show how far one run is from another: on a small host, "
    "the operating system's placement of the ranks' compute and gloo threads moves runs by milliseconds.")


def _gap(r) -> str:
    """``**dominant** +x.xx, other +y.yy, ...`` from a row's ``gap_<part>_s`` columns."""
    dom = getattr(r, "gap_mechanism", "")
    if not isinstance(dom, str) or not dom:
        return "-"
    cells = []
    for part in ("compute", "issue", "wait", "imbalance"):
        v = getattr(r, f"gap_{part}_s", float("nan"))
        if v == v:
            name = f"**{part}**" if part == dom else part
            cells.append(f"{name} {v * 1e3:+.2f}")
    return ", ".join(cells)


def sanitize(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return s or "unknown"


def machine_name(device: str, device_label: str = "") -> str:
    """Directory name for a machine: the GPU's name on CUDA, else the host name."""
    if device == "cuda" and device_label:
        return sanitize(device_label)
    return sanitize(socket.gethostname())


def _fmt_s(x: float) -> str:
    if x != x:
        return "-"
    return f"{x * 1e3:.3f}"


def _fmt_pct(x: float) -> str:
    return "-" if x != x else f"{x * 100:.1f}%"


def scatter(df: pd.DataFrame, path: Path, title: str) -> None:
    """Predicted vs measured makespan (log-log, one colour per scenario, y = x line)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 5))
    d = df.dropna(subset=["predicted_s", "measured_s"])
    for scen, g in d.groupby("scenario", sort=False):
        ax.scatter(g["predicted_s"] * 1e3, g["measured_s"] * 1e3, label=str(scen)[:40], s=28)
    if not d.empty:
        lo = min(d["predicted_s"].min(), d["measured_s"].min()) * 1e3 * 0.8
        hi = max(d["predicted_s"].max(), d["measured_s"].max()) * 1e3 * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("predicted makespan (ms)")
    ax.set_ylabel("measured makespan (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


# the ranking figures beyond the strict ones: (key suffix, how the line opens, what its top-1 means)
RANKINGS = (
    ("resolved", "- the same, counting only the differences the measurement resolves (two medians whose 95% notches, "
     "1.58 IQR / sqrt(repeats), overlap are a measured tie)", "top-1 (the predicted best measures within the notches "
     "of the measured best)", ""),
    ("self", "- the measurement against itself (the medians of the even and of the odd repeats, each half spanning "
     "the run)", "the same fastest schedule", ": how far this run reproduces its own ranking. Where it sits below "
     "the bars, the case set's schedules differ by less than this host's noise and the prediction's tau and top-1 "
     "move from run to run whatever the model (a noise-free prediction meets one noisy ranking, the halves two "
     "noisy ones: it can score above them)"))


def _rankings(overall: dict) -> list[str]:
    """A line per figure of :data:`RANKINGS` the table has (NaN: it has none)."""
    out = []
    for key, opening, top, tail in RANKINGS:
        tau = overall.get(f"mean_kendall_tau_{key}", float("nan"))
        if tau == tau:
            out.append(f"{opening}: Kendall tau **{tau:.3f}**, {top} **{_fmt_pct(overall[f'top1_{key}_rate'])}**"
                       f"{tail}")
    return out


def markdown(df: pd.DataFrame, context: dict, png_name: str | None) -> str:
    """The accuracy report (see module docstring for the columns it draws on)."""
    per, overall = summarize(df)
    lines = [f"# Validation: {context.get('title', 'predicted vs measured')}", ""]
    for key in ("date", "command", "device", "torch", "mode", "world_size", "gpu_profile", "topology",
                "repeats", "warmup", "source"):
        if context.get(key) not in (None, ""):
            lines.append(f"- **{key.replace('_', ' ')}**: `{context[key]}`")
    lines += ["", "## Accuracy", "",
              f"- rows: {overall['rows']}",
              f"- MAPE (mean |predicted - measured| / measured): **{_fmt_pct(overall['mape'])}**",
              f"- mean Kendall tau of the schedule ranking per scenario: **{overall['mean_kendall_tau']:.3f}** "
              f"over {overall['scenarios_ranked']} scenario(s)"
              if overall["mean_kendall_tau"] == overall["mean_kendall_tau"] else
              "- Kendall tau: - (undefined: no scenario with two or more schedules, or predictions all tied)",
              f"- top-1 (predicted best schedule is the measured best): **{_fmt_pct(overall['top1_rate'])}**",
              *_rankings(overall),
              "", "Accuracy is reported, never asserted: a measured number is only ever written by running "
              "the executor.", "", "### Per scenario", "",
              "| scenario | schedules | MAPE | Kendall tau | top-1 | predicted best | measured best | "
              "tau, resolved | top-1, resolved | tau, run vs itself | top-1, run vs itself |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    yes_no = lambda v: "-" if v != v else ("yes" if v else "no")  # noqa: E731
    num = lambda v: "-" if v != v else f"{v:.3f}"  # noqa: E731
    for r in per.itertuples():
        lines.append(f"| {r.scenario} | {r.schedules} | {_fmt_pct(r.mape)} | {num(r.kendall_tau)} | {yes_no(r.top1)} | "
                     f"{r.predicted_best} | {r.measured_best} | {num(r.kendall_tau_resolved)} | "
                     f"{yes_no(r.top1_resolved)} | {num(r.kendall_tau_self)} | {yes_no(r.top1_self)} |")
    lines += ["", "### Per schedule (ms)", "",
              "| scenario | schedule | predicted | measured | error | correct | not honoured | gap (measured - "
              "predicted, ms) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        nh = str(r.not_honoured) if isinstance(r.not_honoured, str) and r.not_honoured else "-"
        corr = "-" if r.correct != r.correct else ("yes" if bool(r.correct) else "**NO**")
        lines.append(f"| {r.scenario} | {r.schedule} | {_fmt_s(r.predicted_s)} | {_fmt_s(r.measured_s)} | "
                     f"{_fmt_pct(r.err)} | {corr} | {nh} | {_gap(r)} |")
    if png_name:
        lines += ["", f"![predicted vs measured]({png_name})"]
    details = context.get("not_honoured_details") or {}
    if details:
        lines += ["", "## Knobs not honoured", ""]
        lines += [f"- {k}" for k in sorted(details)]
    if context.get("gap"):
        lines += ["", "## Why predictions and measurements differ here", "", context["gap"]]
    if context.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in context["notes"]]
    return "\n".join(lines) + "\n"


def write_all(df: pd.DataFrame, out_dir: str | Path, machine: str, stamp: str, context: dict) -> dict[str, Path]:
    """Write ``<out>/<machine>/<stamp>.{csv,md,png}``; returns the paths."""
    folder = Path(out_dir) / machine
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"csv": folder / f"{stamp}.csv", "md": folder / f"{stamp}.md", "png": folder / f"{stamp}.png"}
    cols = COLUMNS + [c for c in df.columns if c not in COLUMNS]
    with atomic_path(paths["csv"]) as tmp:
        df[cols].to_csv(tmp, index=False)
    scatter(df, paths["png"], context.get("title", "predicted vs measured"))
    write_text_atomic(paths["md"], markdown(df, context, paths["png"].name))
    return paths
