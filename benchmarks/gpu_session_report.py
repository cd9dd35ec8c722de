"""ficco-sim against the measurements of one GPU session (validation/gpu/<gpu>/<date>/, as
``benchmarks/gpu_session.sh`` writes them; the GPU is the folder's parent's name).

The profiles are the shipped ones: the session's GPU, and ``--also`` others (default ``h100``,
whose GEMM model is fitted on Vidur's H100 table). Table 3's "as run" rows use the
profile the session's ``validate --gpu`` named ("as run": for a full session, the one
``ficco-sim calibrate --device cuda`` wrote in it). Up to seven tables, each
where the session has its files:

1. GEMM cost model vs ``<gpu>-gemm_times.csv`` (cuBLAS, the library models' layers,
   ``benchmarks/gpu_gemm_table.py``): |error| median, p90, signed median.
2. Decomposition loss (DIL) read off that table vs predicted (``benchmarks/dil_error.py``'s
   definition), at 8 and 16 pieces the issue's bar (|diff| <= 0.05).
3. The single-GPU replays (``validate --device cuda --single-gpu``) predicted again with the
   shipped profiles: MAPE, signed median, mean Kendall tau, top-1, per (kind, ranks).
4. Copies beside a GEMM chain (``benchmarks/gpu_contention.py``, copy engine, back-to-back
   copies): the GEMM's and the copies' measured slowdowns against the contention rule's
   (:mod:`ficco_sim.contention`) at the measured copy rate and the GEMM's HBM rate.
5. DIL timed directly: row pieces back to back (``benchmarks/gpu_dil.py``) against the model.
6. Every copy path, stream priority and copy size of ``gpu_contention.py``.
7. Kernel-boundary gaps (``benchmarks/gpu_launch.py``) against the profile's.

    python benchmarks/gpu_session_report.py [validation/gpu/h200/2026-11-27] [--also h100 a100]
    python benchmarks/gpu_session_report.py validation/gpu/h200/2026-11-27-2
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))             # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

from dil_error import BAR, dil_table  # noqa: E402
from contention_model import modelled_copies  # noqa: E402

from ficco_sim.calibrate.fit_gemm import predict_times  # noqa: E402
from ficco_sim.calibrate.measurements import read_gemm_table  # noqa: E402
from ficco_sim.contention import comm_slowdown, compute_slowdown  # noqa: E402
from ficco_sim.gemm_model import gemm_time, hbm_traffic  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402

DEFAULT = ROOT / "validation" / "gpu" / "h200" / "2026-11-27"


def session_gpu(folder: Path) -> str:
    """The GPU a session folder (validation/gpu/<gpu>/<date>) ran on."""
    return folder.resolve().parent.name


def gemm_error(folder: Path, profiles: tuple[str, ...]) -> Table:
    gpu = session_gpu(folder)
    rows = read_gemm_table(folder / f"{gpu}-gemm_times.csv", gpu)
    t = Table(title=f"1. GEMM model vs {len(rows)} cuBLAS GEMMs on the {gpu.upper()} (never fitted)")
    for c in ("profile", "median |err|", "p90 |err|", "signed median", ">= 1 ms median |err|"):
        t.add_column(c, justify="right")
    for p in profiles:
        err = predict_times(load_gpu(p), rows) / rows["time_s"].to_numpy() - 1.0
        long = rows["time_s"].to_numpy() >= 1e-3
        t.add_row(p, f"{100 * np.median(abs(err)):.1f}%", f"{100 * np.quantile(abs(err), .9):.1f}%",
                  f"{100 * np.median(err):+.1f}%", f"{100 * np.median(abs(err[long])):.1f}%")
    return t


def dil(folder: Path) -> Table:
    gpu = session_gpu(folder)
    rows = read_gemm_table(folder / f"{gpu}-gemm_times.csv", gpu)
    t = Table(title=f"2. DIL on the {gpu.upper()} (profile {gpu}, never fitted); "
                    f"bar |diff| <= {BAR} at 8 and 16 pieces")
    for c in ("whole m", "pieces", "shapes", "measured", "predicted", "diff", "bar"):
        t.add_column(c, justify="right")
    rows = rows.assign(predicted_s=predict_times(load_gpu(gpu), rows))
    d = dil_table(rows, "time_s").merge(dil_table(rows, "predicted_s"), on=["group", "n", "k", "m_whole", "pieces"])
    for (whole, p), x in d.groupby(["m_whole", "pieces"]):
        meas, pred = x["time_s"].median(), x["predicted_s"].median()
        bar = ("met" if abs(pred - meas) <= BAR else "missed") if p in (8, 16) else ""
        t.add_row(str(whole), str(p), str(len(x)), f"{meas:.3f}", f"{pred:.3f}", f"{pred - meas:+.3f}", bar)
    return t


def replays(folder: Path, profiles: tuple[str, ...]) -> Table:
    """Each replay report predicted again (as ``validate --import`` does) and scored as
    ``validate`` scores it (:func:`ficco_sim.validate.compare.summarize`, tie-aware top-1)."""
    from ficco_sim.validate.compare import summarize
    from ficco_sim.validate.importer import predict_measured, read_measured
    t = Table(title=f"3. Single-GPU replays on the {session_gpu(folder).upper()} (every rank's work on one GPU), "
                    "predicted again")
    for c in ("profile", "report", "kind", "ranks", "rows", "MAPE", "signed median", "Kendall tau", "top-1"):
        t.add_column(c, justify="right")
    reports = sorted(glob.glob(str(folder / "validation/*/*.csv")))
    for p in ("as run",) + profiles:       # "as run": the report's own predictions (the session's --gpu)
        for path in reports:
            runs = pd.read_csv(path)
            if p != "as run":
                runs["predicted_s"] = [q for q, _, _ in predict_measured(read_measured(path), load_gpu(p), where=path)]
            for kind, x in runs.groupby("kind"):
                _, overall = summarize(x)
                err = x["predicted_s"] / x["measured_s"] - 1.0
                t.add_row(p, Path(path).parent.name, kind, str(x["gpus"].iloc[0]), str(overall["rows"]),
                          f"{100 * overall['mape']:.1f}%", f"{100 * err.median():+.1f}%",
                          f"{overall['mean_kendall_tau']:.2f}", f"{overall['top1_rate']:.0%}")
    return t


def dil_direct(folder: Path) -> Table:
    """DIL of row pieces run back to back (``benchmarks/gpu_dil.py``) beside the same shapes'
    pieces timed one at a time (``evicted``: queued, L2 evicted before each) and the model."""
    gpu = session_gpu(folder)
    frames = []
    for path in sorted(folder.glob(f"{gpu}-dil*.csv")):
        x = pd.read_csv(path, comment="#")
        frames.append(x.assign(mode=x["mode"] if "mode" in x else "back-to-back", file=path.name))
    d = pd.concat(frames, ignore_index=True)
    key = ["file", "mode", "model", "op", "tp", "n", "k", "m"]
    d = d.merge(d[d["pieces"] == 1][key + ["time_ms_median"]].rename(columns={"time_ms_median": "whole"}), on=key)
    d["dil"] = d["time_ms_median"] / d["whole"] - 1.0
    g = load_gpu(gpu)
    # the model's DIL, as dil_error.py predicts the tables: its times (launch included) of every
    # whole M and every piece M / p, through the one DIL definition (dil_table)
    nk = d[["n", "k"]].drop_duplicates()
    ms = sorted({m // p for m, p in d[["m", "pieces"]].drop_duplicates().itertuples(index=False)})
    times = pd.DataFrame([("all", n, k, m, gemm_time(g, m, n, k)) for n, k in nk.itertuples(index=False) for m in ms],
                         columns=["group", "n", "k", "m", "pred"])
    pred = dil_table(times, "pred").drop(columns="group").rename(columns={"m_whole": "m"})
    d = d.merge(pred, on=["n", "k", "m", "pieces"])
    t = Table(title=f"5. DIL timed directly on the {gpu.upper()} (benchmarks/gpu_dil.py; median over shapes), "
                    f"profile {gpu}'s prediction")
    for c in ("file", "mode", "whole m", "pieces", "shapes", "measured", "predicted"):
        t.add_column(c, justify="right")
    for (f, mode, m, p), x in d[d["pieces"] > 1].groupby(["file", "mode", "m", "pieces"]):
        if p in (8, 16):
            t.add_row(f, mode, str(m), str(p), str(len(x)), f"{x['dil'].median():.3f}", f"{x['pred'].median():.3f}")
    return t


def contention_grid(folder: Path, model: bool = True) -> Table:
    """Every copy path, stream priority and copy size of ``benchmarks/gpu_contention.py``:
    medians over GEMM shapes and start orders; with ``model``, the discrete-event engine's
    answer beside them (``benchmarks/contention_model.py``, the kernels as the lowerings make them
    today; about two minutes)."""
    gpu = session_gpu(folder)
    d = pd.concat([pd.read_csv(p, comment="#") for p in sorted(folder.glob(f"{gpu}-contention*.csv"))],
                  ignore_index=True)
    if "priority" not in d:         # the script's first version: one priority, copies first
        d = d.assign(priority="same", order="copies-first")
    d = d[d["duty"] == 1.0]         # back to back only (a sleep between copies needs an SM)
    d = d.assign(mib=d["copy_bytes"] // 2**20, copy_share=d["copy_active_gbps"] / d["copy_alone_gbps"])
    t = Table(title=f"6. Copies beside a GEMM chain on the {gpu.upper()} by path, priority and size "
                    "(medians over 4 GEMM shapes and both start orders; model: the discrete-event engine, "
                    "tr-many's at 256 MiB copies first only)")
    for c in ("path", "priority", "copy MiB", "rows", "GEMM slowdown (min-max)", "model", "copy rate beside / alone",
              "model"):
        t.add_column(c, justify="right")
    g = load_gpu(gpu)
    for (path, prio, mib), x in d.groupby(["path", "priority", "mib"]):
        # short-block copies take the engine seconds per row: only their 256 MiB copies-first rows
        m = x if path != "tr-many" else x[(x["order"] == "copies-first") & (x["mib"] == 256)]
        modelled = model and path in ("sm", "dma", "tr-many", "tr-wave") and len(m)
        pred = np.array([modelled_copies(g, r) for r in m.itertuples()]) if modelled else None
        t.add_row(path, prio, str(mib), str(len(x)),
                  f"{x['slowdown'].median():.3f} ({x['slowdown'].min():.2f}-{x['slowdown'].max():.2f})",
                  "" if pred is None else f"{np.median(pred[:, 0]):.3f} ({pred[:, 0].min():.2f}-"
                                          f"{pred[:, 0].max():.2f})",
                  f"{x['copy_share'].median():.2f}", "" if pred is None else f"{np.median(pred[:, 1]):.2f}")
    return t


def launch(folder: Path) -> Table:
    """Kernel-boundary gaps (``benchmarks/gpu_launch.py``) beside the profile's numbers."""
    gpu = session_gpu(folder)
    d = pd.read_csv(folder / f"{gpu}-launch.csv", comment="#")
    g = load_gpu(gpu)
    t = Table(title=f"7. Kernel-boundary gaps on the {gpu.upper()} (benchmarks/gpu_launch.py, Kineto)")
    for c in ("kind", "gaps", "median (us)", "p10-p90 (us)", f"the engines charge, {gpu} (us)"):
        t.add_column(c, justify="right")
    prof = dict.fromkeys(("idle", "queued", "event"), g.launch_overhead)   # at every kernel boundary
    for kind, x in d.groupby("kind", sort=False):
        q = x["gap_us"].quantile([.1, .9])
        t.add_row(kind, str(len(x)), f"{x['gap_us'].median():.2f}", f"{q.iloc[0]:.2f}-{q.iloc[1]:.2f}",
                  f"{prof[kind] * 1e6:.2f}")
    return t


def contention(folder: Path) -> Table:
    gpu_name = session_gpu(folder)
    rows = pd.read_csv(folder / f"{gpu_name}-contention.csv", comment="#")
    rows = rows[(rows["path"] == "dma") & (rows["duty"] == 1.0) & (rows["copy_bytes"] == 64 << 20)]
    if "order" in rows:         # the script's later version also starts the copies after the GEMM
        rows = rows[rows["order"] == "copies-first"]
    if "priority" in rows:      # ... and sets stream priorities
        rows = rows[rows["priority"] == "same"]
    gpu = load_gpu(gpu_name)
    t = Table(title=f"4. Back-to-back copy-engine copies beside a GEMM chain on the {gpu_name.upper()} "
                    f"(profile {gpu_name}'s rule)")
    for c in ("GEMM m x n x k", "copy rate beside (GB/s)", "GEMM slowdown", "rule", "copy slowdown", "rule"):
        t.add_column(c, justify="right")
    for r in rows.itertuples():
        copy_rate = 2 * r.copy_gbps * 1e9                    # a copy reads and writes HBM
        gemm_rate = hbm_traffic(r.m, r.n, r.k, "float16") / gemm_time(gpu, r.m, r.n, r.k, "float16")
        t.add_row(f"{r.m}x{r.n}x{r.k}", f"{r.copy_gbps:.0f} (alone {r.copy_alone_gbps:.0f})", f"{r.slowdown:.3f}",
                  f"{compute_slowdown(gpu, copy_rate):.3f}", f"{r.copy_alone_gbps / r.copy_active_gbps:.2f}",
                  f"{comm_slowdown(gpu, gemm_rate):.3f}")
    return t


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--also", nargs="*", default=["h100"], help="other shipped profiles to set beside the GPU's")
    args = ap.parse_args()
    profiles = (session_gpu(args.folder), *args.also)
    console = Console(width=150)
    gpu, f = session_gpu(args.folder), args.folder
    # each table where the session has its files (a rerun session may have only some)
    for table, needs in ((lambda: gemm_error(f, profiles), f"{gpu}-gemm_times.csv"),
                         (lambda: dil(f), f"{gpu}-gemm_times.csv"),
                         (lambda: replays(f, profiles), "validation/*/*.csv"),
                         (lambda: contention(f), f"{gpu}-contention.csv"),
                         (lambda: dil_direct(f), f"{gpu}-dil*.csv"),
                         (lambda: contention_grid(f), f"{gpu}-contention*.csv"),
                         (lambda: launch(f), f"{gpu}-launch.csv")):
        if any(f.glob(needs)):
            console.print(table())


if __name__ == "__main__":
    main()
