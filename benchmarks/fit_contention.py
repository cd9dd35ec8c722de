"""Fit the contention rule's two HBM coefficients on one published study, score them on others.

The rule (:mod:`ficco_sim.contention`) slows a compute kernel by ``1 + c_comp * u`` while
communication moves ``u`` of the GPU's HBM bandwidth, and a transfer by ``1 + c_comm * u``
while compute does. Until now both were assumptions (0.3 and 0.1). They are fitted here on
the two averages of arXiv 2507.03114 (4 x A100 / H100 / MI250 / MI210 training runs):
overlapping slows compute by 18.9% on average, and running compute and communication one
after the other is 10.2% slower than overlapping them. The model's counterparts are those
of ``benchmarks/independent_overlap.py`` (a GEMM beside an all-reduce on 4 GPUs, five
shapes, A100 / H100 / MI250X, ``par-sm``): the mean of ``cil_compute`` and of
``speedup - 1``. One pair of coefficients serves every GPU (the study publishes averages
over GPUs, not per GPU). The fit minimises the squared log errors of the two averages over
a grid, then refines around the best point. The two averages leave a valley of near-equal
fits (a stronger pull on transfers traded for a weaker one on compute); of the points within
:data:`TIE` of the least loss the fit takes the one with the weakest pull on transfers (the
study measures the compute slowdown; the transfers' is only inferred), and says so.

Scored, never fitted: the same study's maxima (40%, 26.6%), ConCCL's shares of the ideal
gain on 8 x MI300X (21% / 42% / 72%, best 1.67x) and Cui & Pericàs' largest cut of total
time (25.5%): ``python benchmarks/public_table.py`` after the profiles carry the fit.

    python benchmarks/fit_contention.py [--out validation/public/contention_fit.txt]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from independent_overlap import SLOWDOWN_URL, slowdown_rows  # noqa: E402

from ficco_sim.files import write_text_atomic  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402

PUBLISHED = {"compute slowdown, mean": 0.189, "sequential slower than overlapped, mean": 0.102}
TIE = 0.10      # fits whose loss is within 10% of the least are the same fit to these two numbers


def model(c_comp: float, c_comm: float) -> dict[str, float]:
    """The two averages with every GPU's HBM coefficients set to ``c_comp``, ``c_comm``."""
    def profile(name: str):
        g = load_gpu(name)
        return dataclasses.replace(g, contention=dataclasses.replace(
            g.contention, compute_per_hbm_util=c_comp, comm_per_hbm_util=c_comm))
    rows = slowdown_rows(profile, schedules=("par-sm",))
    return {"compute slowdown, mean": float(np.mean([r["cil_compute"] for r in rows])),
            "sequential slower than overlapped, mean": float(np.mean([r["speedup"] for r in rows])) - 1.0}


def loss(pred: dict[str, float]) -> float:
    return sum(math.log((1 + pred[k]) / (1 + v)) ** 2 for k, v in PUBLISHED.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="also write the fit and its search here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    seen: dict[tuple[float, float], tuple[float, dict]] = {}

    def at(cc: float, cm: float) -> float:
        key = (round(cc, 4), round(cm, 4))
        if key not in seen:
            pred = model(*key)
            seen[key] = (loss(pred), pred)
        return seen[key][0]

    for cc, cm in itertools.product((0.3, 1.0, 2.0, 3.0, 4.0, 6.0), (0.0, 0.1, 0.5, 1.0, 2.0, 3.0)):
        at(cc, cm)
    step = (0.5, 0.25)
    for _ in range(4):          # refine: a 3 x 3 neighbourhood of the best and of the weakest tie, halving the steps
        least = min(v[0] for v in seen.values())
        tie = min((k for k, v in seen.items() if v[0] <= least * (1 + TIE)), key=lambda k: (k[1], k[0]))
        for cc, cm in {min(seen, key=lambda k: seen[k][0]), tie}:
            for dc, dm in itertools.product((-1, 0, 1), repeat=2):
                at(max(0.0, cc + dc * step[0]), max(0.0, cm + dm * step[1]))
        step = (step[0] / 2, step[1] / 2)
    least = min(v[0] for v in seen.values())
    (lc, lm), _ = min(seen.items(), key=lambda kv: kv[1][0])
    (cc, cm), (best, pred) = min(((k, v) for k, v in seen.items() if v[0] <= least * (1 + TIE)),
                                 key=lambda kv: (kv[0][1], kv[0][0]))
    lines = [f"# benchmarks/fit_contention.py; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}; "
             f"host {platform.node()}; {len(seen)} points in {time.perf_counter() - t0:.0f} s",
             f"# fitted on {SLOWDOWN_URL} (abstract): " + ", ".join(f"{k} {v}" for k, v in PUBLISHED.items()),
             f"compute_per_hbm_util = {cc:.3g}", f"comm_per_hbm_util = {cm:.3g}",
             f"loss (sum of squared log errors) = {best:.3g} (least {least:.3g} at {lc:.3g}, {lm:.3g}: of the fits "
             f"within {TIE:.0%} of it, the weakest pull on transfers)"]
    lines += [f"{k}: model {pred[k]:.4f}, published {v} ({(pred[k] - v) / v:+.1%})" for k, v in PUBLISHED.items()]
    lines.append("# search: c_comp, c_comm, loss, " + ", ".join(PUBLISHED))
    lines += [f"{k[0]:.4g}, {k[1]:.4g}, {v[0]:.4g}, " + ", ".join(f"{v[1][n]:.4f}" for n in PUBLISHED)
              for k, v in sorted(seen.items())]
    text = "\n".join(lines) + "\n"
    print("\n".join(lines[:7]))
    if args.out:
        write_text_atomic(args.out, text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
