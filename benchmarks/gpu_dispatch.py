"""Does the GPU's block scheduler let a kernel whose blocks fit go past one whose blocks do not
(backfill), or does a kernel with blocks still to place hold back those behind it (head of line,
``strict``)? The measured answer the dispatcher's ``policy`` (:mod:`ficco_sim.engine.dispatcher`)
stands for.

Three spin kernels (``benchmarks/gpu_sm_hold.py``'s, each block records its start, end and SM):

* ``R`` holds SMs for 300 us: ``resident`` SMs (all, or half), one block of 512 threads and
  120 KiB of shared memory on each;
* ``H``, 132 blocks like R's (50 us): none fits beside an R block, so it waits for R's SMs;
* ``L``, 132 light blocks (128 threads, no shared memory; 50 us): each fits beside an R block.

All three are gated (queued before the GPU sees any), R first; H and L are issued on their own
streams 20 and 40 us later (``order`` ``H-first``) or the other way round (``L-first``), at the
stream priorities of ``priority`` (``H-high``: H's stream highest, L's lowest; ``same``;
``L-high``). With backfill L starts 20-40 us in whatever the order and priorities; head of line
(by priority, then arrival) keeps it waiting until H's blocks are all placed, when R's end.

One row per repeat, times in seconds from the gate's end (global timer):
``r_end_s`` (R's last block's end), ``h_first_s`` / ``h_last_s``, ``l_first_s`` / ``l_last_s``
(first and last block start), ``l_early`` (L blocks that started before R's last block ended).

    python benchmarks/gpu_dispatch.py --out dispatch.csv        # ~5 s on an H200; needs CuPy
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ficco_sim.files import write_text_atomic  # noqa: E402

HEAVY = (512, 120 * 1024)
LIGHT = (128, 0)
GATE_S, R_S, K_S = 1e-3, 300e-6, 50e-6
FIRST_S, SECOND_S = 20e-6, 40e-6
PRIORITIES = {"H-high": (-100, 0), "same": (0, 0), "L-high": (0, -100)}   # (H's, L's) torch stream priority
COLUMNS = ["resident", "order", "priority", "rep", "r_end_s", "h_first_s", "h_last_s", "l_first_s", "l_last_s",
           "l_early", "r_sms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("dispatch.csv"))
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    import torch

    from gpu_sm_hold import cuda_device, spin_launcher
    dev, props, sms = cuda_device(torch, "gpu_dispatch.py")
    launch, how = spin_launcher(torch, dev, *HEAVY)
    # priority -100 is clamped to the device's highest (torch.cuda.Stream's documented behaviour)
    gate, rs = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
    rows = []
    for resident in ("all", "half"):
        for order in ("H-first", "L-first"):
            for prio, (ph, pl) in PRIORITIES.items():
                hs, ls = torch.cuda.Stream(device=dev, priority=ph), torch.cuda.Stream(device=dev, priority=pl)
                for rep in range(args.repeats + 1):
                    read_gate = launch(gate, 1, GATE_S, heavy=False)
                    e0 = torch.cuda.Event()
                    with torch.cuda.stream(gate):
                        e0.record()
                    for s in (rs, hs, ls):
                        s.wait_event(e0)
                    read_r = launch(rs, sms if resident == "all" else sms // 2, R_S, shape=HEAVY)
                    launch(hs, 1, FIRST_S if order == "H-first" else SECOND_S, heavy=False)
                    launch(ls, 1, SECOND_S if order == "H-first" else FIRST_S, heavy=False)
                    read_h = launch(hs, sms, K_S, shape=HEAVY)
                    read_l = launch(ls, sms, K_S, shape=LIGHT)
                    torch.cuda.synchronize()
                    if rep == 0:        # warm-up
                        continue
                    t0 = read_gate()[1][0]
                    r, h, lo = read_r(), read_h(), read_l()
                    r_end = max(r[1])
                    rows.append([resident, order, prio, rep, *(f"{(v - t0) / 1e9:.6e}" for v in
                                                               (r_end, min(h[0]), max(h[0]), min(lo[0]), max(lo[0]))),
                                 sum(1 for v in lo[0] if v < r_end), len(set(r[2]))])
            print(f"{resident}: {len(rows)} rows", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# benchmarks/gpu_dispatch.py on {props.name} ({sms} SMs), torch {torch.__version__}, spin kernels via "
            f"{how}, {stamp}, host {platform.node()}", f"# command: {' '.join(sys.argv)}", ",".join(COLUMNS)]
    write_text_atomic(args.out, "\n".join(head + [",".join(map(str, r)) for r in rows]) + "\n")
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
