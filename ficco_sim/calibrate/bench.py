"""Torch microbenchmarks for calibration, on the local CPU or a CUDA/ROCm device.

:func:`run_benchmarks` measures, one CSV row per point, written as each point finishes (a
crash keeps what finished):

* ``gemm``: a sweep of whole shapes (group ``whole``) and the decomposed pieces of a base
  shape, ``M/N`` and ``M/N^2`` along M and along N (groups ``split_m/2`` ...), as
  shard-level and FiCCO schedules cut them;
* ``copy``: bandwidth vs bytes. ``path=dma``: contiguous ``dst.copy_(src)`` (cudaMemcpyAsync,
  a copy engine on GPUs; a core's memcpy on the CPU). ``path=sm`` (CUDA only):
  ``torch.add(src, 0, out=dst)``, an elementwise kernel on SMs;
* ``contention``: a GEMM alone and while copies run on another stream (a thread on CPU),
  with the copy rate reached meanwhile (``copy_gbps``);
* ``priority`` (CUDA): a small GEMM's latency behind a queue of big GEMMs, on a
  high- vs a normal-priority stream; ``launch`` (CUDA): back-to-back tiny kernels per launch.
  On the CPU these are ``skipped`` rows with the reason.

Timing: warm-up runs, then the median (and p20/p80) of repeats; ``torch.cuda.Event`` with an
L2 flush before each repeat on CUDA, ``time.perf_counter`` on CPU. Times in seconds.
"""

from __future__ import annotations

import csv
import datetime as _dt
import math
import os
import platform
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import InputError

COLUMNS = ["kind", "group", "dtype", "m", "n", "k", "bytes", "path", "priority", "time_s", "p20_s", "p80_s",
           "repeats", "ranks", "count", "alone_s", "copy_gbps", "note", "gpu", "device", "device_name", "cores", "torch", "cuda",
           "host", "date"]

# name -> (whole-shape sweep sizes, decomposition base (m, n, k), copy sizes in bytes, repeats)
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(whole=[16, 32, 64, 128, 192], base=(128, 128, 128), copies=[2**p for p in range(12, 21, 4)],
                 repeats=3, warmup=1, contention=(128, 1 << 20)),
    "small": dict(whole=[32, 64, 128, 256, 384, 512, 768, 1024], base=(1024, 1024, 1024),
                  copies=[2**p for p in range(12, 27, 2)], repeats=7, warmup=2, contention=(768, 16 << 20)),
    "full": dict(whole=[256, 512, 1024, 2048, 4096, 6144, 8192], base=(8192, 8192, 8192),
                 copies=[2**p for p in range(12, 31, 2)], repeats=20, warmup=3, contention=(4096, 256 << 20),
                 layers=dict(tps=(1, 8), ms=(256, 1024, 4096))),
}


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InputError("--device", None, "the benchmarks need PyTorch: pip install ficco-sim[torch]") from None
    return torch


def parse_device(torch: Any, device: str) -> Any:
    """``cpu``, ``cuda`` or ``cuda:i`` (ROCm builds answer to ``cuda`` too)."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise InputError("--device", None, f"{device}: this torch build sees no CUDA/ROCm device")
        idx = 0 if device == "cuda" else device.split(":", 1)[1]
        if not str(idx).isdigit() or int(idx) >= torch.cuda.device_count():
            raise InputError("--device", None, f"{device}: there are {torch.cuda.device_count()} devices")
        return torch.device(f"cuda:{int(idx)}")
    raise InputError("--device", None, f"{device!r}: expected cpu, cuda or cuda:i")


def environment(torch: Any, dev: Any) -> dict[str, Any]:
    """Columns that say where and when a row was measured."""
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        cuda = torch.version.hip or torch.version.cuda or ""
    else:
        name = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        cuda = ""
    return dict(device=str(dev), device_name=name.replace("#", "no."), cores=os.cpu_count() or 1,
                torch=torch.__version__, cuda=cuda, host=socket.gethostname(),
                date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


class Timer:
    """Median-of-repeats timing on one device."""

    def __init__(self, torch: Any, dev: Any, repeats: int, warmup: int):
        self.torch, self.dev, self.repeats, self.warmup = torch, dev, repeats, warmup
        self.cuda = dev.type == "cuda"
        # 256 MB zeroed before each repeat evicts L2 (as triton's do_bench does).
        self.flush = torch.empty(64 << 20, dtype=torch.int32, device=dev) if self.cuda else None

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float, float]:
        """(median, p20, p80) seconds of ``fn``."""
        for _ in range(self.warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.repeats):
            if self.cuda:
                self.flush.zero_()
                start = self.torch.cuda.Event(enable_timing=True)
                end = self.torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        a = np.array(times)
        return float(np.median(a)), float(np.quantile(a, 0.2)), float(np.quantile(a, 0.8))


def gemm_points(cfg: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    """(group, m, n, k): the whole-shape sweep, then M/N and M/N^2 pieces of the base shape
    (N = 2 and 4 GPUs, i.e. shard and FiCCO granularity) along M and along N; with
    ``cfg["layers"]`` (``tps``, ``ms``) also the library models' layer GEMMs
    (:func:`~ficco_sim.explore.library.layer_gemms`), grouped by model so that the fit holds
    whole models out. Square shapes alone leave the fit free to trade efficiency against the
    per-block overhead (a session on an H200 fitted k_overhead 967 on them); real layers are
    skinny (k = 8192 with m or n <= 1,024), where cuBLAS is 11-13% below its square rate.

    >>> pts = gemm_points(dict(whole=[64], base=(64, 64, 64), layers=dict(tps=(8,), ms=(256,))))
    >>> ("llama-70b", 256, 1280, 8192) in pts, len({g for g, *_ in pts if not g.startswith(("whole", "split"))})
    (True, 5)
    """
    pts = [("whole", s, s, s) for s in cfg["whole"]]
    bm, bn, bk = cfg["base"]
    pts.append(("whole", bm, bn, bk))
    for parts in (2, 4, 8, 16):
        pts.append((f"split_m/{parts}", max(1, bm // parts), bn, bk))
        pts.append((f"split_n/{parts}", bm, max(1, bn // parts), bk))
    if cfg.get("layers"):
        from ..explore.library import layer_gemms
        pts += [(model, m, n, k) for model, _, _, n, k in layer_gemms(cfg["layers"]["tps"])
                for m in cfg["layers"]["ms"]]
    seen, out = set(), []
    for p in pts:
        if p[1:] not in seen:
            seen.add(p[1:])
            out.append(p)
    return out


class RowWriter:
    """Appends rows to the CSV and flushes each one, so an interrupted run keeps what finished."""

    def __init__(self, path: Path, env: dict[str, Any]):
        self.env = env
        self.rows: list[dict[str, Any]] = []
        self.fh = path.open("w", newline="")
        self.fh.write(f"# ficco-sim calibrate benchmark; device {env['device']} ({env['device_name']}), "
                      f"torch {env['torch']}, cuda/hip {env['cuda'] or 'none'}, host {env['host']}, {env['date']}\n")
        self.csv = csv.DictWriter(self.fh, fieldnames=COLUMNS)
        self.csv.writeheader()
        self.fh.flush()

    def add(self, **row: Any) -> None:
        full = {c: "" for c in COLUMNS}
        full.update(self.env)
        full.update({k: v for k, v in row.items() if v is not None})
        full["note"] = str(full["note"]).replace("#", "no.")
        self.csv.writerow(full)
        self.fh.flush()
        self.rows.append(full)

    def close(self) -> None:
        self.fh.close()


def run_benchmarks(device: str = "cpu", sizes: str | dict[str, Any] = "small", out_csv: str | Path = "bench.csv",
                   *, dtype: str | None = None, force: bool = False, progress: bool = True,
                   gpu_name: str = "local") -> "Any":
    """Run the calibration microbenchmarks; write ``out_csv``; return its rows as a DataFrame.

    ``sizes``: ``"tiny"`` (seconds, for tests), ``"small"`` (about a minute on a laptop CPU),
    ``"full"`` (GPU scale), or a dict shaped like :data:`SIZES` entries.
    """
    torch = import_torch()
    import pandas as pd

    cfg = dict(SIZES[sizes]) if isinstance(sizes, str) and sizes in SIZES else sizes
    if not isinstance(cfg, dict):
        raise InputError("--sizes", None, f"{sizes!r}: expected one of {', '.join(SIZES)}")
    dev = parse_device(torch, device)
    out = Path(out_csv)
    if out.exists() and not force:
        raise InputError(str(out), None, "exists; pass force=True (--force) to overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    dtype = dtype or ("float16" if dev.type == "cuda" else "float32")
    tdt = getattr(torch, dtype)
    env = environment(torch, dev)
    env["gpu"] = gpu_name
    timer = Timer(torch, dev, cfg["repeats"], cfg["warmup"])
    writer = RowWriter(out, env)
    gpts = gemm_points(cfg)
    steps = len(gpts) + len(cfg["copies"]) * (2 if dev.type == "cuda" else 1) + 3
    try:
        with _progress(progress, steps, f"benchmarking {dev}") as tick:
            for group, m, n, k in gpts:
                a = torch.randn(m, k, device=dev, dtype=tdt)
                b = torch.randn(k, n, device=dev, dtype=tdt)
                c = torch.empty(m, n, device=dev, dtype=tdt)
                med, p20, p80 = timer(lambda: torch.mm(a, b, out=c))
                writer.add(kind="gemm", group=group, dtype=dtype, m=m, n=n, k=k, time_s=med, p20_s=p20,
                           p80_s=p80, repeats=cfg["repeats"])
                tick()
            paths = ["dma", "sm"] if dev.type == "cuda" else ["dma"]
            for path in paths:
                for nbytes in cfg["copies"]:
                    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                    dst = torch.empty_like(src)
                    if path == "dma":
                        fn = lambda: dst.copy_(src)  # noqa: E731
                        note = "contiguous copy_ (cudaMemcpyAsync)" if dev.type == "cuda" else "memcpy by CPU cores"
                    else:
                        fn = lambda: torch.add(src, 0, out=dst)  # noqa: E731
                        note = "torch.add(src, 0, out=dst): elementwise kernel on SMs"
                    med, p20, p80 = timer(fn)
                    writer.add(kind="copy", group=path, bytes=nbytes, path=path, time_s=med, p20_s=p20, p80_s=p80,
                               repeats=cfg["repeats"], note=note)
                    tick()
            _contention(torch, dev, timer, writer, cfg, tdt, dtype)
            tick()
            if dev.type == "cuda":
                _priority(torch, dev, writer, cfg, tdt, dtype)
                tick()
                _launch(torch, dev, writer)
                tick()
            else:
                writer.add(kind="priority", group="priority", note="skipped: CPU has no stream priorities")
                writer.add(kind="launch", group="launch", note="skipped: no kernel launches on CPU; launch "
                           "overhead comes from the GEMM fit (per-op dispatch)")
                tick()
                tick()
    finally:
        writer.close()
    return pd.DataFrame(writer.rows)


class _progress:
    """A rich progress bar, or nothing when ``enabled`` is false."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled, self.total, self.label = enabled, total, label

    def __enter__(self) -> Callable[[], None]:
        if not self.enabled:
            return lambda: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                            TimeElapsedColumn(), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task(self.label, total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)


def _contention(torch: Any, dev: Any, timer: Timer, writer: RowWriter, cfg: dict[str, Any], tdt: Any,
                dtype: str) -> None:
    """GEMM alone, then the same GEMM while copies of ``nbytes`` run back to back elsewhere."""
    s, nbytes = cfg["contention"]
    a = torch.randn(s, s, device=dev, dtype=tdt)
    b = torch.randn(s, s, device=dev, dtype=tdt)
    c = torch.empty(s, s, device=dev, dtype=tdt)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    alone, _, _ = timer(lambda: torch.mm(a, b, out=c))
    if dev.type == "cuda":
        copy_stream = torch.cuda.Stream(device=dev)
        copy_t, _, _ = timer(lambda: dst.copy_(src))
        copies = max(4, math.ceil(3 * alone / max(copy_t, 1e-9)))
        times, rates = [], []
        for _ in range(cfg["repeats"]):
            torch.cuda.synchronize(dev)
            c0 = torch.cuda.Event(enable_timing=True)
            done = [torch.cuda.Event(enable_timing=True) for _ in range(copies)]
            g0, g1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(copy_stream):
                c0.record(copy_stream)
                for ev in done:
                    dst.copy_(src)
                    ev.record(copy_stream)
            # The GEMM starts once the first copy is done, so copies are in flight throughout.
            main = torch.cuda.current_stream(dev)
            main.wait_event(done[0])
            g0.record(main)
            torch.mm(a, b, out=c)
            g1.record(main)
            torch.cuda.synchronize(dev)
            t0, t1 = c0.elapsed_time(g0) * 1e-3, c0.elapsed_time(g1) * 1e-3
            ends = [c0.elapsed_time(ev) * 1e-3 for ev in done]
            times.append(t1 - t0)
            rates.append(bytes_between(ends, nbytes, t0, t1) / max(t1 - t0, 1e-12) / 1e9)
        note = ("copies on a second stream (copy engine); copy_gbps = bytes the copies moved during the GEMM "
                "(per-copy end events, linear within a copy) / GEMM time")
    else:
        stop = threading.Event()
        moved = [0]

        def copier() -> None:
            while not stop.is_set():
                dst.copy_(src)
                moved[0] += nbytes

        # Repeat the GEMM inside one window long enough (~20 ms) to see whole copies finish.
        inner = max(1, math.ceil(0.02 / max(alone, 1e-9)))
        times, rates = [], []
        for _ in range(cfg["repeats"]):
            stop.clear()
            moved[0] = 0
            th = threading.Thread(target=copier, daemon=True)
            th.start()
            time.sleep(0.002)
            b0, t0 = moved[0], time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b, out=c)
            t1, b1 = time.perf_counter(), moved[0]
            stop.set()
            th.join()
            times.append((t1 - t0) / inner)
            rates.append((b1 - b0) / max(t1 - t0, 1e-9) / 1e9)
        note = "copies in a second thread; on CPU both share cores as well as memory bandwidth"
    writer.add(kind="contention", group="dma", dtype=dtype, m=s, n=s, k=s, bytes=nbytes, path="dma",
               time_s=float(np.median(times)), p20_s=float(np.quantile(times, 0.2)),
               p80_s=float(np.quantile(times, 0.8)), repeats=cfg["repeats"], alone_s=alone,
               copy_gbps=float(np.median(rates)), note=note)


def bytes_between(ends: list[float], nbytes: int, t0: float, t1: float) -> float:
    """Bytes moved in [t0, t1] by back-to-back copies of ``nbytes`` each that started at
    time 0 and ended at ``ends`` (sorted), each copy moving its bytes at a constant rate.

    >>> bytes_between([1.0, 2.0, 3.0], 100, 0.5, 2.5)
    200.0
    >>> bytes_between([1.0, 2.0], 100, 1.5, 4.0)
    50.0
    """
    return overlap_bytes(list(zip([0.0, *ends[:-1]], ends)), nbytes, t0, t1)[0]


def overlap_bytes(spans: list[tuple[float, float]], nbytes: int, t0: float, t1: float) -> tuple[float, float]:
    """(bytes moved in [t0, t1], seconds of [t0, t1] some copy ran) by copies of ``nbytes``
    each over ``spans`` (start, end, not overlapping each other), each at a constant rate.

    >>> overlap_bytes([(0.0, 1.0), (2.0, 3.0)], 100, 0.5, 2.5)
    (100.0, 1.0)
    """
    moved = active = 0.0
    for s, e in spans:
        lo, hi = max(s, t0), min(e, t1)
        if hi > lo:
            moved += nbytes * (hi - lo) / max(e - s, 1e-15)
            active += hi - lo
    return moved, active


def _priority(torch: Any, dev: Any, writer: RowWriter, cfg: dict[str, Any], tdt: Any, dtype: str) -> None:
    """A small GEMM queued behind big GEMMs on a low-priority stream: its latency on a
    normal- and on a high-priority stream."""
    big = cfg["base"][0]
    a = torch.randn(big, big, device=dev, dtype=tdt)
    c = torch.empty_like(a)
    x = torch.randn(256, 256, device=dev, dtype=tdt)
    y = torch.empty_like(x)
    try:
        low, high = torch.cuda.Stream.priority_range()
    except AttributeError:
        low, high = 0, -1
    bg = torch.cuda.Stream(device=dev, priority=low)
    for label, prio in (("normal", low), ("high", high)):
        st = torch.cuda.Stream(device=dev, priority=prio)
        lat = []
        for _ in range(cfg["repeats"]):
            torch.cuda.synchronize(dev)
            first = torch.cuda.Event()
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(bg):
                torch.mm(a, a, out=c)
                first.record()
                for _ in range(4):
                    torch.mm(a, a, out=c)
            with torch.cuda.stream(st):
                st.wait_event(first)
                s0.record()
                torch.mm(x, x, out=y)
                s1.record()
            torch.cuda.synchronize(dev)
            lat.append(s0.elapsed_time(s1) * 1e-3)
        writer.add(kind="priority", group="priority", dtype=dtype, m=256, n=256, k=256, priority=label,
                   time_s=float(np.median(lat)), repeats=cfg["repeats"],
                   note=f"256^3 GEMM latency behind 4 {big}^3 GEMMs on a priority-{low} stream")


def _launch(torch: Any, dev: Any, writer: RowWriter, count: int = 500) -> None:
    """Per-launch time of back-to-back tiny kernels (launch-throughput bound)."""
    x = torch.zeros(1, device=dev)
    for _ in range(20):
        x.add_(1)
    torch.cuda.synchronize(dev)
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s0.record()
    for _ in range(count):
        x.add_(1)
    s1.record()
    torch.cuda.synchronize(dev)
    writer.add(kind="launch", group="launch", time_s=s0.elapsed_time(s1) * 1e-3 / count, repeats=count,
               note="GPU time per back-to-back 1-element add_: launch throughput bound")


def iter_rows(path: str | Path) -> Iterator[dict[str, str]]:
    """Rows of a benchmark CSV as dicts (comments skipped); for quick inspection."""
    with Path(path).open() as fh:
        yield from csv.DictReader(line for line in fh if not line.startswith("#"))
