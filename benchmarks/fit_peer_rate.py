"""Fit ``gemm.peer_gbps_per_block`` (how fast one block of a fused GEMM moves its tile to or
from a peer) on Flux's own tuning runs, and score it on another Flux report it never saw.

Flux's Hopper GEMM + reduce-scatter (bytedance/flux, ``Sm90RSGemmUniversal``) moves every
output tile between GPUs from inside the GEMM's own blocks: extra producer warps pull the
peers' tiles with a single stage of TMA loads in flight per block, so a block moves a few KiB
per NVLink round trip, far below what the link carries when all 132 SMs do it. ficco-sim's
``flux`` preset (``fused-st``) holds each wave's blocks until their tiles have crossed, at
``blocks x peer_rate`` or the path's bandwidth, whichever is lower.

Fitted on: the best time of Flux's tuner for every configuration bytedance/flux#100's public
copy shows on 8 x H100 (N = 8192; M = 8192 ... 32768; K = 1024 and 3584 per GPU; fp16; the
layout RRR / RCR and fused reduction on or off vary from row to row, and one shape appears
twice, 13% apart). At K = 1024 the GEMM is short, so the kernel's time is mostly its tile
traffic: those rows pin the rate. The fit minimises the mean |log(model / measured)| over a
log grid, then refines it.

Scored, never fitted: bytedance/flux#90 (same shapes at K = 3584 for M = 1024 ... 32768,
Flux against cuBLAS + NCCL, ``benchmarks/flux_issue90.py``).

    python benchmarks/fit_peer_rate.py [--out validation/public/peer_rate_fit.txt]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim import Scenario, simulate  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402

URL = "https://github.com/bytedance/flux/issues/100"
# (m, k per GPU, the tuner's best time in microseconds, its configuration), quoted from the logs
# (N = 8192, 8 GPUs, fp16; "?": the configuration line is not in the public copy)
PUBLISHED = [(8192, 1024, 990.0, "RRR fuse_reduction=0"), (8192, 3584, 1493.0, "RRR fuse_reduction=1"),
             (16384, 1024, 1949.0, "RCR fuse_reduction=0"), (16384, 3584, 2479.0, "RCR fuse_reduction=0"),
             (16384, 3584, 2822.0, "?"), (32768, 1024, 4595.0, "RCR fuse_reduction=1")]


def model(rate_gbps: float) -> dict[tuple[int, int], float]:
    g = load_gpu("h100")
    gpu = dataclasses.replace(g, gemm=dataclasses.replace(g.gemm, peer_rate=rate_gbps * 1e9))
    return {(m, k): simulate(Scenario("gemm-rs", 8, m, 8192, k, "float16"), "flux", gpu, "switch:8").makespan * 1e6
            for m, k in {(m, k) for m, k, _, _ in PUBLISHED}}


def loss(pred: dict) -> float:
    return float(np.mean([abs(math.log(pred[(m, k)] / v)) for m, k, v, _ in PUBLISHED]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write the report here too")
    args = ap.parse_args()
    t0 = time.perf_counter()
    grid = np.geomspace(0.25, 16.0, 25)
    scores = {float(r): loss(model(float(r))) for r in grid}
    best = min(scores, key=scores.get)
    lo, hi = best / 1.2, best * 1.2
    for _ in range(20):                      # golden-section refinement in log space
        span = math.log(hi / lo)
        a, b = lo * math.exp(0.382 * span), lo * math.exp(0.618 * span)
        if loss(model(a)) < loss(model(b)):
            hi = b
        else:
            lo = a
    rate = round(math.sqrt(lo * hi), 2)
    pred = model(rate)
    lines = [f"# gemm.peer_gbps_per_block fitted on {URL} (Flux's tuner, 8 x H100, N 8192, fp16); generated "
             f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')} on {platform.node()} "
             f"by benchmarks/fit_peer_rate.py in {time.perf_counter() - t0:.0f} s",
             f"# peer_gbps_per_block = {rate} (mean |log err| {loss(pred):.3f}; grid best {best:.2f})",
             "m,k,config,published_us,model_us,err,source_url"]
    lines += [f"{m},{k},{c},{v:.0f},{pred[(m, k)]:.1f},{pred[(m, k)] / v - 1:+.4f},{URL}" for m, k, v, c in PUBLISHED]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
