"""NCCL / RCCL's software mechanisms fitted on measured collective times (nccl-tests rows):
the collective-call floor, the host time each more GPU a thread drives adds (nccl-tests'
``-g``), the link latency, the per-step latency of the LL / LL128 / Simple protocols, the
share of the raw link rate SM-driven traffic reaches (the channels' bandwidth), and, on GPUs
whose switch reduces (NVLS), the channels an NVLS all-reduce runs on.

What NCCL's source fixes is not fitted: protocol payload shares (LL: a 4 B flag per 4 B;
LL128: 8 B per 128 B line), the channel rule (a small call runs on fewer channels), which
size its tuner sees, and the NVLS latency of its tuner. :func:`fit` is a bounded least
squares on ``log(predicted / measured)`` of rows of at least :data:`FIT_FROM` bytes (smaller
collectives are floors), every prediction by the closed-form engine
(:func:`ficco_sim.collective_time`). Rows are tidy: ``gpu_profile, topology, kind, nbytes,
algorithm, gpus_per_thread, tuner, measured_s`` (:func:`tidy`).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..files import read_text
from ..hardware import GpuProfile, Protocol, load_gpu
from ..simulate import collective_time, per_rank_bytes
from .nccl_tests import KIND

LL, LL128 = 0.5, 120 / 128     # payload shares by design
# the fitted mechanisms, their bounds and where the fit starts
BOUNDS = {"launch_us": (0.0, 30.0), "issue_us": (0.0, 20.0), "link_us": (0.0, 5.0), "ll_us": (0.0, 10.0),
          "ll128_us": (0.0, 40.0), "simple_us": (0.0, 60.0), "sm_share": (0.5, 1.0)}
START = {"launch_us": 10.0, "issue_us": 3.0, "link_us": 1.0, "ll_us": 1.0, "ll128_us": 5.0, "simple_us": 10.0,
         "sm_share": 0.8}
# a mechanism is fitted only where the rows see it: moved by this much, it moves some row's time by SEEN
NUDGE = {"launch_us": 5.0, "issue_us": 5.0, "link_us": 5.0, "ll_us": 5.0, "ll128_us": 5.0, "simple_us": 5.0,
         "sm_share": 0.05}
SEEN = 0.01
NVLS_CHANNELS = range(4, 33)
FIT_FROM = 64 << 10
# where each fitted number lives in a profile
PATHS = {"launch_us": "comm_kernel.launch_us", "issue_us": "comm_kernel.issue_us", "link_us": "link.latency_us",
         "ll_us": "comm_kernel.protocols.LL.latency_us", "ll128_us": "comm_kernel.protocols.LL128.latency_us",
         "simple_us": "comm_kernel.protocols.Simple.latency_us", "sm_share": "comm_kernel.channel_bandwidth_gbps",
         "nvls_channels": "comm_kernel.nvls.channels"}


def tidy(rows: pd.DataFrame, gpu_profile: str, topology_kind: str) -> pd.DataFrame:
    """nccl-tests rows (:mod:`.nccl_tests` columns) as fit rows on ``topology_kind:<gpus>``:
    the collectives ficco-sim models, ``nbytes`` per rank, ``measured_s``, and the
    ``algorithm`` to predict them with: the one an ``algo`` column names where the run pinned
    it (``NCCL_ALGO``; ``env_notes`` not starting "default env"), else ``auto`` (NCCL's choice)."""
    d = rows[rows["collective"].isin(list(KIND))].copy()
    if d.empty:
        raise InputError("--from", None, f"no collective ficco-sim models in the rows (it models "
                         f"{', '.join(KIND)}; got {', '.join(sorted(rows['collective'].unique()))})")
    d["gpu_profile"] = gpu_profile
    d["topology"] = [f"{topology_kind}:{n}" for n in d["gpus"]]
    d["kind"] = d["collective"].map(KIND)
    d["nbytes"] = [per_rank_bytes(k, int(s), int(n)) for k, s, n in zip(d["kind"], d["size_bytes"], d["gpus"])]
    d["measured_s"] = d["time_us_oop"] * 1e-6
    algo = d["algo"].astype(str).str.lower() if "algo" in d else pd.Series("auto", index=d.index)
    default = (d["env_notes"].astype(str).str.startswith("default env") if "env_notes" in d
               else pd.Series(True, index=d.index))
    d["algorithm"] = np.where(algo.isin(["ring", "nvls"]) & ~default, algo, "auto")
    if "gpus_per_thread" not in d:
        d["gpus_per_thread"] = 1
    d["gpus_per_thread"] = d["gpus_per_thread"].fillna(1).astype(int)
    if "tuner" not in d:
        d["tuner"] = [tuner_of(v) for v in d["nccl_version"]] if "nccl_version" in d else "call"
    return d[d["nbytes"] >= 1].reset_index(drop=True)


def tuner_of(version: object) -> str:
    """``rank`` for an NCCL before 2.22 (its tuner sized an all-gather or reduce-scatter by one
    rank's share), else ``call`` (also when the version is unknown).

    >>> tuner_of("2.21.5"), tuner_of("2.29.2"), tuner_of("")
    ('rank', 'call', 'call')
    """
    m = re.match(r"\s*(\d+)\.(\d+)", str(version))
    return "rank" if m and (int(m.group(1)), int(m.group(2))) < (2, 22) else "call"


def channel_rate(gpu: GpuProfile, sm_share: float) -> float:
    """Channel bandwidth (B/s) at which the default channels reach ``sm_share`` of the raw
    link rate (the fitted SM share; :func:`current` inverts it)."""
    return sm_share * gpu.link.ports * gpu.link.port_bandwidth / gpu.comm_kernel.channels


def with_params(gpu: GpuProfile, launch_us: float, ll_us: float, ll128_us: float, simple_us: float,
                sm_share: float, nvls_channels: float | None = None, link_us: float | None = None,
                issue_us: float | None = None) -> GpuProfile:
    """``gpu`` with the collective mechanisms set: call floor, protocol latencies (NCCL's
    channel rule and payload shares kept), channel bandwidth such that the default channels
    reach ``sm_share`` of the raw link rate, the NVLS channels where the GPU has NVLS, and
    the link latency and per-GPU issue time if given."""
    if link_us is not None:
        gpu = dataclasses.replace(gpu, link=dataclasses.replace(gpu.link, latency=link_us * 1e-6))
    ck = gpu.comm_kernel
    cb = channel_rate(gpu, sm_share)
    lat = {"LL": ll_us, "LL128": ll128_us, "Simple": simple_us}
    old = {p.name: p for p in ck.protocols}
    protos = tuple(dataclasses.replace(old[name], latency=lat[name] * 1e-6, efficiency=eff) if name in old
                   else Protocol(name, lat[name] * 1e-6, eff)
                   for name, eff in (("LL", LL), ("LL128", LL128), ("Simple", 1.0)))
    nvls = int(nvls_channels) if nvls_channels is not None and ck.nvls_channels else ck.nvls_channels
    return dataclasses.replace(gpu, comm_kernel=dataclasses.replace(
        ck, launch=launch_us * 1e-6, protocols=protos, channel_bandwidth=cb, nvls_channels=nvls,
        issue=ck.issue if issue_us is None else issue_us * 1e-6))


def predict(rows: pd.DataFrame, gpus: dict[str, GpuProfile], sim: str = "analytical", *,
            why: list | None = None) -> np.ndarray:
    """Predicted seconds per row; NaN where the simulator refuses the size (fewer bytes than
    one element per piece), its reason appended to ``why`` ("" for the rows it answers)."""
    def one(r) -> float:
        try:
            t = collective_time(gpus[r.gpu_profile], r.topology, r.kind, int(r.nbytes), sim=sim,
                                algorithm=getattr(r, "algorithm", "auto"),
                                gpus_per_thread=int(getattr(r, "gpus_per_thread", 1)),
                                tuner=getattr(r, "tuner", None))
            said = ""
        except InputError as e:
            t, said = float("nan"), e.message
        if why is not None:
            why.append(said)
        return t
    return np.array([one(r) for r in rows.itertuples()])


def current(gpu: GpuProfile) -> dict[str, float]:
    """The fitted mechanisms (:data:`BOUNDS`) as ``gpu`` has them (a protocol it lacks: where
    the fit starts), so that ``with_params(gpu, **current(gpu))`` is ``gpu``'s collectives."""
    ck, lat = gpu.comm_kernel, {p.name: p.latency * 1e6 for p in gpu.comm_kernel.protocols}
    return {"launch_us": (ck.launch if ck.launch is not None else gpu.launch_overhead) * 1e6,
            "issue_us": ck.issue * 1e6, "link_us": gpu.link.latency * 1e6,
            "ll_us": lat.get("LL", START["ll_us"]), "ll128_us": lat.get("LL128", START["ll128_us"]),
            "simple_us": lat.get("Simple", START["simple_us"]),
            "sm_share": ck.channel_bandwidth / channel_rate(gpu, 1.0)}


def with_fitted(base: dict[str, GpuProfile], params: dict) -> dict[str, GpuProfile]:
    """The ``base`` profiles with ``params`` set, every mechanism not in it as each has it."""
    return {g: with_params(p, **{**current(p), **params}) for g, p in base.items()}


def loss(rows: pd.DataFrame, params: dict, base: dict[str, GpuProfile] | None = None) -> float:
    """Mean |log(predicted / measured)| of ``rows`` with ``params`` set on the ``base`` profiles."""
    base = base or {g: load_gpu(g) for g in rows["gpu_profile"].unique()}
    return float(np.nanmean(np.abs(np.log(predict(rows, with_fitted(base, params)) / rows["measured_s"].to_numpy()))))


def visible(rows: pd.DataFrame, base: dict[str, GpuProfile]) -> list[str]:
    """The mechanisms of :data:`BOUNDS` the rows can tell: moved by :data:`NUDGE` from the
    base profiles' values, each moves some row's predicted time by :data:`SEEN` or more (a
    protocol no row runs, a floor too small beside calls of hundreds of microseconds, do not,
    and are kept as the base profile has them)."""
    ref = predict(rows, with_fitted(base, {}))
    out = []
    for k, step in NUDGE.items():
        moved = predict(rows, {g: with_params(p, **{**current(p), k: current(p)[k] + step}) for g, p in base.items()})
        if np.nanmax(np.abs(np.log(moved / ref)), initial=0.0) >= SEEN:
            out.append(k)
    return out


def algorithms(rows: pd.DataFrame, base: dict[str, GpuProfile]) -> list[str]:
    """Per row, the algorithm it runs (pinned, or NCCL's choice on its GPU, GPU count and size);
    "" where none applies (a pinned one the collective lacks)."""
    from ..schedules.collectives import pick_algorithm
    from ..topology import load_topology

    def one(r) -> str:
        topo = load_topology(r.topology, base[r.gpu_profile])
        try:
            return pick_algorithm(getattr(r, "algorithm", "auto"), r.kind, topo.kind, gpus=topo.num_gpus,
                                  spec=base[r.gpu_profile].comm_kernel, nbytes=int(r.nbytes))
        except InputError:
            return ""
    return [one(r) for r in rows.itertuples()]


def runs_nvls(rows: pd.DataFrame, base: dict[str, GpuProfile]) -> np.ndarray:
    """Per row, whether it runs NVLS (:func:`algorithms`)."""
    return np.array([a == "nvls" for a in algorithms(rows, base)], dtype=bool)


def fit(rows: pd.DataFrame, base: dict[str, GpuProfile] | None = None, evaluations: int = 200,
        fixed: dict | None = None) -> tuple[dict, float]:
    """Every mechanism at once (bounded least squares, scipy, on ``log(predicted / measured)``
    with a soft L1 loss so that a few odd rows do not steer it), on every row: the call floor,
    the per-GPU issue time (only when the rows drive GPUs in two or more ways: one thread for
    one GPU, for four, ...; else the base profile's), the link
    latency, the protocols' per-step latencies and the SM share, each only if the rows see it
    (:func:`visible`; else the base profile's); then the NVLS channels on the
    rows that run NVLS, and the rest again. ``base``: the profiles by ``gpu_profile`` (default
    the built-in ones), whose other numbers (NCCL's channel rule, payload shares, the NVLS
    latency) are kept; ``fixed``: mechanisms set, not fitted (returned with the rest). Returns
    the parameters fitted and the mean |log error| of all rows."""
    from scipy.optimize import least_squares
    fixed = fixed or {}
    base = with_fitted(base or {g: load_gpu(g) for g in rows["gpu_profile"].unique()}, fixed)
    # the issue time per GPU is told apart from the floor only by rows of two ways of driving GPUs
    seen = visible(rows, base)
    names = [k for k in BOUNDS if k in seen and k not in fixed and
             (k != "issue_us" or rows.get("gpus_per_thread", pd.Series([1])).nunique() > 1)]
    if not names:
        return dict(fixed), loss(rows, {}, base)
    lo, hi = np.array([BOUNDS[k] for k in names]).T
    measured = rows["measured_s"].to_numpy()
    nvls = runs_nvls(rows, base)
    best: dict = {}

    def residual(x: np.ndarray) -> np.ndarray:
        r = np.log(predict(rows, with_fitted(base, {**dict(zip(names, x)), **best})) / measured)
        return np.where(np.isfinite(r), r, 0.0)

    x = np.array([START[k] for k in names])
    for final in (False, True):
        x = least_squares(residual, x, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=1e-3,
                          max_nfev=evaluations).x
        if final or not nvls.any():
            break
        got = dict(zip(names, x))
        errs = {c: loss(rows[nvls], dict(got, nvls_channels=float(c)), base) for c in NVLS_CHANNELS}
        best = {"nvls_channels": float(min(errs, key=errs.get))}
    params = {**dict(zip(names, x.tolist())), **best}
    return {**fixed, **params}, loss(rows, params, base)


def at_bounds(params: dict, rel: float = 1e-3, *, zero: bool = False, bounds: dict | None = None,
              paths: dict | None = None) -> list[str]:
    """Profile paths of the fitted mechanisms that ended on a bound of :data:`BOUNDS` (a fit
    pressed against its range explains the rows with something else than that mechanism);
    ``zero``: those pressed to a lower bound of 0 instead (the rows would take less than none).
    ``bounds`` / ``paths``: another fit's ranges and profile paths (the GEMM fit's).

    >>> at_bounds({"launch_us": 30.0, "ll_us": 1.2, "sm_share": 0.5})
    ['comm_kernel.launch_us', 'comm_kernel.channel_bandwidth_gbps']
    >>> at_bounds({"link_us": 0.0, "ll_us": 1.2, "sm_share": 0.5}, zero=True)
    ['link.latency_us']
    """
    bounds, paths = bounds or BOUNDS, paths or PATHS
    out = []
    for k, v in params.items():
        if k not in bounds:
            continue
        lo, hi = bounds[k]
        span = (hi - lo) * rel
        low = v <= lo + span
        if (lo == 0 and low) if zero else (v >= hi - span or (lo > 0 and low)):
            out.append(paths[k])
    return out


def band(nbytes: pd.Series) -> pd.Series:
    return pd.cut(nbytes, [0, 1 << 20, 64 << 20, 1 << 62], right=False, labels=["< 1 MiB", "1-64 MiB", ">= 64 MiB"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median |error| and row count per (profile, GPUs, collective, size band), the bands
    ``< 1 MiB``, ``1-64 MiB``, ``>= 64 MiB`` and, across the last two, ``>= 1 MiB``."""
    t = table.assign(abs_err=(table["predicted_s"] / table["measured_s"] - 1).abs(),
                     band=band(table["size_bytes"]).astype(str))
    t = pd.concat([t, t[t["size_bytes"] >= 1 << 20].assign(band=">= 1 MiB")], ignore_index=True)
    order = {b: i for i, b in enumerate(["< 1 MiB", "1-64 MiB", ">= 64 MiB", ">= 1 MiB"])}
    out = (t.groupby(["gpu_profile", "gpus", "collective", "band"])["abs_err"]
           .agg(median="median", rows="size").reset_index())
    return out.sort_values(["gpu_profile", "gpus", "collective", "band"], key=lambda c: c.map(order) if
                           c.name == "band" else c, kind="stable").reset_index(drop=True)


def profile_values(gpu: GpuProfile, params: dict) -> dict[str, float]:
    """The fitted parameters in the profile's units, by profile path (:data:`PATHS`)."""
    out = {PATHS[k]: round(v, 3) for k, v in params.items() if k not in ("sm_share", "nvls_channels")}
    if "nvls_channels" in params and gpu.comm_kernel.nvls_channels:
        out[PATHS["nvls_channels"]] = int(params["nvls_channels"])
    if "sm_share" in params:
        out[PATHS["sm_share"]] = round(channel_rate(gpu, params["sm_share"]) / 1e9, 3)
    return out


def _tuning_from_logs(cal: Any, base: GpuProfile, texts: dict[str, str]) -> GpuProfile:
    """``base`` with the ring bus bandwidth and LL cap of NCCL's own tuning table where a log
    prints one (:mod:`.nccl_tuning`; the first found), set in the written profile too; the
    protocols the fit then sees are the ones NCCL picked in those runs."""
    from .nccl_tuning import ring_tuning
    from .workflow import _today
    for p, text in texts.items():
        try:
            t = ring_tuning(text, p)
        except InputError as exc:
            if exc.field != "nNodes":
                raise
            cal.notes.append(f"{Path(p).name}: NCCL's tuning table is of several nodes (the network's ring): not read")
            continue
        if t is None:
            continue
        ck = base.comm_kernel
        ll = t["ll_max_bw_gbps"]
        base = dataclasses.replace(base, comm_kernel=dataclasses.replace(
            ck, ring_bus_bw=t["bus_bw_gbps"] * 1e9, ll_max_bw=ll * 1e9 if ll else ck.ll_max_bw))
        src = (f"read by ficco-sim calibrate {_today()} from NCCL's own tuning table (NCCL_DEBUG_SUBSYS=TUNING) "
               f"in {Path(p).name}: the Ring/Simple all-gather cell over {t['ranks']} ranks x (n - 1) / n")
        if not ck.ring_bus_bw:
            cal.notes.append(f"{Path(p).name} prints NCCL's tuning table (ring bus bandwidth {t['bus_bw_gbps']:g} "
                             "GB/s) but the base profile has no comm_kernel.nccl_ring block to hold it: used for "
                             "this fit, not written")
            return base
        cal.updates["comm_kernel.nccl_ring.bus_bw_gbps"] = (t["bus_bw_gbps"], "measured", src)
        if ll:
            cal.updates["comm_kernel.nccl_ring.ll_max_bw_gbps"] = (ll, "measured", src.replace("Simple", "LL"))
        return base
    return base


def calibrate_collectives(cal: Any, base: GpuProfile, paths: Sequence[str], topology: str, report_dir: Any) -> None:
    """Raw nccl-tests / rccl-tests output: the collective mechanisms (call floor, protocol
    latencies, SM share of the link) fitted on the rows of 64 KiB and more
    (:mod:`.fit_nccl`), every row's error reported."""
    from . import nccl_tests
    from .workflow import _today, write_text
    if topology not in ("switch", "fc", "ring"):
        raise InputError("--topology", None, f"the kind of topology the runs ran on: switch, fc or ring; got "
                         f"{topology!r}")
    texts = {str(p): read_text(p) for p in paths}
    raw = pd.concat([nccl_tests.parse(text, p) for p, text in texts.items()], ignore_index=True)
    multi = raw[raw["hosts"] > 1]
    if len(multi) == len(raw):
        raise InputError(str(multi["source"].iloc[0]), "hosts", f"the ranks ran on {int(multi['hosts'].iloc[0])} "
                         "machines; calibrating collectives needs single-node runs (one topology)")
    if len(multi):
        runs = multi["source"].unique()
        cal.notes.append(f"{len(runs)} run(s) across machines left out ({runs[0]}"
                         f"{' ...' if len(runs) > 1 else ''}): collectives are fitted on single-node runs")
        raw = raw[raw["hosts"] == 1]
    wrong = raw[raw["wrong_oop"] > 0]
    if len(wrong):
        cal.notes.append(f"{len(wrong)} row(s) whose results nccl-tests found wrong (#wrong > 0) left out "
                         f"({wrong['source'].iloc[0]}, size {int(wrong['size_bytes'].iloc[0])})")
        raw = raw[raw["wrong_oop"] == 0]
    other = nccl_tests.device_mismatch(raw["device"], base)
    if other:
        cal.notes.append(other)
    base = _tuning_from_logs(cal, base, texts)
    rows = tidy(raw, cal.gpu, topology)
    big = rows[rows["size_bytes"] >= FIT_FROM]
    if len(big) < 3:
        raise InputError(paths[0], None, f"{len(big)} rows of at least {FIT_FROM >> 10} KiB; the collective "
                         "mechanisms need 3 or more")
    profiles = {cal.gpu: base}
    params, _ = fit(big, base=profiles)
    pinned = at_bounds(params)
    if pinned:
        cal.notes.append(f"fitted at the edge of its range: {', '.join(pinned)}: the profile's links or GPU may not "
                         "be what these runs ran on (check --gpu / --base and --topology), or the runs are noisy")
    zero = at_bounds(params, zero=True)
    if zero:
        counts = sorted(big["gpus"].unique())
        cal.notes.append(f"fitted at 0, the bottom of its range: {', '.join(zero)}: these rows take "
                         "their time from the other terms (the call floor above all)" + (
                             f"; every run is on {counts[0]} GPUs, where the per-step latencies add the same to every "
                             "call as the floor does: runs at another GPU count tell them apart" if len(counts) == 1 else
                             "") + "; a prediction at another GPU count or size may suffer")
    refused: list[str] = []
    rows["predicted_s"] = predict(rows, with_fitted(profiles, params), why=refused)
    rows["not_predicted"] = refused
    rows["algorithm_run"] = algorithms(rows, profiles)
    rows["error"] = rows["predicted_s"] / rows["measured_s"] - 1
    rows["base_error"] = predict(rows, profiles) / rows["measured_s"] - 1      # the profile before the fit
    now, before = (float(rows[c].abs().median()) for c in ("error", "base_error"))
    cal.notes.append(f"every row's median |error|: {100 * now:.1f}% fitted, {100 * before:.1f}% with {base.name} as it "
                     "was" + (": the fit reads these runs worse than the base profile (rows below "
                              f"{FIT_FROM >> 10} KiB are not fitted on; see the points' error and base_error)"
                              if now > before else ""))
    table = cal.nccl_summary = summary(rows)
    errs = "; ".join(f"{r.collective} x{r.gpus} {r.band}: {100 * r.median:.1f}% ({r.rows})" for r in table.itertuples())
    kinds = ", ".join(sorted(big["collective"].unique()))
    src = (f"fitted by ficco-sim calibrate {_today()} on {len(big)} nccl-tests rows >= {FIT_FROM >> 10} KiB ({kinds}) of "
           f"{', '.join(Path(p).name for p in paths)} on {topology}; median |error| in sample (not held out): {errs}")
    if len(big["collective"].unique()) == 1:
        src += "; one collective alone does not tell the call floor from the per-step latencies"
    if big["size_bytes"].min() >= 1 << 20:
        src += (f"; its smallest call is {int(big['size_bytes'].min()) >> 20} MiB, so the floor and the per-step "
                "latencies are fitted where they are a few percent of a call (calls below 1 MiB pin them)")
    kept = [PATHS[k] for k in BOUNDS if k not in params and k != "issue_us"]
    if kept:
        src += f"; not seen by these rows, kept as the base profile has them: {', '.join(kept)}"
    if "issue_us" not in params and (big["gpus_per_thread"] > 1).any():
        src += (f"; every run drove {int(big['gpus_per_thread'].iloc[0])} GPUs from one thread, so the issue time "
                "per GPU is the base profile's (comm_kernel.issue_us) and the floor is fitted beside it")
    for path, value in profile_values(base, params).items():
        cal.updates[path] = (value, "fitted", src + ("; at 0, the bottom of its range: these rows do not pin it"
                                                     if path in zero else ""))
    if report_dir:
        cal.written.append(write_text(Path(report_dir) / f"{cal.gpu}_nccl_tests_points.csv", rows))
