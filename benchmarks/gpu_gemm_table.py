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


def setup(torch, device: str, gpu: str | None = None):
    """What the GPU timing scripts share: the device, its name, the table's gpu key (from the
    name unless given), the dtype (float16 on CUDA), an L2-evicting buffer and a UTC stamp."""
    import types
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu"
    dtype = torch.float16 if cuda else torch.float32
    return types.SimpleNamespace(
        dev=dev, cuda=cuda, name=name, dtype=dtype, dname=str(dtype).replace("torch.", ""),
        gpu=gpu or next((g for g in ("h200", "h100", "a100", "b200") if g in name.lower()), "gpu"),
        flush=torch.empty(64 << 20, dtype=torch.int32, device=dev) if cuda else None,
        stamp=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def timed_ms(torch, env, fn, repeats: int) -> list[float]:
    """``fn``'s times (ms, sorted) over ``repeats`` runs, each after L2 is evicted: CUDA events
    on a GPU, the wall clock on a CPU. The caller warms ``fn`` up first."""
    import time
    out = []
    for _ in range(repeats):
        if env.cuda:
            env.flush.zero_()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            out.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return sorted(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="CSV to write (Vidur gemm_times.csv columns)")
    ap.add_argument("--gpu", default=None, help="the gpu column (default: from the device name, e.g. h200)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="two shapes at m <= 256 (a plumbing check)")
    args = ap.parse_args()
    import torch

    env = setup(torch, args.device, args.gpu)
    dev, name, gpu, dtype, dname, stamp = env.dev, env.name, env.gpu, env.dtype, env.dname, env.stamp
    shapes = layer_gemms(TPS)[:2] if args.quick else layer_gemms(TPS)
    ms = MS[:2] if args.quick else MS
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
            times = timed_ms(torch, env, lambda a=a, c=c: torch.mm(a, b, out=c), args.repeats)
            med = times[len(times) // 2]
            lines.append(f"{gpu},{model},{op},{tp},{m},{n},{k},{dname},{med:.6g},{times[0]:.6g},{times[-1]:.6g}")
        del b, c_all
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines) - 2} GEMMs")


if __name__ == "__main__":
    main()
