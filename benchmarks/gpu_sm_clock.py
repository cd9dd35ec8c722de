"""Why an SM does more when fewer SMs run a GEMM (``benchmarks/gpu_sm_carveout.py``: on half the
SMs an H200 GEMM takes 1.66-1.81x, not 2x): the SM clock and board power while GEMMs run back to
back for ``--seconds`` each on every SM, on half of them (cuBLASLt SM carveout), and on every SM
with all-zero inputs (less switching, less power), sampled by ``nvidia-smi`` every 50 ms; with
``--phases spin``, the GEMM planned for the SMs a spin kernel holding 33 or 66 of them leaves (does
an SM that holds a collective-like block count toward the clock limit?).

Rows: one per sample (``phase``, ``t_s`` from the phase's start, ``sm_mhz``, ``power_w``) and one
summary per phase (``phase``, ``gemm_s``: the median GEMM time, ``tflops``).

    python benchmarks/gpu_sm_clock.py --out sm_clock.csv      # ~10 s on an H200
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ficco_sim.files import write_text_atomic  # noqa: E402

M = N = K = 8192
# (phase, SM carveout, inputs, SMs a spin kernel holds meanwhile)
PHASES = {"default": (("all-sms", 0, "randn", 0), ("half-sms", 66, "randn", 0), ("all-sms-zeros", 0, "zeros", 0),
                      ("all-sms-again", 0, "randn", 0)),
          "spin": (("all-sms", 0, "randn", 0), ("quarter-held", 33, "randn", 33), ("half-held", 66, "randn", 66),
                   ("half-sms", 66, "randn", 0))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("sm_clock.csv"))
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--phases", choices=sorted(PHASES), default="default",
                        help="spin: the GEMM on the SMs a spin kernel (512 threads, 120 KiB a block) leaves")
    args = parser.parse_args()

    import torch

    from gpu_sm_hold import cuda_device, spin_launcher
    dev, props, _ = cuda_device(torch, "gpu_sm_clock.py")
    launch = spin_launcher(torch, dev, 512, 120 * 1024)[0] if args.phases == "spin" else None
    side = torch.cuda.Stream(device=dev)
    torch.backends.cuda.preferred_blas_library("cublaslt")
    carve = getattr(torch._C, "_set_sm_carveout_experimental", None)
    lines, summary = [], []
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as log:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "50", "-f", log.name])
        try:
            for phase, carveout, fill, held in PHASES[args.phases]:
                if carve is None and carveout:
                    continue
                if carve is not None:
                    carve(carveout or None)
                make = torch.randn if fill == "randn" else torch.zeros
                a = make(M, K, device=dev, dtype=torch.bfloat16)
                b = make(K, N, device=dev, dtype=torch.bfloat16)
                out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
                torch.mm(a, b, out=out)
                torch.cuda.synchronize()
                if held:
                    launch(side, held, args.seconds + 0.5)
                start, times = time.time(), []
                while time.time() - start < args.seconds:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for _ in range(10):
                        torch.mm(a, b, out=out)
                    e1.record()
                    e1.synchronize()
                    times.append(e0.elapsed_time(e1) / 1e3 / 10)
                end = time.time()
                torch.cuda.synchronize()      # the spin, if any, ends half a second later
                times.sort()
                gemm_s = times[len(times) // 2]
                summary.append((phase, start, end, gemm_s))
                print(f"{phase}: {gemm_s * 1e6:.0f} us, {2 * M * N * K / gemm_s / 1e12:.0f} TFLOP/s", flush=True)
                time.sleep(0.3)
        finally:
            smi.terminate()
            smi.wait(timeout=10)
        samples = []
        for row in Path(log.name).read_text().splitlines():
            parts = [p.strip() for p in row.split(",")]
            if len(parts) != 3:
                continue
            try:
                stamp = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((stamp, float(parts[1]), float(parts[2])))
            except ValueError:
                continue
    offset = 0.0       # nvidia-smi's timestamps are local time: align on the first phase's start
    if samples and summary:
        offset = min((s[0] - summary[0][1] for s in samples), key=abs)
        offset = round(offset / 3600) * 3600
    for phase, t0, t1, gemm_s in summary:
        inside = [s for s in samples if t0 <= s[0] - offset <= t1]
        lines += [f"sample,{phase},{s[0] - offset - t0:.3f},{s[1]:.0f},{s[2]:.1f},," for s in inside]
        lines.append(f"summary,{phase},,,,{gemm_s:.6e},{2 * M * N * K / gemm_s / 1e12:.1f}")
        if inside:
            print(f"{phase}: SM clock {sum(s[1] for s in inside) / len(inside):.0f} MHz, "
                  f"power {sum(s[2] for s in inside) / len(inside):.0f} W over {len(inside)} samples")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# benchmarks/gpu_sm_clock.py on {props.name} ({props.multi_processor_count} SMs), "
            f"torch {torch.__version__}, {M}x{N}x{K} bf16, {stamp}, host {platform.node()}",
            f"# command: {' '.join(sys.argv)}",
            "row,phase,t_s,sm_mhz,power_w,gemm_s,tflops"]
    write_text_atomic(args.out, "\n".join(head + lines) + "\n")
    print(f"wrote {args.out} ({len(lines)} rows, {len(samples)} samples)")


if __name__ == "__main__":
    main()
