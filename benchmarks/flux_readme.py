"""Flux's own performance table on 8 x A800 and 8 x H800, beside ficco-sim (DES, the built-in
``a800`` / ``h800`` profiles, ``switch:8``). Quoted, fitted on nothing: no number of either
profile was fitted on an A800 or H800 (they are the A100 and H100 with 8 NVLinks, the link
numbers scaled; hw_profiles/a800.yaml, h800.yaml).

bytedance/flux's README (at 7f98c8ab, 2024-10) times its demo on each machine, TP = 8, fp16:
all-gather then GEMM (``test_ag_kernel.py 4096 49152 12288``: the gathered 4096 x 12288 times
each rank's 12288 x 6144) and GEMM then reduce-scatter (``test_gemm_rs.py 4096 12288 49152``:
each rank's 4096 x 6144 times 6144 x 12288, the 4096 x 12288 outputs reduce-scattered). Per
row it quotes torch's GEMM alone, its NCCL collective alone, the two one after the other, and
Flux's fused run. The model's counterparts: the GEMM's isolated time and the collective's from
the ``none`` schedule's metrics, the ``nccl`` preset's makespan, and for Flux the ``flux``
preset on GEMM + reduce-scatter; Flux's all-gather GEMM waits on arriving chunks, which no
lowering here does, so it is scored against the nearest, ``async-tp`` (one GEMM per arrived
shard, shards moved by copy engines), as benchmarks/overlap_prs.py does the fused Triton one.

    python benchmarks/flux_readme.py [--csv validation/public/flux_readme.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from versus import arguments  # noqa: E402

from ficco_sim import Scenario, simulate  # noqa: E402
from ficco_sim.files import write_stamped_csv  # noqa: E402

URL = "https://github.com/bytedance/flux/blob/7f98c8ab847449983a46810f8a9b7b53484935d0/README.md"
TOPO = "switch:8"
# (kind, GPU) -> torch GEMM, torch NCCL, torch total, Flux total (ms), as the README's table quotes them
PUBLISHED_MS = {("ag-gemm", "a800"): (2.438, 0.662, 3.099, 2.469), ("gemm-rs", "a800"): (2.453, 0.646, 3.100, 2.508),
                ("ag-gemm", "h800"): (0.846, 0.583, 1.429, 0.957), ("gemm-rs", "h800"): (0.818, 0.590, 1.408, 0.932)}
# the demo's shapes as the model states them: ag-gemm (gathered M, N per rank, K), gemm-rs (M, N, K per rank)
SHAPES = {"ag-gemm": (4096, 6144, 12288), "gemm-rs": (4096, 12288, 6144)}
WHAT = ("GEMM alone", "NCCL collective alone", "GEMM and NCCL one after the other", "Flux fused")


def rows() -> list[dict]:
    out = []
    for (kind, gpu), published in PUBLISHED_MS.items():
        sc = Scenario(kind, 8, *SHAPES[kind], "float16")
        plain = simulate(sc, "nccl", gpu, TOPO)
        flux = "flux" if kind == "gemm-rs" else "async-tp"
        model = ((float(plain.metrics["t_comp_iso"]), "none (its GEMM)"),
                 (float(plain.metrics["t_comm_iso"]), "none (its collective)"),
                 (plain.makespan, "nccl"), (simulate(sc, flux, gpu, TOPO).makespan, flux))
        for what, ms, (t, schedule) in zip(WHAT, published, model):
            out.append({"source": "flux README", "case": f"{kind} M={SHAPES[kind][0]} N={SHAPES[kind][1]} "
                        f"K={SHAPES[kind][2]} fp16", "gpu": gpu, "what": what, "schedule": schedule,
                        "published_ms": ms, "model_ms": t * 1e3, "source_url": URL})
    df = pd.DataFrame(out)
    df["err"] = df["model_ms"] / df["published_ms"] - 1.0
    df["used_for_fit"] = False
    return df.to_dict("records")


def main() -> None:
    args = arguments(__doc__)
    df = pd.DataFrame(rows())
    t = Table(title=f"Flux README on 8x A800 / 8x H800, published vs ficco-sim (DES, {TOPO})")
    for c in ("gpu", "case", "what", "schedule", "published ms", "model ms", "err"):
        t.add_column(c, justify="right")
    for r in df.itertuples():
        t.add_row(r.gpu, r.case, r.what, r.schedule, f"{r.published_ms:.3f}", f"{r.model_ms:.3f}", f"{r.err:+.1%}")
    Console(width=150).print(t)
    for gpu, x in df.groupby("gpu", sort=False):
        print(f"{gpu}: median |err| {x['err'].abs().median():.1%} over {len(x)} facts")
    print(f"all: median |err| {df['err'].abs().median():.1%} over {len(df)} facts")
    if args.csv:
        write_stamped_csv(args.csv, df, f"{URL}: published torch and Flux times beside ficco-sim (DES, a800 / "
                          f"h800 {TOPO})", "benchmarks/flux_readme.py")


if __name__ == "__main__":
    main()
