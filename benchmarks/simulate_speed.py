"""Wall time and simulated events per second of `simulate --schedule all`.

Run: python benchmarks/simulate_speed.py
Prints one row per (scenario, GPU, topology): wall and CPU seconds for the whole table
(every basic schedule plus the baseline and comm-only runs the metrics need; best of three
after a warm-up run), DES events processed and events per second. Targets: the ag-gemm
8-GPU table in under 2 s on 2 cores (issue 2), in 0.2 s of CPU (issue 19).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ficco_sim import Scenario, basic_schedules, simulate_many  # noqa: E402

CASES = [
    ("ag-gemm", "h100", "switch:8", 16384, 8192, 8192),
    ("ag-gemm", "mi300x", "fc:8", 16384, 8192, 8192),
    ("gemm-rs", "h100", "switch:8", 16384, 8192, 8192),
    ("a2a-gemm", "mi300x", "fc:8", 16384, 4096, 8192),
]


def main() -> None:
    print(f"{'scenario':10s} {'gpu':7s} {'topology':9s} {'engine':10s} {'wall s':>7s} {'CPU s':>6s} {'events':>7s} "
          f"{'events/s':>9s}")
    for kind, gpu, topo, m, n, k in CASES:
        for engine in ("des", "analytical"):
            sc = Scenario(kind, 8, m, n, k)
            simulate_many(sc, basic_schedules(), gpu, topo, engine=engine)       # warm: profiles, routes
            wall = cpu = float("inf")
            for _ in range(3):                                                   # best of three
                t0, c0 = time.perf_counter(), time.process_time()
                results = simulate_many(sc, basic_schedules(), gpu, topo, engine=engine)
                wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
            events = sum(r.timeline.events for r in results)
            print(f"{kind:10s} {gpu:7s} {topo:9s} {engine:10s} {wall:7.2f} {cpu:6.2f} {events:7d} {events / wall:9.0f}")


if __name__ == "__main__":
    main()
