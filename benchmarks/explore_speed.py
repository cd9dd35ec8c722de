"""Speed of explore: schedule points per second for the DES, the analytical model and the
vectorized fast estimator on the built-in default study, and the wall time of the full
default ``ficco-sim explore`` with 1 and 2 local workers.

    python benchmarks/explore_speed.py [--fast-only]

``--fast-only`` keeps the fast estimator's rows and skips the DES and analytical timings.
"""

import sys
import time

from rich.console import Console
from rich.table import Table

from ficco_sim.explore.fast import _CACHE, estimate_many
from ficco_sim.explore.library import builtin_library
from ficco_sim.explore.study import DEFAULT_PAIRS, default_scenarios, run_study
from ficco_sim.explore.sweep import Job, run_sweep
from ficco_sim.schedules import basic_schedules


def rate(engine: str, scenarios, limit=None) -> tuple[int, float]:
    jobs = [Job(g, t, (s,), tuple(x.name for x in basic_schedules()), engine) for g, t in DEFAULT_PAIRS
            for s in scenarios[:limit]]
    t0 = time.perf_counter()
    rows = run_sweep(jobs, progress=False)
    return len(rows), time.perf_counter() - t0


def main() -> None:
    table = Table(title="explore speed (1 process)")
    for c in ("engine", "points", "seconds", "points/s"):
        table.add_column(c, justify="right")
    study = default_scenarios()
    fast_only = "--fast-only" in sys.argv[1:]
    for engine, limit in () if fast_only else (("des", 3), ("analytical", None)):
        n, dt = rate(engine, study, limit)
        table.add_row(f"{engine} (default study{', 3 scenarios' if limit else ''})", str(n), f"{dt:.2f}",
                      f"{n / dt:,.0f}")
    scheds = [s.name for s in basic_schedules()]
    for label, scs in (("default study", study), ("builtin library <= 8 GPUs", [s for s in builtin_library()
                                                                                 if s.gpus <= 8])):
        for warm in (False, True):
            if not warm:
                _CACHE.clear()
            t0 = time.perf_counter()
            n = sum(len(estimate_many(scs, scheds, g, t.replace(":8", ":8"))) for g, t in DEFAULT_PAIRS
                    for _ in [0]) if label == "default study" else \
                sum(len(estimate_many([s for s in scs if s.gpus == k], scheds, g, f"{t.split(':')[0]}:{k}"))
                    for g, t in DEFAULT_PAIRS for k in (4, 8))
            dt = time.perf_counter() - t0
            table.add_row(f"fast, {label} ({'templates cached' if warm else 'incl. template build'})", str(n),
                          f"{dt:.2f}", f"{n / dt:,.0f}")
    Console(width=120).print(table)
    if fast_only:
        return
    wall = {}
    for jobs in (1, 2):
        t0 = time.perf_counter()
        pts, _ = run_study(study, DEFAULT_PAIRS, engine="des", workers=jobs, progress=False)
        wall[jobs] = time.perf_counter() - t0
        print(f"full default explore (DES, {len(pts)} points, --jobs {jobs}): {wall[jobs]:.1f} s wall")
    print(f"--jobs 2 vs --jobs 1 speed-up: {wall[1] / wall[2]:.2f}x")


if __name__ == "__main__":
    main()
