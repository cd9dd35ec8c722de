"""Points per second and peak memory of a wide closed-form sweep (the full schedule space over
library scenarios), in this process, from a cold cache.

    python benchmarks/sweep_memory.py [--gpus 16] [--tokens 2048 8192] [--pair h100 switch:16]
"""

from __future__ import annotations

import argparse
import resource
import time

from rich.console import Console
from rich.table import Table

from ficco_sim.explore.library import builtin_library
from ficco_sim.explore.study import run_study


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, nargs="+", default=[16])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--pair", nargs=2, action="append", metavar=("GPU", "TOPOLOGY"))
    ap.add_argument("--space", default="full", choices=["basic", "full"])
    args = ap.parse_args()
    pairs = [tuple(p) for p in args.pair] if args.pair else [("h100", f"switch:{args.gpus[0]}")]
    lib = builtin_library(tokens=tuple(args.tokens), gpus=tuple(args.gpus))
    t0 = time.perf_counter()
    points, _ = run_study(lib, pairs, engine="analytical", space=args.space, progress=False)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux
    table = Table(title=f"closed-form sweep, {args.space} space, {len(lib)} scenarios on {pairs}")
    for c in ("points", "seconds", "points/s", "peak RSS MiB"):
        table.add_column(c, justify="right")
    table.add_row(str(len(points)), f"{dt:.1f}", f"{len(points) / dt:.1f}", f"{peak:.0f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
