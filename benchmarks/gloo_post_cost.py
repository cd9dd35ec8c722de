"""What posting a gloo message costs the issuing thread, on this host, in the pattern the
CPU replay runs (issue 18's "issue" gap).

Two gloo ranks (one compute thread each, as ``ficco-sim validate --device cpu`` runs them)
start together from a barrier, each posts ``isend`` + ``irecv`` of ``B`` bytes to the other
(the all-gather / reduce-scatter step of ``none`` and ``shard-p2p``), then runs a fixed GEMM
while the messages move, then waits for them. Per size it prints the median (and max) time
the two posting calls took on the issuing thread and the GEMM's time beside the messages
(``B = 0``: the GEMM alone).

The CPU device model charges 5 us per posted op (``launch_overhead_us``, one tiny op) and
moves a message's bytes with gloo's threads, compute first. If posting grows with ``B`` and
the GEMM beside the messages slows by about the cores the bytes take, then the sender's
share of a message's core time is paid on the issuing thread, inline, and compute and gloo
threads share cores rather than compute going first.

    python benchmarks/gloo_post_cost.py [--repeats 12] [--sizes-kib 0,256,1024,2048,4096,8192]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rich.console import Console
from rich.table import Table

GEMM = (1024, 1024, 256)     # m, k, n of the GEMM each rank runs beside the messages (~15 ms on 1 core)


def _rank(rank: int, port: int, sizes: list[int], repeats: int, out) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    m, k, n = GEMM
    a, b = torch.randn(m, k), torch.randn(k, n)
    rows = []
    for nbytes in sizes:
        x, y = torch.ones(max(1, nbytes // 4)), torch.empty(max(1, nbytes // 4))
        posts, mms = [], []
        for i in range(repeats + 2):
            dist.barrier()
            t0 = time.perf_counter()
            works = [dist.isend(x, dst=1 - rank), dist.irecv(y, src=1 - rank)] if nbytes else []
            t1 = time.perf_counter()
            torch.mm(a, b)
            t2 = time.perf_counter()
            for w in works:
                w.wait()
            if i >= 2:
                posts.append(t1 - t0)
                mms.append(t2 - t1)
        rows.append((nbytes, statistics.median(posts), max(posts), statistics.median(mms)))
    every: list = [None] * 2
    dist.all_gather_object(every, rows)
    if rank == 0:
        out.put(every)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--sizes-kib", default="0,256,1024,2048,4096,8192")
    args = ap.parse_args()
    sizes = [int(s) * 1024 for s in args.sizes_kib.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(port, sizes, args.repeats, out), nprocs=2, start_method="spawn")
    every = out.get()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(title=f"gloo posting cost on the issuing thread, 2 ranks, {platform.node()} "
                        f"({torch.get_num_threads()} threads here, 1 per rank), torch {torch.__version__}, {stamp}")
    for c in ("bytes each way", "rank", "post median (ms)", "post max (ms)", "post ns/byte",
              f"GEMM {GEMM[0]}x{GEMM[1]}x{GEMM[2]} beside (ms)"):
        table.add_column(c, justify="right")
    for r, rows in enumerate(every):
        for nbytes, post, worst, mm in rows:
            table.add_row(f"{nbytes:,}", str(r), f"{post * 1e3:.3f}", f"{worst * 1e3:.2f}",
                          f"{post / nbytes * 1e9:.2f}" if nbytes else "-", f"{mm * 1e3:.2f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
