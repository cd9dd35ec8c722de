"""bytedance/flux#90 on 8x H100: GEMM -> reduce-scatter with N = 8192 and K = 28672 split over
8 GPUs (K = 3584 per GPU), fp16, M = 1024 ... 32768. The issue quotes, per M, the average time
of torch (cuBLAS GEMM, then NCCL reduce-scatter) and of Flux's fused GEMM + reduce-scatter;
Flux is the slower one at every M (1.02x at M = 1024 to 1.25x at M = 32768).

The model's counterparts, both by the discrete-event engine on h100 switch:8: the ``nccl``
preset (= ``none``) and the ``flux`` preset (= ``fused-st``: one GEMM whose blocks store each
tile to its owner from the epilogue, then a reduction). The quoted numbers fit nothing.

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


def rows() -> list[dict]:
    out = []
    for m, (torch_ms, flux_ms) in PUBLISHED.items():
        sc = Scenario("gemm-rs", 8, m, 8192, 3584, "float16")
        plain = simulate(sc, "nccl", "h100", "switch:8").makespan
        fused = simulate(sc, "flux", "h100", "switch:8").makespan
        out.append({"m": m, **versus("flux", torch_ms / 1e3, plain, flux_ms / 1e3, fused, URL)})
    return out


def main() -> None:
    args = arguments(__doc__)
    df = pd.DataFrame(rows())
    t = Table(title="flux#90: GEMM -> RS on 8x H100, N 8192, K 3584 per GPU, fp16 (DES)")
    for c in ("M", "torch ms", "model nccl ms", "err", "flux ms", "model flux ms", "flux/torch", "model ratio",
              "sign"):
        t.add_column(c, justify="right")
    for r in df.itertuples():
        t.add_row(str(r.m), f"{r.published_nccl_ms:.3f}", f"{r.model_nccl_ms:.3f}", f"{r.err_nccl:+.1%}",
                  f"{r.published_flux_ms:.3f}", f"{r.model_flux_ms:.3f}", f"{r.published_ratio:.3f}",
                  f"{r.model_ratio:.3f}", "ok" if r.sign_agrees else "WRONG")
    Console(width=140).print(t)
    print(f"plain GEMM -> NCCL: max |err| {df.err_nccl.abs().max():.1%}; fused/plain sign right at "
          f"{int(df.sign_agrees.sum())} of {len(df)} sizes")
    if args.csv:
        write_stamped_csv(args.csv, df, f"{URL}: published torch and Flux times beside ficco-sim (DES, h100 switch:8)",
                          "benchmarks/flux_issue90.py")


if __name__ == "__main__":
    main()
