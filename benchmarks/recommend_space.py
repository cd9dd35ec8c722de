"""What ``recommend``'s candidate set leaves on the table, by the discrete-event engine.

1. The built-in library (GEMMs that consume or produce their collective; H100 behind a switch,
   MI300X fully connected): the DES's best over the candidates against its best over the
   candidates and their variants the set leaves out (each SM candidate shaped at every size of
   the space, with an SM margin, with half the channels, with both).
2. A GEMM beside an independent collective (all-reduce, all-gather, all-to-all; seven GEMM
   shapes; 8 GPUs of H100, A100, A40, MI300X, MI250X): the same against the whole ``full``
   space of side-by-side points, and how far ``recommend``'s pick sits from the DES's best;
   then again with the GEMM issued first (``recommend --gemm-first``, every point ``-gf``).

Every number is a DES (or closed-form, for the pick) run made here.

    python benchmarks/recommend_space.py [--jobs 2]      # ~4 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim import Scenario, simulate_many  # noqa: E402
from ficco_sim.explore.heuristics import candidate_schedules, recommend, training_cases  # noqa: E402
from ficco_sim.explore.space import enumerate_space, smem_sizes  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402
from ficco_sim.schedules.validity import margin_for  # noqa: E402
from ficco_sim.topology import load_topology  # noqa: E402

SIDE_GPUS = {"h100": "switch:8", "a100": "switch:8", "a40": "ring:8", "mi300x": "fc:8", "mi250x": "fc:8"}
SIDE_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 1024, 8192),
               (16384, 4096, 8192), (4096, 8192, 2048), (8192, 28672, 8192))


def side_cases() -> list[tuple[Scenario, str, str]]:
    return [(Scenario(kind, 8, m, n, k, dtype="bfloat16"), gpu, topo) for gpu, topo in SIDE_GPUS.items()
            for kind in ("ar-par-gemm", "ag-par-gemm", "a2a-par-gemm") for m, n, k in SIDE_SHAPES]


def _left_out(sc: Scenario, gpu, topo, cands: list, gemm_first: bool = False) -> list[str]:
    """The valid points of the full space that are variants of the SM candidates (dependent
    kinds: shaped, with a margin, with half the channels), or every valid point (independent;
    ``gemm_first``: each with the GEMM issued first)."""
    full = {(replace(p.schedule, gemm_first=True) if gemm_first and p.schedule.granularity == "par"
             else p.schedule).name for p in enumerate_space(sc, gpu, topo, level="full") if p.valid}
    names = {c.name for c in cands}
    if sc.spec.independent:
        return sorted(full - names)
    small = max(1, gpu.comm_kernel.channels // 2)
    out = set()
    for s in cands:
        if s.engine != "sm" or s.granularity == "none":
            continue
        out |= {replace(s, smem=z).name for z in smem_sizes(sc, gpu)}
        out |= {replace(s, margin=margin_for(gpu)).name, replace(s, channels=small).name,
                replace(s, channels=small, margin=margin_for(gpu, small)).name}
    return sorted((out & full) - names)


def case_row(case) -> dict:
    sc, gpu_name, topo_name, gemm_first = case
    gpu = load_gpu(gpu_name)
    topo = load_topology(topo_name, gpu)
    cands = candidate_schedules(sc, gpu, topo, gemm_first=gemm_first)
    extra = _left_out(sc, gpu, topo, cands, gemm_first)
    t = {r.schedule.name: r.makespan for r in simulate_many(sc, [c.name for c in cands] + extra, gpu, topo)}
    inside = min(t[c.name] for c in cands)
    best = min(t, key=t.get)
    pick = recommend(sc, gpu, topo, gemm_first=gemm_first)["schedule"]
    return {"case": sc.label(), "kind": sc.kind, "independent": sc.spec.independent, "gemm_first": gemm_first,
            "gpu": gpu_name,
            "topology": topo_name, "candidates": len(cands), "left_out": len(extra), "best": best,
            "best_left_out": best not in {c.name for c in cands},
            "candidates_loss": inside / t[best] - 1.0, "pick": pick, "pick_loss": t[pick] / t[best] - 1.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="local worker processes (default %(default)s)")
    ap.add_argument("--csv", help="write one row per case here")
    args = ap.parse_args()
    cases = ([(*c, False) for c in training_cases()] + [(*c, False) for c in side_cases()]
             + [(*c, True) for c in side_cases()])
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        df = pd.DataFrame(list(pool.map(case_row, cases, chunksize=4)))
    secs = time.perf_counter() - t0
    table = Table(title=f"recommend's candidates against the DES over what they leave out ({secs:.0f} s)")
    for c in ("cases", "runs left out", "best left out", "candidates > 5% behind", "worst", "pick within 5%",
              "pick worst"):
        table.add_column(c, justify="right")
    for label, part in (("GEMM with its collective (library)", df[~df.independent]),
                        ("GEMM beside a collective", df[df.independent & ~df.gemm_first]),
                        ("the same, GEMM issued first (--gemm-first)", df[df.gemm_first])):
        table.add_row(f"{label}: {len(part)}", str(int(part.left_out.sum())), str(int(part.best_left_out.sum())),
                      str(int((part.candidates_loss > 0.05).sum())), f"{part.candidates_loss.max():.1%}",
                      f"{(part.pick_loss <= 0.05).mean():.0%}", f"{part.pick_loss.max():.1%}")
    Console(width=160).print(table)
    worst = df.sort_values("candidates_loss", ascending=False).head(5)
    for r in worst.itertuples():
        print(f"  {r.case} on {r.gpu} {r.topology}: best {r.best}, candidates {r.candidates_loss:.1%} behind")
    if args.csv:
        df.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
