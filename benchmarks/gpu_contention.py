"""How much a GEMM slows while copies run beside it on the same GPU, and the copies while the
GEMM runs, at several copy rates: the measured curve the contention rule
(:mod:`ficco_sim.contention`: ``1 + compute_per_hbm_util * rate / peak``) must follow.

Run on a CUDA GPU (``benchmarks/gpu_session.sh`` runs it). For each GEMM shape a chain of
back-to-back ``torch.mm`` calls (about 3 ms alone) runs on one stream while a second stream
repeats ``[copy of --copy-mib MiB, sleep]``; the sleep sets the copies' duty cycle, hence their
average rate (``--duties``; 1 by default: back to back). Copies are contiguous
``dst.copy_(src)`` (``dma``: a copy engine, ``Memcpy DtoD`` in a profiler trace; ``peer``, when a
second GPU is visible: to cuda:1, a copy engine over NVLink or PCIe) or
``torch.add(src, 0, out=dst)`` (``sm``: an elementwise kernel, which also takes SMs), or, with
``--paths``, to or from pinned host memory (``d2h`` / ``h2d``: a copy engine over PCIe for
certain, the control for whether ``dma`` copies on one GPU behave like a copy engine), or
Triton copy kernels of a chosen shape (``tr-many``: one short block per 8 KiB, many waves, as
torch's elementwise kernels are; ``tr-wave``: one wave of 256-thread blocks, 8 per SM, each
looping over its share, as the model's elementwise kernel is). ``order``:
``copies-first`` (the chain starts once the first copy is done; the window is the chain) or
``gemm-first`` (the copies start once the chain's first GEMM is done; the window is the rest
of the chain, its alone time the chain's less one GEMM). ``priority``: ``same`` (both streams at
the default priority), ``copies-high`` (the copies' stream at the highest priority: what a
prioritised collective does) or ``gemm-high`` (the chain's stream highest). Every copy has a start and an end
event, so the bytes moved inside the window are known (linear within a copy). Per row:

* ``alone_s`` / ``beside_s``: the chain alone and beside the copies (medians of --repeats);
* ``copy_gbps``: bytes the copies moved inside the window / window (bytes copied, not read +
  written: the HBM traffic is twice this);
* ``copy_active_gbps``: the same bytes / the part of the window a copy was running, and
  ``copy_alone_gbps`` the rate of one copy alone (the copies' own slowdown is their ratio).

Below a duty of 1 the sleep between copies is a kernel too (``torch.cuda._sleep``): beside a
GEMM that holds every SM it waits for a free slot, so those rows measure the copies' rate less
cleanly than the back-to-back (``duty = 1``) rows.

    python benchmarks/gpu_contention.py --out contention.csv          # ~30 s on an H200

The H200 session of 2026-11-27 ran the first version of this script (commit 623fe3e: 64 MiB,
copies first, duties 1 to 0.05, no ``order`` column).
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim.calibrate.bench import overlap_bytes  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 2048, 8192), (512, 8192, 8192))
COPY_MIB = (8, 64, 256)
ORDERS = ("copies-first", "gemm-first")
PRIORITIES = ("same", "copies-high", "gemm-high")
COLUMNS = ["m", "n", "k", "chain", "path", "order", "priority", "duty", "copy_bytes", "copies", "alone_s", "beside_s",
           "slowdown", "copy_gbps", "copy_active_gbps", "copy_alone_gbps", "repeats"]


def triton_copies(torch, dev):
    """``copy(path, src, dst)`` with the two Triton copy kernels (see the module docstring)."""
    import triton
    import triton.language as tl

    @triton.jit
    def many(src, dst, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    @triton.jit
    def wave(src, dst, n, BLOCK: tl.constexpr):
        for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    sms = torch.cuda.get_device_properties(dev).multi_processor_count

    def copy(path: str, src, dst) -> None:
        s, d = src.view(torch.int32), dst.view(torch.int32)
        n = s.numel()
        if path == "tr-many":
            many[(triton.cdiv(n, 2048),)](s, d, n, BLOCK=2048, num_warps=4)     # 8 KiB per block
        else:
            wave[(8 * sms,)](s, d, n, BLOCK=2048, num_warps=8)                 # 8 x 256 threads per SM
    return copy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--copy-mib", type=int, nargs="+", default=list(COPY_MIB))
    ap.add_argument("--duties", type=float, nargs="+", default=[1.0],
                    help="copy duty cycles (below 1 a sleep kernel between copies needs an SM: see above)")
    ap.add_argument("--paths", nargs="+", choices=("dma", "sm", "peer", "d2h", "h2d", "tr-many", "tr-wave"),
                    default=None,
                    help="copy paths (default: dma and sm, and peer when a second GPU is visible)")
    ap.add_argument("--priorities", nargs="+", choices=PRIORITIES, default=list(PRIORITIES))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chain-ms", type=float, default=3.0, help="GEMM chain length alone (ms)")
    ap.add_argument("--device", default="cuda", help="a CUDA device (cpu only under a fake torch.cuda, in tests)")
    args = ap.parse_args()
    import numpy as np
    import torch

    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    # priority -100 is clamped to the device's highest (torch.cuda.Stream's documented behaviour)
    streams = {prio: (torch.cuda.Stream(device=dev, priority=-100 if prio == "gemm-high" else 0),
                      torch.cuda.Stream(device=dev, priority=-100 if prio == "copies-high" else 0))
               for prio in args.priorities}
    main_s = torch.cuda.current_stream(dev)
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    peer = torch.device("cuda", 1) if dev.type == "cuda" and torch.cuda.device_count() > 1 else None
    paths = tuple(args.paths or ("dma", "sm") + (("peer",) if peer is not None else ()))
    if "peer" in paths and peer is None:
        raise SystemExit("gpu_contention.py: --paths peer needs a second GPU")
    biggest = max(args.copy_mib) << 20
    src = torch.empty(biggest, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dsts = {"dma": torch.empty_like(src), "sm": torch.empty_like(src), "h2d": torch.empty_like(src)}
    host = torch.empty(biggest, dtype=torch.uint8, pin_memory=True) if {"d2h", "h2d"} & set(paths) else None
    dsts["d2h"] = host
    if peer is not None:
        dsts["peer"] = torch.empty(biggest, dtype=torch.uint8, device=peer)
    triton_copy = triton_copies(torch, dev) if {"tr-many", "tr-wave"} & set(paths) else None
    for path in ("tr-many", "tr-wave"):
        dsts[path] = torch.empty_like(src)

    def copy(path: str, nbytes: int) -> None:
        dst = dsts[path][:nbytes]
        if path in ("d2h", "h2d"):
            dst.copy_((src if path == "d2h" else host)[:nbytes], non_blocking=True)
            return
        if path.startswith("tr-"):
            triton_copy(path, src[:nbytes], dst)
            return
        dst.copy_(src[:nbytes]) if path != "sm" else torch.add(src[:nbytes], 0, out=dst)

    def timed(fn, n: int = 5) -> float:
        fn()
        out = []
        for _ in range(n):
            e0, e1 = ev(), ev()
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            out.append(e0.elapsed_time(e1) * 1e-3)
        return float(np.median(out))

    # the sleep kernel's cycles per second on this GPU's clock
    cyc = 20_000_000
    hz = cyc / timed(lambda: torch.cuda._sleep(cyc), 3)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# benchmarks/gpu_contention.py on {name}, torch {torch.__version__}, cuda {torch.version.cuda}, "
             f"host {platform.node()}, {stamp}; copies {', '.join(map(str, args.copy_mib))} MiB "
             f"({', '.join(paths)}{'; peer: to cuda:1' if peer is not None else ''}), "
             f"sleep clock {hz / 1e9:.3f} GHz, medians of {args.repeats} "
             "(CUDA events)", ",".join(COLUMNS)]
    alone_copy = {(p, mib): timed(lambda p=p, mib=mib: copy(p, mib << 20)) for p in paths for mib in args.copy_mib}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        c = torch.empty(m, n, device=dev, dtype=dtype)
        one = timed(lambda: torch.mm(a, b, out=c))
        chain = max(2, round(args.chain_ms * 1e-3 / one))

        def run_chain(mark=None, stream=None) -> None:
            with torch.cuda.stream(stream or main_s):
                for i in range(chain):
                    torch.mm(a, b, out=c)
                    if i == 0 and mark is not None:
                        mark.record()
        alone = timed(run_chain, args.repeats)
        for path in paths:
            for mib in args.copy_mib:
                nbytes, t_copy = mib << 20, alone_copy[(path, mib)]
                for order, prio in ((o, q) for o in ORDERS for q in args.priorities):
                    gemm_s, copy_s = streams[prio]
                    for duty in args.duties:
                        period = t_copy / duty
                        gap = int((period - t_copy) * hz)
                        count = math.ceil((3.0 * alone + 4 * period) / period) + 2
                        beside, rates, active_rates = [], [], []
                        for _ in range(args.repeats):
                            torch.cuda.synchronize(dev)
                            gemm_s.wait_stream(main_s)
                            copy_s.wait_stream(main_s)
                            marks = [(ev(), ev()) for _ in range(count)]
                            g0, first, g1 = ev(), ev(), ev()
                            gate = int(0.01 * hz)       # a sleep that holds the work until all is issued
                            if order == "gemm-first":
                                with torch.cuda.stream(gemm_s):
                                    torch.cuda._sleep(gate)     # on the chain's stream
                                g0.record(gemm_s)
                                run_chain(first, gemm_s)
                                g1.record(gemm_s)
                                copy_s.wait_event(first)    # the copies start once the first GEMM is done
                            with torch.cuda.stream(copy_s):
                                if order == "copies-first":
                                    torch.cuda._sleep(gate)
                                for s, e in marks:
                                    s.record(copy_s)
                                    copy(path, nbytes)
                                    e.record(copy_s)
                                    if gap > 0:
                                        torch.cuda._sleep(gap)
                            if order == "copies-first":
                                gemm_s.wait_event(marks[0][1])     # copies are in flight when the chain starts
                                g0.record(gemm_s)
                                run_chain(first, gemm_s)
                                g1.record(gemm_s)
                            torch.cuda.synchronize(dev)
                            ref = marks[0][0]
                            # the window: the chain (copies first), or the chain after its first GEMM
                            start = g0 if order == "copies-first" else first
                            t0, t1 = ref.elapsed_time(start) * 1e-3, ref.elapsed_time(g1) * 1e-3
                            spans = [(ref.elapsed_time(s) * 1e-3, ref.elapsed_time(e) * 1e-3) for s, e in marks]
                            moved, active = overlap_bytes(spans, nbytes, t0, t1)
                            if spans[-1][1] < t1:
                                print(f"warning: the copies ended before the chain ({m}x{n}x{k} {path} {mib} MiB "
                                      f"{order} {prio} duty {duty})")
                            beside.append(t1 - t0)
                            rates.append(moved / max(t1 - t0, 1e-12) / 1e9)
                            active_rates.append(moved / max(active, 1e-12) / 1e9)
                        ref_alone = alone if order == "copies-first" else alone * (chain - 1) / chain
                        med = float(np.median(beside))
                        lines.append(",".join(str(x) for x in (
                            m, n, k, chain, path, order, prio, duty, nbytes, count, f"{ref_alone:.6g}", f"{med:.6g}",
                            f"{med / ref_alone:.4f}", f"{np.median(rates):.1f}", f"{np.median(active_rates):.1f}",
                            f"{nbytes / t_copy / 1e9:.1f}", args.repeats)))
                        print(lines[-1], flush=True)
        del a, b, c
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines) - 2} rows")


if __name__ == "__main__":
    main()
