"""What the CPU replay is made of, measured the way it runs: ``world_size`` gloo processes
on this host, one compute thread each (as :mod:`ficco_sim.validate.launch` sets them up).

Rows (kind, then what varies), every time the median over repeats of the slowest rank
(``post``: over every rank's repeats):

* ``gemm``: ``torch.mm`` float32 on every rank at once (whole shapes and the pieces of a
  decomposed one, as :func:`.bench.gemm_points`): a rank's compute thread while the others'
  run too.
* ``copy``: ``copy_`` of a large buffer on every rank at once: a rank's memory rate.
* ``p2p``: rank 0 sends ``bytes`` to rank 1, the others idle: gloo's latency and one
  stream's rate.
* ``exchange``: every rank sends ``bytes`` to its partner and receives as many, at once:
  gloo's threads are CPU-bound, so this measures the host's cores per byte moved.
* ``op``: a tiny in-place op in the replay loop: the host's per-operation issue cost.
* ``skew``: how far apart the ranks leave a barrier (the latest minus the earliest exit):
  the replay times a run from the first rank's start to the last rank's end.
* ``overlap``: a GEMM on every rank while its exchange is in flight (``alone_s``: the GEMM
  alone): not fitted, it checks the shared-core mechanism.
* ``post``: every rank posts a send and a receive of ``bytes`` to its partner, then runs a
  GEMM while they move, as the replay does; the time is that of the two posting calls alone,
  on the issuing thread (``count`` messages).

:func:`fit_host` turns the rows into the profile's numbers (see :mod:`.cpu_profile`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .fit_links import fit_alpha_beta

PLAN: dict[str, dict[str, Any]] = {
    "tiny": dict(whole=[64, 128, 256], base=(256, 256, 256), nbytes=[4, 1 << 12, 1 << 16, 1 << 20, 1 << 22],
                 copy=1 << 22, overlap=(256, 1 << 20), post=[1 << 16, 1 << 20], repeats=5),
    "small": dict(whole=[64, 128, 256, 384, 512, 768], base=(768, 768, 768),
                  grid=[(m, n, k) for m in (256, 1024, 4096) for n in (64, 256, 1024) for k in (128, 512, 2048)
                        if m * n * k <= 1 << 30],
                  nbytes=[4, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24],
                  copy=1 << 25, overlap=(768, 1 << 22), post=[1 << 16, 1 << 18, 1 << 20, 1 << 21, 1 << 22, 1 << 23],
                  repeats=7),
}
TIMEOUT_S = 600.0


def _bench_rank(rank: int, world: int, port: int, plan: dict[str, Any], out: str) -> None:
    import torch
    import torch.distributed as dist

    from .bench import gemm_points

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    peer = rank ^ 1 if (rank ^ 1) < world else rank
    rows: list[dict[str, Any]] = []

    def timed(fn, **row) -> None:
        times = []
        for i in range(plan["repeats"] + 1):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if i:
                times.append(time.perf_counter() - t0)
        rows.append(dict(row, times=times))

    shapes = gemm_points(dict(whole=plan["whole"], base=plan["base"]))
    shapes += [("grid", m, n, k) for m, n, k in plan.get("grid", ())]
    for group, m, n, k in shapes:
        a, b, c = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        timed(lambda: torch.mm(a, b, out=c), kind="gemm", group=group, m=m, n=n, k=k)
    src, dst = torch.zeros(plan["copy"] // 4), torch.empty(plan["copy"] // 4)
    timed(lambda: dst.copy_(src), kind="copy", bytes=plan["copy"])
    for nb in plan["nbytes"]:
        s, r = torch.zeros(max(1, nb // 4)), torch.empty(max(1, nb // 4))

        def one() -> None:
            if rank == 0:
                dist.send(s, 1)
            elif rank == 1:
                dist.recv(r, 0)

        def both() -> None:
            if peer != rank:
                w = [dist.isend(s, peer), dist.irecv(r, peer)]
                for x in w:
                    x.wait()

        timed(one, kind="p2p", bytes=nb)
        timed(both, kind="exchange", bytes=nb)
    x = torch.zeros(16)

    def ops() -> None:
        for _ in range(200):
            x.add_(1.0)

    timed(ops, kind="op", count=200)
    stamps = []
    for _ in range(4 * plan["repeats"]):
        dist.barrier()
        stamps.append(time.perf_counter())     # one monotonic clock for every process of the host
    rows.append(dict(kind="skew", times=stamps))
    m, nb = plan["overlap"]
    a, b, c = torch.randn(m, m), torch.randn(m, m), torch.empty(m, m)
    s, r = torch.zeros(nb // 4), torch.empty(nb // 4)
    timed(lambda: torch.mm(a, b, out=c), kind="overlap_alone", m=m, n=m, k=m, bytes=nb)

    def overlap() -> None:
        w = [dist.isend(s, peer), dist.irecv(r, peer)] if peer != rank else []
        torch.mm(a, b, out=c)
        for y in w:
            y.wait()

    timed(overlap, kind="overlap", m=m, n=m, k=m, bytes=nb)
    for nb in plan.get("post", ()):
        s, r = torch.zeros(nb // 4), torch.empty(nb // 4)
        times = []
        for i in range(plan["repeats"] + 1):
            dist.barrier()
            t0 = time.perf_counter()
            w = [dist.isend(s, peer), dist.irecv(r, peer)] if peer != rank else []
            t1 = time.perf_counter()
            torch.mm(a, b, out=c)
            for y in w:
                y.wait()
            if i:
                times.append(t1 - t0)
        rows.append(dict(kind="post", bytes=nb, count=2, m=m, n=m, k=m, times=times))
    every: list = [None] * world
    dist.all_gather_object(every, rows)
    if rank == 0:
        Path(out).write_text(json.dumps(every))
    dist.barrier()
    dist.destroy_process_group()


def measure(world_size: int = 2, sizes: str = "small") -> list[dict[str, Any]]:
    """Run the plan on ``world_size`` gloo processes; rows with the slowest rank's median."""
    from ..validate.launch import free_port, run_ranks
    if sizes not in PLAN:
        raise InputError("--sizes", None, f"{sizes!r}: expected one of {', '.join(PLAN)}")
    if world_size < 2:
        raise InputError("--world-size", None, f"{world_size}: the replay's transfers need at least 2 ranks")
    if world_size > max(8, 4 * (os.cpu_count() or 1)):
        raise InputError("--world-size", None, f"{world_size}: more than 4 processes per core of this host")
    with tempfile.TemporaryDirectory(prefix="ficco-host-") as tmp:
        out = os.path.join(tmp, "rows.json")
        run_ranks(_bench_rank, (world_size, free_port(), PLAN[sizes], out), world_size, TIMEOUT_S, "host benchmark",
                  lambda: Path(out).exists())
        every = json.loads(Path(out).read_text())
    rows = []
    for i, row in enumerate(every[0]):
        if row["kind"] == "skew":
            spread = np.ptp([r[i]["times"] for r in every], axis=0)
            rows.append({"kind": "skew", "time_s": float(np.median(spread)), "p20_s": float(np.quantile(spread, 0.2)),
                         "p80_s": float(np.quantile(spread, 0.8)), "repeats": len(spread), "ranks": world_size})
            continue
        # per repeat, the last rank to finish; a post costs each rank's own thread (pooled)
        slowest = np.ravel([r[i]["times"] for r in every]) if row["kind"] == "post" else \
            np.max([r[i]["times"] for r in every], axis=0)
        rows.append({k: v for k, v in row.items() if k != "times"} |
                    {"time_s": float(np.median(slowest)), "p20_s": float(np.quantile(slowest, 0.2)),
                     "p80_s": float(np.quantile(slowest, 0.8)), "repeats": len(slowest), "ranks": world_size})
    return rows


def fit_host(rows: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """The host numbers of the CPU device model, each with how it was obtained:

    * ``latency`` (s) and ``stream_bandwidth`` (B/s): :func:`.fit_links.fit_alpha_beta` (the
      project's one alpha-beta fit) of the one-way ``p2p`` rows;
    * ``core_s_per_byte``: the slope of the ``exchange`` rows, ``ranks x bytes`` moved by
      the host's ``cores`` at once, i.e. ``slope x cores / ranks`` (where noise leaves no
      positive slope, the largest row's time per byte, latency included);
    * ``op_s``: one tiny operation of the replay loop;
    * ``post_s`` and ``post_s_per_byte``: the same alpha-beta fit of the ``post`` rows, per
      message (0 and 0 from a benchmark without such rows);
    * ``skew``: the ranks' median barrier-exit spread;
    * ``copy_bytes_per_s``: a rank's ``copy_`` (read + write bytes).
    """
    def kind(k: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["kind"] == k]

    p2p = kind("p2p")
    x = np.array([r["bytes"] for r in p2p], float)
    y = np.array([r["time_s"] for r in p2p], float)
    lat, fitted = fit_alpha_beta(x, y)
    err = (lat + x / fitted - y) / y
    ex = kind("exchange")
    ranks = int(ex[0]["ranks"])
    pairs = ranks - ranks % 2          # ranks that exchange (an odd one out idles)
    xe = np.array([r["bytes"] for r in ex], float)
    ye = np.array([r["time_s"] for r in ex], float)
    big = xe >= max(xe) / 64           # the bandwidth regime
    slope = float(np.sum((ye[big] - lat) * xe[big]) / np.sum(xe[big] ** 2))
    if slope <= 0:     # no believable slope (the p2p latency above these rows: noise): the largest's own rate
        slope = float(ye[xe.argmax()] / xe.max())
    core_s = slope * cores / pairs
    op = kind("op")[0]
    cp = kind("copy")[0]
    # no believable slope (a host too noisy to tell): the largest message's rate, latency included
    raw = float(x.max() / y[x.argmax()])
    bw = fitted if fitted < 10 * raw else raw
    post = kind("post")
    post_s = post_per_byte = 0.0
    post_err = np.array([])
    if len(post) >= 2:
        xp = np.array([r["bytes"] for r in post], float)
        yp = np.array([r["time_s"] / r["count"] for r in post], float)
        post_s, rate = fit_alpha_beta(xp, yp)
        post_per_byte = 1.0 / rate
        post_err = (post_s + xp * post_per_byte - yp) / yp
    return dict(skew=kind("skew")[0]["time_s"], latency=lat, stream_bandwidth=bw, post_s=post_s,
                post_s_per_byte=post_per_byte, post_err=post_err, post_rows=len(post),
                p2p_err=err, core_s_per_byte=core_s, exchange_rows=int(big.sum()),
                binding=bool(slope > 1.1 / bw), op_s=op["time_s"] / op["count"],
                copy_bytes_per_s=2.0 * cp["bytes"] / cp["time_s"], ranks=ranks)
