"""How much slower a GEMM runs in a steady stream of GEMMs (the SM clock lowered under sustained
load: ``benchmarks/gpu_sm_clock.py``) than in a burst after the GPU idled (the clock at its
maximum), per shape: the measurement a clock-aware GEMM model needs (which part of a GEMM's time
follows the clock).

Per shape: ``burst_s`` (the median of 3 GEMMs timed right after 0.3 s idle) with the SM clock read
by NVML just after, and ``sustained_s`` (the median of 10 GEMMs timed after ``--warm`` seconds of the
same GEMM back to back) with its clock. bf16, cuBLAS (cuBLASLt), every SM.

    python benchmarks/gpu_gemm_regime.py --out gemm_regime.csv      # ~30 s on an H200
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ficco_sim.files import write_text_atomic  # noqa: E402

SHAPES = ((1024, 8192, 8192), (2048, 8192, 8192), (4096, 4096, 4096), (4096, 8192, 8192), (8192, 8192, 8192),
          (16384, 8192, 8192), (8192, 2048, 8192), (16384, 4096, 2048), (512, 8192, 8192), (8192, 8192, 1024))
COLUMNS = ["m", "n", "k", "burst_s", "burst_mhz", "sustained_s", "sustained_mhz"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gemm_regime.csv"))
    parser.add_argument("--warm", type=float, default=1.0, help="seconds of back-to-back GEMMs before timing")
    args = parser.parse_args()

    import torch

    from gpu_sm_hold import cuda_device
    dev, props, _ = cuda_device(torch, "gpu_gemm_regime.py")
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

        def clock() -> float:
            return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception as exc:  # noqa: BLE001 - the times still mean something without the clock
        print(f"no NVML clock ({exc})", flush=True)

        def clock() -> float:
            return float("nan")

    def timed(a, b, out, n: int) -> float:
        times = []
        for _ in range(n):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.mm(a, b, out=out)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        return statistics.median(times)

    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        torch.mm(a, b, out=out)
        torch.cuda.synchronize()
        time.sleep(0.3)
        burst = timed(a, b, out, 3)
        burst_mhz = clock()
        start = time.time()
        while time.time() - start < args.warm:
            for _ in range(20):
                torch.mm(a, b, out=out)
            torch.cuda.synchronize()
        sustained = timed(a, b, out, 10)
        rows.append([m, n, k, f"{burst:.6e}", f"{burst_mhz:.0f}", f"{sustained:.6e}", f"{clock():.0f}"])
        print(f"{(m, n, k)}: burst {burst * 1e6:.0f} us at {burst_mhz:.0f} MHz, sustained {sustained * 1e6:.0f} us "
              f"at {rows[-1][-1]} MHz ({sustained / burst:.3f}x)", flush=True)
        time.sleep(0.3)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# benchmarks/gpu_gemm_regime.py on {props.name} ({props.multi_processor_count} SMs), "
            f"torch {torch.__version__}, bf16 cuBLASLt, warm {args.warm} s, {stamp}, host {platform.node()}",
            f"# command: {' '.join(sys.argv)}", ",".join(COLUMNS)]
    write_text_atomic(args.out, "\n".join(head + [",".join(map(str, r)) for r in rows]) + "\n")
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
