"""``calibrate --from TRACE``: what PyTorch-profiler (Kineto) traces tell a profile: how the
GEMM kernels hold SMs (``gemm.kernel``), the compute slowdown beside collectives
(``contention.compute_beside_comm_kernel``) and the GEMM operators that ran alone (their
times, kept with ``--keep-times``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..errors import InputError
from ..hardware import GpuProfile
from . import nccl_tests
from .workflow import Calibration, _today, write_text


def read_traces(cal: Calibration, base: GpuProfile, paths: Sequence[str], report_dir: Any) -> None:
    """Kineto traces: how their GEMM kernels hold SMs (:mod:`ficco_sim.traces.gemm_kind`) ->
    ``gemm.kernel``; the same kernels alone and beside collectives, across profiler steps
    (:mod:`ficco_sim.traces.interference`) -> ``contention.compute_beside_comm_kernel``. What
    the traces cannot tell is said (``unfitted``); an error only when they tell nothing."""
    from ..traces.gemm_kind import gemm_kind
    from ..traces.interference import fit_compute, kernel_pairs
    from ..traces.kineto import load_kineto
    loaded = [load_kineto([p]) for p in paths]          # each file imported once, for every read
    other = nccl_tests.device_mismatch(pd.Series([t.device for t in loaded]), base, "traces",
                                       "its GEMM kernels, contention and kept times are")
    if other and cal.keep_times:
        raise InputError("--keep-times", None, f"{other}: another GPU's GEMM times are not kept (--gpu names the GPU "
                         "the traces ran on, or leave --keep-times out)")
    if other:
        cal.notes.append(other)
    cal.trace_gemms = _trace_gemms([t.ops for t in loaded], base)
    if report_dir and len(cal.trace_gemms):
        cal.written.append(write_text(Path(report_dir) / f"{cal.gpu}_trace_gemms.csv", cal.trace_gemms))
    kind = gemm_kind([o for t in loaded for o in t.ops], base)
    if kind is not None:
        name, pers, waves, told = kind
        cal.updates["gemm.kernel"] = (name, "measured", (
            f"{told} GEMM kernels in {', '.join(Path(p).name for p in paths)} ({_today()}): "
            f"{pers * 1e3:.3g} ms of GEMM time in blocks computing more outputs than one tile (persistent), "
            f"{waves * 1e3:.3g} ms in grids larger than the GPU holds at once (a block per tile); "
            "ficco_sim.traces.gemm_kind"))
    try:
        pairs = kernel_pairs(paths, loaded)
    except InputError as e:
        if kind is None and cal.trace_gemms.empty:
            raise
        cal.unfitted["contention.compute_beside_comm_kernel"] = e.message
        return
    try:
        fit = fit_compute(base, pairs)
    except InputError as e:       # pairs, but too few of compute beside a collective to fit on
        if kind is None and cal.trace_gemms.empty:
            raise InputError(paths[0] if len(paths) == 1 else "--from", e.field, e.message) from None
        cal.unfitted["contention.compute_beside_comm_kernel"] = e.message
        return
    cal.contention = fit.coef
    cal.updates["contention.compute_beside_comm_kernel"] = (round(fit.coef, 4), "fitted", fit.source(_today()))
    if report_dir:
        cal.written.append(write_text(Path(report_dir) / f"{cal.gpu}_trace_pairs.csv",
                                      pairs.merge(fit.points[["sm_term", "hbm_term", "residual"]], how="left",
                                                  left_index=True, right_index=True)))


def _trace_gemms(traces: list, gpu: GpuProfile) -> pd.DataFrame:
    """The traces' GEMM operators that ran alone (:func:`ficco_sim.traces.gemm_times.gemm_timings`,
    each trace's ops on their own clock), the median per shape beside ``gpu``'s model (launch
    excluded on both sides): ``err``, ``abs_err``; shapes of a dtype the profile has no peak
    for are left out."""
    from ..gemm_model import gemm_times
    from ..traces.gemm_times import gemm_timings
    t = pd.concat([gemm_timings(ops) for ops in traces], ignore_index=True)
    t = t[t["dtype"].isin(list(gpu.peak_flops))]
    if t.empty:
        return t.assign(predicted_s=[], err=[], abs_err=[])
    med = t.groupby(["m", "n", "k", "dtype"])["time_s"].agg(["median", "size"]).reset_index()
    med = med.rename(columns={"median": "time_s", "size": "ops"})
    med["predicted_s"] = [float(gemm_times(gpu, r.m, r.n, r.k, r.dtype)) for r in med.itertuples()]
    med["err"] = med["predicted_s"] / med["time_s"] - 1.0
    return med.assign(abs_err=med["err"].abs())
