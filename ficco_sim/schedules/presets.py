"""Presets: the overlap implementations people run, each a documented mapping onto the
schedule space with its knobs and their defaults.

A preset is written ``name`` or ``name:knob=value,knob=value`` anywhere a schedule name is
accepted (``simulate --schedule``, :func:`~ficco_sim.simulate`, :func:`lower`). It resolves,
for a scenario on a GPU and topology, to one schedule, or is refused with the reason it
does not apply there.

>>> from ficco_sim.workload import Scenario
>>> resolve(Scenario("gemm-rs", 8, 8192, 8192, 4096), "te-pipeline", "h100", "switch:8").name
'ficco-a2a-sm-g2-c16-m16'
>>> resolve(Scenario("gemm-rs", 8, 8192, 8192, 4096), "te-pipeline:num_splits=8,set_sm_margin=0",
...         "h100", "switch:8").name
'ficco-a2a-sm-c16'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from ..hardware import GpuProfile, load_gpu
from ..topology import Topology, load_topology
from ..workload import Scenario
from .schedule import Schedule, parse_schedule

TE_URL = "https://github.com/NVIDIA/TransformerEngine (transformer_engine/pytorch/module/base.py, initialize_ub)"


@dataclass(frozen=True)
class Knob:
    name: str
    default: int
    help: str


@dataclass(frozen=True)
class Preset:
    """One implementation: what it is, its knobs, the facts its mapping rests on, and the
    mapping (``build(scenario, gpu, knobs)`` -> schedule, or a reason it does not apply)."""

    name: str
    library: str
    summary: str
    knobs: tuple[Knob, ...]
    sources: tuple[str, ...]
    build: Callable[[Scenario, GpuProfile, dict], "Schedule | str"]


def _copy_engines(gpu: GpuProfile) -> str | None:
    if gpu.dma.engines < 1:
        return f"{gpu.name} has no copy engines (dma.engines = {gpu.dma.engines})"
    return None


def _dependent(sc: Scenario, what: str) -> str | None:
    if sc.spec.independent:
        return f"{what} overlaps a GEMM with the collective it consumes or produces; {sc.kind} is independent"
    return None


def _nccl(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if kn["ce"]:
        if sc.spec.collective not in ("all-gather", "all-to-all"):
            return f"NCCL's copy-engine collectives cover all-gather and all-to-all, not {sc.spec.collective}"
        # the library's zero-CTA path queues a rank's copies on dma.collective_engines (RCCL on MI300X: one)
        return _copy_engines(gpu) or Schedule("none", engine="dma", channels=gpu.dma.collective_engines or None)
    return Schedule("none", channels=kn["ctas"] or None)


def _async_tp(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if sc.kind not in ("ag-gemm", "gemm-rs"):
        return f"async-TP fuses all-gather -> matmul and matmul -> reduce-scatter; not {sc.kind}"
    return _copy_engines(gpu) or Schedule("shard", "p2p", engine="dma")


def _te_common(kn: dict) -> dict:
    return {"channels": kn["num_sm"], "margin": kn["num_sm"] if kn["set_sm_margin"] else 0}


# TransformerEngine's userbuffers overlap of each dependent kind (it has none for an MoE all-to-all)
TE_FOR = {"ag-gemm": "te-ring-exchange", "gemm-rs": "te-pipeline or te-ring-exchange",
          "a2a-gemm": "TransformerEngine has no all-to-all overlap"}


def _te_bulk(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if not sc.spec.independent:
        return (f"bulk overlaps a collective independent of the GEMM (dgrad all-gather beside wgrad); {sc.kind} "
                f"is dependent: {TE_FOR.get(sc.kind, 'te-pipeline or te-ring-exchange')}")
    return Schedule("par", engine="sm", **_te_common(kn))


def _te_pipeline(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if sc.spec.independent:
        return f"TransformerEngine pipelines GEMM -> reduce-scatter; {sc.kind} is independent: te-bulk"
    if sc.kind != "gemm-rs":
        instead = TE_FOR.get(sc.kind, "te-ring-exchange")
        return f"TransformerEngine pipelines GEMM -> reduce-scatter; {sc.kind}: {instead}"
    if kn["atomic_gemm"]:
        return Schedule("fused", engine="sm", **_te_common(kn))
    splits = kn["num_splits"]
    if splits < 1 or sc.gpus % splits:
        return f"num_splits={splits} must divide the {sc.gpus} GPUs (each split is a whole step group)"
    return Schedule("ficco", "a2a", engine="sm", group=sc.gpus // splits, **_te_common(kn))


def _te_ring(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if sc.kind not in ("ag-gemm", "gemm-rs"):
        return f"ring exchange overlaps all-gather / reduce-scatter GEMMs; not {sc.kind}"
    if kn["use_ce"]:
        return _copy_engines(gpu) or Schedule("shard", "p2p", engine="dma")
    return Schedule("shard", "p2p", engine="sm", **_te_common(kn))


def _flux(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    reason = _dependent(sc, "Flux")
    if reason:
        return reason
    if sc.kind == "ag-gemm":     # the GEMM spins on per-chunk flags while copy engines pull the chunks
        return _copy_engines(gpu) or Schedule("fused", engine="dma")
    if sc.kind != "gemm-rs":
        return f"{sc.kind}: Flux fuses all-gather -> GEMM and GEMM -> reduce-scatter"
    return Schedule("fused", engine="st")


def _conccl(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if not sc.spec.independent:
        return (f"ConCCL offloads a collective running beside an independent GEMM; {sc.kind} is dependent "
                "(async-tp or ficco-bespoke offload dependent pieces)")
    return _copy_engines(gpu) or Schedule("par", engine="dma")


def _ficco(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    reason = _dependent(sc, "FiCCO")
    if reason:
        return reason
    if kn["dma"]:
        return _copy_engines(gpu) or Schedule("ficco", "a2a", engine="dma")
    return Schedule("ficco", "a2a", engine="sm")


def _cui(sc: Scenario, gpu: GpuProfile, kn: dict) -> Schedule | str:
    if not sc.spec.independent:
        return (f"Cui & Pericàs shape a GEMM running beside an independent collective; {sc.kind} is dependent "
                f"(ficco-bespoke{', te-pipeline' if sc.kind == 'gemm-rs' else ''})")
    smem = kn["smem_kib"] * 1024
    if not smem:   # the least shaping after which a retiring GEMM block hands its SM to the collective
        from ..explore.space import handoff_shaping
        smem = handoff_shaping(sc, gpu)
        if smem is None and gpu.gemm.persistent_for(sc.dtype):
            return (f"{gpu.name}'s GEMM is a persistent kernel: its blocks pass each SM from tile to tile, so none "
                    "retiring frees one for the collective, shaped or not")
        if smem is None:
            return (f"no shaping of the GEMM's blocks on {gpu.name} frees an SM for a block of the collective as one "
                    "of them retires: there is no occupancy to shape")
        if smem == 0:
            return (f"the GEMM on {gpu.name} already leaves room for a block of the collective (an SM it does not "
                    "fill, or one block's as it retires): nothing to shape (par-sm-hi)")
    from ..explore.space import fits_every_tile
    return fits_every_tile(gpu, smem) or Schedule("par", engine="sm", priority="high", smem=smem)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("nccl", "NCCL / RCCL", "no overlap: the GEMM, then the library's collective on SM kernels",
           (Knob("ctas", 0, "channels (NCCL_MIN_CTAS = NCCL_MAX_CTAS); 0: the profile's own choice"),
            Knob("ce", 0, "1: copy-engine collective (NCCL_CTA_POLICY_ZERO, NCCL 2.28; all-gather, all-to-all), "
                 "a rank's copies queued on the profile's dma.collective_engines")),
           ("NCCL 2.28 release notes: CE collectives for AllGather/AlltoAll with NCCL_CTA_POLICY_ZERO, symmetric "
            "buffers, NVLink", "NCCL env docs: NCCL_MIN_CTAS / NCCL_MAX_CTAS bound the channel count",
            "Z-Y00/ROCM-sdma-rccl-test: RCCL's zero-CTA path on MI300X, one copy stream a rank (~47 GB/s)"), _nccl),
    Preset("async-tp", "PyTorch async-TP (torch.distributed._symmetric_memory)",
           "one matmul per rank shard; the shards move by copy engine (symmetric memory) in ring order",
           (), ("torch/distributed/_symmetric_memory/__init__.py: fused_all_gather_matmul and "
                "fused_matmul_reduce_scatter, one matmul per shard, peers' buffers copied with copy_ "
                "(cudaMemcpyAsync: copy engines); the reduce-scatter pushes each chunk and reduces once at the "
                "end, lowered here as the ring that chains the reduction (same pieces, same engines)",), _async_tp),
    Preset("te-bulk", "TransformerEngine userbuffers, method bulk",
           "a collective beside an independent GEMM on num_sm SMs, the GEMM kept off them",
           (Knob("num_sm", 16, "SMs (blocks) of the userbuffers communication kernel"),
            Knob("set_sm_margin", 1, "1: the GEMM runs on all SMs but num_sm")),
           (TE_URL + ": bulk defaults num_sm 16, cga_size 2, set_sm_margin on; used for qkv/fc1 dgrad and wgrad",),
           _te_bulk),
    Preset("te-pipeline", "TransformerEngine userbuffers, method pipeline",
           "the GEMM split into num_splits pieces along M, each followed by its reduce-scatter on num_sm SMs",
           (Knob("num_splits", 4, "GEMM pieces (must divide the GPUs)"),
            Knob("num_sm", 16, "SMs (blocks) of the communication kernel"),
            Knob("set_sm_margin", 1, "1: the GEMM runs on all SMs but num_sm"),
            Knob("atomic_gemm", 0, "1: one GEMM whose tile counters release each chunk's reduce-scatter")),
           (TE_URL + ": pipeline defaults num_splits 4, num_sm 16, cga_size 2, set_sm_margin on, atomic_gemm off; "
            "used for proj_fprop and fc2_fprop",), _te_pipeline),
    Preset("te-ring-exchange", "TransformerEngine userbuffers, method ring_exchange",
           "one GEMM per shard while the next shard moves around the ring (copy engines by default)",
           (Knob("use_ce", 1, "1: copy engines move the shards; 0: an SM kernel of num_sm blocks"),
            Knob("num_sm", 1, "SMs of the communication kernel when use_ce=0"),
            Knob("set_sm_margin", 0, "1: the GEMM runs on all SMs but num_sm")),
           (TE_URL + ": ring_exchange defaults num_sm 1, cga_size 1, set_sm_margin off, num_splits = tp size, "
            "use_ce on; used for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad",), _te_ring),
    Preset("flux", "Flux (bytedance/flux)",
           "one fused kernel: GEMM + reduce-scatter, each tile leaving for its owner from the GEMM's own blocks, "
           "or an all-gather GEMM whose tiles wait for copy engines to bring their rows",
           (), ("arXiv 2406.06858 and bytedance/flux: GEMM + reduce-scatter fused into the GEMM kernel, tiles "
                "written to their owner from the epilogue as posted stores (Ampere: the SM takes its next tile "
                "meanwhile; bytedance/flux#36, 8xA100), pulled by extra warps of the same kernel on "
                "Hopper with one stage of loads in flight per block (gemm.peer_gbps_per_block, fitted on "
                "bytedance/flux#100), then a separate reduction; measured on 8xH100 at 0.80-0.87x of "
                "GEMM then NCCL for M >= 2048 (bytedance/flux#90); its all-gather GEMM spins on a flag per "
                "chunk while copy engines pull the chunks (fused-dma)",), _flux),
    Preset("conccl", "ConCCL (DMA-offloaded collectives, arXiv 2412.14335)",
           "a collective on copy engines beside an independent GEMM", (),
           ("arXiv 2412.14335: DMA offload reaches ~72% of the ideal overlap gain on 8xMI300X, SM concurrency "
            "~21%, prioritised + partitioned ~42%",), _conccl),
    Preset("ficco-bespoke", "FiCCO (arXiv 2512.10236)",
           "finer-grain pieces: each peer's piece cut again, all peers' sub-piece j per step, offloaded to copy "
           "engines", (Knob("dma", 1, "1: copy engines move the pieces; 0: SM kernels"),),
           ("arXiv 2512.10236: finer-grain all-to-all-style pieces with DMA offload, up to 1.6x on 8xMI300X",),
           _ficco),
    Preset("cui-pericas", "Cui & Pericàs, resource-aware overlap (arXiv 2606.09200)",
           "a GEMM shaped with extra shared memory per block beside a high-priority collective",
           (Knob("smem_kib", 0, "extra shared memory per GEMM block (KiB); 0: the least after which one GEMM "
                 "block retiring frees its SM for a block of the collective; tune it with explore --space full"),),
           ("arXiv 2606.09200: shared-memory occupancy shaping plus a high-priority communication stream, up to "
            "25.5% lower time than naive concurrency",), _cui),
)}


def is_preset(text: str | Schedule) -> bool:
    return isinstance(text, str) and text.split(":", 1)[0].strip() in PRESETS


def parse_preset(text: str) -> tuple[Preset, dict]:
    """The preset and its knobs (defaults filled in) named by ``name[:knob=value,...]``."""
    name, _, rest = text.partition(":")
    preset = PRESETS.get(name.strip())
    if preset is None:
        raise InputError("--schedule", None, f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    knobs = {k.name: k.default for k in preset.knobs}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if key not in knobs:
            known = ", ".join(knobs) or "none"
            raise InputError("--schedule", f"{name}:{key}", f"unknown knob; {name}'s knobs: {known}")
        try:
            knobs[key] = int(value)
        except ValueError:
            raise InputError("--schedule", f"{name}:{key}", f"must be an integer, got {value!r}") from None
        if not eq or knobs[key] < 0:
            raise InputError("--schedule", f"{name}:{key}", f"give a value >= 0 as {key}=N")
    return preset, knobs


def resolve(scenario: Scenario, text: str | Schedule, gpu: GpuProfile | str, topology: Topology | str) -> Schedule:
    """The schedule ``text`` names for ``scenario`` here: a schedule name as it is, a preset
    through its mapping (an :class:`InputError` with the reason where it does not apply)."""
    if not is_preset(text):
        return parse_schedule(text)
    from .validity import invalid_reason
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    preset, knobs = parse_preset(str(text))
    out = preset.build(scenario, gpu, knobs)
    if isinstance(out, str):
        raise InputError("--schedule", preset.name, f"does not apply here: {out}")
    why = invalid_reason(scenario, out, gpu, topo)
    if why:     # named as the user wrote it, not as the schedule it maps to
        raise InputError("--schedule", str(text), f"does not apply here ({out.name}): {why}")
    return out


def applicable(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str) -> dict[str, Schedule | str]:
    """Every preset at its defaults: its schedule here, or why it does not apply."""
    from .validity import invalid_reason
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    out: dict[str, Schedule | str] = {}
    for name, p in PRESETS.items():
        got = p.build(scenario, gpu, {k.name: k.default for k in p.knobs})
        if isinstance(got, Schedule):
            got = invalid_reason(scenario, got, gpu, topo) or got
        out[name] = got
    return out
