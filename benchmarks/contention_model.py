"""The discrete-event engine on the rows of ``benchmarks/gpu_contention.py``: a chain of GEMMs
beside back-to-back copies on one GPU, with the row's copy path, size, start order and stream
priorities, read the way the script reads the measurement (the GEMMs' slowdown over the window,
and the copies' rate while one runs over one copy's rate alone).

Two readings of what the kernels are (``shapes``):

* ``model``: as the lowerings make them today. GEMMs are tile blocks, and on the H200 (its
  profile's ``gemm.kernel: persistent``, read from the traces below) an SM a GEMM block leaves
  goes to the same GEMM's next tile before any other kernel; an elementwise copy (``sm``,
  ``tr-wave``) is one wave of 256-thread blocks (``GraphBuilder.reduce``); a same-GPU ``copy_``
  (``dma``) is a copy-engine command.
* ``traces``: as the H200's Kineto traces show them (validation/gpu/h200/2026-11-27*/traces).
  cuBLAS GEMMs are persistent (``nvjet_sm90`` kernels of at most one 384-thread block per SM,
  each looping over its tiles): the engine's own GEMMs, as above; torch's copy
  (``vectorized_elementwise_kernel<8>``) and a same-GPU ``copy_`` are thousands of short
  128-thread blocks of 8 KiB each (``tr-many`` alike); ``tr-wave`` stays one wave.

``policy`` is the dispatcher's (:mod:`ficco_sim.engine.dispatcher`; None: the profile's
``dispatch``, ``strict`` on the H200 as measured: a kernel with blocks still to place holds back
those behind it). With ``shapes="traces"`` the engine reproduces every priority setting the H200
measured, in both start orders; the model's own kernels reproduce equal priority and copies-high
(the persistent GEMMs keep their SMs) and, with ``strict``, a GEMM stream of higher priority beside
the short-block ``tr-many`` copies, not beside the one-wave elementwise copy (``sm``: torch's is
short blocks; validation/README.md, the H200 leases).

A second table reads the copies' side of the equal-priority rows (their rate beside the GEMMs over
alone): there the engine is off both ways (validation/README.md, the H200 leases).

    python benchmarks/contention_model.py          # the 64 and 256 MiB rows, both orders, both readings
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim.hardware import BlockShape, GpuProfile  # noqa: E402
from ficco_sim.taskgraph import Kernel  # noqa: E402

SHORT_BLOCK = BlockShape(128, 32, 0)   # torch's vectorized_elementwise_kernel<8> on the H200 traces
CHUNK = 8192                           # bytes one of its blocks copies (2,048 blocks for 16 MiB)
SHAPES = ("model", "traces")
ROOT = Path(__file__).resolve().parents[1]


def short_blocks(gpu: GpuProfile, k: Kernel, nbytes: int) -> Kernel:
    """Copy kernel ``k`` (read + write ``nbytes``) as thousands of short blocks, many waves."""
    from ficco_sim.gemm_model import blocks_per_sm
    wave = gpu.num_sms * blocks_per_sm(gpu.sm, SHORT_BLOCK) * 2 * CHUNK
    return dataclasses.replace(k, grid=-(-nbytes // CHUNK), block=SHORT_BLOCK, block_time=wave / gpu.hbm_effective,
                               block_hbm_bytes=2 * CHUNK)


def modelled_copies(gpu: GpuProfile, r, *, shapes: str = "model", policy: str | None = None) -> tuple[float, float]:
    """(GEMM slowdown, copy rate beside / alone) of row ``r`` (see the module docstring)."""
    from ficco_sim.calibrate.bench import overlap_bytes
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.schedules.builder import COMPUTE, GraphBuilder
    from ficco_sim.taskgraph import Stream
    from ficco_sim.topology import switch

    if shapes not in SHAPES:
        raise ValueError(f"shapes: one of {SHAPES}, got {shapes!r}")
    topo = switch(2, 1e12, 0.0)      # the engine wants a topology; GPU 1 stays idle
    prio = getattr(r, "priority", "same")
    order = getattr(r, "order", "copies-first")
    short = r.path == "tr-many" or (shapes == "traces" and r.path in ("sm", "dma"))

    def run(chain: int, copies: int):
        b = GraphBuilder(gpu, 2, comm_priority=int(prio == "copies-high"))
        if prio == "gemm-high":
            b.streams[(0, COMPUTE)] = Stream(0, COMPUTE, 1)
        gemms, cps = [f"g{i}" for i in range(chain)], [f"c{i}" for i in range(copies)]

        def add_copies() -> None:
            for i, c in enumerate(cps):
                deps = (gemms[0],) if (i == 0 and order == "gemm-first" and chain) else ()
                if r.path == "dma" and not short:
                    b.dma_transfer(c, 0, 0, 0, float(r.copy_bytes), step=("copy", i), deps=deps)
                    continue
                k = b.reduce(c, 0, 1, r.copy_bytes // 2, "float16", 1, deps=deps)
                if short:          # the same stream and deps, in short blocks
                    b.tasks[-1] = short_blocks(gpu, k, r.copy_bytes)
        if order == "copies-first":
            add_copies()
        for i, g in enumerate(gemms):
            deps = (cps[0],) if (i == 0 and order == "copies-first" and copies) else ()
            b.gemm(g, 0, r.m, r.n, r.k, "float16", deps=deps)
        if order == "gemm-first":
            add_copies()
        return simulate_graph(b.build(), gpu, topo, policy=policy).by_id(), gemms, cps
    alone, gemms, _ = run(r.chain, 0)
    t_alone = alone[gemms[-1]].end - alone[gemms[0]].start
    one, _, cps = run(0, 1)
    copy_alone = r.copy_bytes / (one[cps[0]].end - one[cps[0]].start)
    tl, gemms, cps = run(r.chain, int(r.copies))
    t0 = tl[gemms[0]].start if order == "copies-first" else tl[gemms[0]].end
    t1 = tl[gemms[-1]].end
    if order == "gemm-first":
        t_alone *= (r.chain - 1) / r.chain
    moved, active = overlap_bytes([(tl[c].start, tl[c].end) for c in cps], r.copy_bytes, t0, t1)
    return (t1 - t0) / t_alone, moved / max(active, 1e-12) / copy_alone


def rows(folder: Path, mib=(64, 256), paths=("sm", "dma", "tr-many", "tr-wave"), orders=("copies-first",)):
    """The rows of a session's contention files at those copy sizes, paths and start orders."""
    import pandas as pd
    gpu = folder.resolve().parent.name
    d = pd.concat([pd.read_csv(p, comment="#") for p in sorted(folder.glob(f"{gpu}-contention*.csv"))],
                  ignore_index=True)
    if "priority" not in d:
        return d.iloc[0:0]
    return d[d["order"].isin(orders) & (d["duty"] == 1.0) & d["path"].isin(paths)
             & (d["copy_bytes"] // 2**20).isin(mib)]


def main() -> None:
    import argparse

    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from ficco_sim.hardware import load_gpu
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", type=Path, default=ROOT / "validation" / "gpu" / "h200" / "2026-11-27-2")
    ap.add_argument("--orders", nargs="+", default=["copies-first", "gemm-first"],
                    choices=["copies-first", "gemm-first"], help="start orders (default both)")
    args = ap.parse_args()
    d = rows(args.folder, orders=tuple(args.orders))
    gpu = load_gpu(args.folder.resolve().parent.name)
    t = Table(title=f"GEMM slowdown beside copies, measured on the {gpu.name.upper()} and by the engine "
                    "(median over 4 GEMM shapes, min-max)")
    for c in ("order", "path", "priority", "MiB", "measured", "model", "model, backfill", "traces"):
        t.add_column(c, justify="right")
    fmt = lambda a: f"{np.median(a):.3f} ({np.min(a):.2f}-{np.max(a):.2f})"  # noqa: E731
    copies = []
    for (order, path, prio, nbytes), x in d.groupby(["order", "path", "priority", "copy_bytes"]):
        today = [modelled_copies(gpu, r)[0] for r in x.itertuples()]
        backfill = [modelled_copies(gpu, r, policy="backfill")[0] for r in x.itertuples()]
        traced = [modelled_copies(gpu, r, shapes="traces") for r in x.itertuples()]
        t.add_row(order, path, prio, str(nbytes >> 20), fmt(x["slowdown"]), fmt(today), fmt(backfill),
                  fmt([g for g, _ in traced]))
        if prio == "same":
            copies += [(r.m, r.n, r.k, path, r.copy_active_gbps / r.copy_alone_gbps, c)
                       for r, (_, c) in zip(x.itertuples(), traced)]
    Console(width=150).print(t)
    copy_side(copies, gpu.name.upper())


def copy_side(copies: list[tuple], gpu: str) -> None:
    """The other side of the same rows (equal priority, the kernels as the traces show them):
    the copies' rate while one runs beside the GEMMs, over one copy's rate alone, per GEMM
    shape and copy kernel, measured and by the engine (median over both orders and sizes)."""
    import numpy as np
    import pandas as pd
    from rich.console import Console
    from rich.table import Table
    d = pd.DataFrame(copies, columns=["m", "n", "k", "path", "measured", "model"])
    t = Table(title=f"The copies' side: rate beside the GEMMs over alone, measured on the {gpu} and by the engine "
                    "(equal priority, kernels as traced; median over both orders and sizes)")
    for c in ("GEMM m x n x k", "path", "measured", "model", "model / measured"):
        t.add_column(c, justify="right")
    for (m, n, k, path), x in d.groupby(["m", "n", "k", "path"], sort=False):
        meas, mod = float(np.median(x["measured"])), float(np.median(x["model"]))
        t.add_row(f"{m} x {n} x {k}", path, f"{meas:.2f}", f"{mod:.2f}", f"{mod / meas:.2f}")
    t.caption = ("beside a GEMM that is bound by its math the copies keep less of their rate than the engine "
                 "gives them, beside one bound by HBM (m = 512) more: the engine shares HBM fairly, the GPU "
                 "does not (not modelled yet)")
    Console(width=150).print(t)


if __name__ == "__main__":
    main()
