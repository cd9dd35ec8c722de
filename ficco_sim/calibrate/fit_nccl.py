"""NCCL / RCCL's software mechanisms fitted on measured collective times (nccl-tests rows):
the collective-call floor, the per-step latency of the LL / LL128 / Simple protocols, the
share of the raw link rate SM-driven traffic reaches (the channels' bandwidth), and, on GPUs
whose switch reduces (NVLS), the channels an NVLS all-reduce runs on.

Protocol payload shares are NCCL's design (LL: a 4 B flag per 4 B; LL128: 8 B per 128 B
line), not fitted. The fit is a coordinate descent over :data:`GRID` on the mean
``|log(predicted / measured)|`` of rows of at least :data:`FIT_FROM` bytes (the sizes overlap
pieces have; smaller collectives are floors), every prediction by the closed-form engine
(:func:`ficco_sim.collective_time`). Rows are tidy: ``gpu_profile, topology, kind, nbytes,
algorithm, measured_s`` (:func:`tidy`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ..errors import InputError
from ..hardware import GpuProfile, Protocol, load_gpu
from ..simulate import collective_time, per_rank_bytes
from .nccl_tests import KIND

LL, LL128 = 0.5, 120 / 128     # payload shares by design
GRID = {"launch_us": np.arange(0.0, 24.1, 2.0), "ll_us": np.arange(0.0, 6.1, 0.5),
        "ll128_us": np.arange(0.0, 30.1, 2.5), "simple_us": np.arange(0.0, 60.1, 5.0),
        "sm_share": np.arange(0.60, 0.951, 0.025), "nvls_channels": np.arange(4, 33, 1)}
START = {"launch_us": 8.0, "ll_us": 1.0, "ll128_us": 5.0, "simple_us": 15.0, "sm_share": 0.8, "nvls_channels": 16}
FIT_FROM = 1 << 20
# where each fitted number lives in a profile
PATHS = {"launch_us": "comm_kernel.launch_us", "ll_us": "comm_kernel.protocols.LL.latency_us",
         "ll128_us": "comm_kernel.protocols.LL128.latency_us",
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
    return d[d["nbytes"] >= 1].reset_index(drop=True)


def with_params(gpu: GpuProfile, launch_us: float, ll_us: float, ll128_us: float, simple_us: float,
                sm_share: float, nvls_channels: float | None = None, link_us: float | None = None) -> GpuProfile:
    """``gpu`` with the collective mechanisms set: call floor, protocol latencies, channel
    bandwidth such that the default channels reach ``sm_share`` of the raw link rate, the
    NVLS channels where the GPU has NVLS, and the link latency if given."""
    if link_us is not None:
        gpu = dataclasses.replace(gpu, link=dataclasses.replace(gpu.link, latency=link_us * 1e-6))
    ck = gpu.comm_kernel
    cb = sm_share * gpu.link.ports * gpu.link.port_bandwidth / ck.channels
    protos = (Protocol("LL", ll_us * 1e-6, LL), Protocol("LL128", ll128_us * 1e-6, LL128),
              Protocol("Simple", simple_us * 1e-6, 1.0))
    nvls = int(nvls_channels) if nvls_channels is not None and ck.nvls_channels else ck.nvls_channels
    return dataclasses.replace(gpu, comm_kernel=dataclasses.replace(ck, launch=launch_us * 1e-6, protocols=protos,
                                                                    channel_bandwidth=cb, nvls_channels=nvls))


def predict(rows: pd.DataFrame, gpus: dict[str, GpuProfile], sim: str = "analytical") -> np.ndarray:
    """Predicted seconds per row; NaN where the simulator refuses the size (fewer bytes than
    one element per piece)."""
    def one(r) -> float:
        try:
            return collective_time(gpus[r.gpu_profile], r.topology, r.kind, int(r.nbytes), sim=sim,
                                   algorithm=getattr(r, "algorithm", "auto"))
        except InputError:
            return float("nan")
    return np.array([one(r) for r in rows.itertuples()])


def loss(rows: pd.DataFrame, params: dict, base: dict[str, GpuProfile] | None = None) -> float:
    base = base or {g: load_gpu(g) for g in rows["gpu_profile"].unique()}
    gpus = {g: with_params(p, **params) for g, p in base.items()}
    return float(np.nanmean(np.abs(np.log(predict(rows, gpus) / rows["measured_s"].to_numpy()))))


def runs_nvls(rows: pd.DataFrame, base: dict[str, GpuProfile]) -> np.ndarray:
    """Per row, whether it runs NVLS (pinned, or NCCL's choice on its GPU, GPU count and size)."""
    from ..schedules.collectives import pick_algorithm
    from ..topology import load_topology

    def one(r) -> bool:
        topo = load_topology(r.topology, base[r.gpu_profile])
        try:
            return pick_algorithm(getattr(r, "algorithm", "auto"), r.kind, topo.kind, gpus=topo.num_gpus,
                                  spec=base[r.gpu_profile].comm_kernel, nbytes=int(r.nbytes)) == "nvls"
        except InputError:
            return False
    return np.array([one(r) for r in rows.itertuples()], dtype=bool)


def fit(rows: pd.DataFrame, passes: int = 3, base: dict[str, GpuProfile] | None = None) -> tuple[dict, float]:
    """Coordinate descent over :data:`GRID` on the mean |log(predicted / measured)| (``base``:
    the profiles by ``gpu_profile``; default the built-in ones), each mechanism on the rows it
    governs: the call floor, protocols and SM share on the rows that do not run NVLS (all
    rows when fewer than 3 do not), then the NVLS channels on the rows that do (left out of
    the answer when none does). Returns the parameters and the mean |log error| of all rows."""
    base = base or {g: load_gpu(g) for g in rows["gpu_profile"].unique()}
    nvls = runs_nvls(rows, base)
    plain = rows[~nvls] if (~nvls).sum() >= 3 else rows
    best = {k: v for k, v in START.items() if k != "nvls_channels"}
    cur = loss(plain, best, base)
    for _ in range(passes):
        for name, values in GRID.items():
            if name == "nvls_channels":
                continue
            for v in values:
                trial = dict(best, **{name: float(v)})
                e = loss(plain, trial, base)
                if e < cur - 1e-12:
                    best, cur = trial, e
    if nvls.any():
        errs = {float(v): loss(rows[nvls], dict(best, nvls_channels=float(v)), base) for v in GRID["nvls_channels"]}
        best["nvls_channels"] = min(errs, key=errs.get)
    return best, loss(rows, best, base)


SHARED = ("ll_us", "ll128_us", "simple_us", "sm_share", "link_us")     # one value for every GPU of a vendor
BOUNDS = {"launch_us": (0.0, 60.0), "ll_us": (0.0, 10.0), "ll128_us": (0.0, 30.0), "simple_us": (0.0, 60.0),
          "sm_share": (0.5, 0.95), "link_us": (0.0, 3.0)}


def fit_per_gpu_floor(rows: pd.DataFrame, evaluations: int = 260,
                      base: dict[str, GpuProfile] | None = None) -> tuple[dict[str, dict], float]:
    """A joint fit (Nelder-Mead, scipy) of a call floor per GPU profile (``launch_us``: the
    host, driver and library version differ from system to system) and the vendor's shared
    mechanisms, the link latency included (:data:`SHARED`), on the rows that do not run NVLS.
    Returns the parameters by GPU profile and the mean |log error|. Not what the shipped
    profiles use (:func:`fit`): ``benchmarks/collective_error.py --per-gpu-floor`` scores it."""
    from scipy.optimize import minimize
    base = base or {g: load_gpu(g) for g in rows["gpu_profile"].unique()}
    plain = rows[~runs_nvls(rows, base)]
    names = [f"launch_us:{g}" for g in base] + list(SHARED)
    lo, hi = np.array([BOUNDS[n.split(":")[0]] for n in names]).T
    measured = plain["measured_s"].to_numpy()

    def params(x: np.ndarray) -> dict[str, dict]:
        v = dict(zip(names, np.clip(x, lo, hi).tolist()))
        return {g: {"launch_us": v[f"launch_us:{g}"], **{k: v[k] for k in SHARED}} for g in base}

    def err(x: np.ndarray) -> float:
        gpus = {g: with_params(base[g], **p) for g, p in params(x).items()}
        return float(np.nanmean(np.abs(np.log(predict(plain, gpus) / measured))))

    start = np.array([15.0] * len(base) + [0.5, 3.0, 8.0, 0.8, 0.5])
    r = minimize(err, start, method="Nelder-Mead", options={"maxfev": evaluations, "xatol": 0.05, "fatol": 1e-4})
    return params(r.x), float(r.fun)


def band(nbytes: pd.Series) -> pd.Series:
    return pd.cut(nbytes, [0, 1 << 20, 64 << 20, 1 << 62], right=False, labels=["< 1 MiB", "1-64 MiB", ">= 64 MiB"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median |error| and row count per (profile, GPUs, collective, size band)."""
    t = table.assign(abs_err=(table["predicted_s"] / table["measured_s"] - 1).abs(), band=band(table["size_bytes"]))
    return (t.groupby(["gpu_profile", "gpus", "collective", "band"], observed=True)["abs_err"]
            .agg(median="median", rows="size").reset_index())


def profile_values(gpu: GpuProfile, params: dict) -> dict[str, float]:
    """The fitted parameters in the profile's units, by profile path (:data:`PATHS`)."""
    out = {PATHS[k]: round(v, 3) for k, v in params.items() if k not in ("sm_share", "nvls_channels")}
    if "nvls_channels" in params and gpu.comm_kernel.nvls_channels:
        out[PATHS["nvls_channels"]] = int(params["nvls_channels"])
    cb = params["sm_share"] * gpu.link.ports * gpu.link.port_bandwidth / gpu.comm_kernel.channels
    out[PATHS["sm_share"]] = round(cb / 1e9, 3)
    return out
