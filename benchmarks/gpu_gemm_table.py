"""Time cuBLAS GEMMs of real model layers on this GPU, in the Vidur table's format.

Run on a machine with a CUDA GPU (the device tool's H100/H200; ``benchmarks/gpu_session.sh``
runs it): every (model, layer, tensor-parallel degree) of the built-in library's models
(:func:`ficco_sim.explore.library.layer_gemms`, shapes from the models' public configurations)
at token counts m = 128 ... 8192 (powers of two), so that the decomposition loss of cutting an
m = 2048, 4096 or 8192 GEMM into 2-16 row pieces (``p * t(m / p) / t(m) - 1``) can be read off
the table, as ``benchmarks/dil_error.py`` reads it off Vidur's.

Timing: ``torch.mm(a, b, out=c)``, float16, one warm-up then ``--repeats`` runs, each timed
with CUDA events after a 256 MiB write that evicts L2; median, min and max in ms.

    python benchmarks/gpu_gemm_table.py --out h200_gemm_times.csv      # ~30 s on an H200
    python benchmarks/gpu_gemm_table.py --out t.csv --device cpu --quick   # plumbing check
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim.explore.library import layer_gemms  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402

TPS = (1, 2, 4, 8)
MS = tuple(2**p for p in range(7, 14))      # 128 .. 8192


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="CSV to write (Vidur gemm_times.csv columns)")
    ap.add_argument("--gpu", default=None, help="the gpu column (default: from the device name, e.g. h200)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="two shapes at m <= 256 (a plumbing check)")
    args = ap.parse_args()
    import torch

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu"
    gpu = args.gpu or next((g for g in ("h200", "h100", "a100", "b200") if g in name.lower()), "gpu")
    shapes = layer_gemms(TPS)[:2] if args.quick else layer_gemms(TPS)
    ms = MS[:2] if args.quick else MS
    dtype = torch.float16 if cuda else torch.float32
    dname = str(dtype).replace("torch.", "")
    flush = torch.empty(64 << 20, dtype=torch.int32, device=dev) if cuda else None
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# benchmarks/gpu_gemm_table.py on {name} ({dev}), torch {torch.__version__}, "
             f"cuda {torch.version.cuda}, host {platform.node()}, {stamp}; torch.mm {dname}, median of "
             f"{args.repeats} after 1 warm-up, L2 evicted before each (CUDA events)",
             "gpu,model,op,tp,m,n,k,dtype,time_ms_median,time_ms_min,time_ms_max"]
    a_all = torch.randn(max(ms), max(k for *_, k in shapes), device=dev, dtype=dtype)
    for model, op, tp, n, k in shapes:
        b = torch.randn(k, n, device=dev, dtype=dtype)
        c_all = torch.empty(max(ms), n, device=dev, dtype=dtype)
        for m in ms:
            a, c = a_all[:m, :k], c_all[:m]
            a = a.contiguous()
            torch.mm(a, b, out=c)
            times = []
            for _ in range(args.repeats):
                if cuda:
                    flush.zero_()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    torch.mm(a, b, out=c)
                    e1.record()
                    e1.synchronize()
                    times.append(e0.elapsed_time(e1))
                else:
                    import time
                    t0 = time.perf_counter()
                    torch.mm(a, b, out=c)
                    times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            med = times[len(times) // 2]
            lines.append(f"{gpu},{model},{op},{tp},{m},{n},{k},{dname},{med:.6g},{times[0]:.6g},{times[-1]:.6g}")
        del b, c_all
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines) - 2} GEMMs")


if __name__ == "__main__":
    main()
