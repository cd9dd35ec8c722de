"""The two calibration workflows: from measurement files, and on the local device.

Both end the same way: fitted numbers (``kind: fitted``, with a ``source`` naming the data,
the groups fitted and held out, the date and the held-out error) written into a profile,
plus a per-point report CSV and a predicted-vs-measured PNG per fit.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..hardware import GpuProfile, beyond_peak, load_gpu, parse_profile
from . import measurements as ms
from . import fit_nccl, mamf, nccl_tests
from .fit_gemm import GemmFit, TooFewShapes, fit_gemm, pinned, predict_times
from .fit_links import LinkFits, fit_collectives, fit_contention, fit_copies
from .report import error_summary, held_out_line, plot_predicted_vs_measured, write_points_csv
from .writer import update_profile, write_profile


@dataclass
class Calibration:
    """What a calibration produced: fits, summaries, the profile updates and files written."""

    gpu: str
    gemm: GemmFit | None = None
    gemm_summary: pd.DataFrame | None = None
    links: LinkFits | None = None
    copy: dict[str, Any] | None = None
    contention: float | None = None
    nccl_summary: pd.DataFrame | None = None
    updates: dict[str, tuple[Any, str, str]] = field(default_factory=dict)
    unfitted: dict[str, str] = field(default_factory=dict)   # profile path -> why the inputs could not tell it
    written: list[Path] = field(default_factory=list)
    measured: list[tuple[int, int, int, str, float, str]] | None = None    # kept timings (keep_times)
    trace_gemms: pd.DataFrame | None = None    # a trace's GEMM operators that ran alone (traces.gemm_times)
    notes: list[str] = field(default_factory=list)   # what was left out of the inputs, or looks off, and why
    gemm_before: pd.Series | None = None     # the base profile's relative error on the GEMM rows, before the fit
    keep_times: bool = False                  # the GEMM timings are kept (gemm.measured), fitted or not
    unfit_rows: list[pd.DataFrame] = field(default_factory=list)   # GEMM timings too few to fit on, kept only

    def summary_rows(self) -> list[tuple[str, str, str]]:
        """(quantity, value, note) lines for the CLI table."""
        rows = []
        for path, (value, kind, source) in self.updates.items():
            rows.append((path, value if isinstance(value, str) else f"{value:.4g}", kind))
        for path, why in self.unfitted.items():
            rows.append((path, "not fitted", why))
        if self.gemm_summary is not None:
            for _, r in self.gemm_summary.iterrows():
                if not int(r["points"]):
                    continue          # an empty subset has no error to report
                rows.append((f"GEMM |err| {r['split']} {r['subset']}",
                             f"median {100 * r['median_abs_err']:.1f}%  p90 {100 * r['p90_abs_err']:.1f}%",
                             f"{int(r['points'])} points"))
        if self.nccl_summary is not None:
            for r in self.nccl_summary.itertuples():
                rows.append((f"{r.collective} x{r.gpus} {r.band} |err|", f"median {100 * r.median:.1f}%",
                             f"{r.rows} rows, in sample"))
        if self.links is not None and not self.links.scaling.empty:
            for _, r in self.links.scaling.dropna(subset=["median_abs_err"]).iterrows():
                rows.append((f"{r['setup']} 2->4 GPU all-reduce", f"median {100 * r['median_abs_err']:.1f}%",
                             r["assumption"]))
        if self.trace_gemms is not None and len(self.trace_gemms):
            t = self.trace_gemms
            rows.append(("GEMM |err| trace ops alone", f"median {100 * t['abs_err'].median():.1f}%  signed "
                         f"{100 * t['err'].median():+.1f}%", f"{len(t)} shapes, the base's model (not fitted)"))
        if self.gemm_before is not None and len(self.gemm_before):
            e = self.gemm_before
            rows.append(("GEMM |err| base profile, before the fit", f"median {100 * e.abs().median():.1f}%  signed "
                         f"{100 * e.median():+.1f}%", f"{len(e)} points, every row (nothing fitted)"))
        rows += [("note", "", n) for n in self.notes]
        return rows


def _today() -> str:
    return _dt.date.today().isoformat()


def _short(groups: Sequence[str]) -> str:
    # "meta-llama/Llama-2-7b-hf" -> "Llama-2-7b-hf"; benchmark groups ("split_m/2") stay whole.
    return ", ".join(g if g.startswith("split_") else g.split("/")[-1] for g in groups) or "none"


def gemm_source(fit: GemmFit, file: str, summary: pd.DataFrame) -> str:
    return (f"fitted by ficco-sim calibrate {_today()} on {file}: {int((fit.rows['split'] == 'train').sum())} rows "
            f"of {_short(fit.train_groups)}; held out {_short(fit.test_groups)}; {held_out_line(summary)}")


def calibrate_from_files(paths: Sequence[str | Path], gpu: str, base_profile: str | Path | None = None, *,
                         holdout: str | Sequence[str] | None = "auto", fit_launch: bool = True,
                         fit_roofline: bool = False, out: str | Path | None = None, force: bool = False,
                         report_dir: str | Path | None = None, use_engine: bool = True,
                         topology: str = "switch", keep_times: bool = False) -> Calibration:
    """Fit a profile's GEMM model (and, with a collective file, link alpha-beta) to measured files.

    ``paths``: vidur ``gemm_times.csv`` / ``collective_times.csv``, ficco-sim benchmark CSVs, or
    PyTorch-profiler traces (``*.json[.gz]``, one rank each, several profiler steps): the
    compute slowdown beside collectives (:mod:`ficco_sim.traces.interference`).
    ``gpu``: which rows to use (``a40``, ``a100``, ``h100``; ``local`` for benchmark files).
    ``base_profile``: the profile whose other numbers the model uses (default: the built-in
    named ``gpu``). ``holdout``: groups (vidur: models) kept out of the fit and reported
    separately; ``"auto"`` holds out every third model. ``out``: write the calibrated profile
    there (never over an existing file unless ``force``). ``report_dir``: per-point CSVs and PNGs.
    ``fit_roofline``: fit ``gemm.roofline_exponent`` too (a GEMM table with memory- and
    math-bound shapes, such as the Vidur tables, tells it apart from the efficiency).
    ``topology``: the kind of topology nccl-tests runs ran on (``switch``, ``fc`` or ``ring``; the
    GPU count comes from each run). ``keep_times``: also write every timed GEMM shape into the
    profile (``gemm.measured``, its median time): those shapes then cost exactly that in every
    engine, the fit every other shape (:func:`kept_times`).
    """
    def run(report: Path | None) -> Calibration:
        return _from_files(paths, gpu, base_profile, holdout=holdout, fit_launch=fit_launch, fit_roofline=fit_roofline,
                           out=out, force=force, report_dir=report, use_engine=use_engine, topology=topology,
                           keep_times=keep_times)
    return _staged(report_dir, run)


def _staged(report_dir: str | Path | None, run) -> Calibration:
    """``run(folder)`` with its report written to a folder beside ``report_dir`` that lands in
    it only once the whole calibration went through (a run that fails writes no report)."""
    if not report_dir:
        return run(None)
    import shutil
    import tempfile
    final = Path(report_dir)
    if final.exists() and not final.is_dir():
        raise InputError("--report", None, f"{final} is a file; --report names a folder")
    final.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        cal = run(staged)
        final.mkdir(exist_ok=True)
        moved = {}
        for f in sorted(staged.iterdir()):
            moved[f] = final / f.name
            f.replace(moved[f])
        cal.written = [moved.get(Path(w), Path(w)) for w in cal.written]
        if not moved:
            cal.notes.append(f"--report {final}: nothing to report from these inputs")
        return cal
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _from_files(paths: Sequence[str | Path], gpu: str, base_profile: str | Path | None, *, holdout, fit_launch: bool,
                fit_roofline: bool, out, force: bool, report_dir, use_engine: bool, topology: str,
                keep_times: bool) -> Calibration:
    if not paths:
        raise InputError("--from", None, "give at least one measurement file")
    base = load_gpu(base_profile if base_profile is not None else gpu)
    if base.gemm.measured:      # fit the model on the timings, not on a base's pinned shapes
        import dataclasses
        base = dataclasses.replace(base, gemm=dataclasses.replace(base.gemm, measured={}))
    cal = Calibration(gpu=gpu, keep_times=keep_times)
    traces = [str(p) for p in paths if is_trace(p)]
    if traces:
        from .from_traces import read_traces
        read_traces(cal, base, traces, report_dir)
    logs = [str(p) for p in paths if not is_trace(p) and nccl_tests.looks_like(p)]
    bare = next((str(p) for p in paths if not is_trace(p) and str(p) not in logs and nccl_tests.table_without_header(p)),
                None)
    if bare is not None:
        raise InputError(bare, None, "an nccl-tests table without the output around it (no '# nThread' header): give "
                         "the test's whole output, whose '# nThread' and '#  Rank' lines say how many GPUs ran and how")
    if logs:
        fit_nccl.calibrate_collectives(cal, base, logs, topology, report_dir)
    finder = [str(p) for p in paths if not is_trace(p) and str(p) not in logs and mamf.looks_like(p)]
    tables = [(p, mamf.read(p)) for p in finder]       # mamf-finder's GEMM sweeps: a user's timings
    tables += [(str(p), ms.read_csv(p, str(p))) for p in paths
               if not is_trace(p) and str(p) not in logs and str(p) not in finder]
    fmts = [ms.file_format(df) for _, df in tables]
    for (where, df), fmt in zip(tables, fmts):
        if fmt == "unknown":      # say which file, before anything else is fitted or refused
            raise InputError(where, None, f"unrecognised measurement file (columns {', '.join(map(str, df.columns[:8]))}"
                             f"{' ...' if len(df.columns) > 8 else ''}): expected vidur gemm_times.csv or "
                             "collective_times.csv columns, a ficco-sim benchmark CSV (kind, ..., time_s), "
                             "nccl-tests output, a mamf-finder sweep or a profiler trace (ficco-sim formats)")
    if out is not None and not report_dir and not traces and not logs and not {"vidur_gemm", "bench"} & set(fmts):
        # say it before fitting: collective tables fit links, which are reported, not written
        raise InputError("--from", None, "collective tables fit link alpha-beta, which is reported (--report DIR: "
                         "tables and plots), not written into a profile; give a GEMM or benchmark file for --out")
    for (where, df), fmt in zip(tables, fmts):
        path = where
        if fmt == "vidur_gemm":
            rows = ms.gemm_rows(df, where, gpu)
            _gemm(cal, base, rows, where, holdout, fit_launch, report_dir, fit_roofline)
        elif fmt == "bench" and where in finder:     # families of shapes (m=...): every third held out
            _gemm(cal, base, ms.gemm_rows(df, where), where, holdout, fit_launch, report_dir, fit_roofline)
            mamf.note_device(cal, df, base)
        elif fmt == "bench":
            _bench(cal, base, df, where, holdout, fit_launch, report_dir, fit_roofline)
        elif fmt == "vidur_collective":
            coll = ms.read_collective_table(path, where=where)
            cal.links = fit_collectives(coll, gpu, use_engine=use_engine)
            if report_dir:
                d = Path(report_dir)
                pts = cal.links.points
                cal.written.append(write_points_csv(pts, d / f"{gpu}_links_points.csv.gz"))
                cal.written.append(write_text(d / f"{gpu}_links_fits.csv", cal.links.fits))
                cal.written.append(write_text(d / f"{gpu}_links_scaling.csv", cal.links.scaling))
                cal.written.append(plot_predicted_vs_measured(pts, d / f"{gpu}_links.png",
                                                              f"{gpu} collectives: alpha-beta fit"))
        else:
            raise InputError(where, None, "unrecognised measurement file: expected vidur gemm_times.csv, "
                             "collective_times.csv or a ficco-sim benchmark CSV")
    if keep_times:
        timed = ([cal.gemm.rows] if cal.gemm is not None else []) + cal.unfit_rows
        if cal.trace_gemms is not None and len(cal.trace_gemms):    # an operator's span, plus its launch
            traced = cal.trace_gemms.assign(time_s=cal.trace_gemms["time_s"] + base.launch_overhead)
            fast = traced[beyond_peak(traced["m"], traced["n"], traced["k"], traced["time_s"],
                                      traced["dtype"].map(base.peak_flops))]
            if len(fast):      # e.g. float32 run as TF32 on tensor cores: not the profile's float32
                r = fast.iloc[0]
                cal.unfitted["gemm.measured"] = (
                    f"{len(fast)} of {len(traced)} traced shapes not kept: faster than {base.name}'s peak for their "
                    f"dtype (e.g. {r['m']}x{r['n']}x{r['k']} {r['dtype']} in {r['time_s'] * 1e6:.3g} us; float32 "
                    "run as TF32?)")
            timed.append(traced.drop(fast.index))
        if not timed:
            raise InputError("--keep-times", None, "keeps the GEMM timings of a GEMM or benchmark file, or of a "
                             "trace's GEMM operators that recorded their shapes and ran alone; none was given")
        cal.measured = kept_times(pd.concat([t[[c for c in ("m", "n", "k", "dtype", "time_s", "ops") if c in t]]
                                             for t in timed], ignore_index=True),
                                  ", ".join(str(p) for p in paths), base)
    if base.name.endswith(":sustained"):
        to_burst(cal, base)
    if out is not None and (cal.updates or cal.measured):
        cal.written.append(update_profile(base.path or gpu, out, cal.updates, force=force, measured=cal.measured))
    elif out is not None and not report_dir:
        raise InputError("--out", None, "nothing was fitted that a profile holds (give a GEMM or benchmark file; "
                         "a trace's GEMM timings are kept with --keep-times)")
    elif out is not None:
        cal.notes.append(f"--out {out} not written: nothing was fitted that a profile holds (the fits are in the "
                         "report)")
    return cal


def is_trace(path: str | Path) -> bool:
    """A PyTorch-profiler (Kineto) trace, by its name: ``*.json`` or ``*.json.gz``."""
    name = Path(path).name.lower()
    return name.endswith(".json") or name.endswith(".json.gz")


def to_burst(cal: Calibration, base: GpuProfile) -> None:
    """GEMM numbers fitted against a ``<gpu>:sustained`` base (timings of the steady regime)
    turned into the plain profile's (the burst regime), which keeps ``gemm.sustained``: the
    efficiencies divided by it, kept times multiplied by it, so that ``OUT.yaml:sustained``
    gives back what the timings say and the plain ``OUT.yaml`` what a burst of GEMMs gets (the
    shipped profiles' convention; otherwise the steady clock would be counted twice)."""
    s = base.gemm.sustained
    for key, (value, kind, src) in list(cal.updates.items()):
        if key.startswith("gemm.efficiency."):
            if value / s > 1.0:
                raise InputError("--gpu", key, f"{value:g} fitted at {base.name}'s steady rate is {value / s:.3g} of the "
                                 f"peak at its burst rate (divided by gemm.sustained {s:g}): timings of a burst, not "
                                 f"of the steady regime? calibrate them against {base.name[:-len(':sustained')]!r}")
            cal.updates[key] = (round(value / s, 4), kind, f"{src}; fitted against {base.name} (the timings' steady "
                                f"regime) and divided by gemm.sustained {s:g} into this profile's burst rate: "
                                f"use OUT.yaml:sustained for the fitted one")
    if cal.measured:
        cal.measured = [(m, n, k, d, t * s, f"{src}, times {s:g} (gemm.sustained) into the burst regime")
                        for m, n, k, d, t, src in cal.measured]


def write_text(path: Path, df: pd.DataFrame) -> Path:
    from ..files import write_text_atomic
    return write_text_atomic(path, df.to_csv(index=False, float_format="%.6g"), force=True)


MAX_KEPT = 2000    # GEMM shapes --keep-times writes into a profile: a whole sweep is the fit's job


def kept_times(rows: pd.DataFrame, where: str, gpu: GpuProfile) -> list[tuple[int, int, int, str, float, str]]:
    """(m, n, k, dtype, median seconds, source) of every GEMM shape of ``rows`` (``m, n, k, dtype,
    time_s``), for ``gemm.measured``; more than :data:`MAX_KEPT` shapes, or one faster than
    ``gpu``'s peak allows (:func:`~ficco_sim.hardware.beyond_peak`), are refused."""
    rows = rows.assign(ops=rows["ops"] if "ops" in rows else 1)    # a row may stand for several timings
    med = rows.groupby(["m", "n", "k", "dtype"]).agg(median=("time_s", "median"), size=("ops", "sum")).reset_index()
    if len(med) > MAX_KEPT:
        raise InputError("--keep-times", None, f"{len(med)} GEMM shapes: at most {MAX_KEPT} are kept in a profile "
                         "(the fitted model serves a sweep; keep the shapes you run)")
    for r in med.itertuples():
        if beyond_peak(r.m, r.n, r.k, r.median, gpu.peak_flops.get(r.dtype, float("inf"))):
            raise InputError(where, "time_s", f"{r.m}x{r.n}x{r.k} {r.dtype} in {r.median * 1e6:.4g} us is beyond "
                             f"{gpu.name}'s {r.dtype} peak ({gpu.peak_flops[r.dtype] / 1e12:g} TFLOP/s): "
                             "another GPU's or dtype's time (float32 run as TF32?), or ms for s?")
    return [(int(r.m), int(r.n), int(r.k), str(r.dtype), float(r.median),
             f"median of {int(r.size)} timing(s) in {where}, kept by ficco-sim calibrate --keep-times {_today()}")
            for r in med.itertuples()]


UNITS_OFF = 30.0        # timings this many times the base model's (median), either way: not seconds of this GPU
LAUNCH_SEEN = 100.0     # rows all longer than this many base launch overheads cannot tell the launch apart


def _gemm(cal: Calibration, base: GpuProfile, rows: pd.DataFrame, where: str, holdout: Any, fit_launch: bool,
          report_dir: Any, fit_roofline: bool = False) -> None:
    ratio = float(np.median(rows["time_s"].to_numpy() / predict_times(base, rows)))
    if not 1 / UNITS_OFF <= ratio <= UNITS_OFF:
        raise InputError(where, "time_s", f"the timings are {ratio:.3g}x what {base.name}'s model gives the same "
                         "shapes (median): time_s is seconds (were these ms or us?), of the GPU --gpu names")
    shortest = float(rows["time_s"].min())
    if fit_launch and shortest > LAUNCH_SEEN * base.launch_overhead:
        fit_launch = False
        cal.notes.append(f"launch_overhead_us kept ({base.launch_overhead * 1e6:g} us): the shortest GEMM in {where} "
                         f"takes {shortest * 1e3:.3g} ms, where a launch cannot be told apart (time small GEMMs to "
                         "fit it)")
    try:
        fit = fit_gemm(base, rows, holdout=holdout, fit_launch=fit_launch, fit_roofline=fit_roofline)
    except TooFewShapes as e:
        if not cal.keep_times:
            raise
        cal.unfit_rows.append(rows)            # kept as timed (--keep-times); the model is the base's
        cal.unfitted["gemm.efficiency"] = e.message
        return
    cal.gemm_before = pd.Series(predict_times(base, rows) / rows["time_s"].to_numpy() - 1.0)
    edge = pinned(fit.params)
    if edge:
        cal.notes.append(f"fitted at the edge of its range: {', '.join(edge)}: the rows ask more of it than it can "
                         f"mean (another GPU's timings, or a shape regime the model lacks): check {where}")
    summary = error_summary(fit.rows)
    src = gemm_source(fit, where, summary)
    cal.gemm, cal.gemm_summary = fit, summary
    for name, value in fit.params.items():
        if name.startswith("efficiency."):
            cal.updates[f"gemm.{name}"] = (round(value, 4), "fitted", src)
        elif name == "k_overhead":
            cal.updates["gemm.k_overhead"] = (round(value, 2), "fitted", src)
        elif name == "launch_overhead":
            cal.updates["launch_overhead_us"] = (round(value * 1e6, 3), "fitted", src)
        elif name == "roofline_exponent":
            cal.updates["gemm.roofline_exponent"] = (round(value, 3), "fitted", src)
    if report_dir:
        d = Path(report_dir)
        cal.written.append(write_points_csv(fit.rows, d / f"{cal.gpu}_gemm_points.csv.gz"))
        cal.written.append(write_text(d / f"{cal.gpu}_gemm_summary.csv", summary))
        cal.written.append(plot_predicted_vs_measured(fit.rows, d / f"{cal.gpu}_gemm.png",
                                                      f"{cal.gpu} GEMM model: predicted vs measured"))


# the columns each kind of benchmark row is read with (beyond kind and time_s)
BENCH_COLUMNS = {"gemm": ("m", "n", "k", "dtype"), "copy": ("bytes", "path"), "contention": ("alone_s", "copy_gbps")}


def _bench(cal: Calibration, base: GpuProfile, df: pd.DataFrame, where: str, holdout: Any, fit_launch: bool,
           report_dir: Any, fit_roofline: bool = False) -> None:
    """Benchmark CSV: GEMM (hold out the decomposed pieces), copies, launch, contention. A file
    of GEMM rows alone (``kind, m, n, k, dtype, time_s``: a user's own timings) is one too."""
    for kind, cols in BENCH_COLUMNS.items():
        missing = [c for c in cols if c not in df] if (df["kind"] == kind).any() else []
        if missing:
            raise InputError(where, missing[0], f"its {kind} rows need the column {missing[0]!r}")
    rows = ms.gemm_rows(df, where)
    if holdout == "auto":
        split = sorted(g for g in rows["group"].unique() if g.startswith("split_"))
        holdout = split if len(split) < rows["group"].nunique() else "auto"
    _gemm(cal, base, rows, where, holdout, fit_launch, report_dir, fit_roofline)
    date = str(df["date"].dropna().iloc[0]) if "date" in df and df["date"].notna().any() else _today()
    copies = df[df["kind"] == "copy"]
    if len(copies) and len(copies[copies["path"] == "dma"]) >= 2:
        # The benchmark copies within one GPU: a copy engine reads and writes the same HBM, so
        # its rate measures HBM (hbm.efficiency = 2 x rate / peak), not dma.bandwidth, which is
        # an engine's rate to a peer GPU (DmaSpec.cap); the per-command cost is the engine's own.
        a, b, pts = fit_copies(df, "dma")
        err = pts["rel_error"].abs()
        src = (f"alpha-beta fit {date} of {len(pts)} contiguous copy_ rows in {where}; "
               f"|error| median {100 * err.median():.1f}% p90 {100 * err.quantile(0.9):.1f}%")
        cal.copy = dict(overhead=a, bandwidth=b, source=src, best=float((pts["bytes"] / pts["time_s"]).max()))
        cal.updates["hbm.efficiency"] = (round(min(1.0, 2 * b / base.hbm_bandwidth), 4), "fitted",
                                         f"a copy within one GPU reads and writes HBM: 2 x {b / 1e9:.0f} GB/s of "
                                         f"{base.hbm_bandwidth / 1e9:.0f}; {src}")
        cal.updates["dma.command_overhead_us"] = (round(a * 1e6, 3), "fitted", src)
    launch = df[(df["kind"] == "launch") & pd.to_numeric(df["time_s"], errors="coerce").notna()]
    if len(launch):
        cal.updates["launch_overhead_us"] = (round(float(launch["time_s"].astype(float).median()) * 1e6, 3),
                                             "measured", f"back-to-back tiny kernels, {where} {date}")
    c = fit_contention(df, base.hbm_bandwidth)     # the denominator the contention rule divides by
    if c is not None:
        coef, pts = c
        cal.contention = coef
        cal.updates["contention.compute_per_hbm_util"] = (
            round(coef, 4), "fitted", f"GEMM slowdown vs copy HBM share, {len(pts)} contention rows in {where} "
            f"{date}; slowdown {', '.join(f'{s:.2f}' for s in pts['slowdown'])} at u {', '.join(f'{u:.2f}' for u in pts['hbm_util'])}")
    if report_dir and cal.copy:
        cal.written.append(write_points_csv(fit_copies(df, "dma")[2], Path(report_dir) / f"{cal.gpu}_copy_points.csv"))


def calibrate_device(device: str = "cpu", *, out: str | Path, base_profile: str | Path | None = None,
                     force: bool = False, report_dir: str | Path | None = None, quick: bool = False,
                     raw_csv: str | Path | None = None, sizes: str | None = None,
                     progress: bool = True, world_size: int = 2, keep_times: bool = False) -> Calibration:
    """Benchmark the local device, fit, write a profile.

    On ``cpu`` the profile describes one rank of the CPU replay on this host, measured with
    ``world_size`` gloo processes (:mod:`.host_ranks`, :mod:`.cpu_profile`). On ``cuda[:i]``
    a ``base_profile`` (the GPU's datasheet profile: SM limits, tiles) is required and its
    GEMM, copy, launch and contention numbers are replaced by the fitted ones.
    """
    from .bench import run_benchmarks

    if device != "cpu" and not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise InputError("--device", None, f"{device!r}: expected cpu, cuda or cuda:i")
    outp = Path(out)
    if outp.exists() and not force:
        raise InputError(str(outp), None, "exists; pass --force to overwrite it")
    if device != "cpu" and base_profile is None:
        raise InputError("--base", None, "a GPU calibration needs --base PROFILE (its SM limits and GEMM tiles)")
    raw = Path(raw_csv) if raw_csv else Path(report_dir or outp.parent) / f"{outp.stem}_bench.csv"
    if device == "cpu":
        return _staged(report_dir, lambda report: _calibrate_cpu(raw, outp, force, report,
                                                                 sizes or ("tiny" if quick else "small"), world_size))
    sizes = sizes or ("tiny" if quick else "full")
    run_benchmarks(device, sizes, raw, force=True, progress=progress)
    return calibrate_from_files([raw], "local", base_profile, out=out, force=force, report_dir=report_dir,
                                keep_times=keep_times)


def _calibrate_cpu(raw: Path, out: Path, force: bool, report_dir: Any, sizes: str, world_size: int) -> Calibration:
    """Measure the replay's parts on ``world_size`` ranks (:func:`.host_ranks.measure`), keep
    the raw rows, fit the host and GEMM numbers, write the profile."""
    import torch
    import yaml

    from .bench import RowWriter, environment
    from .cpu_profile import render_cpu_profile
    from .host_ranks import fit_host, measure

    rows = measure(world_size, sizes)
    env = environment(torch, torch.device("cpu"))
    raw.parent.mkdir(parents=True, exist_ok=True)
    writer = RowWriter(raw, env)
    try:
        for r in rows:
            writer.add(**{k: v for k, v in r.items() if k != "kind"}, kind=r["kind"], dtype="float32",
                       path="gloo" if r["kind"] in ("p2p", "exchange") else None)
    finally:
        writer.close()
    bench = pd.DataFrame(writer.rows)
    date = env["date"]
    host = fit_host(rows, env["cores"])
    err = np.abs(host["p2p_err"])
    host_source = (f"fitted {date} on {raw}: t = latency + bytes/bandwidth on {len(err)} one-way gloo rows "
                   f"(|error| median {100 * np.median(err):.0f}% max {100 * err.max():.0f}%); cores per byte = "
                   f"slope of {host['exchange_rows']} all-ranks exchange rows x cores / ranks "
                   f"({'binding' if host['binding'] else 'not binding: exchange no slower than one stream'})")
    perr = np.abs(host["post_err"])
    post_source = ("fitted", f"fitted {date} on {raw}: per message, t = post_us + bytes x post_ns_per_byte on "
                             f"{host['post_rows']} rows of both ranks posting a send and a receive, then computing "
                             f"(|error| median {100 * np.median(perr):.0f}% max {100 * perr.max():.0f}%)") \
        if len(perr) else ("assumption", f"no post rows in {raw}: posting costs launch_overhead_us only")
    g = [r for r in rows if r["kind"] == "gemm"]
    peak = max(2.0 * r["m"] * r["n"] * r["k"] / r["time_s"] for r in g)
    values = dict(device_name=env["device_name"], host=env["host"], cores=env["cores"], ranks=world_size,
                  peak_flops=peak, efficiency=0.8, k_overhead=0.0, gemm_source="seed", host_source=host_source,
                  post_source=post_source,
                  **{k: host[k] for k in ("copy_bytes_per_s", "op_s", "latency", "stream_bandwidth",
                                          "core_s_per_byte", "skew", "post_s", "post_s_per_byte")})
    # A first profile with guessed GEMM numbers gives the fit its hardware; then refit.
    seed_gpu = parse_profile(yaml.safe_load(render_cpu_profile(values, str(raw), date)), str(out))
    cal = Calibration(gpu="cpu")
    _gemm(cal, seed_gpu, ms.gemm_rows(bench, str(raw)), str(raw),
          sorted({r["group"] for r in g if r["group"].startswith("split_")}), False, report_dir)
    u = cal.updates
    values.update(efficiency=u["gemm.efficiency.float32"][0], k_overhead=u["gemm.k_overhead"][0],
                  gemm_source=u["gemm.k_overhead"][2])
    for key, name, scale in (("link.latency_us", "latency", 1e6),
                             ("link.port_bandwidth_gbps", "stream_bandwidth", 1e-9),
                             ("host.transfer_core_ns_per_byte", "core_s_per_byte", 1e9)):
        u[key] = (round(host[name] * scale, 4), "fitted", host_source)
    u["launch_overhead_us"] = (round(host["op_s"] * 1e6, 3), "measured", f"one tiny op in the replay loop, {raw}")
    u["host.start_skew_us"] = (round(host["skew"] * 1e6, 1), "measured", f"ranks' barrier-exit spread, {raw}")
    u["host.post_us"] = (round(host["post_s"] * 1e6, 2), *post_source)
    u["host.post_ns_per_byte"] = (round(host["post_s_per_byte"] * 1e9, 5), *post_source)
    cal.written.append(write_profile(out, render_cpu_profile(values, str(raw), date), force=force))
    return cal
