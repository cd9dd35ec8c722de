"""A GEMM beside an independent collective: the settings of ConCCL and of Cui & Pericàs, as the
model answers them, beside what the papers measured.

1. ConCCL (Agrawal et al., arXiv 2412.14335, 8x MI300X): a GEMM runs concurrently with an
   all-gather or all-to-all sized 0.5-2x the GEMM. Measured share of the ideal overlap gain:
   ~21% with both on CUs (naive), ~42% prioritised with CU partitioning, ~72% with the
   collective on DMA engines; best speedup 1.67x. The model's counterparts: ``par-sm``,
   ``par-sm-hi-m<N>`` (high priority, the GEMM kept off the N CUs the collective's channels
   need) and ``par-dma``.
2. Cui & Pericàs (arXiv 2606.09200; A40 / A100 / H100 / MI250X): shared-memory occupancy
   shaping of the GEMM plus a high-priority communication stream cut total execution time
   by up to 25.5% (against running them one after the other); naive concurrency gains
   little, because the GEMM, already holding the SMs, refills every slot a retiring block
   frees before the collective's larger blocks fit (shared/reference/resource_aware.md 2.1,
   2.3). The model's counterpart: a GEMM of 2048^3, 4096^3 and 8192^3 (fp16) issued first
   beside an all-reduce of X (m x k) on 8 GPUs: ``none`` (sequential), ``par-sm-gf``
   (naive), ``par-sm-hi-gf`` (priority alone), ``par-sm-smem<N>k-gf`` (shaping alone, at
   each size that drops one GEMM block per SM) and ``par-sm-hi-smem<N>k-gf`` at every
   2 KiB of extra shared memory the GEMM's blocks take: the time against extra shared
   memory, and whether it has an interior optimum (strictly below both ends).

3. Characterizing compute-communication overlap (arXiv 2507.03114; 4 x A100, H100, MI250,
   MI210): overlapping slows compute by 18.9% on average and 40% at most against running it
   alone, and running compute and communication one after the other is 10.2% slower than
   overlapping on average, 26.6% at most. The model's counterpart: ``cil_compute`` (the
   GEMM's slowdown against its isolated time) and the speedup over ``none`` of a GEMM beside
   an all-reduce on 4 GPUs, naive (``par-sm``) and with the collective at high priority
   (``par-sm-hi``), over five GEMM shapes.

Every number on the model side comes from ``simulate`` (discrete-event engine) here; the
papers' numbers are quoted from their abstracts and were used to fit nothing.

    python benchmarks/independent_overlap.py [--csv validation/public/independent_overlap.csv]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim import Scenario, simulate  # noqa: E402
from ficco_sim.errors import InputError  # noqa: E402
from ficco_sim.explore.space import smem_sizes  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402
from ficco_sim.schedules.validity import margin_for  # noqa: E402

PUBLISHED = {"naive": 0.21, "prioritised + partitioned": 0.42, "DMA": 0.72}
# the model's counterpart of each published configuration
CONCCL = dict(zip(("par-sm", f"par-sm-hi-m{margin_for(load_gpu('mi300x'))}", "par-dma"), PUBLISHED.values()))

CONCCL_URL = "https://arxiv.org/abs/2412.14335"
CUI_URL = "https://arxiv.org/abs/2606.09200"
SLOWDOWN_URL = "https://arxiv.org/abs/2507.03114"
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 28672, 8192), (16384, 4096, 16384))


def conccl_rows() -> list[dict]:
    """8x MI300X: GEMM 16384 x n x 8192 (bf16) beside an all-gather / all-to-all of X (m x k),
    n chosen so the collective takes ~0.5-2x the GEMM."""
    rows = []
    for kind in ("ag-par-gemm", "a2a-par-gemm"):
        for n in (1024, 2048, 4096):
            sc = Scenario(kind, 8, 16384, n, 8192, dtype="bfloat16")
            res = {s: simulate(sc, s, "mi300x", "fc:8") for s in ("none", *CONCCL)}
            m = res["none"].metrics
            ratio = float(m["t_comm_iso"] / m["t_comp_iso"])
            for s in CONCCL:
                rows.append({"setting": "ConCCL", "gpu": "mi300x", "topology": "fc:8", "scenario": sc.label(),
                             "comm_over_compute": ratio, "schedule": s,
                             "of_ideal": float(res[s].metrics["of_ideal"]),
                             "speedup": float(res[s].metrics["speedup"]), "published_of_ideal": CONCCL[s],
                             "source": CONCCL_URL})
    return rows


CUI_PAIRS = (("a40", "ring:8"), ("a100", "switch:8"), ("h100", "switch:8"), ("mi250x", "fc:8"))
CUI_SIZES = (2048, 4096, 8192)


def cui_rows() -> list[dict]:
    """GEMM s x s x s (fp16) issued first, beside an all-reduce of X (s x s) on 8 GPUs."""
    rows = []
    for gpu, topo in CUI_PAIRS:
        g = load_gpu(gpu)
        for size in CUI_SIZES:
            sc = Scenario("ar-par-gemm", 8, size, size, size)
            none = simulate(sc, "none", gpu, topo).makespan
            naive = simulate(sc, "par-sm-gf", gpu, topo).makespan
            shaping_only = [f"par-sm-smem{x // 1024}k-gf" for x in smem_sizes(sc, g)]
            swept = [f"par-sm-hi-smem{kib}k-gf" for kib in range(2, g.sm.max_smem_per_block // 1024 + 1, 2)]
            for name in ("par-sm-gf", "par-sm-hi-gf", *shaping_only, *swept):
                try:
                    r = simulate(sc, name, gpu, topo)
                except InputError:      # the GEMM's blocks no longer fit an SM: the end of the sweep
                    continue
                s = r.schedule
                rows.append({"setting": "Cui & Pericas", "gpu": gpu, "topology": topo, "scenario": sc.label(),
                             "schedule": s.name, "smem_kib": s.smem // 1024, "priority": s.priority,
                             "margin": s.margin, "makespan_s": r.makespan, "gain_over_naive": naive / r.makespan - 1.0,
                             "reduction": 1.0 - r.makespan / none, "speedup": none / r.makespan,
                             "published_reduction_max": 0.255, "source": CUI_URL})
    return rows


def interior_optimum(times: list[float]) -> bool:
    """Is the smallest of ``times`` (a curve in order) strictly below both of its ends?

    >>> interior_optimum([3.0, 2.0, 2.5]), interior_optimum([3.0, 2.0, 2.0]), interior_optimum([2.0, 3.0])
    (True, False, False)
    """
    low = min(times)
    return len(times) > 2 and low < times[0] * (1 - 1e-9) and low < times[-1] * (1 - 1e-9)


SLOWDOWN_PAIRS = (("a100", "switch:4"), ("h100", "switch:4"), ("mi250x", "fc:4"))


def slowdown_rows(profile=load_gpu, schedules=("par-sm", "par-sm-hi")) -> list[dict]:
    """GEMM slowdown and speedup over ``none`` beside an all-reduce on 4 GPUs, per GPU, shape
    and schedule (``profile``: GPU name -> profile, for fits that vary one)."""
    rows = []
    for gpu, topo in SLOWDOWN_PAIRS:
        g = profile(gpu)
        for m, n, k in SHAPES:
            sc = Scenario("ar-par-gemm", 4, m, n, k)
            for s in schedules:
                r = simulate(sc, s, g, topo)
                rows.append({"setting": "compute slowdown", "gpu": gpu, "topology": topo, "scenario": sc.label(),
                             "schedule": s, "cil_compute": float(r.metrics["cil_compute"]),
                             "speedup": float(r.metrics["speedup"]), "published_mean": 0.189, "published_max": 0.40,
                             "published_sequential_mean": 0.102, "published_sequential_max": 0.266,
                             "source": SLOWDOWN_URL})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=None, help="also write every row here")
    args = ap.parse_args()
    con = pd.DataFrame(conccl_rows())
    t = Table(title=f"ConCCL setting, 8x MI300X fc:8: share of the ideal overlap gain ({CONCCL_URL})")
    for c in ("published configuration", "schedule", "model of ideal (min-max)", "model median", "published",
              "model best speedup"):
        t.add_column(c, justify="right")
    for label, s in zip(PUBLISHED, CONCCL):
        x = con[con["schedule"] == s]
        t.add_row(label, s, f"{x['of_ideal'].min():.2f}-{x['of_ideal'].max():.2f}", f"{x['of_ideal'].median():.2f}",
                  f"{CONCCL[s]:.2f}", f"{x['speedup'].max():.2f}x")
    t.caption = (f"{len(con) // len(CONCCL)} cases (all-gather / all-to-all, collective {con['comm_over_compute'].min():.2f}"
                 f"-{con['comm_over_compute'].max():.2f}x the GEMM); published best speedup 1.67x")
    Console(width=130).print(t)
    mixed = [float(simulate(Scenario(kind, 8, 16384, n, 8192, dtype="bfloat16"), "par-sm-mix", "mi300x",
                            "fc:8").metrics["of_ideal"]) for kind in ("ag-par-gemm", "a2a-par-gemm") for n in (1024, 2048, 4096)]
    print(f"naive with the launch order differing across ranks (par-sm-mix: the odd GPUs' GEMM first): median "
          f"{pd.Series(mixed).median():.2f} ({min(mixed):.2f}-{max(mixed):.2f}); published 0.21 lies between the two orders")
    cui = pd.DataFrame(cui_rows())
    t = Table(title=f"Cui & Pericas setting: GEMM issued first || all-reduce, 8 GPUs ({CUI_URL})")
    for c in ("gpu", "GEMM", "naive vs sequential", "priority alone", "shaping alone", "best", "best vs sequential",
              "best vs naive", "time (ms) by extra smem KiB, high priority", "interior optimum"):
        t.add_column(c, justify="right")
    for (gpu, scen), x in cui.groupby(["gpu", "scenario"], sort=False):
        naive = x[x["schedule"] == "par-sm-gf"].iloc[0]
        prio = x[x["schedule"] == "par-sm-hi-gf"].iloc[0]
        shaped = x[(x["priority"] == "normal") & (x["smem_kib"] > 0)]
        best = x.loc[x["makespan_s"].idxmin()]
        hi = x[x["priority"] == "high"].sort_values("smem_kib")
        ms = hi["makespan_s"].tolist()
        keep = [0] + [i for i in range(1, len(ms)) if abs(ms[i] - ms[i - 1]) > 1e-12 * ms[i]]
        curve = " ".join(f"{int(hi['smem_kib'].iloc[i])}:{ms[i] * 1e3:.3f}" for i in keep)
        t.add_row(gpu, scen.split(" x")[0].replace("ar-par-gemm ", ""), f"{naive['reduction']:.1%}",
                  f"{prio['gain_over_naive']:+.1%}",
                  f"{shaped['gain_over_naive'].max():+.1%}" if len(shaped) else "-", best["schedule"],
                  f"{best['reduction']:.1%}", f"{best['gain_over_naive']:+.1%}",
                  f"{curve} .. {int(hi['smem_kib'].iloc[-1])}", "yes" if interior_optimum(ms) else "no")
    t.caption = ("published: shaping + priority cut total time by up to 25.5% against sequential; naive concurrency "
                 "gains little; shaping has an interior optimum")
    Console(width=190).print(t)
    slow = pd.DataFrame(slowdown_rows())
    t = Table(title=f"Compute slowdown and overlap speedup, GEMM || all-reduce on 4 GPUs ({SLOWDOWN_URL})")
    for c in ("gpu", "schedule", "slowdown mean", "slowdown max", "published", "sequential slower mean",
              "sequential slower max", "published"):
        t.add_column(c, justify="right")
    for (gpu, sched), x in slow.groupby(["gpu", "schedule"], sort=False):
        t.add_row(gpu, sched, f"{x['cil_compute'].mean():.1%}", f"{x['cil_compute'].max():.1%}", "18.9% / 40%",
                  f"{x['speedup'].mean() - 1:.1%}", f"{x['speedup'].max() - 1:.1%}", "10.2% / 26.6%")
    t.caption = f"{len(SHAPES)} GEMM shapes per GPU; published over A100 / H100 / MI250 / MI210 training runs"
    Console(width=150).print(t)
    if args.csv:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_text_atomic(args.csv, f"# benchmarks/independent_overlap.py; {stamp}; host {platform.node()}; model "
                          "rows by the DES with the shipped profiles; published figures quoted from the papers' "
                          "abstracts, fitted on nothing\n"
                          + pd.concat([con, cui, slow], ignore_index=True).to_csv(index=False, float_format="%.6g"))
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
