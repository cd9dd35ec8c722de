"""How far the closed-form engine sits from the DES, the reference model of time, on every
point of the heuristic's DES table (``validation/heuristic/des_oracle.csv``: 156 library
layers x H100 switch / MI300X fully connected x each candidate schedule, every makespan
produced by the DES). Prints, per GPU and schedule family, the median, p90 and worst
|error| of the makespan and of the speedup over ``none``, and the mean signed error.

    python benchmarks/closed_form_vs_des.py [--oracle validation/heuristic/des_oracle.csv]

Schedule families drop the compute grouping (``-g2``) and shared-memory knobs
(``-smem16k``) from the name, so ``ficco-a2a-dma-g4-dimK`` counts as ``ficco-a2a-dma-dimK``.

``--fused-st``: instead, ``fused-st`` (a GEMM whose blocks store their tiles to the peers, Flux's
lowering; not a heuristic candidate) on every 8-GPU GEMM -> reduce-scatter layer of the library,
on five GPU / topology pairs: blocks holding their SMs at a per-block rate (H100) or posting
their stores (A100, A40, MI250X, MI300X), behind a switch, fully connected, on a ring and on
MI250X's GCD graph; both engines run each point here.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ficco_sim.explore.estimate import estimate_many  # noqa: E402
from ficco_sim.explore.heuristics import ORACLE_FILE, load_oracle, training_cases  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402


def closed_form_rows(oracle: pd.DataFrame) -> pd.DataFrame:
    """The oracle's rows with the closed form's makespan and speedup beside the DES's."""
    cases = {(sc.label(), g, t): sc for sc, g, t in training_cases()}
    want: dict[tuple, list] = defaultdict(list)
    for key, grp in oracle.groupby(["scenario", "gpu", "topology"], sort=False):
        want[(key[1], key[2], tuple(grp["schedule"]))].append(cases[key])
    got = {}
    for (gpu, topo, scheds), scs in want.items():
        for r in estimate_many(scs, list(scheds), gpu, topo):
            got[(r["scenario"], gpu, topo, r["schedule"])] = (r["makespan"], r["speedup"])
    cf = [got[(r.scenario, r.gpu, r.topology, r.schedule)] for r in oracle.itertuples()]
    out = oracle.copy()
    out["cf_makespan_s"] = [c[0] for c in cf]
    out["cf_speedup"] = [c[1] for c in cf]
    out["family"] = out["schedule"].str.replace(r"-g\d+", "", regex=True).str.replace(r"-smem\d+k?", "", regex=True)
    return out


FUSED_ST_PAIRS = (("h100", "switch:8"), ("a100", "switch:8"), ("a40", "ring:8"), ("mi250x", "mi250x-8gcd"),
                  ("mi300x", "fc:8"))


def fused_st() -> None:
    """``--fused-st``: the closed form against the DES on ``fused-st``, per GPU and topology."""
    from ficco_sim.engine.closed_form import closed_form_timeline
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.explore.library import builtin_library
    from ficco_sim.schedules import lower
    scs = [sc for sc in builtin_library() if sc.kind == "gemm-rs" and sc.gpus == 8]
    table = Table(title=f"closed form vs DES, fused-st on {len(scs)} library GEMM -> reduce-scatter layers (8 GPUs)")
    for c in ("gpu", "topology", "stores", "median |err|", "worst |err|", "mean signed"):
        table.add_column(c, justify="right")
    for gpu, topo in FUSED_ST_PAIRS:
        err = []
        for sc in scs:
            graph = lower(sc, "fused-st", gpu, topo)
            err.append(closed_form_timeline(graph, gpu, topo).makespan / simulate_graph(graph, gpu, topo).makespan - 1)
        a = np.abs(err)
        held = np.isfinite(load_gpu(gpu).gemm.peer_rate)
        table.add_row(gpu, topo, "held (per-block rate)" if held else "posted", f"{np.median(a):.1%}",
                      f"{a.max():.1%}", f"{np.mean(err):+.1%}")
    Console(width=120).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default=str(ORACLE_FILE), help="DES table (default %(default)s)")
    ap.add_argument("--fused-st", action="store_true", help="fused-st on the library's reduce-scatter layers instead")
    args = ap.parse_args()
    if args.fused_st:
        fused_st()
        return
    df = closed_form_rows(load_oracle(args.oracle))
    df = df[df["schedule"] != "none"]
    df["err"] = df["cf_makespan_s"] / df["makespan_s"] - 1.0
    df["sp_err"] = df["cf_speedup"] / df["speedup"] - 1.0
    table = Table(title=f"closed form vs DES, {len(df)} overlapped points (makespan |error|; speedup |error|)")
    for c in ("gpu", "family", "points", "median", "p90", "worst", "mean signed", "speedup median", "speedup p90"):
        table.add_column(c, justify="right")
    for (gpu, fam), g in df.groupby(["gpu", "family"]):
        a, b = g["err"].abs(), g["sp_err"].abs()
        table.add_row(gpu, fam, str(len(g)), f"{a.median():.1%}", f"{np.percentile(a, 90):.1%}", f"{a.max():.1%}",
                      f"{g['err'].mean():+.1%}", f"{b.median():.1%}", f"{np.percentile(b, 90):.1%}")
    a = df["err"].abs()
    table.add_row("all", "", str(len(df)), f"{a.median():.1%}", f"{np.percentile(a, 90):.1%}", f"{a.max():.1%}",
                  f"{df['err'].mean():+.1%}", f"{df['sp_err'].abs().median():.1%}",
                  f"{np.percentile(df['sp_err'].abs(), 90):.1%}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
