"""Speed of the closed-form engine: schedule points per second over the built-in library,
template builds (lowering + compiling) included and excluded, and one ``simulate --engine
analytical`` of one scenario, its templates compiled anew (a schedule's metrics need four
compiled templates: the schedule, ``none``, and each one's communication alone).

    python benchmarks/closed_form_speed.py [--space basic|full] [--max-gpus 8]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from ficco_sim import Scenario, simulate
from ficco_sim.explore import estimate
from ficco_sim.explore.library import builtin_library
from ficco_sim.explore.space import valid_schedules
from ficco_sim.hardware import load_gpu
from ficco_sim.topology import load_topology

PAIRS = (("h100", "switch"), ("mi300x", "fc"))


def sweep(space: str, max_gpus: int) -> tuple[int, int, float]:
    """(points, scenarios, seconds) of the whole library on both pairs, cold caches."""
    estimate.clear_cache()
    lib = [s for s in builtin_library() if s.gpus <= max_gpus]
    points, t0 = 0, time.perf_counter()
    for gname, kind in PAIRS:
        gpu = load_gpu(gname)
        for gpus in sorted({s.gpus for s in lib}):
            topo = load_topology(f"{kind}:{gpus}", gpu)
            groups: dict[tuple, list[Scenario]] = {}
            for s in lib:
                if s.gpus == gpus:
                    names = tuple(x.name for x in valid_schedules(s, gpu, topo, level=space))
                    groups.setdefault(names, []).append(s)
            for names, scs in groups.items():
                points += len(estimate.estimate_many(scs, names, gpu, topo))
    return points, len(lib) * len(PAIRS), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", default="basic", choices=["basic", "candidates", "full"])
    ap.add_argument("--max-gpus", type=int, default=8)
    args = ap.parse_args()
    table = Table(title=f"closed-form engine speed (1 process, space {args.space}, <= {args.max_gpus} GPUs)")
    for c in ("what", "points", "seconds", "points/s"):
        table.add_column(c, justify="right")
    # first, in a fresh heap, as a CLI run is
    simulate(Scenario("ag-gemm", 8, 8192, 8192, 8192), "none", "h100", "switch:8", engine="analytical")  # loads
    cases = [(Scenario("ag-gemm", 8, 16384, 8192, 8192), s) for s in ("none", "ficco-a2a-dma", "ficco-a2a-sm")] + \
        [(Scenario(kind, 8, 16384, 8192, 8192), "ficco-a2a-sm") for kind in ("gemm-rs", "a2a-gemm")]
    for sc, sched in cases:
        times = []
        for _ in range(7):      # cold: the templates compiled anew each time, as in a fresh process
            estimate.clear_cache()
            t0 = time.perf_counter()
            simulate(sc, sched, "h100", "switch:8", engine="analytical")
            times.append(time.perf_counter() - t0)
        dt = sorted(times)[len(times) // 2]
        table.add_row(f"simulate --engine analytical, {sc.label()}, {sched} (cold, median of 7)", "1",
                      f"{dt:.3f}", f"{1 / dt:,.0f}")
    n, cases, dt = sweep(args.space, args.max_gpus)
    table.add_row(f"library sweep, {cases} scenario x pair cases, incl. template builds", str(n), f"{dt:.2f}",
                  f"{n / dt:,.0f}")
    t0 = time.perf_counter()
    lib = [s for s in builtin_library() if s.gpus <= args.max_gpus]
    for gname, kind in PAIRS:
        for gpus in sorted({s.gpus for s in lib}):
            scs = [s for s in lib if s.gpus == gpus]
            gpu = load_gpu(gname)
            topo = load_topology(f"{kind}:{gpus}", gpu)
            groups: dict[tuple, list[Scenario]] = {}
            for s in scs:
                groups.setdefault(tuple(x.name for x in valid_schedules(s, gpu, topo, level=args.space)), []).append(s)
            for names, g in groups.items():
                estimate.estimate_many(g, names, gpu, topo)
    warm = time.perf_counter() - t0
    table.add_row("the same, templates cached (includes enumerating the space)", str(n), f"{warm:.2f}",
                  f"{n / warm:,.0f}")
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
