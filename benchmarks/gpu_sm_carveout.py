"""A persistent GEMM beside a kernel that holds SMs for longer than the GEMM needs, with and without
an SM carveout (cuBLASLt's ``CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET``, set by
``torch._C._set_sm_carveout_experimental``: the GEMM is planned for ``SMs - carveout`` SMs).

A kernel ends when every block of its grid has run. A persistent GEMM launched with a grid of one
block per SM while ``held`` SMs are taken cannot end before those SMs free, however early its other
blocks finish its tiles; planned for the free SMs (carveout = ``held``) it ends on its own time.

Per (shape, carveout): the GEMM alone (``alone_s``, CUDA events, median of --repeats) and its
kernel (name, grid: from one profiled call). Per (shape, held, carveout in {0, held}): a spin
kernel of ``held`` blocks (512 threads, 120 KiB of shared memory: one per SM) spins for
``hold_s`` = 3 x the GEMM's time alone; 10 us later the GEMM is issued on a second stream;
``gemm_end_s`` is its end and ``spin_end_s`` the spin's, from the gate's end (one row per repeat).

    python benchmarks/gpu_sm_carveout.py --out sm_carveout.csv      # ~20 s on an H200; needs CuPy
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ficco_sim.files import write_text_atomic  # noqa: E402

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 2048, 8192), (16384, 4096, 2048))
CARVEOUTS = (0, 8, 16, 32, 66)
HELD = (8, 16, 32)
HEAVY = (512, 120 * 1024)
COLUMNS = ["experiment", "m", "n", "k", "held", "carveout", "rep", "alone_s", "hold_s", "gemm_end_s", "spin_end_s",
           "kernel", "grid"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("sm_carveout.csv"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch
    from gpu_sm_hold import cuda_device, profiled_kernels, spin_launcher
    dev, props, sms = cuda_device(torch, "gpu_sm_carveout.py")
    torch.backends.cuda.preferred_blas_library("cublaslt")
    launch, how = spin_launcher(torch, dev, *HEAVY)
    gs, ss = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)

    can_carve = hasattr(torch._C, "_set_sm_carveout_experimental")
    carveouts = CARVEOUTS if can_carve else (0,)
    if not can_carve:
        print("this torch has no SM carveout: GEMMs on every SM only", flush=True)

    def carve(c: int) -> None:
        if can_carve:
            torch._C._set_sm_carveout_experimental(c if c else None)

    def kernel_of(a, b, out) -> tuple[str, str]:
        ks = profiled_kernels(torch, a, b, out)
        if not ks:
            return "", ""
        k = max(ks, key=lambda e: e.get("dur", 0))
        return str(k.get("name", "")).replace(",", ";")[:120], "x".join(map(str, k.get("args", {}).get("grid", [])))

    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        alone = {}
        for c in carveouts:
            carve(c)
            for _ in range(3):
                torch.mm(a, b, out=out)
            torch.cuda.synchronize()
            times = []
            for _ in range(args.repeats):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                torch.mm(a, b, out=out)
                e1.record()
                torch.cuda.synchronize()
                times.append(e0.elapsed_time(e1) / 1e3)
            alone[c] = statistics.median(times)
            name, grid = kernel_of(a, b, out)
            rows.append(["alone", m, n, k, 0, c, 0, f"{alone[c]:.6e}", "", "", "", name, grid])
        hold_s = 3 * alone[0]
        for held in HELD:
            for c in sorted({0, held} & set(carveouts) | {0}):
                carve(c)
                with torch.cuda.stream(gs):
                    torch.mm(a, b, out=out)      # the plan for this carveout, cached
                torch.cuda.synchronize()
                for rep in range(args.repeats):
                    read_gate = launch(ss, 1, 1e-3, heavy=False)
                    e0, e_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    with torch.cuda.stream(ss):
                        e0.record()
                    read_spin = launch(ss, held, hold_s, shape=HEAVY)
                    gs.wait_event(e0)
                    launch(gs, 1, 10e-6, heavy=False)
                    with torch.cuda.stream(gs):
                        torch.mm(a, b, out=out)
                        e_end.record()
                    torch.cuda.synchronize()
                    t0 = read_gate()[1][0]
                    spin_end = (max(read_spin()[1]) - t0) / 1e9
                    rows.append(["beside", m, n, k, held, c, rep, f"{alone[c]:.6e}", f"{hold_s:.6e}",
                                 f"{e0.elapsed_time(e_end) / 1e3:.6e}", f"{spin_end:.6e}", "", ""])
        carve(0)
        print(f"{(m, n, k)}: alone {', '.join(f'{c}: {t * 1e6:.0f} us' for c, t in alone.items())}", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# benchmarks/gpu_sm_carveout.py on {props.name} ({sms} SMs), torch {torch.__version__}, cuBLASLt, "
            f"spin kernels via {how}, {stamp}, host {platform.node()}", f"# command: {' '.join(sys.argv)}",
            ",".join(COLUMNS)]
    write_text_atomic(args.out, "\n".join(head + [",".join(map(str, r)) for r in rows]) + "\n")
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
