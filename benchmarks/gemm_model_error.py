"""How well does each profile's GEMM cost model predict real GEMMs?

Prints median and p90 absolute relative error of ficco_sim.gemm_model over every row of
the shared vidur gemm_times.csv, per GPU, for all rows and for GEMMs of at least 1 ms.
The profiles' fitted parameters come from `ficco-sim calibrate --from ...` (see their
sources); this script fits nothing.

    python benchmarks/gemm_model_error.py [path/to/gemm_times.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from rich.console import Console
from rich.table import Table

from ficco_sim.calibrate.fit_gemm import predict_times
from ficco_sim.calibrate.measurements import read_gemm_table
from ficco_sim.hardware import load_gpu

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "measurements" / "vidur" / "gemm_times.csv"


def main(path: str | Path = DEFAULT) -> Table:
    table = Table(title=f"GEMM model |error| over {path}")
    for col in ("gpu", "rows", "median", "p90", "rows >=1ms", "median >=1ms", "p90 >=1ms", "signed median"):
        table.add_column(col, justify="right")
    for gpu in ("a100", "a40", "h100"):
        rows = read_gemm_table(path, gpu)
        err = predict_times(load_gpu(gpu), rows) / rows["time_s"].to_numpy() - 1.0
        long = rows["time_s"].to_numpy() >= 1e-3
        a, b = abs(err), abs(err[long])
        table.add_row(gpu, str(len(err)), f"{100 * _q(a, .5):.1f}%", f"{100 * _q(a, .9):.1f}%", str(long.sum()),
                      f"{100 * _q(b, .5):.1f}%", f"{100 * _q(b, .9):.1f}%", f"{100 * _q(err, .5):+.1f}%")
    return table


def _q(x, q):
    import numpy as np
    return float(np.quantile(x, q)) if len(x) else float("nan")


if __name__ == "__main__":
    Console().print(main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT))
