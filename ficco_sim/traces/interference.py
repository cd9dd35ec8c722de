"""Interference measured in real profiler traces: how much a kernel slows while the other
side (communication for a compute kernel, compute for a collective) runs beside it.

A training loop runs the same kernels in the same order every iteration, so the same
kernel is found by its place: its position among its stream's kernels in a profiler step
(``ProfilerStep#N``), checked by name and launch configuration across the steps. Where a
kernel ran alone in some steps (overlapped for under 1% of its span) and beside the other
side in others (over half of its span), its slowdown is the median overlapped duration over
the median alone one, minus 1. Nothing else is assumed about the kernel: its shape need not
be recorded.

For a compute kernel the model's own explanation is then taken off (:func:`fit_compute`):
the SMs the collective's blocks hold (a wave-quantised loss, from the kernel's grid and
footprint and the collective's grid), and what is left is set against the collective's
HBM rate to fit the contention rule's ``compute_per_hbm_util``
(:mod:`ficco_sim.contention`). A collective's bytes come from the trace (``In msg
nelems``); a rank's HBM rate is what it sends plus what it receives per second of the
collective's transfer time (:func:`ficco_sim.simulate.bus_bandwidth`, twice), the time spent
waiting for peers left out when every rank is in the trace.

Collectives' own slowdowns are measured the same way and reported; the compute side's HBM
rate is not in a trace without shapes, so ``comm_per_hbm_util`` is not fitted from them.

>>> from pathlib import Path
>>> root = Path(__file__).resolve().parents[2]
>>> pairs = kernel_pairs([root / "traces/real/hta_a100_nccl217_rank0.json.gz"])
>>> bool((pairs["side"] == "compute").sum() >= 10)
True
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..gemm_model import block_needs, blocks_beside, blocks_per_sm
from ..hardware import BlockShape, GpuProfile
from ..timeline import union_length
from .kineto import load_kineto
from .ops import TraceOp

ALONE = 0.01       # overlapped for less than this share of its span: the kernel ran alone
BESIDE = 0.5       # overlapped for more than this share: it ran beside the other side
MIN_DUR = 10e-6    # shorter kernels are launch- and clock-noise bound (s)

COLUMNS = ["trace", "rank", "side", "stream", "position", "name", "grid", "threads", "registers", "smem",
           "alone_n", "beside_n", "alone_s", "beside_s", "slowdown", "share", "other_blocks", "other_hbm_rate",
           "other_threads", "other_registers", "other_smem"]


def kernel_pairs(paths: Sequence[str | Path], traces: Sequence | None = None) -> pd.DataFrame:
    """Every kernel seen both alone and beside the other side, one row per (trace, rank,
    stream, position); columns :data:`COLUMNS` (``share``: median share of its span
    overlapped when beside; ``other_blocks``: the other side's blocks resident on average
    over the overlap; ``other_hbm_rate``: the collectives' HBM bytes/s over it, NaN when a
    collective's size is not recorded; ``other_threads/registers/smem``: the other side's most
    common block footprint on the rank). Each path is one trace (one rank's file); ``traces``:
    the same files already imported (:func:`~ficco_sim.traces.kineto.load_kineto`, one per path)."""
    rows: list[dict] = []
    for i, path in enumerate(paths):
        trace = traces[i] if traces is not None else load_kineto([path])
        if not trace.on_gpu:
            raise InputError(str(path), "traceEvents", "a CPU-only trace has no GPU kernels to compare")
        for rank in sorted({o.rank for o in trace.ops}):
            windows = trace.steps.get(rank) or trace.steps.get(next(iter(trace.steps), None)) or {}
            if len(windows) < 2:
                continue
            ops = [o for o in trace.ops if o.rank == rank and o.category != "copy"]
            rows += _rank_pairs(str(path), rank, ops, windows)
    if not rows and paths:
        raise InputError(str(paths[0]), "traceEvents", "no kernel ran both alone and beside a collective (or a "
                         "collective beside compute) in two ProfilerStep#N windows: nothing to measure interference on")
    return pd.DataFrame(rows, columns=COLUMNS)


@dataclass
class _Side:
    """One side's kernels on a rank: their intervals, grids and HBM rates."""

    start: np.ndarray
    end: np.ndarray
    blocks: np.ndarray
    rate: np.ndarray
    block: tuple[int, int, int]     # the most common (threads, registers, smem); zeros: not known

    @classmethod
    def of(cls, ops: list[TraceOp]) -> "_Side":
        shapes = Counter((o.block.threads, o.block.registers, o.block.smem) for o in ops if o.block)
        return cls(np.array([o.start for o in ops]), np.array([o.end for o in ops]),
                   np.array([float(o.grid) for o in ops]), np.array([_hbm_rate(o) for o in ops]),
                   shapes.most_common(1)[0][0] if shapes else (0, 0, 0))

    def overlap(self, a: float, b: float) -> tuple[float, float, float]:
        """(share of [a, b] covered, mean blocks resident over the overlap, mean HBM rate over it)."""
        if not len(self.start):
            return 0.0, 0.0, 0.0
        ov = np.clip(np.minimum(self.end, b) - np.maximum(self.start, a), 0.0, None)
        total = ov.sum()
        if total <= 0:
            return 0.0, 0.0, 0.0
        on = ov > 0
        cover = union_length(list(zip(np.clip(self.start[on], a, b), np.clip(self.end[on], a, b))))
        return cover / (b - a), float((ov * self.blocks).sum() / cover), float((ov * self.rate).sum() / cover)


def _hbm_rate(op: TraceOp) -> float:
    """A collective's HBM bytes/s on its rank: sent plus received per second of transfer
    (NaN when its size or group is not in the trace); 0 for compute."""
    if op.category != "comm":
        return 0.0
    n = len(op.group)
    if op.nbytes <= 0 or n < 2 or op.collective in ("", "other"):
        return float("nan")
    from ..simulate import bus_bandwidth, nccl_tests_size
    kind = op.collective if op.collective in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all") \
        else "send-recv"
    active = op.dur - (op.wait or 0.0)
    return 2.0 * bus_bandwidth(kind, nccl_tests_size(kind, int(op.nbytes), n), n, max(active, 1e-9))[1]


def _rank_pairs(where: str, rank: int, ops: list[TraceOp], windows: dict) -> list[dict]:
    steps = sorted(windows.items())
    comm = _Side.of([o for o in ops if o.category == "comm"])
    comp = _Side.of([o for o in ops if o.category != "comm"])
    seqs: dict[tuple[str, str], dict[int, list[TraceOp]]] = defaultdict(lambda: defaultdict(list))
    for o in sorted(ops, key=lambda o: (o.start, o.order)):
        t = o.launch if o.launch is not None else o.start
        step = next((n for n, (a, b) in steps if a <= t <= b), None)
        if step is not None:
            seqs[(o.role, o.stream)][step].append(o)
    rows = []
    for (side, stream), by_step in seqs.items():
        sig = {n: tuple((o.name, o.grid, o.block) for o in run) for n, run in by_step.items()}
        common, _ = Counter(sig.values()).most_common(1)[0]
        runs = [by_step[n] for n in sorted(by_step) if sig[n] == common]
        if len(runs) < 2:
            continue
        other = comp if side == "comm" else comm
        for i in range(len(common)):
            inst = [(run[i], *other.overlap(run[i].start, run[i].end)) for run in runs]
            alone = [o.dur for o, share, _, _ in inst if share < ALONE]
            beside = [(o.dur, share, blocks, rate) for o, share, blocks, rate in inst if share > BESIDE]
            if not alone or not beside or np.median(alone) < MIN_DUR:
                continue
            o = runs[0][i]
            b = np.array(beside)
            blk = o.block
            rows.append({"trace": where, "rank": rank, "side": side, "stream": stream, "position": i,
                         "name": o.name, "grid": o.grid, "threads": blk.threads if blk else 0,
                         "registers": blk.registers if blk else 0, "smem": blk.smem if blk else 0,
                         "alone_n": len(alone), "beside_n": len(b), "alone_s": float(np.median(alone)),
                         "beside_s": float(np.median(b[:, 0])),
                         "slowdown": float(np.median(b[:, 0]) / np.median(alone) - 1.0),
                         "share": float(np.median(b[:, 1])), "other_blocks": float(np.mean(b[:, 2])),
                         "other_hbm_rate": float(np.mean(b[:, 3])), "other_threads": other.block[0],
                         "other_registers": other.block[1], "other_smem": other.block[2]})
    return rows


def sm_loss_slowdown(gpu: GpuProfile, pairs: pd.DataFrame) -> np.ndarray:
    """The slowdown the model explains by SMs alone, per compute pair: the collective's
    ``other_blocks`` blocks (one per SM, with the trace's footprint, else the profile's
    communication kernel's) leave each of those SMs room for fewer of the kernel's blocks,
    so its grid runs in more waves; scaled by the share of its span overlapped. 0 where the
    kernel's footprint is not in the trace."""
    out = np.zeros(len(pairs))
    for i, r in enumerate(pairs.itertuples()):
        if not (r.grid and r.threads):
            continue
        comm = BlockShape(threads=int(r.other_threads), registers=int(r.other_registers),
                          smem=int(r.other_smem)) if r.other_threads else gpu.comm_kernel.block
        hold = block_needs(gpu.sm, comm)
        blk = BlockShape(threads=int(r.threads), registers=int(r.registers), smem=int(r.smem))
        occ = blocks_per_sm(gpu.sm, blk)
        if occ < 1:
            continue
        held = min(round(r.other_blocks), gpu.num_sms)
        beside = int(blocks_beside(gpu.sm, block_needs(gpu.sm, blk), hold, 1))
        slots0 = gpu.num_sms * occ
        slots1 = (gpu.num_sms - held) * occ + held * min(beside, occ)
        waves0, waves1 = np.ceil(r.grid / slots0), np.ceil(r.grid / max(slots1, 1))
        out[i] = r.share * (waves1 / waves0 - 1.0)
    return out


@dataclass
class InterferenceFit:
    """``contention.compute_beside_comm_kernel`` fitted on trace pairs, and what it rests on."""

    coef: float                 # median unexplained slowdown per unit of overlapped share
    low: float                  # bootstrap 10th-90th percentile of that median
    high: float
    points: pd.DataFrame        # the compute pairs, with ``sm_term``, ``hbm_term``, ``hbm_util``, ``residual``
    median_slowdown: float      # measured
    median_sm_term: float       # the part the SMs the collective holds explain
    hbm_slope: float            # compute_per_hbm_util that would explain it all by HBM traffic (NaN: sizes unknown)

    def source(self, date: str) -> str:
        names = ", ".join(sorted({Path(t).name for t in self.points["trace"]}))
        hbm = "" if not np.isfinite(self.hbm_slope) else (
            f"; by HBM traffic alone it would take compute_per_hbm_util = {self.hbm_slope:.3g}")
        return (f"fitted by ficco-sim calibrate {date} on {len(self.points)} same-kernel pairs (alone vs beside "
                f"NCCL/RCCL kernels, in different profiler steps) of {names}: measured slowdown median "
                f"{self.median_slowdown:+.3f}, the SMs the collective holds explain {self.median_sm_term:+.3f}; "
                f"median of the rest {self.coef:.3g} (bootstrap 10-90%: {self.low:.3g}..{self.high:.3g}){hbm}")


def fit_compute(gpu: GpuProfile, pairs: pd.DataFrame, *, seed: int = 0) -> InterferenceFit:
    """Fit ``compute_beside_comm_kernel`` (see module docstring) on the compute pairs: the
    median over pairs of (slowdown - SM term - the profile's HBM term) / overlapped share,
    clipped at 0, with a bootstrap over the pairs for its spread. A median, not a mean:
    kernels matched by place are sometimes not the same work (a first step's autotuning),
    and those pairs are far off in both directions."""
    from ..calibrate.fit_links import origin_slope
    pts = pairs[pairs["side"] == "compute"].copy()
    if len(pts) < 3:
        raise InputError("trace", None, f"{len(pts)} compute kernels seen both alone and beside a collective; at "
                         "least 3 are needed to fit the contention rule")
    pts["sm_term"] = sm_loss_slowdown(gpu, pts)
    pts["hbm_util"] = pts["share"] * pts["other_hbm_rate"].fillna(0.0) / gpu.hbm_bandwidth
    pts["hbm_term"] = gpu.contention.compute_per_hbm_util * pts["hbm_util"]
    pts["residual"] = (pts["slowdown"] - pts["sm_term"] - pts["hbm_term"]) / pts["share"]
    y = pts["residual"].to_numpy()
    rng = np.random.default_rng(seed)
    boot = np.median(y[rng.integers(0, len(y), size=(1000, len(y)))], axis=1)
    known = np.isfinite(pairs.loc[pts.index, "other_hbm_rate"]).to_numpy() & (pts["hbm_util"].to_numpy() > 0)
    slope = origin_slope(pts["hbm_util"].to_numpy()[known], (pts["slowdown"] - pts["sm_term"]).to_numpy()[known]) \
        if known.sum() >= 3 else float("nan")
    return InterferenceFit(max(0.0, float(np.median(y))), max(0.0, float(np.percentile(boot, 10))),
                           max(0.0, float(np.percentile(boot, 90))), pts, float(pts["slowdown"].median()),
                           float(pts["sm_term"].median()), slope)
