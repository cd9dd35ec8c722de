"""NCCL's all-reduce, reduce-scatter and all-gather on 8 x H100 as PyTorch calls them, timed by
microsoft/tokenweave's artifact (figure 5), beside ``ficco-sim predict collective``. Quoted from
the shipped CSV (``validation/nccl-tests/h100x8_tokenweave_torch_collectives.csv``, MIT); fitted
on nothing.

The run (its README): an 8 x H100 DGX, PyTorch 2.6.0 (whose CUDA 12.4 wheel pins NCCL 2.21.5),
``dist.all_reduce`` / ``reduce_scatter_tensor`` / ``all_gather_into_tensor`` of BL x 8192 bf16
(BL = 64 ... 32768: 1-512 MiB a rank for the all-reduce and reduce-scatter input, an eighth of it
for the all-gather's shard), the median of 100 calls timed by CUDA events around each call, the
GPU kept busy while the host queued them (``torch.cuda._sleep``). The script imports vLLM, which
sets ``NCCL_CUMEM_ENABLE=0`` (vllm/env_override.py), and NCCL needs cuMem for NVLS: the all-reduce
runs as a ring. So the model is asked as that NCCL would run: before 2.22 its tuner sizes an
all-gather or reduce-scatter by one rank's share (``--tuner rank``), and the all-reduce on a ring
(``--algorithm ring``). Each call also crosses PyTorch's stream hand-off (an event the NCCL stream
waits for and one the caller's stream waits for), which the model does not count.

    python benchmarks/tokenweave_collectives.py [--csv validation/public/tokenweave.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from ficco_sim.files import write_stamped_csv  # noqa: E402
from ficco_sim.simulate import collective_time  # noqa: E402

RUNS = ROOT / "validation" / "nccl-tests" / "h100x8_tokenweave_torch_collectives.csv"
URL = ("https://github.com/microsoft/tokenweave/blob/f483d1c431f55734f38b1c039f3ca0e44f465d05/"
       "artifact/csvs/figure_5.csv")
GPU, TOPO, GPUS = "h100", "switch:8", 8
# collective -> (CSV column, per-rank bytes from the BL x hidden bf16 tensor, how NCCL 2.21 without NVLS runs it)
CALLS = {"all-reduce": ("pytorch_dist_ar_us", lambda b: b, {"algorithm": "ring"}),
         "reduce-scatter": ("pytorch_dist_rs_us", lambda b: b, {"tuner": "rank"}),
         "all-gather": ("pytorch_dist_ag_us", lambda b: b // GPUS, {"tuner": "rank"})}


def rows() -> list[dict]:
    out = []
    runs = pd.read_csv(RUNS)
    for r in runs.itertuples():
        full = int(r.BL) * int(r.hidden_size) * 2
        for kind, (col, per_rank, how) in CALLS.items():
            nbytes = per_rank(full)
            model = collective_time(GPU, TOPO, kind, nbytes, **how)
            default = collective_time(GPU, TOPO, kind, nbytes)
            flags = " ".join(f"--{k} {v}" for k, v in how.items())
            out.append({"collective": kind, "bl": int(r.BL), "bytes_per_rank": nbytes, "buffer_mib": full / 2 ** 20,
                        "measured_s": getattr(r, col) * 1e-6, "predicted_s": model, "default_s": default,
                        "error": model / (getattr(r, col) * 1e-6) - 1.0, "source_url": URL, "used_for_fit": False,
                        "command": f"ficco-sim predict collective --gpu {GPU} --topology {TOPO} --kind {kind} "
                                   f"--bytes {nbytes} {flags}"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=None, help="also write the rows here")
    args = ap.parse_args()
    df = pd.DataFrame(rows())
    df["default_error"] = df["default_s"] / df["measured_s"] - 1.0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"NCCL through PyTorch on 8x H100 (microsoft/tokenweave figure 5) vs ficco-sim ({TOPO})")
    for c in ("collective", "buffer MiB", "measured us", "model us", "err", "profile's defaults us", "err"):
        t.add_column(c, justify="right")
    for r in df.to_dict("records"):
        t.add_row(r["collective"], f"{r['buffer_mib']:g}", f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] * 1e6:.1f}",
                  f"{r['error']:+.1%}", f"{r['default_s'] * 1e6:.1f}", f"{r['default_error']:+.1%}")
    Console(width=140).print(t)
    for kind, g in df.groupby("collective", sort=False):
        band = g[g["buffer_mib"] <= 64]
        print(f"{kind}: median |err| {g['error'].abs().median():.1%} (>= 1 MiB), {band['error'].abs().median():.1%} "
              f"(1-64 MiB); with the profile's defaults (NCCL 2.22+ tuner, NVLS) {g['default_error'].abs().median():.1%}"
              f" / {band['default_error'].abs().median():.1%}")
    if args.csv:
        write_stamped_csv(args.csv, df, f"NCCL 2.21 through PyTorch 2.6 on 8 x H100, quoted from {URL}; model by the "
                          "DES with the shipped h100 profile, as that NCCL runs the calls; fitted on nothing",
                          "benchmarks/tokenweave_collectives.py")


if __name__ == "__main__":
    main()
