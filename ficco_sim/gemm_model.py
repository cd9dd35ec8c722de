"""GEMM cost model: how a GEMM becomes thread blocks, and what one block costs.

C[m, n] = A[m, k] @ B[k, n] is cut into output tiles of ``tile.m x tile.n``; one tile
is one thread block. A block's duration when ``o`` blocks share an SM is

    t_block = o * 2 * tile.m * tile.n * (k + k_overhead) / (peak_per_sm * efficiency)

(the SM's tensor throughput is shared by its resident blocks; ``k_overhead`` is the
per-block prologue/epilogue). Occupancy costs something: a kernel is tuned for the blocks
per SM it reaches as the library launches it (``o_lib``), and fewer resident blocks hide
less latency, so occupancy shaping (extra shared memory, ``o < o_lib``) divides the SM's
throughput by ``hiding(o_lib) / hiding(o)`` with ``hiding(o) = 1 - (1 - a)**o`` and ``a``
the profile's ``gemm.one_block_share`` (:func:`latency_hiding`). The kernel's HBM traffic, ``(m*k + k*n + m*n) * bytes``
(L2 reuse assumed ideal), is spread evenly over its blocks. A wave's time combines its math
and its HBM traffic as a p-norm, ``(t_math**p + t_hbm**p)**(1/p)`` with ``p`` the profile's
``gemm.roofline_exponent`` (:func:`roofline`): a block cannot hide all of its loads under its
math, least of all near the ridge point, where the two take about as long (p = inf is the
plain roofline, the larger of the two). Wave quantization
comes from ``ceil(blocks / (SMs * o))``. The library picks the kernel with the smallest
isolated time, as cuBLAS heuristics try to: every tile, and with ``gemm.max_split_k > 1``
every split-K variant of it (s blocks per output tile share the K loop, then their float32
partial tiles go through HBM; see :func:`tile_costs`), which keeps a GEMM with few output
tiles and a long K loop from running on a handful of SMs.

>>> from ficco_sim.hardware import load_gpu
>>> gpu = load_gpu("h100")
>>> plan = plan_gemm(gpu, 8192, 8192, 8192)
>>> plan.grid, plan.occupancy
(2048, 1)
>>> round(isolated_time(gpu, plan) * 1e3, 3) > 0
True
"""

from __future__ import annotations

import functools
import math

from dataclasses import dataclass, replace

import numpy as np

from .errors import InputError
from .hardware import DTYPE_BYTES, BlockShape, GemmTile, GpuProfile, SmLimits
from .workload import MAX_DIM


@functools.lru_cache(maxsize=4096)
def blocks_per_sm(limits: SmLimits, block: BlockShape) -> int:
    """Resident blocks of one kernel on an empty SM, limited by blocks, threads,
    registers and shared memory (including the driver's per-block reservation)."""
    return int(blocks_beside(limits, block_needs(limits, block), block_needs(limits, block), 0))


def block_needs(limits: SmLimits, block: BlockShape) -> np.ndarray:
    """What one block takes of an SM: a block slot, threads, registers, shared memory
    (the dispatcher's four limits, in :attr:`SmLimits` order). A fresh array (callers may
    keep it); the values are cached."""
    return np.array(_needs(limits, block), dtype=np.int64)


@functools.lru_cache(maxsize=4096)
def _needs(limits: SmLimits, block: BlockShape) -> tuple[int, int, int, int]:
    return 1, block.threads, block.threads * block.registers, block.smem + limits.reserved_smem_per_block


def blocks_beside(limits: SmLimits, need, resident_need, count):
    """Blocks needing ``need`` (:func:`block_needs`; arrays (..., 4) broadcast) an SM still
    takes while it holds ``count`` blocks needing ``resident_need``: what a kernel gets
    beside a running GEMM (0 held: its occupancy on an empty SM)."""
    cap = np.array([limits.max_blocks, limits.max_threads, limits.registers, limits.smem], dtype=np.int64)
    free = np.maximum(cap - np.asarray(count, dtype=np.int64)[..., None] * resident_need, 0)
    need = np.asarray(need)
    return np.where(need > 0, free // np.maximum(need, 1), limits.max_blocks).min(-1)


def hands_off(limits: SmLimits, need, resident_need, resident, persistent=False):
    """Whether a kernel needing ``need`` gets an SM holding ``resident`` blocks needing
    ``resident_need`` as one of them retires (a higher-priority kernel takes the freed room
    before the resident kernel's next block): the room of one block fewer fits one of its
    blocks; never beside a persistent kernel, whose blocks pass the SM from tile to tile.
    Arrays broadcast."""
    room = blocks_beside(limits, need, resident_need, np.maximum(np.asarray(resident) - 1, 0)) > 0
    return room & ~np.asarray(persistent, dtype=bool)


@dataclass(frozen=True)
class GemmShape:
    """The GEMM a kernel computes, as the cost model sees it: C[m, n] (+)= A[m, k] @ B[k, n]
    in ``dtype``; ``accumulate``: C is read too (beta = 1); ``extra_smem``: occupancy
    shaping added to every block (bytes); ``sms``: the SMs it is launched on (an SM margin,
    as cuBLAS's SM-count target or TransformerEngine's ``set_sm_margin``; 0: all);
    ``persistent``: a kernel whose blocks loop over tiles, so an SM one of them leaves takes
    its next tile before any other kernel (the profile's ``gemm.kernel``). A kernel of kind
    ``gemm`` carries one
    (:attr:`ficco_sim.taskgraph.Kernel.gemm`), so engines can re-cost it at other sizes."""

    m: int
    n: int
    k: int
    dtype: str = "float16"
    accumulate: bool = False
    extra_smem: int = 0
    sms: int = 0
    persistent: bool = False


@dataclass(frozen=True)
class GemmPlan:
    """A GEMM lowered to blocks: grid, per-block footprint and cost (SI units)."""

    m: int
    n: int
    k: int
    dtype: str
    tile: GemmTile
    block: BlockShape
    grid: int
    occupancy: int
    block_time: float
    block_hbm_bytes: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def hbm_bytes(self) -> float:
        return self.block_hbm_bytes * self.grid


def check_shape(m: int, n: int, k: int, dtype: str, where: str = "gemm") -> None:
    for name, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(where, name, f"must be a positive integer, got {v!r}")
        if v > MAX_DIM:      # as a scenario's: a typo, not a layer (and no time would mean anything)
            raise InputError(where, name, f"{v} is beyond what one simulation answers (at most {MAX_DIM})")
    if dtype not in DTYPE_BYTES:
        raise InputError(where, "dtype", f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")


# ----------------------------------------------------------------------------------------
# The cost: one formula, on arrays (scalars are 0-d arrays)

def hbm_traffic(m, n, k, dtype: str, accumulate: bool = False):
    """HBM bytes of a GEMM with ideal L2 reuse: read A and B, write C (and read it when
    accumulating). Works on numbers and arrays alike."""
    size = DTYPE_BYTES[dtype]
    return (m * k + k * n) * size + m * n * size * (2 if accumulate else 1)


def _efficiency(gpu: GpuProfile, dtype: str) -> float:
    eff = gpu.gemm.efficiency.get(dtype)
    if eff is None:
        have = ", ".join(sorted(gpu.gemm.efficiency))
        raise InputError(f"dtype {dtype}", None, f"{gpu.name} has no {dtype} GEMM rate (gemm.efficiency in "
                         f"{gpu.path or gpu.name} lists {have})")
    return eff


SPLIT_K_BYTES = 4   # split-K partial sums accumulate in float32 whatever the GEMM's dtype


def latency_hiding(gpu: GpuProfile, occupancy):
    """Share of an SM's GEMM throughput ``occupancy`` resident blocks of one kernel sustain,
    ``1 - (1 - a)**occupancy`` with ``a = gemm.one_block_share`` (1: one block saturates the
    SM). Works on numbers and arrays.

    >>> from ficco_sim.hardware import load_gpu
    >>> g = load_gpu("h100")
    >>> a = g.gemm.one_block_share
    >>> bool(abs(latency_hiding(g, 1) - a) < 1e-12 and latency_hiding(g, 2) > latency_hiding(g, 1))
    True
    """
    return 1.0 - (1.0 - gpu.gemm.one_block_share) ** np.asarray(occupancy, dtype=float)


def tile_costs(gpu: GpuProfile, tile: GemmTile, m, n, k, dtype: str, *, extra_smem: int = 0,
               accumulate: bool = False, sms: int | None = None,
               measured: bool = True) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """(grid, occupancy, block time s, block HBM bytes) of GEMMs of shapes ``m, n, k`` (arrays)
    cut into ``tile`` with ``extra_smem`` of shaping; occupancy 0 when the block does not fit.
    A split-K tile (``tile.split_k = s > 1``) has ``s`` blocks per output tile, each running
    ``ceil(k / s)`` of the K loop (and paying ``k_overhead`` again), and moves ``s`` float32
    partial tiles through HBM and back for the reduction. Shaped below the library's own
    occupancy, the SM's throughput drops by :func:`latency_hiding` (the efficiency is the
    library kernel's, at its own occupancy). A shape the profile has measured
    (``gemm.measured``) has its block time times :func:`measured_factor` (``measured=False``:
    the model alone, as the factor is solved on)."""
    block = replace(tile.block, smem=tile.block.smem + extra_smem)
    occ = blocks_per_sm(gpu.sm, block) if block.smem <= gpu.sm.max_smem_per_block else 0
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    split = tile.split_k
    grid = np.ceil(m / tile.m) * np.ceil(n / tile.n) * split
    block_time = occ * 2.0 * tile.m * tile.n * (np.ceil(k / split) + gpu.gemm.k_overhead) / (
        gpu.flops_per_sm(dtype) * _efficiency(gpu, dtype))
    if extra_smem and occ >= 1:
        block_time = block_time * float(latency_hiding(gpu, blocks_per_sm(gpu.sm, tile.block)) /
                                         latency_hiding(gpu, occ))
    if split > 1:
        # each block writes its float32 partial tile and the reduction reads it back, after
        # the block's K loop (not hidden under it), sharing HBM with the blocks of its wave: over
        # the waves the reduction moves every partial once (grid * bytes), whatever the SM count
        beside = grid / np.ceil(grid / ((sms or gpu.num_sms) * max(occ, 1)))
        block_time = block_time + beside * 2.0 * tile.m * tile.n * SPLIT_K_BYTES / gpu.hbm_effective
    if measured and gpu.gemm.measured:
        block_time = block_time * measured_factors(gpu, m, n, k, dtype)
    return grid, occ, block_time, hbm_traffic(m, n, k, dtype, accumulate) / grid


def measured_factors(gpu: GpuProfile, m, n, k, dtype: str) -> np.ndarray:
    """Per shape (arrays), :func:`measured_factor` where the profile measured it, else 1."""
    m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k)))
    table = gpu.gemm.measured
    out = [measured_factor(gpu, *key) if (key := (int(a), int(b), int(c), dtype)) in table else 1.0
           for a, b, c in zip(m.ravel(), n.ravel(), k.ravel())]
    return np.asarray(out, dtype=float).reshape(m.shape)


def measured_factor(gpu: GpuProfile, m: int, n: int, k: int, dtype: str) -> float:
    """What the model's block time of a GEMM the profile measured (``gemm.measured``) is
    multiplied by, so that its isolated time on every SM, launch included, is the measured
    one: the library's kernel for that shape, as timed, where the model's tiles and efficiency
    would say otherwise. The tile stays the model's pick, and the factor holds beside other
    kernels, on fewer SMs and shaped alike. A time below what the shape's HBM traffic alone
    takes cannot be reached by the math: the factor stops there (the traffic's time is kept).

    >>> import dataclasses
    >>> from ficco_sim.hardware import load_gpu
    >>> g = load_gpu("h100")
    >>> t = gemm_time(g, 4096, 4096, 4096)
    >>> g2 = dataclasses.replace(g, gemm=dataclasses.replace(g.gemm, measured={(4096, 4096, 4096, "float16"): 1.2 * t}))
    >>> round(gemm_time(g2, 4096, 4096, 4096) / t, 6), 1.2 <= measured_factor(g2, 4096, 4096, 4096, "float16") < 1.25
    (1.2, True)
    >>> gemm_time(g2, 4096, 4096, 2048) == gemm_time(g, 4096, 4096, 2048)
    True
    """
    key = (id(gpu), m, n, k, dtype)
    if key not in _FACTORS:
        _FACTOR_GPUS[id(gpu)] = gpu     # kept alive with its factors, so its id() names no other
        _FACTORS[key] = _solve_factor(gpu, m, n, k, dtype, gpu.gemm.measured[(m, n, k, dtype)] - gpu.launch_overhead)
    return _FACTORS[key]


_FACTORS: dict[tuple, float] = {}
_FACTOR_GPUS: dict[int, GpuProfile] = {}
_LEAST_FACTOR = 1e-9


def _solve_factor(gpu: GpuProfile, m: int, n: int, k: int, dtype: str, target: float) -> float:
    """The factor on the picked tile's block time (the model alone) that makes the GEMM's
    isolated time (launch excluded) ``target`` s: bisection, the time rising with the factor."""
    _, best = _costed(gpu, m, n, k, dtype, measured=False)
    grid, occ, block_time, per_block = tile_costs(gpu, gpu.gemm.configs[int(best)], m, n, k, dtype, measured=False)

    def time(f: float) -> float:
        return float(waves_time(gpu, grid, occ, block_time * f, per_block, gemm=True,
                                tail=not gpu.gemm.persistent_for(dtype)))

    lo, hi = _LEAST_FACTOR, 1.0
    if time(lo) >= target:
        return lo
    while time(hi) < target:
        lo, hi = hi, hi * 2.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if time(mid) < target else (lo, mid)
    return math.sqrt(lo * hi)


def tile_prefix_blocks(tile: GemmTile, m, n, share, *, within: bool = False):
    """Blocks of a GEMM cut into ``tile`` that cover its first ``share`` (0-1] of output rows,
    its tiles running row band by row band (the ``tile.m`` rows of band 0 across every
    column, then band 1, ...; a split-K tile's blocks next to each other): the signalling
    order of fused kernels (a tile signal fires when that many blocks are done). ``within``:
    only the blocks whose rows all lie in that share (what can run once those rows are
    there). Works on numbers and arrays alike."""
    m, n, share = (np.asarray(x, dtype=float) for x in (m, n, share))
    bands = (np.floor if within else np.ceil)(np.round(share * m, 9) / tile.m)
    bands = np.where(share >= 1.0, np.ceil(m / tile.m), bands)
    return np.minimum(bands, np.ceil(m / tile.m)) * np.ceil(n / tile.n) * tile.split_k


def tile_bytes(tile: GemmTile, dtype: str) -> float:
    """Output bytes one block of ``tile`` writes (a split-K tile's share of its output tile)."""
    return tile.m * tile.n * DTYPE_BYTES[dtype] / tile.split_k


def roofline(t_math, t_hbm, p: float):
    """Time of work that needs ``t_math`` of math and ``t_hbm`` of HBM traffic, each alone:
    ``(t_math**p + t_hbm**p)**(1/p)``, between the larger of the two (``p = inf``, perfect
    overlap: the plain roofline) and their sum (``p = 1``, none). Works on numbers and arrays.

    >>> [float(roofline(3.0, 4.0, p)) for p in (math.inf, 2.0, 1.0)]
    [4.0, 5.0, 7.0]
    """
    if math.isinf(p):
        return np.maximum(t_math, t_hbm)
    big = np.maximum(np.maximum(t_math, t_hbm), 1e-300)   # scaled by the larger: no overflow
    return big * ((t_math / big) ** p + (t_hbm / big) ** p) ** (1.0 / p)


def under_occupied(gpu: GpuProfile, resident, occupancy):
    """Factor on a GEMM block's time when only ``resident`` of the ``occupancy`` blocks of its
    kernel its block time assumes share its SM (a grid the GPU holds at once, spread one block
    per SM first): they share the SM's throughput among fewer, each at the throughput fewer
    blocks sustain, ``(b / o) * hiding(o) / hiding(b)`` (:func:`latency_hiding`; 1 at ``b = o``).
    Only a grid under one wave: a longer GEMM's last wave is ragged (its blocks start as earlier
    ones end, on SMs still busy), and the Vidur tables' decomposition loss says it gains nothing
    so (13 of 14 cells within 0.05 without it on the tails, 9 of 14 with it). Works on numbers
    and arrays.

    >>> from ficco_sim.hardware import load_gpu
    >>> g = load_gpu("a100")
    >>> float(under_occupied(g, 2, 2)), round(float(under_occupied(g, 1, 2)), 3)
    (1.0, 0.575)
    """
    o = np.maximum(1, occupancy)
    b = np.clip(resident, 1, o)
    return (b / o) * latency_hiding(gpu, o) / latency_hiding(gpu, b)


def waves_time(gpu: GpuProfile, grid, occupancy: int, block_time, block_hbm_bytes, *, sms: int | None = None,
               gemm: bool = False, tail: bool = True):
    """Closed-form time (s) of ``grid`` identical blocks alone on ``sms`` SMs (default all):
    full waves of ``sms * occupancy`` blocks, then a partial one. Each wave takes the block
    time, or the HBM bound when its traffic outruns the GPU's effective bandwidth; a GEMM's
    waves (``gemm``) combine the two by :func:`roofline` with the profile's
    ``gemm.roofline_exponent`` (a memory kernel's block time is its traffic: the larger
    one), and a GEMM the GPU holds in less than one wave, spread one block per SM first, has its
    blocks share their SMs with fewer of its own (:func:`under_occupied`; ``tail=False``: not so,
    a persistent kernel, whose blocks take their next tiles as SMs free, or a measured one).
    Works on numbers and arrays alike."""
    slots = (sms or gpu.num_sms) * np.maximum(1, occupancy)
    full, rest = np.floor_divide(grid, slots), np.mod(grid, slots)
    p = gpu.gemm.roofline_exponent if gemm else math.inf
    wave_full = roofline(block_time, slots * block_hbm_bytes / gpu.hbm_effective, p)
    rest_time = np.where(full > 0, block_time, block_time * under_occupied(
        gpu, np.ceil(rest / (sms or gpu.num_sms)), occupancy)) if gemm and tail else block_time
    wave_rest = roofline(rest_time, rest * block_hbm_bytes / gpu.hbm_effective, p)
    return full * wave_full + np.where(rest > 0, wave_rest, 0.0)


def gemm_times(gpu: GpuProfile, m, n, k, dtype: str = "float16", *, extra_smem: int = 0,
               accumulate: bool = False, tiles: bool = False, sms: int | None = None):
    """Isolated times (s, launch excluded) of GEMMs of shapes ``m, n, k`` (arrays): every tile
    of the profile is costed, the one with the smallest unshaped time is what a library
    picks, then ``extra_smem`` is applied to it. With ``tiles``, also the picked tile index.

    This is the GEMM cost: the DES's blocks (:func:`plan_gemm`), the closed-form engine,
    the heuristic and the calibration fit all come here.

    >>> from ficco_sim.hardware import load_gpu
    >>> g = load_gpu("h100")
    >>> t = gemm_times(g, np.array([8192]), np.array([8192]), np.array([8192]))[0]
    >>> bool(abs(t + g.launch_overhead - gemm_time(g, 8192, 8192, 8192)) < 1e-15)
    True
    """
    m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k)))
    sms = sms or None   # launched on the first ``sms`` SMs (the library picks for that many)
    iso, best = _costed(gpu, m, n, k, dtype, accumulate=accumulate, sms=sms, measured=False)
    if gpu.gemm.measured:     # a measured shape costs what it measured; the pick stays the model's
        iso, _ = _costed(gpu, m, n, k, dtype, accumulate=accumulate, sms=sms)
    out = np.take_along_axis(iso, best[None], 0)[0]
    if extra_smem:
        shaped = np.stack([waves_time(gpu, *tile_costs(gpu, t, m, n, k, dtype, extra_smem=extra_smem,
                                                       accumulate=accumulate, sms=sms), sms=sms, gemm=True,
                                      tail=not gpu.gemm.persistent_for(dtype)) for t in gpu.gemm.configs])
        out = np.take_along_axis(shaped, best[None], 0)[0]
    return (out, best) if tiles else out


def _costed(gpu: GpuProfile, m, n, k, dtype: str, *, accumulate: bool = False, sms: int | None = None,
            measured: bool = True):
    """(isolated time of every kernel config, the index a library picks) for shapes ``m, n, k``:
    the first minimum, as min() picks, launch included in the comparison (ties between
    HBM-bound tiles resolve as they always have)."""
    iso = np.stack([waves_time(gpu, *tile_costs(gpu, t, m, n, k, dtype, accumulate=accumulate, sms=sms,
                                                measured=measured), sms=sms, gemm=True,
                               tail=not gpu.gemm.persistent_for(dtype)) for t in gpu.gemm.configs])  # (kernels, ...)
    return iso, np.argmin(iso + gpu.launch_overhead, axis=0)


def plan_gemm(gpu: GpuProfile, m: int, n: int, k: int, dtype: str = "float16", *,
              extra_smem: int = 0, accumulate: bool = False, sms: int = 0) -> GemmPlan:
    """The blocks of one GEMM: the tile :func:`gemm_times` picks, with ``extra_smem`` bytes of
    occupancy shaping on every block.

    ``accumulate`` means C += A @ B (beta = 1): the output is read as well as written.
    """
    check_shape(m, n, k, dtype)
    # a pure function of its arguments, called for every GEMM piece of every lowering:
    # memoized per profile object (kept alive with its plans, so its id() names no other)
    key = (id(gpu), m, n, k, dtype, extra_smem, accumulate, sms)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 200_000:
            _PLANS.clear()
            _PLAN_GPUS.clear()
        plan = _PLANS[key] = _plan_gemm(gpu, m, n, k, dtype, extra_smem, accumulate, sms)
        _PLAN_GPUS[id(gpu)] = gpu
    return plan


_PLANS: dict[tuple, GemmPlan] = {}
_PLAN_GPUS: dict[int, GpuProfile] = {}


def _plan_gemm(gpu: GpuProfile, m: int, n: int, k: int, dtype: str, extra_smem: int, accumulate: bool,
               sms: int) -> GemmPlan:
    _efficiency(gpu, dtype)
    _, best = gemm_times(gpu, m, n, k, dtype, accumulate=accumulate, tiles=True, sms=sms)
    tile = gpu.gemm.configs[int(best)]
    grid, occ, block_time, per_block = tile_costs(gpu, tile, m, n, k, dtype, extra_smem=extra_smem,
                                                  accumulate=accumulate, sms=sms or None)
    if occ < 1:
        raise InputError("schedule", "smem", f"{extra_smem} extra bytes of shared memory per block leave no room "
                         f"for a {tile.m}x{tile.n} GEMM block on {gpu.name}")
    return GemmPlan(m, n, k, dtype, tile, replace(tile.block, smem=tile.block.smem + extra_smem), int(grid), occ,
                    float(block_time), float(per_block))


def isolated_time(gpu: GpuProfile, plan: GemmPlan, *, sms: int | None = None,
                  launch: bool = True) -> float:
    """Closed-form time (s) of the GEMM alone on ``sms`` SMs (default: all), launch included."""
    t = waves_time(gpu, plan.grid, plan.occupancy, plan.block_time, plan.block_hbm_bytes, sms=sms, gemm=True,
                   tail=not gpu.gemm.persistent_for(plan.dtype))
    return float(t) + (gpu.launch_overhead if launch else 0.0)


def gemm_time(gpu: GpuProfile, m: int, n: int, k: int, dtype: str = "float16") -> float:
    """Isolated time (s) of one GEMM on one GPU, launch overhead included.

    >>> from ficco_sim.hardware import load_gpu
    >>> t = gemm_time(load_gpu("h100"), 16384, 8192, 8192)
    >>> 2.0e-3 < t < 3.5e-3
    True
    """
    return isolated_time(gpu, plan_gemm(gpu, m, n, k, dtype))


def describe(gpu: GpuProfile, m: int, n: int, k: int, dtype: str = "float16") -> dict:
    """One GEMM as ``predict gemm`` shows it: time (launch included), TFLOP/s, the kernel the
    library picks (tile, blocks, blocks per SM, waves; ``kernel``: ``persistent`` where its
    blocks loop over tiles and keep their SMs, else ``waves``), and its waves' math and HBM time
    each alone, which :func:`roofline` combines (``bound``: which is larger, or ``ridge`` within
    25%: where the roofline exponent costs most); ``source``: ``measured`` where the profile
    timed this shape (``gemm.measured``: the time is that), else ``model``. Operands that
    cannot fit the GPU's memory are refused (:func:`~ficco_sim.workload.check_memory`)."""
    from .workload import check_memory
    plan = plan_gemm(gpu, m, n, k, dtype)        # (refuses a dtype the profile lacks first)
    check_memory(gpu, hbm_traffic(m, n, k, dtype), "--m, --n, --k", None, f"the {dtype} operands")  # A, B and C
    t = isolated_time(gpu, plan)
    waves = math.ceil(plan.grid / (gpu.num_sms * plan.occupancy))
    t_math, t_hbm = waves * plan.block_time, plan.hbm_bytes / gpu.hbm_effective
    bound = "ridge" if 0.8 <= t_hbm / t_math <= 1.25 else ("HBM" if t_hbm > t_math else "math")
    split = plan.tile.split_k
    return {"gpu": gpu.name, "m": m, "n": n, "k": k, "dtype": dtype, "time_s": t, "tflops": plan.flops / t / 1e12,
            "tile": f"{plan.tile.m}x{plan.tile.n}" + (f" split-k {split}" if split > 1 else ""),
            "blocks": plan.grid, "blocks_per_sm": plan.occupancy, "waves": waves,
            "kernel": "persistent" if gpu.gemm.persistent_for(dtype) else "waves", "math_s": t_math, "hbm_s": t_hbm,
            "bound": bound, "source": "measured" if (m, n, k, dtype) in gpu.gemm.measured else "model"}
