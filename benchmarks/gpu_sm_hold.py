"""What a GEMM does when another kernel holds some SMs: the measured answer to how a persistent
GEMM (Hopper's cuBLAS ``nvjet`` kernels, a block per SM looping over tiles) hands out its tiles.

Two experiments, each on one stream pair, each repeat gated so that both streams' work is queued
before the GPU sees any of it (a one-block spin kernel of 1 ms first):

``hold-first``: a spin kernel of ``held`` blocks (each spins for ``hold_s`` on the GPU's global
timer, then records its start, end and SM id) reaches the SMs first; 10 µs later a GEMM is issued
on a second stream. If the GEMM's blocks take tiles on demand (a shared counter), the blocks that
found an SM at once do the whole GEMM's work and the held SMs' blocks find little left: the GEMM
ends about ``alone_s * SMs / (SMs - held)`` after its issue, or just after the spin, whichever is
later. If each block owns a fixed share of tiles (tile = block index + i * grid), the blocks that
start late do their whole share late: the GEMM ends about ``hold_s + alone_s``. ``held = SMs``
holds every SM (the GEMM must wait); fp32 (a block per tile, no persistence) is the control.

``gemm-first``: a chain of three GEMMs runs on one stream; a spin kernel of ``held`` blocks is
issued on the other stream once the chain's first GEMM is done (stream priority ``same`` or
``spin-high``). Its blocks' start times say when a kernel queued behind a running GEMM gets SMs:
at the first GEMM's end (kernel boundary), only when the chain ends, or somewhere between.

One row per repeat (raw, nothing averaged), times in seconds from the gate's end:

* ``gemm_end_s``: the measured GEMM's end (CUDA events); ``alone_s``: that GEMM alone, median;
* ``spin_first_s`` / ``spin_last_s``: the first and last spin block's start (global timer);
  ``spin_end_s``: the last spin block's end; ``spin_sms``: distinct SMs the spin blocks ran on.

    python benchmarks/gpu_sm_hold.py --out sm_hold.csv        # ~20 s on an H200; needs CuPy or Triton

Its GEMMs' kernels (name, grid, block, shared memory, registers) are written beside it
(``--kernels``), read from one profiled GEMM per shape.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim.files import write_text_atomic  # noqa: E402

SHAPES = (("bf16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192), ("bf16", 8192, 2048, 8192),
          ("bf16", 2048, 2048, 8192), ("fp32", 4096, 4096, 4096))
HOLD_FRACTIONS = (0.25, 0.5, 1.0)
GATE_S = 1e-3
DELAY_S = 10e-6
COLUMNS = ["experiment", "dtype", "m", "n", "k", "held", "hold_s", "priority", "rep", "alone_s", "gemm_end_s",
           "spin_first_s", "spin_last_s", "spin_end_s", "spin_sms"]

SPIN_CUDA = r"""
extern "C" __global__ void spin(long long ns, long long* starts, long long* ends, int* smids) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    t = t0;
    while ((long long)(t - t0) < ns) { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); }
    if (threadIdx.x == 0) {
        unsigned int s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        starts[blockIdx.x] = (long long)t0;
        ends[blockIdx.x] = (long long)t;
        smids[blockIdx.x] = (int)s;
    }
}
"""


def cuda_device(torch, script: str):
    """(device, its properties, its SM count) of the first CUDA GPU, or exit saying ``script``
    needs one."""
    if not torch.cuda.is_available():
        sys.exit(f"{script}: needs a CUDA GPU")
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    return dev, props, props.multi_processor_count


def spin_launcher(torch, dev, threads: int, smem: int):
    """``launch(stream, blocks, seconds, heavy, shape) -> read()``: a spin kernel on a torch stream, its
    blocks ``threads`` wide with ``smem`` bytes of shared memory (``heavy``, as a collective's blocks
    are: no GEMM block fits beside one), one warp and none (the gate and the delay), or ``shape``
    (threads, shared memory bytes up to ``smem``); ``read()`` gives the blocks' (starts, ends, smids)
    in global-timer ns after a synchronize. Triton's fallback takes no shared memory."""
    try:
        import cupy as cp

        kernel = cp.RawKernel(SPIN_CUDA, "spin")
        kernel.max_dynamic_shared_size_bytes = smem

        def launch(stream, blocks: int, seconds: float, heavy: bool = True, shape: tuple | None = None):
            starts = torch.empty(blocks, dtype=torch.int64, device=dev)
            ends, smids = torch.empty_like(starts), torch.empty(blocks, dtype=torch.int32, device=dev)
            width, nbytes = shape or ((threads, smem) if heavy else (32, 0))
            with cp.cuda.ExternalStream(stream.cuda_stream):
                kernel((blocks,), (width,),
                       (cp.int64(int(seconds * 1e9)), cp.asarray(starts), cp.asarray(ends), cp.asarray(smids)),
                       shared_mem=nbytes)
            return lambda: (starts.tolist(), ends.tolist(), smids.tolist())

        return launch, "cupy"
    except Exception as exc:  # noqa: BLE001 - fall back to Triton, say why
        print(f"cupy spin kernel unavailable ({exc}); using Triton", flush=True)
    import triton
    import triton.language as tl

    @triton.jit
    def spin(starts, ends, smids, ns):
        t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        t = t0
        while t - t0 < ns:
            t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                          pack=1)
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        pid = tl.program_id(0)
        tl.store(starts + pid, t0)
        tl.store(ends + pid, t)
        tl.store(smids + pid, sm)

    def launch(stream, blocks: int, seconds: float, heavy: bool = True, shape: tuple | None = None):
        starts = torch.empty(blocks, dtype=torch.int64, device=dev)
        ends, smids = torch.empty_like(starts), torch.empty(blocks, dtype=torch.int32, device=dev)
        width = shape[0] if shape else threads if heavy else 32
        with torch.cuda.stream(stream):
            spin[(blocks,)](starts, ends, smids, int(seconds * 1e9), num_warps=max(1, width // 32))
        return lambda: (starts.tolist(), ends.tolist(), smids.tolist())

    return launch, "triton"


def profiled_kernels(torch, a, b, out) -> list[dict]:
    """The GPU kernels of one ``torch.mm(a, b, out=out)``, as the profiler's trace records them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.mm(a, b, out=out)
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        prof.export_chrome_trace(tmp.name)
        events = json.loads(Path(tmp.name).read_text()).get("traceEvents", [])
    return [ev for ev in events if ev.get("cat") == "kernel"]


def kernel_table(torch, mats) -> list[str]:
    """One profiled GEMM per shape: its kernels' name, grid, block, shared memory, registers."""
    rows = ["dtype,m,n,k,kernel,grid,block,shared_memory,registers_per_thread,dur_us"]
    for key, (a, b, out) in mats.items():
        for ev in profiled_kernels(torch, a, b, out):
            args = ev.get("args", {})
            name = str(ev.get("name", "")).replace(",", ";")[:160]
            rows.append(",".join(str(x) for x in (*key, name, "x".join(map(str, args.get("grid", []))),
                                                  "x".join(map(str, args.get("block", []))),
                                                  args.get("shared memory", ""), args.get("registers per thread", ""),
                                                  ev.get("dur", ""))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("sm_hold.csv"))
    parser.add_argument("--kernels", type=Path, default=None, help="kernel table (default: beside --out)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=512, help="threads per spin block (NCCL's: 512-640)")
    parser.add_argument("--smem-kib", type=int, default=120,
                        help="shared memory per spin block, KiB (over half an SM's: one block per SM)")
    parser.add_argument("--quick", action="store_true", help="one shape, few cells: a plumbing check")
    args = parser.parse_args()

    import torch

    dev, props, sms = cuda_device(torch, "gpu_sm_hold.py")
    launch, how = spin_launcher(torch, dev, args.threads, args.smem_kib * 1024)
    shapes = SHAPES[:1] + SHAPES[-1:] if args.quick else SHAPES
    held_counts = sorted({1, 2, 8, 16, sms // 4, sms // 2, 3 * sms // 4, sms - 8, sms - 1, sms})
    if args.quick:
        held_counts = [1, sms // 2, sms]
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    torch.backends.cuda.matmul.allow_tf32 = False
    mats = {}
    for dtype, m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=dtypes[dtype])
        b = torch.randn(k, n, device=dev, dtype=dtypes[dtype])
        mats[(dtype, m, n, k)] = (a, b, torch.empty(m, n, device=dev, dtype=dtypes[dtype]))
    streams = {p: (torch.cuda.Stream(device=dev, priority=0),
                   torch.cuda.Stream(device=dev, priority=-100 if p == "spin-high" else 0))
               for p in ("same", "spin-high")}

    def event():
        return torch.cuda.Event(enable_timing=True)

    def gemm(key, stream):
        a, b, out = mats[key]
        with torch.cuda.stream(stream):
            torch.mm(a, b, out=out)

    def alone(key) -> float:
        gs, _ = streams["same"]
        times = []
        for _ in range(args.repeats + 2):
            e0, e1 = event(), event()
            with torch.cuda.stream(gs):
                e0.record()
            gemm(key, gs)
            with torch.cuda.stream(gs):
                e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        return statistics.median(times[2:])

    rows = []

    def add(experiment, key, held, hold_s, prio, rep, alone_s, gemm_end, gate_end_ns, spin):
        starts, ends, smids = spin if spin else ([], [], [])
        rel = [(t - gate_end_ns) / 1e9 for t in starts]
        rows.append([experiment, *key, held, f"{hold_s:.6g}", prio, rep, f"{alone_s:.6e}", f"{gemm_end:.6e}",
                     f"{min(rel):.6e}" if rel else "", f"{max(rel):.6e}" if rel else "",
                     f"{(max(ends) - gate_end_ns) / 1e9:.6e}" if ends else "", len(set(smids))])

    for key in mats:
        gemm(key, streams["same"][0])
    torch.cuda.synchronize()
    for key in mats:
        alone_s = alone(key)
        print(f"{key}: alone {alone_s * 1e6:.1f} us", flush=True)
        gs, ss = streams["same"]
        # hold-first: the spin reaches the SMs first, the GEMM 10 us later
        for held in [0, *held_counts]:
            for frac in HOLD_FRACTIONS if held else (0.0,):
                hold_s = frac * alone_s
                for rep in range(args.repeats):
                    read_gate = launch(ss, 1, GATE_S, heavy=False)
                    e0, e_end = event(), event()
                    with torch.cuda.stream(ss):
                        e0.record()
                    read_spin = launch(ss, held, hold_s) if held else None
                    gs.wait_event(e0)
                    launch(gs, 1, DELAY_S, heavy=False)
                    gemm(key, gs)
                    with torch.cuda.stream(gs):
                        e_end.record()
                    torch.cuda.synchronize()
                    gate_end = read_gate()[1][0]
                    add("hold-first", key, held, hold_s, "same", rep, alone_s, e0.elapsed_time(e_end) / 1e3,
                        gate_end, read_spin() if read_spin else None)
        # gemm-first: a chain of three GEMMs; the spin issued once the first is done
        for prio in ("same", "spin-high"):
            gs, ss = streams[prio]
            for held in (1, 16, sms // 2, sms):
                for rep in range(args.repeats):
                    read_gate = launch(gs, 1, GATE_S, heavy=False)
                    e0, e1, e_end = event(), event(), event()
                    with torch.cuda.stream(gs):
                        e0.record()
                    gemm(key, gs)
                    with torch.cuda.stream(gs):
                        e1.record()
                    gemm(key, gs)
                    gemm(key, gs)
                    with torch.cuda.stream(gs):
                        e_end.record()
                    ss.wait_event(e1)
                    read_spin = launch(ss, held, 20e-6)
                    torch.cuda.synchronize()
                    gate_end = read_gate()[1][0]
                    add("gemm-first", key, held, 20e-6, prio, rep, alone_s, e0.elapsed_time(e_end) / 1e3, gate_end,
                        read_spin())
        print(f"{key}: {len(rows)} rows so far", flush=True)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"# benchmarks/gpu_sm_hold.py on {props.name} ({sms} SMs), torch {torch.__version__}, spin kernel via "
            f"{how} ({args.threads} threads and {args.smem_kib} KiB shared memory a block), {stamp}, "
            f"host {platform.node()}",
            f"# command: {' '.join(sys.argv)}", ",".join(COLUMNS)]
    write_text_atomic(args.out, "\n".join(head + [",".join(map(str, r)) for r in rows]) + "\n")
    kernels = args.kernels or args.out.with_name(args.out.stem + "_kernels.csv")
    write_text_atomic(kernels, "\n".join([head[0], head[1], *kernel_table(torch, mats)]) + "\n")
    print(f"wrote {args.out} ({len(rows)} rows) and {kernels}")


if __name__ == "__main__":
    main()
