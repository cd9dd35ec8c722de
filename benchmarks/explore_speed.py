"""Speed of explore: schedule points per second for the DES and the closed-form engine on the
built-in default study, and the wall time of the full default ``ficco-sim explore`` (the whole
schedule space ranked by the closed form, the 5 fastest per scenario confirmed by the DES) with
1 and 2 local workers. The closed-form engine over the whole library:
``benchmarks/closed_form_speed.py``.

    python benchmarks/explore_speed.py
"""

import time

from rich.console import Console
from rich.table import Table

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
    for engine, limit in (("des", 3), ("analytical", None)):
        n, dt = rate(engine, study, limit)
        table.add_row(f"{engine} (default study{', 3 scenarios' if limit else ''})", str(n), f"{dt:.2f}",
                      f"{n / dt:,.0f}")
    Console(width=120).print(table)
    wall = {}
    for jobs in (1, 2):
        t0 = time.perf_counter()
        pts, _ = run_study(study, DEFAULT_PAIRS, workers=jobs, progress=False)
        wall[jobs] = time.perf_counter() - t0
        des = int((pts["engine"] == "des").sum())
        print(f"full default explore ({len(pts) - des} points ranked by the closed form, {des} confirmed by the "
              f"DES, --jobs {jobs}): {wall[jobs]:.1f} s wall")
    print(f"--jobs 2 vs --jobs 1 speed-up: {wall[1] / wall[2]:.2f}x")


if __name__ == "__main__":
    main()
