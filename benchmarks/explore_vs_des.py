"""Does the default study (the closed form ranks the whole space, the DES confirms the top 5
per scenario) give the answer of the DES run on every point of the full space? Runs both on
the built-in default study and prints, per scenario, both best schedules and speedups.

    python benchmarks/explore_vs_des.py [--jobs 2]      # ~3 min of the DES on 2 cores
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from ficco_sim.explore.study import DEFAULT_PAIRS, default_scenarios, run_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="local worker processes (default %(default)s)")
    args = ap.parse_args()
    scenarios = default_scenarios()
    t0 = time.perf_counter()
    _, confirm = run_study(scenarios, DEFAULT_PAIRS, engine="confirm", space="full", workers=args.jobs,
                           progress=False)
    t1 = time.perf_counter()
    _, des = run_study(scenarios, DEFAULT_PAIRS, engine="des", space="full", workers=args.jobs, progress=False)
    t2 = time.perf_counter()
    both = confirm.merge(des, on=["gpu", "topology", "scenario_id"], suffixes=("_confirm", "_des"))
    table = Table(title=f"default study ({t1 - t0:.0f} s) vs the DES on the full space ({t2 - t1:.0f} s)")
    for c in ("gpu", "scenario", "best (default)", "best (DES, full)", "speedup", "DES speedup", "same"):
        table.add_column(c)
    same = 0
    for r in both.itertuples():
        ok = r.best_confirm == r.best_des and abs(r.speedup_confirm - r.speedup_des) <= 1e-9 * r.speedup_des
        same += ok
        table.add_row(r.gpu, r.scenario_confirm, r.best_confirm, r.best_des, f"{r.speedup_confirm:.3f}",
                      f"{r.speedup_des:.3f}", "yes" if ok else "NO")
    Console(width=180).print(table)
    print(f"same best schedule and speedup: {same} / {len(both)} scenarios")


if __name__ == "__main__":
    main()
