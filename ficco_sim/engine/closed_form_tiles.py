"""Tile-level pieces of the closed-form engine (:mod:`.closed_form`): where a GEMM's blocks
sit (its residency, for the dispatch rules), when a tile signal fires within its producer's
waves, and a fused GEMM's epilogue stores as time per output element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..contention import comm_slowdown, compute_slowdown
from ..gemm_model import GemmShape, block_needs, tile_costs, tile_prefix_blocks, waves_time
from ..hardware import DTYPE_BYTES, BlockShape, GpuProfile
from ..taskgraph import Kernel
from ..topology import Topology

if TYPE_CHECKING:
    from .closed_form import Template


def _picked_tiles(gpu: GpuProfile, sh: GemmShape, size: tuple, best: np.ndarray):
    """Per tile the library picked for some scenarios of one GEMM shape: (those scenarios'
    rows, the tile, grid, occupancy (at least 1), SMs it runs on, and ``done(blocks)``: the
    share of their time until the wave holding block ``blocks`` ends; ``done.rest(blocks)``:
    the share the blocks from ``blocks`` on take, run as a grid of their own)."""
    m, n, k = size
    S = sh.sms or gpu.num_sms        # an SM margin leaves the last SMs empty
    for ti in np.unique(best):
        tile = gpu.gemm.configs[int(ti)]
        rows = best == ti
        grid, occ, bt, per_block = tile_costs(gpu, tile, m[rows], n[rows], k[rows], sh.dtype,
                                              extra_smem=sh.extra_smem, sms=sh.sms or None)
        occ = max(1, occ)

        tail = not gpu.gemm.persistent_for(sh.dtype)
        whole = waves_time(gpu, grid, occ, bt, per_block, sms=S, gemm=True, tail=tail)

        def share(blocks, occ=occ, bt=bt, per_block=per_block, tail=tail, whole=whole):
            """Share of the GEMM's time ``blocks`` (a count, per scenario) take as a grid."""
            return waves_time(gpu, blocks, occ, bt, per_block, sms=S, gemm=True, tail=tail) / whole

        def done(blocks, grid=grid, occ=occ, share=share):
            """Share of the GEMM's time until its waves up to the one holding block
            ``blocks`` are done: waves differ (a partial last one moves fewer bytes), so a
            share of waves is not a share of time."""
            slots = S * occ
            return share(np.minimum(grid, np.ceil(blocks / slots) * slots))

        def rest(blocks, grid=grid, share=share):
            left = np.maximum(grid - blocks, 0)
            return np.where(left > 0, share(np.maximum(left, 1)), 0.0)

        done.rest = rest
        yield rows, tile, grid, occ, S, done


def store_coef(k: Kernel, topo: Topology, gpu: GpuProfile, storing=None) -> tuple[float, float, float, float, float]:
    """A fused GEMM's epilogue stores per output element of its m x n: seconds, remote bytes,
    for posted stores where they crowd: the row share before the first row crossing their
    busiest link and that link's seconds, and 1 where every rank stores alike (else 0). Ranks
    store alike when this one's peers are ranks 0 .. n-1 (itself among them) and each of them
    has a storing GEMM too (``storing``: their GPUs; None: every GPU, a rotation-symmetric
    graph): rank g's i-th peer is then this one's plus g, so a link carries every rank's
    stores routed over it; else only this rank's. A wave's blocks store the rows of one peer,
    so stores a block waits for (a finite ``gemm.peer_rate``) go one peer after the other,
    each step as long as its busiest link (the first number). Posted stores of later waves go
    out while earlier ones still cross, so a link drains all its steps from its first row on."""
    n, size = len(k.stores), DTYPE_BYTES[k.gemm.dtype]
    ranks = sorted(dst for _, dst in k.stores)
    turned = ranks == list(range(n)) and k.gpu < n and (storing is None or set(ranks) <= storing)
    bw = lambda e: topo.graph.edges[e]["bandwidth"]    # noqa: E731
    held, remote, lo = 0.0, 0.0, 0.0
    load: dict[tuple[str, str], list[float]] = {}     # link -> [bytes per element, share before its first row]
    mine: set[tuple[str, str]] = set()                # the links this rank's own stores cross
    for share, dst in k.stores:
        if dst != k.gpu:
            b = (share - lo) * size
            step: dict[tuple[str, str], float] = {}
            for g in range(n) if turned else (k.gpu,):
                for e in topo.path_links(g, (dst - k.gpu + g) % n if turned else dst):
                    step[e] = step.get(e, 0.0) + b
            held += max((v / bw(e) for e, v in step.items()), default=0.0)
            remote += b
            for e, v in step.items():
                load.setdefault(e, [0.0, lo])[0] += v
            mine.update(topo.path_links(k.gpu, dst))
        lo = share
    if np.isfinite(gpu.gemm.peer_rate) or not mine:
        return held, remote, 0.0, 0.0, float(turned)
    # the busiest of this rank's links (of those alike, the one whose rows come last)
    (b, first), e = max(((load[e], e) for e in mine), key=lambda x: (round(x[0][0] / bw(x[1]), 15), x[0][1]))
    return held, remote, first, b / bw(e), float(turned)


def with_stores(gpu: GpuProfile, tpl, stored: np.ndarray, sizes: list, picked: list,
                compute: np.ndarray, hbm: np.ndarray) -> np.ndarray:
    """(P, stored GEMMs): their durations (``compute`` without stores, ``hbm`` their own HBM
    bytes) with their epilogue stores, per scenario. Blocks that move their tiles themselves
    (a finite ``gemm.peer_rate``) hold their SMs until the bytes land, so the stores add up
    after the math: a wave's blocks store at most ``blocks x peer_rate`` (each has a few KiB
    in flight), so a full wave of ``SMs x occupancy`` blocks moves its tiles at the path's
    bandwidth or that, whichever is lower. Posted stores (no such rate) leave the SMs to the
    next wave's math, which the peers' stores arriving before it ends slow by the contention
    rule (:func:`~ficco_sim.contention.compute_slowdown`; the GEMM's own traffic slows the
    stores, :func:`~ficco_sim.contention.comm_slowdown`). Of ``W`` waves of math ``C`` in all,
    the last one's stores cross after it (``S / W`` of the stores one peer after the other,
    at most the busiest link's ``L`` when a wave covers several peers), and that link drains
    from the end of the wave holding its first row, a share ``f`` of the rows in:
    ``max(C + min(S / W, L), (floor(f W) + 1) / W C + L)`` (on a switch ``f = 0`` and ``L = S``:
    a two-stage pipeline; exact for full waves without contention; the discrete-event engine
    runs the last one as it is)."""
    shape = tpl.gemm_shape[stored]
    mn = np.stack([sizes[j][0] * sizes[j][1] for j in shape], axis=1).astype(float)
    coef = np.broadcast_to(tpl.coef[stored], mn.shape)
    slots, waves = np.ones(mn.shape), np.ones(mn.shape)
    for c, j in enumerate(shape):
        for rows, _tile, grid, occ, S, _done in _picked_tiles(gpu, tpl.shapes[j], sizes[j], picked[j]):
            slots[rows, c] = S * occ
            waves[rows, c] = np.ceil(grid / (S * occ))
    if np.isfinite(gpu.gemm.peer_rate):
        return compute + np.maximum(coef, tpl.ref_bytes[stored] / (slots * gpu.gemm.peer_rate)) * mn
    slow = comm_slowdown(gpu, hbm / compute)
    store, drain = coef * mn * slow, tpl.tune[stored, 1] * mn * slow
    first = np.minimum(1.0, (np.floor(tpl.tune[stored, 0] * waves) + 1.0) / waves)   # its first row's wave ends
    # peers storing alike store as much here as this GPU sends them; what arrives before the last
    # wave's math ends (all but the last wave's, or the share of the stores the math outlasts) slows it
    span = np.maximum((1.0 - first) * compute + drain, 1e-300)
    arriving = tpl.ref_bytes[stored] * tpl.tune[stored, 2] * mn * (1.0 - 1.0 / waves) * \
        np.minimum(1.0, (1.0 - first) * compute / span)
    math_ = compute * compute_slowdown(gpu, arriving / compute)
    return np.maximum(math_ + np.minimum(store / waves, drain), first * math_ + drain)


def sources(source: dict[int, int], n: int) -> np.ndarray | None:
    if not source:
        return None
    out = np.full(n, -1, dtype=np.int64)
    out[list(source)] = list(source.values())
    return out


def signal_share(gpu: GpuProfile, tpl: Template, sig: np.ndarray, sizes: list, picked: list) -> np.ndarray:
    """(P, signals): the share of its producer GEMM's time after which each tile signal fires,
    its waves up to the last block covering the signalled rows, in time; for a GEMM's rows
    waiting to arrive (``GATE`` nodes), the share its blocks from the band's first on take
    alone, less 1 (the GEMM, which adds its whole time, then runs them once the band lands)."""
    from .closed_form_nodes import GATE
    out = np.zeros((len(picked[0]), len(sig)))
    for c, i in enumerate(sig):
        j = tpl.gemm_shape[i]
        m, n, _ = sizes[j]
        for rows, tile, grid, occ, S, done in _picked_tiles(gpu, tpl.shapes[j], sizes[j], picked[j]):
            gate = tpl.kind[i] == GATE
            blocks = np.minimum(grid, tile_prefix_blocks(tile, m[rows], n[rows], tpl.coef[i], within=gate))
            if gate:      # the blocks from the band's first on, as a grid of their own, after it lands
                out[rows, c] = done.rest(blocks) - 1.0
            else:
                out[rows, c] = done(blocks)
    return out


def with_signals(tpl: Template, add: np.ndarray, share: np.ndarray | None) -> np.ndarray:
    """``add`` with every tile signal set to its flag latency plus its share of the producer's
    (possibly slowed) time."""
    if share is not None:
        sig = np.flatnonzero(tpl.source >= 0)
        add[:, sig] = tpl.const[sig] + share * add[:, tpl.source[sig]]
    return add


def residency(gpu: GpuProfile, shapes: list[GemmShape], sizes: list, picked: list, of_gemm: np.ndarray) -> dict:
    """Per GEMM node and scenario, where its blocks sit (spread evenly, one per SM first, as
    the dispatcher does) while it still has blocks to place (``used`` SMs, ``full`` of them
    holding ``count`` blocks, the others one fewer) and in its last wave (``used_last``,
    ``full_last``, ``count_last``), when that wave starts (a share ``last_at`` of its run),
    and a block's SM needs (``need``)."""
    P = len(picked[0])
    out = {k: np.zeros((P, len(shapes))) for k in ("used", "count", "full", "used_last", "count_last", "full_last",
                                                   "last_at", "waves")}
    need = np.zeros((P, len(shapes), 4), dtype=np.int64)
    for j, (sh, size, best) in enumerate(zip(shapes, sizes, picked)):
        for rows, tile, grid, occ, S, done in _picked_tiles(gpu, sh, size, best):
            waves = np.ceil(grid / (S * occ))
            last = grid - (waves - 1) * S * occ
            for key, n in (("", np.minimum(grid, S * occ)), ("_last", last)):
                out["used" + key][rows, j], out["count" + key][rows, j] = np.minimum(S, n), np.ceil(n / S)
                out["full" + key][rows, j] = np.where(n % S > 0, n % S, np.minimum(S, n))
            out["last_at"][rows, j], out["waves"][rows, j] = done((waves - 1) * S * occ), waves
            need[rows, j] = block_needs(gpu.sm, BlockShape(tile.block.threads, tile.block.registers,
                                                           tile.block.smem + sh.extra_smem))
    out = {k: v[:, of_gemm] for k, v in out.items()}
    out["need"] = need[:, of_gemm]
    return out
