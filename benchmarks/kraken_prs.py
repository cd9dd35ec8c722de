"""PyTorch async-TP against GEMM + NCCL on 8 x H100, as meta-pytorch/kraken's pull requests
measured them, beside ficco-sim's ``async-tp`` and ``nccl`` presets (DES, h100 switch:8).

- meta-pytorch/kraken#19: GEMM then reduce-scatter, bf16. Each rank holds A (M x K) and B
  (K x N) and keeps M / 8 summed rows: ``torch.matmul`` then NCCL ``reduce_scatter_tensor``
  against ``torch.ops.symm_mem.fused_matmul_reduce_scatter`` (async-TP). ficco-sim:
  ``gemm-rs`` with m = M, k = K (per GPU).
- meta-pytorch/kraken#2: all-gather then GEMM, bf16. Each rank holds A (M x K), gathered to
  8M rows, times B (K x 6656): NCCL ``all_gather_tensor`` then ``torch.matmul`` against
  ``torch.ops.symm_mem.fused_all_gather_matmul``. ficco-sim: ``ag-gemm`` with m = 8M.

The numbers are quoted from the pull requests' descriptions (the rows the public copy
shows; both benchmarks time with CUDA events, L2 flushed). Nothing here was fitted on
them. The third column of #19 (a Triton persistent GEMM whose tiles leave by copy engine)
is not one of the presets and is left out.

    python benchmarks/kraken_prs.py [--csv validation/public/kraken.csv]
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

RS_URL = "https://github.com/meta-pytorch/kraken/pull/19"
AG_URL = "https://github.com/meta-pytorch/kraken/pull/2"
# (M, N, K per rank) -> (GEMM then NCCL, async-TP), in milliseconds (#19) or microseconds (#2), as quoted
GEMM_RS_MS = {(512, 4096, 14336): (0.133653, 0.613784), (1024, 4096, 14336): (0.223621, 0.666917),
              (2048, 4096, 14336): (0.422704, 0.755246)}
AG_GEMM_US = {(128, 6656, 4096): (141.984, 277.184), (128, 6656, 8192): (284.288, 635.072),
              (128, 6656, 16384): (513.600, 1166.944), (256, 6656, 4096): (272.992, 309.920),
              (256, 6656, 8192): (499.392, 548.480), (256, 6656, 16384): (953.216, 1333.120),
              (512, 6656, 4096): (514.496, 455.776), (512, 6656, 8192): (912.384, 837.792),
              (512, 6656, 16384): (1810.432, 1633.312)}


def rows() -> list[dict]:
    out = []
    cases = [("gemm-rs", shape, (a / 1e3, b / 1e3), RS_URL) for shape, (a, b) in GEMM_RS_MS.items()]
    cases += [("ag-gemm", shape, (a / 1e6, b / 1e6), AG_URL) for shape, (a, b) in AG_GEMM_US.items()]
    for kind, (m, n, k), (nccl_s, atp_s), url in cases:
        sc = Scenario(kind, 8, m if kind == "gemm-rs" else 8 * m, n, k, "bfloat16")
        plain = simulate(sc, "nccl", "h100", "switch:8").makespan
        atp = simulate(sc, "async-tp", "h100", "switch:8").makespan
        out.append({"kind": kind, "m_per_rank": m, "n": n, "k": k,
                    **versus("async_tp", nccl_s, plain, atp_s, atp, url)})
    return out


def main() -> None:
    args = arguments(__doc__)
    df = pd.DataFrame(rows())
    t = Table(title="async-TP vs GEMM + NCCL on 8x H100, bf16 (meta-pytorch/kraken#19, #2; model: DES)")
    for c in ("kind", "M/rank", "N", "K", "nccl ms", "model", "err", "async-TP ms", "model", "err",
              "ratio", "model ratio", "sign"):
        t.add_column(c, justify="right")
    for r in df.itertuples():
        t.add_row(r.kind, str(r.m_per_rank), str(r.n), str(r.k), f"{r.published_nccl_ms:.3f}",
                  f"{r.model_nccl_ms:.3f}", f"{r.err_nccl:+.1%}", f"{r.published_async_tp_ms:.3f}",
                  f"{r.model_async_tp_ms:.3f}", f"{r.err_async_tp:+.1%}", f"{r.published_ratio:.2f}",
                  f"{r.model_ratio:.2f}", "ok" if r.sign_agrees else "WRONG")
    Console(width=160).print(t)
    print(f"GEMM + NCCL: median |err| {df.err_nccl.abs().median():.1%}; async-TP: median |err| "
          f"{df.err_async_tp.abs().median():.1%}; async-TP / NCCL sign right at {int(df.sign_agrees.sum())} of "
          f"{len(df)}")
    if args.csv:
        write_stamped_csv(args.csv, df, f"{RS_URL} and {AG_URL}: published GEMM + NCCL and async-TP times beside "
                          "ficco-sim (DES, h100 switch:8)", "benchmarks/kraken_prs.py")


if __name__ == "__main__":
    main()
