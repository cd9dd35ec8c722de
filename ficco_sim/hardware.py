"""GPU hardware profiles: what one GPU can hold, compute and move.

A profile is a YAML file in ``hw_profiles/`` (or any path). Every number in it
is a mapping ``{value, kind, source}`` where ``kind`` is one of
``datasheet``, ``measured``, ``fitted``, ``derived`` or ``assumption`` and
``source`` says where it came from (a URL, a measurement file and date, or a
fit with its data and error). Field names carry their unit in the file
(``clock_mhz``, ``bandwidth_gbps``); :func:`load_gpu` converts everything to
SI (seconds, bytes, FLOP/s, bytes/s) and checks it.

>>> gpu = load_gpu("h100")
>>> gpu.num_sms, gpu.sm.max_threads
(132, 2048)
>>> round(gpu.hbm_bandwidth / 1e12, 2)
3.35
>>> gpu.provenance("num_sms").kind
'datasheet'
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError
from .hardware_specs import (SIMPLE, BlockShape, CommKernelSpec, Contention, DmaSpec, GemmModel, GemmTile,  # noqa: F401
                             HostSpec, LinkSpec, NVLS_MIN_BYTES, P2pRule, Protocol, Provenance, SmLimits)
from .profile_reader import KIB, KINDS, Reader, check_block_fits, overlay, read_yaml  # noqa: F401

PROFILE_DIR = Path(__file__).resolve().parent.parent / "hw_profiles"
# gemm.kernel: how the library's GEMM kernels hold SMs (GemmModel.persistent)
KERNELS = ("waves", "persistent")
# dispatch: how the block scheduler orders kernels waiting for SMs (ficco_sim.engine.dispatcher)
POLICIES = ("backfill", "strict", "fifo")
# tfloat32: float32 operands multiplied on tensor cores at TF32 precision (PyTorch's allow_tf32)
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "tfloat32": 4, "float8": 1}

GB = 1e9


@dataclass(frozen=True)
class GpuProfile:
    """One GPU, in SI units. Build with :func:`load_gpu`; tweak with :func:`dataclasses.replace`."""

    name: str
    description: str
    num_sms: int
    clock_hz: float
    sm: SmLimits
    peak_flops: Mapping[str, float]
    hbm_bandwidth: float
    hbm_efficiency: float
    dma: DmaSpec
    launch_overhead: float
    priority_levels: int
    link: LinkSpec
    comm_kernel: CommKernelSpec
    gemm: GemmModel
    contention: Contention
    sources: Mapping[str, Provenance] = field(default_factory=dict, compare=False, repr=False)
    path: str = field(default="", compare=False)
    peak_sms: int = 0   # the SM count ``peak_flops`` is for (0: num_sms); an SM's rate never depends on num_sms
    host_bandwidth: float = 0.0   # host link (PCIe / CPU fabric) per direction, B/s (0: not known)
    host: HostSpec | None = None  # ranks are processes sharing one host's cores (the CPU replay)
    dispatch: str = "backfill"    # the block scheduler's policy (:data:`POLICIES`; ``dispatch`` in the YAML)
    hbm_capacity: float = 0.0     # device memory, bytes (``hbm.capacity_gb``, read as GiB; 0: not known)

    @property
    def hbm_effective(self) -> float:
        """Bandwidth (B/s) that all HBM traffic on this GPU shares."""
        return self.hbm_bandwidth * self.hbm_efficiency

    def provenance(self, path: str) -> Provenance:
        """Provenance of the number at ``path`` (e.g. ``"dma.engines"``)."""
        return self.sources[path]

    def launch_of(self, kind: str) -> float:
        """Delay from a kernel's turn on its stream to its blocks being dispatchable: the
        launch overhead (a communication kernel: at most its collective call floor)."""
        if kind == "comm" and self.comm_kernel.launch is not None:
            return min(self.comm_kernel.launch, self.launch_overhead)
        return self.launch_overhead

    def handshake_of(self, kind: str) -> float:
        """What is left of a communication kernel's call floor once its blocks are resident
        (the ranks' handshake): its transfers start that long after it reaches the SMs, while
        its blocks hold them. 0 for other kernels."""
        if kind == "comm" and self.comm_kernel.launch is not None:
            return max(0.0, self.comm_kernel.launch - self.launch_overhead)
        return 0.0

    def flops_per_sm(self, dtype: str) -> float:
        if dtype not in self.peak_flops:
            raise InputError(self.path or self.name, "peak_tflops", f"no peak given for dtype {dtype!r}")
        return self.peak_flops[dtype] / (self.peak_sms or self.num_sms)


# ----------------------------------------------------------------------------------------
# Loading

def available_profiles() -> list[str]:
    """Names of the built-in profiles (files in ``hw_profiles/``)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_for_device(device: str) -> str | None:
    """The built-in GPU profile a device name (a trace's ``deviceProperties``, an nccl-tests
    rank line) names, as a word of its own, else None.

    >>> [profile_for_device(d) for d in ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "A100-SXM4-40GB",
    ...                                  "AMD Instinct MI300X", "NVIDIA GH200 120GB", "")]
    ['h100', 'v100', 'a100', 'mi300x', None, None]
    """
    import re
    name = re.sub(r"[-_/,()]", " ", str(device).lower())
    for p in sorted(available_profiles(), key=len, reverse=True):
        if p and p != "cpu" and re.search(rf"(?<![a-z0-9]){re.escape(p)}(?![a-z0-9])", name):
            return p
    return None


def resolve_profile_path(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise InputError(text, None, "no such profile file")
        return p
    builtin = PROFILE_DIR / f"{text.lower()}.yaml"
    if not builtin.exists():
        raise InputError(
            "--gpu", None, f"unknown GPU {text!r}; built-in profiles: {', '.join(available_profiles())}"
        )
    return builtin


YAML_HELP = """\
A GPU profile is YAML (hw_profiles/*.yaml; pass a name or a path to --gpu). Every number is
{value, kind, source}: kind is datasheet | measured | fitted | derived | assumption and
source says where it comes from (a URL, a measurement file, or a fit with its error).
Units are in the key names (_gbps, _us, _kib, _mhz). A variant of another GPU gives only
what differs: `extends: h100` (a built-in name, or a profile file's path relative to this
one) takes every entry of that profile and lays the file's own over it, leaf by leaf (a list
such as gemm.tiles is replaced whole, and `key: null` unsets an optional entry of the base);
it needs a name of its own. A number the base derived
from one the variant changes (a channel rate from the link count) is not derived again:
give it too (hw_profiles/h800.yaml extends h100 so). The sections, with {example} values:
"""
MEASURED_HELP = """\
Optional, gemm.measured: GEMMs you timed yourself, each costing exactly its time in every
engine (its blocks the model's times one factor, so it holds beside other kernels, shaped and
on fewer SMs alike); every other shape stays the model's. `ficco-sim predict gemm` says which:
  gemm:
    measured:
      - {m: 4096, n: 8192, k: 8192, dtype: bfloat16, time_us: {value: 781.0, kind: measured,
         source: "torch.mm + CUDA events, median of 50 after 10 warm-ups, my-node 2026-11-28"}}
time_us: isolated, launch included, on every SM, the GPU idle before (as benchmarks time it).
Optional, dma.collective_engines: how many copy engines the communication library's own copy-
engine collectives (NCCL / RCCL with zero CTAs: `nccl:ce=1`) queue a rank's copies on (absent:
all of dma.engines; RCCL on MI300X: 1, its peers' shards one after another).
"""

_PROFILE_CACHE: dict[tuple[str, float], tuple[GpuProfile, list]] = {}


def load_gpu(name_or_path: str | Path | GpuProfile) -> GpuProfile:
    """Load a profile by built-in name (``"h100"``) or YAML path; a profile passes through.
    ``"<gpu>:sustained"``: its GEMMs at the tensor rate a steady stream of them keeps
    (``gemm.sustained``), for a training step's steady state; the profile alone is for GEMMs
    after an idle gap (the clock at its maximum), as benchmarks time them."""
    if isinstance(name_or_path, GpuProfile):
        return name_or_path
    if isinstance(name_or_path, str) and name_or_path.endswith(":sustained"):
        base = load_gpu(name_or_path[:-len(":sustained")])
        if base.name.endswith(":sustained") or "gemm.sustained" not in base.sources:
            raise InputError("--gpu", None, f"{name_or_path!r}: profile {base.name!r} has no gemm.sustained "
                             "(its GEMMs were never timed in a steady stream), or has it applied already")
        gemm = dataclasses.replace(base.gemm, efficiency={d: e * base.gemm.sustained
                                                          for d, e in base.gemm.efficiency.items()},
                                   measured={key: t / base.gemm.sustained for key, t in base.gemm.measured.items()})
        return dataclasses.replace(base, name=f"{base.name}:sustained", gemm=gemm)
    path = resolve_profile_path(name_or_path)
    key = (str(path.resolve()), path.stat().st_mtime)
    hit = _PROFILE_CACHE.get(key)
    if hit is None or any(not f.exists() or f.stat().st_mtime != t for f, t in hit[1]):
        read: list = []                               # the files it extends: the profile is stale if one changes
        gpu = parse_profile(read_yaml(path), str(path), read=read)
        hit = _PROFILE_CACHE[key] = (gpu, [(f, f.stat().st_mtime) for f in read])
    return hit[0]


def _roofline_exponent(r: Reader) -> float:
    """``gemm.roofline_exponent`` (absent: inf, the plain roofline); below 1 a wave would take
    longer than its math and its traffic one after the other."""
    if not r.has("gemm.roofline_exponent"):
        return math.inf
    p = r.number("gemm.roofline_exponent", at_most=64)
    if p < 1:
        raise InputError(r.where, "gemm.roofline_exponent", f"must be at least 1 (1: math and HBM traffic add up), "
                         f"got {p!r}")
    return p


FASTEST_MEASURED = 1.25    # a measured GEMM above this share of its dtype's peak is a typo, not a kernel


def beyond_peak(m: Any, n: Any, k: Any, seconds: Any, peak: Any) -> Any:
    """Whether an ``m x n x k`` GEMM timed at ``seconds`` beats :data:`FASTEST_MEASURED` times
    ``peak`` FLOP/s: a typo or another dtype's time, not a kernel (elementwise on arrays)."""
    return 2.0 * m * n * k / seconds > FASTEST_MEASURED * peak


def _measured_gemms(r: Reader, peaks: Mapping[str, float]) -> dict[tuple[int, int, int, str], float]:
    """``gemm.measured``: GEMMs the profile's owner timed, each ``{m, n, k, dtype, time_us}``
    (``time_us`` a sourced leaf: isolated, launch included, on every SM); absent: none."""
    from .workload import MAX_DIM     # workload imports this module
    if not r.has("gemm.measured"):
        return {}
    node = r.node("gemm.measured")
    if not isinstance(node, list):
        raise InputError(r.where, "gemm.measured", "must be a list of {m, n, k, dtype, time_us}")
    out: dict[tuple[int, int, int, str], float] = {}
    for i, entry in enumerate(node):
        p = f"gemm.measured.{i}"
        if not isinstance(entry, dict):
            raise InputError(r.where, p, "must be a mapping with m, n, k, dtype and time_us")
        dims = []
        r.use(*(f"{p}.{d}" for d in ("m", "n", "k", "dtype")))
        for d in ("m", "n", "k"):
            v = entry.get(d)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_DIM:
                raise InputError(r.where, f"{p}.{d}", f"must be a positive integer of at most {MAX_DIM}, got {v!r}")
            dims.append(v)
        dtype = entry.get("dtype")
        if dtype not in peaks:
            raise InputError(r.where, f"{p}.dtype", f"must be one of peak_tflops' dtypes ({', '.join(peaks)}), "
                             f"got {dtype!r}")
        key = (*dims, str(dtype))
        if key in out:
            raise InputError(r.where, p, f"{key[0]}x{key[1]}x{key[2]} {dtype} is measured twice")
        out[key] = t = r.number(f"{p}.time_us", scale=1e-6)
        if beyond_peak(*dims, t, peaks[dtype]):
            raise InputError(r.where, f"{p}.time_us", f"{t * 1e6:g} us is beyond the {dtype} peak: "
                             f"{dims[0]}x{dims[1]}x{dims[2]} needs {2e6 * dims[0] * dims[1] * dims[2] / peaks[dtype]:.4g} us "
                             f"at peak_tflops.{dtype} (another dtype's time, or ms for us?)")
    return out


def _protocols(r: Reader) -> tuple[Protocol, ...]:
    """``comm_kernel.protocols``: ``{name: {latency_us, efficiency}}``, and NCCL's channel rule
    as ``channel_bytes`` or ``channel_bytes_per_rank`` (at most one); absent: Simple only."""
    if not r.has("comm_kernel.protocols"):
        return (SIMPLE,)
    node = r.node("comm_kernel.protocols")
    if not isinstance(node, dict) or not node:
        raise InputError(r.where, "comm_kernel.protocols", "must map protocol names to latency_us and efficiency")
    out = []
    for name in node:
        path = f"comm_kernel.protocols.{name}"
        rules = [k for k in ("channel_bytes", "channel_bytes_per_rank") if r.has(f"{path}.{k}")]
        if len(rules) > 1:
            raise InputError(r.where, f"{path}.channel_bytes_per_rank", "give channel_bytes or channel_bytes_per_rank, "
                             "not both")
        out.append(Protocol(str(name), r.number(f"{path}.latency_us", scale=1e-6, positive=False),
                            r.number(f"{path}.efficiency", at_most=1.0),
                            r.number(f"{path}.{rules[0]}", integer=True) if rules else 0.0,
                            rules == ["channel_bytes_per_rank"]))
    return tuple(out)


def _p2p(r: Reader) -> P2pRule | None:
    """``comm_kernel.p2p``: NCCL's point-to-point channel rule (:class:`P2pRule`); absent: a
    grouped send runs on every channel of its kernel."""
    if not r.has("comm_kernel.p2p"):
        return None
    q = "comm_kernel.p2p"
    rule = P2pRule(channels=r.number(f"{q}.channels", integer=True), per_peer=r.number(f"{q}.per_peer", integer=True),
                   chunk=r.number(f"{q}.chunk_kib", scale=KIB),
                   ll_bytes=r.number(f"{q}.ll_kib_per_channel", scale=KIB, positive=False))
    if rule.per_peer > rule.channels:
        raise InputError(r.where, f"{q}.per_peer", f"{rule.per_peer} exceeds the {rule.channels} p2p channels")
    return rule


MAX_EXTENDS = 8     # profiles extending one another deeper than this are a mistake, not a family


def inherited(data: Any, where: str, chain: tuple[str, ...] = (), read: list | None = None) -> Any:
    """A profile that ``extends`` another (a built-in name, or a YAML path relative to the
    extending file's folder): the other's entries, themselves resolved, with this file's laid
    over them (:func:`overlay`). A variant must name itself; a loop or a chain deeper than
    :data:`MAX_EXTENDS` is refused. Other data passes through. ``read``: gains every base file
    read (what a cached profile depends on)."""
    if not isinstance(data, dict) or "extends" not in data:
        return data
    ref = data["extends"]
    if not isinstance(ref, str) or not ref.strip():
        raise InputError(where, "extends", f"must name a built-in profile or a profile YAML file, got {ref!r}")
    if not isinstance(data.get("name"), str) or not data["name"]:
        raise InputError(where, "name", f"a profile that extends {ref!r} needs a name of its own (its results are "
                         "labelled by it)")
    target = Path(ref)
    if target.suffix in (".yaml", ".yml"):        # a file, from the extending file's folder
        if not target.is_absolute() and where:
            target = Path(where).parent / target
        if not target.is_file():
            raise InputError(where, "extends", f"no such profile file: {target}")
        path = target
    else:                                         # a built-in name (never a file of the working folder)
        path = PROFILE_DIR / f"{ref.strip().lower()}.yaml"
        if not path.is_file():
            raise InputError(where, "extends", f"no built-in profile {ref!r} (built-in: "
                             f"{', '.join(available_profiles())}; a file's name ends in .yaml)")
    chain = chain or (str(Path(where).resolve()),)
    key = str(path.resolve())
    if key in chain or len(chain) > MAX_EXTENDS:
        names = " -> ".join(Path(c).name for c in (*chain, key))
        raise InputError(where, "extends", f"profiles extend one another in a loop (or deeper than {MAX_EXTENDS}): "
                         f"{names}")
    if read is not None:
        read.append(path)
    base = inherited(read_yaml(path), str(path), (*chain, key), read)
    if not isinstance(base, dict):
        raise InputError(str(path), None, "a profile must be a YAML mapping")
    try:
        return overlay(base, {k: v for k, v in data.items() if k != "extends"})
    except ValueError as exc:
        raise InputError(where, str(exc), f"must be a mapping: {Path(path).name} gives this section entries, "
                         "which a variant overrides one by one") from None


def _walk(data: Any, parts: list[str]) -> Any:
    """The node at ``parts`` of a parsed mapping; ``...`` where the path is absent (``None``
    where the file gives it as ``null``)."""
    for part in parts:
        if not isinstance(data, dict) or part not in data:
            return ...
        data = data[part]
    return data


def parse_profile(data: Any, where: str, read: list | None = None) -> GpuProfile:
    """Validate a parsed profile mapping and build a :class:`GpuProfile` (SI units); one that
    ``extends`` another is laid over it first (:func:`inherited`; ``read`` gains the files it
    extends), and a bad entry it did not give itself is said to be inherited."""
    if isinstance(data, dict) and "extends" in data:
        merged = inherited(data, where, read=read)
        try:
            return _parse(merged, where)
        except InputError as exc:
            parts = (exc.field or "").split(".")
            unset = next((".".join(parts[:i]) for i in range(1, len(parts) + 1)
                          if exc.field and _walk(data, parts[:i]) is None), None)
            if exc.field and exc.where == where and (unset or not Reader(data, where).has(exc.field)):
                why = f"unset by this file's `{unset}: null`" if unset else f"inherited through extends: {data['extends']}"
                raise InputError(where, exc.field, f"{exc.message} ({why})") from None
            raise
    return _parse(data, where)


def _parse(data: Any, where: str) -> GpuProfile:
    r = Reader(data, where)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(where, "name", "must be a non-empty string")
    sm = SmLimits(
        max_blocks=r.number("sm.max_blocks", integer=True),
        max_threads=r.number("sm.max_threads", integer=True),
        registers=r.number("sm.registers", integer=True),
        smem=int(r.number("sm.smem_kib", scale=KIB)),
        max_smem_per_block=int(r.number("sm.max_smem_per_block_kib", scale=KIB)),
        reserved_smem_per_block=int(r.number("sm.reserved_smem_per_block_kib", scale=KIB, positive=False)),
        warp_size=r.number("sm.warp_size", integer=True),
    )
    if sm.max_smem_per_block > sm.smem:
        raise InputError(where, "sm.max_smem_per_block_kib", "exceeds sm.smem_kib")
    peaks = r.node("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise InputError(where, "peak_tflops", "must map dtypes to peak TFLOP/s")
    peak_flops = {}
    for dtype in peaks:
        if dtype not in DTYPE_BYTES:
            raise InputError(where, f"peak_tflops.{dtype}", f"unknown dtype; known: {', '.join(DTYPE_BYTES)}")
        peak_flops[dtype] = r.number(f"peak_tflops.{dtype}", scale=1e12)
    eff_node = r.node("gemm.efficiency")
    if not isinstance(eff_node, dict) or not eff_node:
        raise InputError(where, "gemm.efficiency", "must map dtypes to efficiencies")
    for d in eff_node:
        if d not in DTYPE_BYTES:
            raise InputError(where, f"gemm.efficiency.{d}", f"unknown dtype; known: {', '.join(DTYPE_BYTES)}")
    efficiency = {d: r.number(f"gemm.efficiency.{d}", at_most=1.0) for d in eff_node}
    tiles_node = r.node("gemm.tiles")
    if not isinstance(tiles_node, list) or not tiles_node:
        raise InputError(where, "gemm.tiles", "must be a non-empty list of tile configurations")
    tiles = []
    for i in range(len(tiles_node)):
        p = f"gemm.tiles.{i}"
        tiles.append(GemmTile(m=r.number(f"{p}.m", integer=True), n=r.number(f"{p}.n", integer=True),
                              block=r.block(p, sm)))
    profile = GpuProfile(
        name=name,
        description=str(data.get("description", "")),
        num_sms=r.number("num_sms", integer=True),
        clock_hz=r.number("clock_mhz", scale=1e6),
        sm=sm,
        peak_flops=peak_flops,
        peak_sms=r.number("peak_sms", integer=True) if r.has("peak_sms") else 0,
        host_bandwidth=r.number("host_link_gbps", scale=GB) if r.has("host_link_gbps") else 0.0,
        hbm_bandwidth=r.number("hbm.bandwidth_gbps", scale=GB),
        hbm_efficiency=r.number("hbm.efficiency", at_most=1.0),
        hbm_capacity=r.number("hbm.capacity_gb", scale=2 ** 30) if r.has("hbm.capacity_gb") else 0.0,
        dma=DmaSpec(
            engines=r.number("dma.engines", integer=True),
            bandwidth=r.number("dma.bandwidth_gbps", scale=GB),
            command_overhead=r.number("dma.command_overhead_us", scale=1e-6, positive=False),
            collective_engines=r.number("dma.collective_engines", integer=True,
                                        at_most=r.number("dma.engines", integer=True))
            if r.has("dma.collective_engines") else 0,
        ),
        launch_overhead=r.number("launch_overhead_us", scale=1e-6, positive=False),
        dispatch=r.choice("dispatch", POLICIES) if r.has("dispatch") else "backfill",
        priority_levels=r.number("priority_levels", integer=True),
        link=LinkSpec(
            ports=r.number("link.ports", integer=True),
            port_bandwidth=r.number("link.port_bandwidth_gbps", scale=GB),
            latency=r.number("link.latency_us", scale=1e-6, positive=False),
            efficiency=r.number("link.efficiency", at_most=1.0),
            peers=r.number("link.peers", integer=True) if r.has("link.peers") else 0,
        ),
        comm_kernel=CommKernelSpec(
            block=r.block("comm_kernel", sm),
            channels=r.number("comm_kernel.channels", integer=True),
            channel_bandwidth=r.number("comm_kernel.channel_bandwidth_gbps", scale=GB),
            launch=r.number("comm_kernel.launch_us", scale=1e-6, positive=False)
            if r.has("comm_kernel.launch_us") else None,
            protocols=_protocols(r),
            nvls_channels=r.number("comm_kernel.nvls.channels", integer=True) if r.has("comm_kernel.nvls") else 0,
            nvls_min_gpus=r.number("comm_kernel.nvls.min_gpus", integer=True) if r.has("comm_kernel.nvls") else 0,
            nvls_latency=r.number("comm_kernel.nvls.latency_us", scale=1e-6, positive=False)
            if r.has("comm_kernel.nvls.latency_us") else 0.0,
            issue=r.number("comm_kernel.issue_us", scale=1e-6, positive=False) if r.has("comm_kernel.issue_us") else 0.0,
            tuner=r.choice("comm_kernel.tuner", ("call", "rank")) if r.has("comm_kernel.tuner") else "call",
            p2p=_p2p(r),
            fully_connected=r.choice("comm_kernel.fully_connected", ("ring", "direct"))
            if r.has("comm_kernel.fully_connected") else "direct",
            ring_bus_bw=r.number("comm_kernel.nccl_ring.bus_bw_gbps", scale=GB) if r.has("comm_kernel.nccl_ring") else 0.0,
            ll_max_bw=r.number("comm_kernel.nccl_ring.ll_max_bw_gbps", scale=GB) if r.has("comm_kernel.nccl_ring") else 0.0,
        ),
        gemm=GemmModel(tiles=tuple(tiles), efficiency=efficiency,
                       k_overhead=r.number("gemm.k_overhead", positive=False),
                       max_split_k=r.number("gemm.max_split_k", integer=True, at_most=64) if r.has("gemm.max_split_k")
                       else 1,
                       one_block_share=r.number("gemm.one_block_share", at_most=1.0)
                       if r.has("gemm.one_block_share") else 1.0,
                       peer_rate=r.number("gemm.peer_gbps_per_block", scale=GB)
                       if r.has("gemm.peer_gbps_per_block") else math.inf,
                       roofline_exponent=_roofline_exponent(r),
                       persistent=r.has("gemm.kernel") and r.choice("gemm.kernel", KERNELS) == "persistent",
                       sustained=r.number("gemm.sustained", at_most=1.0) if r.has("gemm.sustained") else 1.0,
                       measured=_measured_gemms(r, peak_flops)),
        contention=Contention(
            compute_per_hbm_util=r.number("contention.compute_per_hbm_util", positive=False),
            comm_per_hbm_util=r.number("contention.comm_per_hbm_util", positive=False),
            compute_beside_comm_kernel=r.number("contention.compute_beside_comm_kernel", positive=False, at_most=10)
            if r.has("contention.compute_beside_comm_kernel") else 0.0,
        ),
        host=HostSpec(cores=r.number("host.cores", integer=True),
                      core_s_per_byte=r.number("host.transfer_core_ns_per_byte", scale=1e-9, positive=False),
                      start_skew=r.number("host.start_skew_us", scale=1e-6, positive=False)
                      if r.has("host.start_skew_us") else 0.0,
                      post_s=r.number("host.post_us", scale=1e-6, positive=False) if r.has("host.post_us") else 0.0,
                      post_s_per_byte=r.number("host.post_ns_per_byte", scale=1e-9, positive=False)
                      if r.has("host.post_ns_per_byte") else 0.0)
        if r.has("host") else None,
        sources=r.sources,
        path=where,
    )
    r.use("name", "description", "vendor", "host.machine")     # what the profile is (validate reads host.machine)
    r.check_unknown()
    return profile


def with_overrides(gpu: GpuProfile, **changes: Any) -> GpuProfile:
    """A copy of ``gpu`` with top-level fields replaced (handy in tests and what-ifs)."""
    return dataclasses.replace(gpu, **changes)
