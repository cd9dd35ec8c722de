"""Alpha-beta fits for transfers: links (send/recv, all-reduce), copies, launch, contention.

A transfer of ``S`` bytes takes ``alpha + S / B``. :func:`fit_alpha_beta` fits ``alpha`` (s) and
``B`` (B/s) by bounded least squares on log time (relative error, so that 4 KiB and 128 MiB
messages count alike).

A ring all-reduce over ``N`` GPUs takes ``2 (N - 1) (alpha + S / (N B))`` where ``B`` is the
bandwidth of the ring's slowest hop. :func:`predict_all_reduce` computes that for any
topology, through the discrete-event engine's ``ficco_sim.simulate.collective_time`` when the
package has one, else in closed form. :func:`fit_collectives` uses it for the "predict a
bigger configuration from a smaller one" check: fit on 2-GPU rows, predict 4-GPU rows.

>>> import numpy as np
>>> s = np.array([1e3, 1e6, 1e8]); t = 5e-6 + s / 100e9
>>> a, b = fit_alpha_beta(s, t)
>>> round(a * 1e6, 2), round(b / 1e9, 1)
(5.0, 100.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from ..errors import InputError
from ..topology import Topology, gpu_node, ring

# PCIe bandwidth per direction (datasheet, x16): what joins NVLink pairs in vidur's 4-GPU
# "pairwise_nvlink" machines. A100: PCIe Gen4; H100 SXM: PCIe Gen5.
PCIE_GBPS = {"a40": 32.0, "a100": 32.0, "h100": 64.0}


def fit_alpha_beta(nbytes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """(alpha s, bandwidth B/s) minimising the log-time error of ``alpha + S / B``."""
    from scipy.optimize import least_squares

    s = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    if len(s) < 2 or np.any(t <= 0):
        raise InputError("calibrate", None, "an alpha-beta fit needs at least two positive timings")
    # Start: alpha from the smallest message, B from the largest.
    a0 = max(float(t[np.argmin(s)]) * 0.5, 1e-9)
    b0 = float(s.max() / max(t.max() - a0, 1e-12))
    x0 = np.array([a0 * 1e6, np.log(b0 / 1e9)])

    def res(x: np.ndarray) -> np.ndarray:
        return np.log(x[0] * 1e-6 + s / (np.exp(x[1]) * 1e9)) - np.log(t)

    r = least_squares(res, x0, bounds=([0.0, np.log(1e-3)], [1e5, np.log(1e5)]), loss="soft_l1", f_scale=0.1)
    return float(r.x[0] * 1e-6), float(np.exp(r.x[1]) * 1e9)


def rel_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.asarray(pred, dtype=float) / np.asarray(meas, dtype=float) - 1.0


def pairwise_topology(n: int, pair_bw: float, cross_bw: float, latency: float) -> Topology:
    """``n`` GPUs joined in pairs (0-1, 2-3, ...) by ``pair_bw`` links; pairs joined in a ring
    by ``cross_bw`` links (PCIe through the host). Bandwidths per direction (B/s)."""
    g = nx.DiGraph()
    g.add_nodes_from(gpu_node(i) for i in range(n))
    for i in range(n):
        j = (i + 1) % n
        bw = pair_bw if i % 2 == 0 else cross_bw
        g.add_edge(gpu_node(i), gpu_node(j), bandwidth=bw, latency=latency)
        g.add_edge(gpu_node(j), gpu_node(i), bandwidth=bw, latency=latency)
    return Topology(f"pairwise:{n}", "custom", n, g)


def ring_bottleneck(topology: Topology) -> tuple[float, float]:
    """(slowest hop bandwidth, largest hop latency) of the ring 0 -> 1 -> ... -> N-1 -> 0."""
    n = topology.num_gpus
    hops = [(i, (i + 1) % n) for i in range(n)]
    return (min(topology.path_bandwidth(a, b) for a, b in hops),
            max(topology.path_latency(a, b) for a, b in hops))


def engine_collective_time() -> Any:
    """The discrete-event engine's ``collective_time``."""
    from ..simulate import collective_time
    return collective_time


def predict_all_reduce(nbytes: np.ndarray, topology: Topology, alpha: float, gpu: Any = None,
                       *, use_engine: bool = True) -> tuple[np.ndarray, str]:
    """Predicted ring all-reduce times (s) of ``nbytes`` per rank on ``topology``, and which
    predictor ran (``"engine"`` or ``"closed-form"``).

    ``alpha`` is the per-step software latency fitted on the small configuration; the closed
    form adds it to every one of the ``2 (N - 1)`` steps. The engine path needs ``gpu`` (a
    profile) and uses the topology's link latencies (set them to ``alpha``).
    """
    s = np.asarray(nbytes, dtype=float)
    engine = engine_collective_time() if use_engine and gpu is not None else None
    if engine is not None:
        # One engine run per distinct size (the tables repeat sizes across dtypes/runs).
        times = {int(b): engine(gpu, topology, "all-reduce", int(b), algorithm="ring") for b in np.unique(s)}
        return np.array([times[int(b)] for b in s]), "engine"
    n = topology.num_gpus
    bw, _ = ring_bottleneck(topology)
    return 2 * (n - 1) * (alpha + s / (n * bw)), "closed-form"


@dataclass
class LinkFits:
    """Per-setup alpha-beta fits and the 2 -> 4 GPU all-reduce prediction check."""

    fits: pd.DataFrame      # one row per (setup, collective, num_workers, devices_per_node)
    points: pd.DataFrame    # every row with predicted_s, rel_error, split
    scaling: pd.DataFrame   # one row per setup x topology assumption: 4-GPU prediction errors


def fit_collectives(coll: pd.DataFrame, gpu_name: str | None = None, *, use_engine: bool = True) -> LinkFits:
    """Fit alpha-beta to every send/recv and 2-GPU all-reduce series; predict 4-GPU all-reduce
    from the 2-GPU fit under two topology assumptions: a uniform ring of the 2-GPU link, and
    NVLink pairs joined by PCIe (datasheet bandwidth, NCCL's two rings, one per direction)."""
    if gpu_name:
        coll = coll[coll["setup"].str.lower().str.startswith(gpu_name.lower())]
        if coll.empty:
            raise InputError("collective_times", "setup", f"no collective rows for gpu {gpu_name!r}")
    fits, points, scaling = [], [], []
    for key, g in coll.groupby(["setup", "collective", "num_workers", "devices_per_node"]):
        setup, coll_kind, n, dpn = key
        if coll_kind == "all_reduce" and n != 2:
            continue
        a, b = fit_alpha_beta(g["bytes"].to_numpy(), g["time_s"].to_numpy())
        if coll_kind == "all_reduce":  # 2 GPUs: t = 2 alpha + S / B_ring
            alpha, bw = a / 2, b
        else:
            alpha, bw = a, b
        pred = a + g["bytes"].to_numpy() / b
        err = rel_errors(pred, g["time_s"].to_numpy())
        fits.append(dict(setup=setup, collective=coll_kind, num_workers=n, devices_per_node=dpn,
                         alpha_us=alpha * 1e6, bandwidth_gbps=bw / 1e9, rows=len(g),
                         median_abs_err=float(np.median(np.abs(err))),
                         p90_abs_err=float(np.quantile(np.abs(err), 0.9))))
        points.append(g.assign(predicted_s=pred, rel_error=err, split="train"))
        if coll_kind != "all_reduce":
            continue
        big = coll[(coll["setup"] == setup) & (coll["collective"] == "all_reduce") & (coll["num_workers"] == 4)]
        if big.empty:
            continue
        gpu_key = str(setup).split("_")[0]
        profile = _profile_or_none(gpu_key)
        cases = [("uniform ring of the 2-GPU link", ring(4, bandwidth=bw, latency=alpha))]
        if gpu_key in PCIE_GBPS:
            # Two rings (one per direction) each carry half the data: per-ring bandwidth of a
            # PCIe hop is its per-direction rate; of the pair link, half the fitted 2-GPU rate.
            cases.append((f"NVLink pairs + PCIe {PCIE_GBPS[gpu_key]:g} GB/s (datasheet), 2 rings",
                          pairwise_topology(4, bw, 2 * PCIE_GBPS[gpu_key] * 1e9, alpha)))
        for label, topo in cases:
            pred4, how = predict_all_reduce(big["bytes"].to_numpy(), topo, alpha, profile, use_engine=use_engine)
            e4 = rel_errors(pred4, big["time_s"].to_numpy())
            points.append(big.assign(predicted_s=pred4, rel_error=e4, split=f"test: {label}"))
            scaling.append(dict(setup=setup, assumption=label, predictor=how, rows=len(big),
                                median_abs_err=float(np.median(np.abs(e4))),
                                p90_abs_err=float(np.quantile(np.abs(e4), 0.9)),
                                median_signed_err=float(np.median(e4))))
        # Diagnostic only (uses the 4-GPU data): the ring bandwidth B that explains it
        # (t = 6 alpha + 1.5 S / B for N = 4).
        _, b4 = fit_alpha_beta(big["bytes"].to_numpy(), big["time_s"].to_numpy())
        scaling.append(dict(setup=setup, assumption="diagnostic: ring bandwidth fitted on the 4-GPU rows",
                            predictor="fit", rows=len(big), implied_ring_gbps=1.5 * b4 / 1e9,
                            median_abs_err=float("nan"), p90_abs_err=float("nan"),
                            median_signed_err=float("nan")))
    return LinkFits(pd.DataFrame(fits), pd.concat(points, ignore_index=True) if points else pd.DataFrame(),
                    pd.DataFrame(scaling))


def _profile_or_none(name: str) -> Any:
    from ..hardware import load_gpu
    try:
        return load_gpu(name)
    except InputError:
        return None


def fit_copies(bench: pd.DataFrame, path: str = "dma") -> tuple[float, float, pd.DataFrame]:
    """(command overhead s, bandwidth B/s, points) from benchmark ``copy`` rows on ``path``."""
    rows = bench[(bench["kind"] == "copy") & (bench["path"] == path)]
    if len(rows) < 2:
        raise InputError("benchmark", "copy", f"need at least two {path} copy rows to fit")
    a, b = fit_alpha_beta(rows["bytes"].to_numpy(), rows["time_s"].to_numpy())
    pred = a + rows["bytes"].to_numpy(dtype=float) / b
    return a, b, rows.assign(predicted_s=pred, rel_error=rel_errors(pred, rows["time_s"].to_numpy()), split="train")


def origin_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``y = c * x`` through the origin, clipped at 0 (a contention
    coefficient: a slowdown never speeds up); 0 when every ``x`` is 0."""
    den = float(np.sum(x * x))
    return max(0.0, float(np.sum(x * y)) / den) if den > 0 else 0.0


def fit_contention(bench: pd.DataFrame, hbm_bandwidth: float) -> tuple[float, pd.DataFrame] | None:
    """``compute_per_hbm_util`` from ``contention`` rows: GEMM slowdown ``t / t_alone - 1``
    against the copy's share of HBM ``u = copy bytes moved / s (read + write) / hbm_bandwidth``;
    least squares through the origin. None when the file has no contention rows."""
    rows = bench[bench["kind"] == "contention"]
    if rows.empty:
        return None
    slow = rows["time_s"].to_numpy(dtype=float) / rows["alone_s"].to_numpy(dtype=float) - 1.0
    u = np.clip(rows["copy_gbps"].to_numpy(dtype=float) * 2e9 / hbm_bandwidth, 1e-6, 1.0)
    coef = origin_slope(u, slow)
    return coef, rows.assign(hbm_util=u, slowdown=slow, predicted_slowdown=coef * u)
