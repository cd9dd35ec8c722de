"""The discrete-event optimum of every heuristic candidate on the built-in library (<= 8 GPUs),
on H100 behind NVSwitch and MI300X fully connected: the table the heuristic is fitted and
scored against (``validation/heuristic/des_oracle.csv``).

Every row is produced by running the DES (``simulate_many``) here; the file's header
comment says when, where and with which command.

    python benchmarks/heuristic_oracle.py [--jobs 2] [--out validation/heuristic/des_oracle.csv]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ficco_sim import simulate_many  # noqa: E402
from ficco_sim.explore.heuristics import candidate_schedules, training_cases  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402


def des_rows(case) -> list[dict]:
    sc, gpu, topo = case
    cands = [s.name for s in candidate_schedules(sc, gpu, topo)]
    out = []
    for r in simulate_many(sc, cands, gpu, topo):
        out.append({"scenario": sc.label(), "model": sc.meta.get("model", ""), "kind": sc.kind, "gpus": sc.gpus,
                    "m": sc.m, "n": sc.n, "k": sc.k, "dtype": sc.dtype, "shard_dim": sc.shard_dim, "gpu": gpu,
                    "topology": topo, "schedule": r.schedule.name, "makespan_s": r.makespan,
                    "speedup": r.metrics["speedup"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="validation/heuristic/des_oracle.csv")
    args = ap.parse_args()
    cases = training_cases()
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = [r for part in pool.map(des_rows, cases, chunksize=4) for r in part]
    secs = time.perf_counter() - t0
    head = (f"# DES optimum table for the recommend heuristic: {len(cases)} cases, {len(rows)} DES runs, "
            f"{secs:.0f} s with --jobs {args.jobs}\n# made {dt.datetime.now().isoformat(timespec='seconds')} on "
            f"{platform.node()} ({platform.platform()}), python {platform.python_version()}, by "
            f"`python benchmarks/heuristic_oracle.py --jobs {args.jobs}`\n")
    write_text_atomic(args.out, head + pd.DataFrame(rows).to_csv(index=False))
    print(f"{len(rows)} rows from {len(cases)} cases in {secs:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
