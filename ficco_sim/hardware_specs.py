"""What a GPU profile is made of: the frozen descriptions :class:`~ficco_sim.hardware.GpuProfile`
holds (SM limits, block shapes, GEMM tiles and model, copy engines, links, the collective
kernel and its wire protocols, a host device's threads, the contention rule's coefficients),
in SI units. :mod:`ficco_sim.hardware` reads them from YAML and re-exports them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Provenance:
    """Where one profile number came from."""

    kind: str
    source: str


@dataclass(frozen=True)
class SmLimits:
    """Per-SM (per-CU) residency limits; shared memory in bytes."""

    max_blocks: int
    max_threads: int
    registers: int
    smem: int
    max_smem_per_block: int
    reserved_smem_per_block: int
    warp_size: int


@dataclass(frozen=True)
class BlockShape:
    """What one thread block asks of an SM: threads, registers per thread, smem bytes."""

    threads: int
    registers: int
    smem: int


@dataclass(frozen=True)
class GemmTile:
    """One GEMM kernel configuration: output tile per block, the block's footprint, and
    ``split_k``: how many blocks share one output tile's K loop (partial sums reduced
    through an fp32 workspace, as cuBLAS/hipBLASLt split-K and stream-K kernels do)."""

    m: int
    n: int
    block: BlockShape
    split_k: int = 1


@dataclass(frozen=True)
class GemmModel:
    """Calibrated GEMM cost model (see :mod:`ficco_sim.gemm_model`).

    ``efficiency[dtype]`` is the fraction of the per-SM peak a full block sustains;
    ``k_overhead`` is the per-block prologue/epilogue cost expressed in K elements,
    which is what makes short-K pieces inefficient. ``one_block_share`` is the share of
    an SM's GEMM throughput one resident block of a kernel sustains alone (latency
    hiding: ``o`` blocks reach ``1 - (1 - share)**o``; 1: occupancy costs nothing).
    ``peer_rate`` is the rate (B/s) at which one block of a fused kernel moves its tile to or
    from a peer (epilogue stores, in-kernel pulls): a few KiB in flight per block over the
    link's round trip, so a wave of blocks moves at most ``blocks x peer_rate`` (inf: the
    path's bandwidth alone limits). ``roofline_exponent`` is how a wave's math and HBM
    traffic combine (:func:`ficco_sim.gemm_model.roofline`: inf, the larger; 1, the sum).
    ``persistent``: the library's GEMM kernels are persistent (cuBLAS's ``nvjet`` kernels on
    Hopper: one block per SM looping over tiles), so an SM one of their blocks leaves goes to
    the kernel's next tile before any other kernel, whatever the streams' priorities: another
    kernel gets an SM only as the GEMM runs out of tiles (:class:`ficco_sim.engine.dispatcher.Waiting`).
    It holds for the tensor-core dtypes (:meth:`persistent_for`). ``sustained``: the share of its
    tensor rate a GPU keeps in a steady stream of GEMMs (its clock lowered under sustained load),
    against the rate after an idle gap the profile is for; a ``<gpu>:sustained`` profile
    (:func:`ficco_sim.hardware.load_gpu`) runs its GEMMs at it (1: not measured).
    ``measured``: isolated times (s, launch included, all SMs) of GEMMs the profile's owner timed,
    by ``(m, n, k, dtype)``: such a GEMM costs exactly that, its blocks the model's times a
    factor (:func:`ficco_sim.gemm_model.measured_factor`); every other shape, the model alone.
    """

    tiles: tuple[GemmTile, ...]
    efficiency: Mapping[str, float]
    k_overhead: float
    max_split_k: int = 1
    one_block_share: float = 1.0
    peer_rate: float = math.inf
    roofline_exponent: float = math.inf
    persistent: bool = False
    sustained: float = 1.0
    measured: Mapping[tuple[int, int, int, str], float] = dataclasses.field(default_factory=dict)

    def persistent_for(self, dtype: str) -> bool:
        """Whether ``dtype``'s GEMMs are persistent kernels: plain fp32 (no TF32) runs on the CUDA
        cores, a block per tile in waves, even where the tensor-core kernels are persistent (the
        H200's 4096^3 fp32 GEMM: an ``sm80_xmma`` kernel of 512 blocks; validation/gpu/h200/2026-11-28)."""
        return self.persistent and dtype != "float32"

    @functools.cached_property
    def configs(self) -> tuple[GemmTile, ...]:
        """Every kernel a library may pick: each tile with each split-K factor
        (1, 2, 4, ... up to ``max_split_k``). Picked indices (``gemm_times(tiles=True)``)
        index this tuple."""
        splits = [1 << i for i in range(max(1, int(self.max_split_k)).bit_length()) if 1 << i <= self.max_split_k]
        return tuple(dataclasses.replace(t, split_k=s) for t in self.tiles for s in splits)


@dataclass(frozen=True)
class DmaSpec:
    """Copy (DMA) engines: count, bandwidth per engine (B/s), fixed cost per command (s), and
    how many of them the communication library's copy-engine collectives (NCCL / RCCL with
    zero CTAs) queue a rank's copies on (0, the profile giving none: all of them)."""

    engines: int
    bandwidth: float
    command_overhead: float
    collective_engines: int = 0

    def cap(self, src: int, dst: int) -> float:
        """Rate limit (B/s) of one engine's copy from GPU ``src`` to ``dst``: ``bandwidth``
        between GPUs (the peer-link figure); none within one GPU, where the copy reads and
        writes the same HBM and that is its limit (real same-device ``Memcpy DtoD`` runs at
        about half the HBM rate, 0.6-1.0 TB/s on A100, far above a peer link)."""
        return self.bandwidth if src != dst else math.inf


@dataclass(frozen=True)
class LinkSpec:
    """Scale-up links: ports, per-port per-direction bandwidth (B/s), GPU-to-GPU latency (s),
    the realized fraction of peak that data transfers reach, and ``peers``: for GPUs wired
    directly to each other (xGMI), how many peers the ports are spread over in the real node
    (MI300X: 7, one link to each), so that any pair gets its real link count (0: unknown)."""

    ports: int
    port_bandwidth: float
    latency: float
    efficiency: float
    peers: int = 0

    @property
    def aggregate(self) -> float:
        """Realized per-direction injection bandwidth of one GPU (B/s)."""
        return self.ports * self.port_bandwidth * self.efficiency


@dataclass(frozen=True)
class Protocol:
    """A wire protocol of SM collectives (NCCL's LL / LL128 / Simple): a fixed cost per transfer
    step (flag handshake between the two kernels) and the share of the bytes on the wire that
    are payload (LL sends a 4-byte flag with every 4 bytes of data: 0.5; LL128 one 8-byte flag
    per 128-byte line: 120/128; Simple: 1). ``channel_bytes``: NCCL's channel rule, the bytes
    of a collective call each channel needs (threads per channel x bytes per thread); a
    smaller call runs on fewer channels, at least one (0: every channel, whatever the size).
    ``per_rank``: that share is per rank of the ring (NCCL's ring LL)."""

    name: str
    latency: float
    efficiency: float
    channel_bytes: float = 0.0
    per_rank: bool = False


SIMPLE = Protocol("Simple", 0.0, 1.0)


@dataclass(frozen=True)
class P2pRule:
    """How NCCL (2.20 and later, single node) moves one point-to-point send of a grouped call
    (an all-to-all's or a send-recv's): ``channels`` p2p channels in the communicator
    (``p2pnChannels``), at most ``per_peer`` for one peer; a send starts on as many as
    ``channels / ranks`` allows (halved from ``per_peer``), at most one per ``chunk / 8``
    bytes, and doubles them while a part exceeds ``chunk x 32`` bytes (up to ``per_peer``).
    It runs LL when it carries at most ``ll_bytes`` per channel, else Simple. On each channel
    its part goes through the peer's staging buffer ``chunk`` bytes at a time, copied in and
    then out: a two-stage pipeline whose last chunk (or whole part, if smaller) is copied out
    after the rest has moved (:meth:`CommKernelSpec.p2p_fill`)."""

    channels: int
    per_peer: int
    chunk: float
    ll_bytes: float

    @property
    def min_part(self) -> float:
        return self.chunk / 8      # minPartSize on one node (src/enqueue.cc)

    @property
    def max_part(self) -> float:
        return self.chunk * 32     # maxPartSize on one node

    def split(self, nbytes: Any, ranks: Any) -> Any:
        """Channels of a send of ``nbytes`` among ``ranks`` ranks (vectorized).

        >>> rule = P2pRule(32, 32, 512 << 10, 16 << 10)
        >>> [int(rule.split(s << 20, 8)) for s in (32, 64, 128, 256)]   # 8 ranks start on 4
        [4, 4, 8, 16]
        >>> int(rule.split(32 << 20, 4)), int(rule.split(100 << 10, 8))
        (8, 2)
        """
        import numpy as np
        x, ranks = np.asarray(nbytes, dtype=float), np.maximum(np.asarray(ranks, dtype=float), 1.0)
        start = float(self.per_peer)
        least = np.full(np.broadcast(x, ranks).shape, start)
        while (big := (least * ranks > self.channels) & (least > 1)).any():     # NCCL's nChannelsMin
            least = np.where(big, least / 2, least)
        n = np.maximum(np.minimum(least, np.ceil(x / self.min_part)), 1.0)
        while (more := (np.maximum(self.min_part, x / n) > self.max_part) & (n <= self.per_peer / 2)).any():
            n = np.where(more, n * 2, n)
        return n


# NCCL runs an all-reduce smaller than this per rank in Ring/LL even where NVLS is its default:
# on 8 x H200 "NVLS engaged >= 2 MiB; RING/LL below 1 MiB" ([MLENG-NET] in
# ../shared/reference/hardware.md). One number for every GPU, so that a scenario's template
# structure (:meth:`ficco_sim.workload.Scenario.structure`) can say which side it is on.
NVLS_MIN_BYTES = 2 << 20


# NCCL's tuner for a ring on NVLink, per protocol (src/graph/tuning.cc, NCCL 2.18-2.29): a call's
# latency is base + steps x per_step (us) and its bandwidth the ring graph's bus bandwidth, LL's
# half of it capped by the GPU's llMaxBw (a quarter for an all-reduce, a third otherwise, before
# 2.21), LL128's 0.92 of it. Used only to pick the protocol, as NCCL does; what a protocol then
# costs is the profile's (:class:`Protocol`).
NCCL_RING_US = {"LL": (6.6, 0.6), "LL128": (14.0, 1.9), "Simple": (8.4, 3.4)}


@dataclass(frozen=True)
class CommKernelSpec:
    """SM-based collective kernel (NCCL/RCCL-like): per-block footprint, default channel
    (block) count, the bandwidth one resident channel can drive (B/s), the cost of one
    collective call before any byte moves (``launch``, s: kernel launch plus the ranks'
    handshake; None: the GPU's kernel launch overhead), and the wire protocols it picks from.
    ``nvls_channels``: the channels of an NVLS (NVLink SHARP: the switch reduces and
    multicasts) all-reduce, 0 where the GPU's switch cannot; NCCL's default from
    ``nvls_min_gpus`` GPUs up; ``nvls_latency``: what an NVLS call costs before its bytes
    move (s). ``issue``: the host time one more GPU's collective kernel takes to issue when
    one thread drives several GPUs (nccl-tests' ``-g``; s). ``tuner``: the size NCCL's tuner
    picks an all-gather's or a reduce-scatter's protocol and channels on: ``"call"`` the
    whole call's bytes (NCCL 2.22 and later), ``"rank"`` one rank's share (before 2.22).
    ``ring_bus_bw``, ``ll_max_bw`` (B/s): the bus bandwidth of NCCL's ring graph (its channels
    x their bandwidth) and the GPU's cap on LL, from which NCCL's tuner picks a ring call's
    protocol (:meth:`nccl_protocol`; 0: the least isolated time, :meth:`protocol_index`).
    ``fully_connected``: the algorithm the library runs an all-gather, reduce-scatter or
    all-reduce with where every GPU has links to every other (no switch): ``"ring"`` (NCCL,
    whose rings then run over every link) or ``"direct"`` (each rank to every peer at once)."""

    block: BlockShape
    channels: int
    channel_bandwidth: float
    launch: float | None = None
    protocols: tuple[Protocol, ...] = (SIMPLE,)
    nvls_channels: int = 0
    nvls_min_gpus: int = 0
    nvls_latency: float = 0.0
    issue: float = 0.0
    tuner: str = "call"
    p2p: P2pRule | None = None
    fully_connected: str = "direct"
    ring_bus_bw: float = 0.0
    ll_max_bw: float = 0.0

    def nccl_protocol(self, size: Any, ranks: Any, steps: Any) -> Any:
        """The protocol NCCL's tuner picks for a ring call of ``size`` bytes (as it sees them)
        over ``ranks`` ranks in ``steps`` ring steps (an all-reduce ``2 (ranks - 1)``, an
        all-gather or reduce-scatter ``ranks - 1``): the least ``base + steps x per_step +
        size / (bandwidth x ranks / steps)`` (:data:`NCCL_RING_US`). Vectorized.

        On 4 x H100 (ring bus bandwidth 360 GB/s, NCCL 2.29.2's own table): a 4 MiB
        all-reduce runs LL128, an all-gather of 4 MiB Simple, 2 MiB ones LL.

        >>> spec = CommKernelSpec(BlockShape(512, 96, 0), 24, 15e9, protocols=(Protocol("LL", 0, .5),
        ...     Protocol("LL128", 0, .9375), SIMPLE), ring_bus_bw=360e9, ll_max_bw=141e9)
        >>> [int(spec.nccl_protocol(s << 20, 4, k)) for s, k in ((4, 6), (4, 3), (2, 6), (2, 3))]
        [1, 2, 0, 0]
        """
        import numpy as np
        size, ranks, steps = (np.asarray(v, dtype=float) for v in (size, ranks, steps))
        steps, ranks = np.maximum(steps, 1.0), np.maximum(ranks, 1.0)
        old = self.tuner == "rank"          # NCCL before 2.22 (LL's half since 2.21): a quarter / a third
        ll = np.where(steps >= 2 * (ranks - 1) - 0.5, 0.25, 1 / 3) if old else 0.5
        if not any(q.name in NCCL_RING_US for q in self.protocols):
            return self.protocol_index(size / ranks)      # none of NCCL's: the least isolated time
        times = []
        for q in self.protocols:
            if q.name not in NCCL_RING_US:
                times.append(np.full(np.broadcast(size, ranks, steps).shape, np.inf))
                continue
            base, per_step = NCCL_RING_US[q.name]
            bw = {"LL": np.minimum(self.ll_max_bw or np.inf, self.ring_bus_bw * ll),
                  "LL128": 0.92 * self.ring_bus_bw}.get(q.name, self.ring_bus_bw)
            times.append((base + steps * per_step) * 1e-6 + size / (bw * ranks / steps))
        best = np.argmin(np.stack(times, axis=-1), axis=-1)
        return int(best) if best.ndim == 0 else best

    def protocol_index(self, nbytes: Any) -> Any:
        """The protocol a transfer step of ``nbytes`` runs with, as NCCL's tuner picks it: the
        least isolated time ``latency + nbytes / (efficiency * channels * channel_bandwidth)``.
        Vectorized over ``nbytes``; the one formula both engines use.

        >>> spec = CommKernelSpec(BlockShape(512, 96, 0), 16, 25e9, protocols=(
        ...     Protocol("LL", 1e-6, 0.5), Protocol("Simple", 10e-6, 1.0)))
        >>> spec.protocol_index(4096), int(spec.protocol_index(64 << 20))
        (0, 1)
        """
        import numpy as np
        lat = np.array([p.latency for p in self.protocols])
        rate = np.array([p.efficiency for p in self.protocols]) * self.channels * self.channel_bandwidth
        x = np.asarray(nbytes, dtype=float)
        best = np.argmin(lat + x[..., None] / rate, axis=-1)
        return int(best) if best.ndim == 0 else best

    @staticmethod
    def grouped(call: Any, ranks: Any) -> Any:
        """Whether a transfer tuned ``(call, ranks, steps)`` (:attr:`~ficco_sim.taskgraph.Transfer.tune`)
        is a send of a grouped point-to-point call: no call size, a communicator's ranks."""
        import numpy as np
        return (np.asarray(call) == 0) & (np.asarray(ranks) > 0)

    def tuned(self, nbytes: Any, call: Any, ranks: Any, grid: Any, steps: Any = 0.0) -> tuple[Any, Any]:
        """(protocol index, channels) of SM transfers of ``nbytes`` driven by kernels of
        ``grid`` channels, as NCCL's tuner picks them for the collective call each is a step
        of: the call's size is ``nbytes * call`` (0: a point-to-point message, its own bytes)
        over ``ranks`` ranks; the protocol is picked on the call's bytes per rank
        (:meth:`protocol_index` of one ring step's), and a call smaller than ``channels x
        channel_bytes`` (x ``ranks`` where the protocol's share is per rank) runs on fewer
        channels, at least one. A send of a grouped point-to-point call (``call`` 0, ``ranks``
        the communicator's) takes its channels and protocol from :class:`P2pRule` where the
        profile has one; a message of no call (``ranks`` 0) runs on every channel, its protocol
        the fastest alone. A ring call (``steps`` > 0: its ring steps) on a profile that has
        NCCL's ring tuner (``ring_bus_bw``) takes the protocol that tuner picks
        (:meth:`nccl_protocol`). Vectorized; the one rule both engines use.

        >>> spec = CommKernelSpec(BlockShape(512, 96, 0), 16, 25e9, protocols=(
        ...     Protocol("LL", 1e-6, 0.5, 4096, True), Protocol("Simple", 10e-6, 1.0, 32768)),
        ...     p2p=P2pRule(32, 32, 512 << 10, 16 << 10))
        >>> p, c = spec.tuned(64 << 10, 8, 8, 16)       # one step of a 512 KiB ring call on 8 ranks
        >>> int(p), int(c)
        (0, 16)
        >>> p, c = spec.tuned(64 << 10, 1, 8, 16)       # the same step, the tuner seeing one rank's 64 KiB
        >>> int(p), int(c)
        (0, 2)
        >>> p, c = spec.tuned(32 << 20, 0, 8, 16)       # a 32 MiB send among 8 ranks: Simple on 4 channels
        >>> int(p), int(c)
        (1, 4)
        """
        import numpy as np
        x, call, ranks = (np.asarray(v, dtype=float) for v in (nbytes, call, ranks))
        grid = np.asarray(grid, dtype=float)
        tuned = call > 0
        size = np.where(tuned, x * call, x)
        p = np.asarray(self.protocol_index(np.where(tuned, size / np.maximum(ranks, 1), x)))
        if self.ring_bus_bw > 0:
            ring = tuned & (np.asarray(steps, dtype=float) > 0)
            if ring.any():
                p = np.where(ring, self.nccl_protocol(size, ranks, steps), p)
        need = np.array([q.channel_bytes for q in self.protocols])[p] * np.where(
            np.array([q.per_rank for q in self.protocols])[p], np.maximum(ranks, 1), 1.0)
        channels = np.where(tuned & (need > 0), np.clip(np.floor(size / np.where(need > 0, need, 1.0)), 1, grid), grid)
        if self.p2p is not None:
            p2p = self.grouped(call, ranks)
            n = np.minimum(self.p2p.split(x, ranks), grid)
            channels = np.where(p2p, n, channels)
            names = [q.name for q in self.protocols]
            if "LL" in names and "Simple" in names:
                p = np.where(p2p, np.where(x <= n * self.p2p.ll_bytes, names.index("LL"), names.index("Simple")), p)
        return p, channels

    def p2p_fill(self, wire: Any, call: Any, ranks: Any, channels: Any) -> Any:
        """Seconds a grouped send (``call`` 0, ``ranks`` > 0; others 0) of ``wire`` bytes on
        ``channels`` channels takes beyond its bytes' time: each channel's last chunk (its
        whole part when smaller) copied out of the staging buffer after the rest has crossed,
        at one channel's rate (:class:`P2pRule`). Vectorized; both engines call it.

        >>> spec = CommKernelSpec(BlockShape(512, 96, 0), 16, 20e9, p2p=P2pRule(32, 32, 512 << 10, 16 << 10))
        >>> round(float(spec.p2p_fill(32 << 20, 0, 8, 4)) * 1e6, 2)     # 8 MiB per channel: one 512 KiB chunk
        26.21
        >>> round(float(spec.p2p_fill(64 << 10, 0, 8, 1)) * 1e6, 2), float(spec.p2p_fill(32 << 20, 4, 8, 4))
        (3.28, 0.0)
        """
        import numpy as np
        x, call, ranks, channels = (np.asarray(v, dtype=float) for v in (wire, call, ranks, channels))
        if self.p2p is None:
            return np.zeros(np.broadcast(x, call, ranks, channels).shape)
        part = np.minimum(x / np.maximum(channels, 1.0), self.p2p.chunk)
        return np.where(self.grouped(call, ranks), part / self.channel_bandwidth, 0.0)


@dataclass(frozen=True)
class HostSpec:
    """A device whose ranks are processes on one host (the CPU replay): each rank has its
    share ``cores / ranks`` of the host's cores for its compute thread and its library's
    (gloo's) threads. A compute cohort wants one core per resident block; a transfer wants
    ``core_s_per_byte`` core-seconds per byte, half at each end. Where they want more than a
    rank's share, the share is split evenly between the threads that want it (the kernel's
    fair scheduler): a message beside a computing thread gets half a core and slows the
    compute as much. Communication kernels hold no compute slot (the library's own threads
    run them).

    Each rank has one issuing thread (the replay's loop): a compute op holds it while it
    runs, and posting a message (its send at one end, its receive at the other) holds it for
    :meth:`post_cost`; a message that becomes ready while the thread computes is posted when
    the op ends, before the next compute op, and moves once both its ends have posted it."""

    cores: int
    core_s_per_byte: float
    start_skew: float = 0.0     # s between the first and the last rank starting a run (the replay's timing)
    post_s: float = 0.0         # s the issuing thread spends posting one message ...
    post_s_per_byte: float = 0.0    # ... plus this per byte

    def post_cost(self, nbytes: float) -> float:
        """Seconds the issuing thread spends posting one message of ``nbytes``."""
        return self.post_s + self.post_s_per_byte * nbytes


@dataclass(frozen=True)
class Contention:
    """Calibrated interference beyond fair bandwidth sharing.

    A compute kernel runs ``1 + compute_per_hbm_util * u`` times slower, where ``u`` is
    the fraction of HBM peak used by other (communication) activity on the GPU, and
    ``compute_beside_comm_kernel`` more while a communication kernel's blocks are resident
    on its GPU (they spin on flags and poll memory on the SMs they share, whether or not
    bytes move); a transfer is slowed by ``1 + comm_per_hbm_util * u`` with ``u`` the
    compute's share.
    """

    compute_per_hbm_util: float
    comm_per_hbm_util: float
    compute_beside_comm_kernel: float = 0.0
