"""bytedance/flux#90 on 8x H100, fp16, M = 1024 ... 32768, two runs. GEMM -> reduce-scatter
with N = 8192 and K = 28672 split over 8 GPUs (K = 3584 per GPU): the issue quotes, per M, the
average time of torch (cuBLAS GEMM, then NCCL reduce-scatter) and of Flux's fused GEMM +
reduce-scatter; Flux is the slower one at every M (1.02x at M = 1024 to 1.25x at M = 32768).
All-gather -> GEMM (``ag_gemm_8192``; the shape from the issue's tuning configuration lines,
``make_runtime_config(16384, 7168, 8192, all_gather)``: N = 57344 over 8 GPUs, 7168 each, K =
8192): torch (NCCL all-gather, then cuBLAS) against Flux's all-gather GEMM, Flux the faster
from M = 2048 (0.78-0.94x).

The model's counterparts, by the discrete-event engine on h100 switch:8: the ``nccl`` preset
(= ``none``), and the ``flux`` preset: ``fused-st`` for the reduce-scatter (one GEMM whose
blocks store each tile to its owner from the epilogue, then a reduction), ``fused-dma`` for the
all-gather (one GEMM whose tiles wait for copy engines to bring their rows, as Flux's spins on
a flag per chunk). The quoted numbers fit nothing.

    python benchmarks/flux_issue90.py [--csv validation/public/flux_issue90.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from versus import arguments, versus  # noqa: E402

from ficco_sim import Scenario, simulate  # noqa: E402
from ficco_sim.files import write_stamped_csv  # noqa: E402

URL = "https://github.com/bytedance/flux/issues/90"
# M -> (torch avg ms, flux avg ms), quoted from the GEMM + RS run
PUBLISHED = {1024: (0.18, 0.18325), 2048: (0.2895, 0.331), 4096: (0.54225, 0.632875), 8192: (1.04, 1.241),
             16384: (2.01063, 2.4585), 32768: (3.978, 4.98637)}
# M -> (torch avg ms, flux avg ms), quoted from the AG + GEMM run
PUBLISHED_AG = {1024: (0.24725, 0.25), 2048: (0.454, 0.426125), 4096: (0.867, 0.673), 8192: (1.692, 1.31525),
                16384: (3.38675, 2.80363), 32768: (6.83137, 5.819)}
# kind -> (N, K as the model states them, the published times, the preset standing for Flux)
RUNS = {"gemm-rs": (8192, 3584, PUBLISHED, "flux"), "ag-gemm": (7168, 8192, PUBLISHED_AG, "flux")}


def rows() -> list[dict]:
    out = []
    for kind, (n, k, published, fused_as) in RUNS.items():
        for m, (torch_ms, flux_ms) in published.items():
            sc = Scenario(kind, 8, m, n, k, "float16")
            plain = simulate(sc, "nccl", "h100", "switch:8").makespan
            fused = simulate(sc, fused_as, "h100", "switch:8")
            out.append({"kind": kind, "m": m, "flux_as": fused.schedule.name,
                        **versus("flux", torch_ms / 1e3, plain, flux_ms / 1e3, fused.makespan, URL)})
    return out


def main() -> None:
    args = arguments(__doc__)
    df = pd.DataFrame(rows())
    t = Table(title="flux#90 on 8x H100, fp16 (DES): GEMM -> RS (N 8192, K 3584 per GPU), AG -> GEMM (N 7168 per "
                    "GPU, K 8192)")
    for c in ("kind", "M", "torch ms", "model nccl ms", "err", "flux ms", "model flux ms", "flux/torch", "model ratio",
              "sign"):
        t.add_column(c, justify="right")
    for r in df.itertuples():
        t.add_row(r.kind, str(r.m), f"{r.published_nccl_ms:.3f}", f"{r.model_nccl_ms:.3f}", f"{r.err_nccl:+.1%}",
                  f"{r.published_flux_ms:.3f}", f"{r.model_flux_ms:.3f}", f"{r.published_ratio:.3f}",
                  f"{r.model_ratio:.3f}", "ok" if r.sign_agrees else "WRONG")
    Console(width=140).print(t)
    for kind, x in df.groupby("kind", sort=False):
        print(f"{kind}: GEMM and NCCL max |err| {x.err_nccl.abs().max():.1%}; Flux ({x.flux_as.iloc[0]}) median |err| "
              f"{x.err_flux.abs().median():.1%}; fused/plain sign right at {int(x.sign_agrees.sum())} of {len(x)} sizes")
    if args.csv:
        write_stamped_csv(args.csv, df, f"{URL}: published torch and Flux times beside ficco-sim (DES, h100 switch:8)",
                          "benchmarks/flux_issue90.py")


if __name__ == "__main__":
    main()
