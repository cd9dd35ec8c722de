"""How often does the fitted heuristic pick what the discrete-event simulator finds best?

The heuristic is fitted and scored (heuristics.json) against the vectorized analytical
model, the same closed-form family it reasons with. This script scores it against the
DES instead, on the held-out cases: strict top-1, top-1 with ties (within 1%) and the
share within 5% of the DES optimum.

Run: python benchmarks/heuristic_vs_des.py [--jobs 2] [--limit N]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ficco_sim import simulate_many  # noqa: E402
from ficco_sim.explore.heuristics import (TIE, candidate_schedules, features, load_heuristic,  # noqa: E402
                                          split, training_cases)


def des_speedups(case) -> dict[str, float]:
    sc, gpu, topo = case
    return {r.schedule.name: r.metrics["speedup"] for r in simulate_many(sc, candidate_schedules(sc.gpus), gpu, topo)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first N held-out cases")
    args = ap.parse_args()
    h = load_heuristic()
    cases = [c for c in training_cases() if split(c[0].label() + c[1]) == "test"]
    if args.limit:
        cases = cases[:args.limit]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        tables = list(pool.map(des_speedups, cases))
    top1 = ties = within = 0
    for (sc, gpu, topo), sp in zip(cases, tables):
        best = max(sp.values())
        pick, _ = h.pick(features(sc, gpu, topo))
        got = sp.get(pick, 0.0)
        top1 += got >= best - 1e-12
        ties += got >= (1 - TIE) * best
        within += got >= 0.95 * best
    n = len(cases)
    print(f"held-out cases: {n} ({time.perf_counter() - t0:.0f} s of DES)")
    print(f"{'against':10s} {'top-1':>7s} {'top-1 ties':>11s} {'within 5%':>10s}")
    print(f"{'DES':10s} {top1 / n:7.0%} {ties / n:11.0%} {within / n:10.0%}")


if __name__ == "__main__":
    main()
