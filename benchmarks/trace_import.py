"""Import speed and memory of ``load_trace`` on real traces: raw JSON megabytes (after
gunzip) per CPU-second and peak Python memory over the raw size (the bars: >= 20 MB/s,
<= 4x).

    python benchmarks/trace_import.py                      # the shipped traces/real sets
    python benchmarks/trace_import.py PATH [PATH ...]      # also these files, one set each

Each set is imported ``--repeats`` times for the CPU time (the best is kept) and once more
under tracemalloc for the peak.
"""

from __future__ import annotations

import argparse
import gzip
import time
import tracemalloc
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ficco_sim.traces import load_trace

REAL = Path(__file__).resolve().parents[1] / "traces" / "real"


def raw_size(path: Path) -> int:
    data = path.read_bytes()
    return len(gzip.decompress(data)) if data[:2] == b"\x1f\x8b" else len(data)


def sets(extra: list[str]) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in sorted(REAL.glob("*.json.gz")):
        key = p.name.split("_worker")[0] if "_worker" in p.name else p.name
        out.setdefault(key, []).append(p)
    for e in extra:
        out[Path(e).name] = [Path(e)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="more trace files, each imported alone")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    table = Table(title="trace import: load_trace on real traces (1 process)")
    for c in ("set", "files", "raw MB", "ops", "CPU s", "MB/s", "peak MB", "peak / raw"):
        table.add_column(c, justify="right")
    for name, files in sets(args.paths).items():
        raw = sum(raw_size(f) for f in files) / 1e6
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.process_time()
            t = load_trace(files)
            best = min(best, time.process_time() - t0)
        tracemalloc.start()
        load_trace(files)
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        table.add_row(name, str(len(files)), f"{raw:.1f}", f"{len(t.ops):,}", f"{best:.2f}", f"{raw / best:.1f}",
                      f"{peak:.0f}", f"{peak / raw:.1f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
