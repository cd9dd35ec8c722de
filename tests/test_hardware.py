"""Hardware profiles: every built-in profile loads, is internally consistent and says where each
number came from; bad input raises InputError naming the file and the field."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from ficco_sim.errors import InputError
from ficco_sim.gemm_model import blocks_per_sm
from ficco_sim.hardware import KINDS, PROFILE_DIR, BlockShape, available_profiles, load_gpu

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # the C parser keeps the suite fast


def _parse(name: str):
    return yaml.load((PROFILE_DIR / f"{name}.yaml").read_text(), Loader=_LOADER)


def _short_sources(node):
    """The template with every source shortened: small files keep the error cases fast."""
    if isinstance(node, dict):
        return {k: ("s" if k == "source" else _short_sources(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_short_sources(v) for v in node]
    return node


PROFILES = available_profiles()
# GPU profiles (the cpu.yaml stand-in for validation runs is not a GPU).
GPUS = [n for n in PROFILES if _parse(n).get("vendor") != "cpu"]
H100 = _short_sources(_parse("h100"))


def _leaves(node, prefix=""):
    """Every ``{value, kind, source}`` leaf of a parsed profile, as (dotted path, leaf)."""
    if isinstance(node, dict):
        if "value" in node:
            yield prefix, node
            return
        for key, child in node.items():
            yield from _leaves(child, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _leaves(child, f"{prefix}.{i}")


def _write(tmp_path: Path, data, name="bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _load_error(tmp_path: Path, data) -> tuple[InputError, Path]:
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as info:
        load_gpu(path)
    return info.value, path


# ---------------------------------------------------------------------------------------------
# Built-in profiles

def test_builtin_profiles_are_present():
    assert {"a40", "a100", "h100", "h200", "mi250x", "mi300x"} <= set(PROFILES)


@pytest.mark.parametrize("name", GPUS)
def test_gpu_profile_loads_in_si_units(name):
    gpu = load_gpu(name)
    assert gpu.name == name
    assert gpu.num_sms > 0 and gpu.sm.warp_size in (32, 64)
    assert 1e8 < gpu.clock_hz < 5e9
    assert 1e11 < gpu.hbm_bandwidth < 1e13            # B/s: 0.1 .. 10 TB/s
    assert 0 < gpu.hbm_efficiency <= 1 and 0 < gpu.link.efficiency <= 1
    assert 0 <= gpu.launch_overhead < 1e-4            # seconds
    assert 1e9 < gpu.link.port_bandwidth < 1e12
    assert gpu.sm.max_smem_per_block <= gpu.sm.smem
    for dtype in gpu.peak_flops:
        assert dtype in gpu.gemm.efficiency, f"{name}: no gemm.efficiency for {dtype}"


def _resident(sm, block) -> int:
    """Blocks of one kind an empty SM holds (independent of gemm_model; zero smem is allowed)."""
    limits = [sm.max_blocks, sm.max_threads // block.threads, sm.registers // (block.threads * block.registers)]
    if block.smem + sm.reserved_smem_per_block:
        limits.append(sm.smem // (block.smem + sm.reserved_smem_per_block))
    return min(limits)


@pytest.mark.parametrize("name", PROFILES)
def test_blocks_fit_an_empty_sm(name):
    gpu = load_gpu(name)
    blocks = [(f"{t.m}x{t.n} tile", t.block) for t in gpu.gemm.tiles] + [("comm kernel", gpu.comm_kernel.block)]
    for what, block in blocks:
        assert _resident(gpu.sm, block) >= 1, f"{name}: {what} never fits an SM"
        assert block.threads % gpu.sm.warp_size == 0, f"{name}: {what} is not whole warps"


@pytest.mark.parametrize("name", GPUS)
def test_gemm_model_agrees_on_residency(name):
    gpu = load_gpu(name)
    for block in [t.block for t in gpu.gemm.tiles] + [gpu.comm_kernel.block]:
        assert blocks_per_sm(gpu.sm, block) == _resident(gpu.sm, block)


def test_blocks_per_sm_with_no_shared_memory():
    gpu = load_gpu("h100")
    sm = dataclasses.replace(gpu.sm, reserved_smem_per_block=0)
    assert blocks_per_sm(sm, BlockShape(threads=256, registers=32, smem=0)) == 8


@pytest.mark.parametrize("name", GPUS)
def test_tensor_peak_matches_clock_and_sm_count(name):
    """Datasheet peaks are SMs x clock x a power-of-two FLOP/clk/SM (1024 on GA102/CDNA2, 2048 on
    GA100/CDNA3, 4096 on GH100, 8192 on Blackwell): catches a unit slip or a sparse figure taken
    for a dense one."""
    gpu = load_gpu(name)
    per_clk = gpu.peak_flops["float16"] / (gpu.num_sms * gpu.clock_hz)
    nearest = 2 ** round(math.log2(per_clk))
    assert nearest in (1024, 2048, 4096, 8192)
    assert per_clk == pytest.approx(nearest, rel=0.01)


@pytest.mark.parametrize("name", PROFILES)
def test_every_number_has_provenance(name):
    data = _parse(name)
    gpu = load_gpu(name)
    leaves = dict(_leaves(data))
    assert leaves, name
    for path, leaf in leaves.items():
        assert leaf.get("kind") in KINDS, f"{name}: {path}"
        assert isinstance(leaf.get("source"), str) and leaf["source"].strip(), f"{name}: {path}"
    # The loader read every number (none is silently ignored) and recorded each one's provenance.
    recorded = set(gpu.sources)
    missing = {p for p in leaves if p not in recorded}
    assert not missing, f"{name}: numbers the loader did not read: {sorted(missing)}"
    assert gpu.provenance("num_sms").kind in KINDS


def test_provenance_lookup():
    gpu = load_gpu("mi300x")
    assert gpu.provenance("link.efficiency").kind == "measured"
    assert gpu.provenance("sm.max_blocks").kind == "assumption"
    assert "LLVM" in gpu.provenance("sm.max_blocks").source


def test_link_aggregates():
    assert load_gpu("mi300x").link.aggregate == pytest.approx(7 * 48e9)
    assert load_gpu("a40").link.port_bandwidth * load_gpu("a40").link.ports == pytest.approx(56.25e9)
    assert load_gpu("a40").link.aggregate <= 56.25e9
    assert load_gpu("h200").link.aggregate == pytest.approx(load_gpu("h100").link.aggregate)


def test_flops_per_sm_unknown_dtype():
    gpu = load_gpu("a100")
    assert gpu.flops_per_sm("float16") == pytest.approx(312e12 / 108)
    with pytest.raises(InputError) as info:
        gpu.flops_per_sm("float8")
    assert info.value.field == "peak_tflops"


def test_load_by_path_and_passthrough():
    gpu = load_gpu(PROFILE_DIR / "a40.yaml")
    assert gpu.name == "a40"
    assert load_gpu(gpu) is gpu
    assert load_gpu("A40").num_sms == 84   # built-in names are case-insensitive


# ---------------------------------------------------------------------------------------------
# Bad input: InputError with the file and the field

def test_unknown_gpu_name():
    with pytest.raises(InputError) as info:
        load_gpu("z9000")
    assert info.value.where == "--gpu"
    assert "z9000" in info.value.message and "h100" in info.value.message


def test_missing_profile_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as info:
        load_gpu(path)
    assert info.value.where == str(path)


def test_malformed_yaml(tmp_path):
    err, path = _load_error(tmp_path, "name: x\nsm: {max_blocks: [1, 2\n")
    assert err.where == str(path)
    assert "malformed YAML" in err.message and "line" in err.message


@pytest.mark.parametrize("data", [[1, 2, 3], "just a string", ""], ids=["list", "scalar", "empty"])
def test_profile_must_be_a_mapping(tmp_path, data):
    err, path = _load_error(tmp_path, data if isinstance(data, str) and data else yaml.safe_dump(data))
    assert err.where == str(path)
    assert "mapping" in err.message


def _mutated(edit):
    data = copy.deepcopy(H100)
    edit(data)
    return data


# (edit, expected field, words expected in the message)
BAD_PROFILES = {
    "missing_field": (lambda d: d["sm"].pop("max_blocks"), "sm.max_blocks", "missing"),
    "missing_section": (lambda d: d.pop("dma"), "dma.engines", "missing"),
    "missing_name": (lambda d: d.pop("name"), "name", "non-empty"),
    "negative_value": (lambda d: d["sm"]["smem_kib"].update(value=-1), "sm.smem_kib", "positive"),
    "negative_overhead": (lambda d: d["dma"]["command_overhead_us"].update(value=-2.0),
                          "dma.command_overhead_us", "negative"),
    "zero_sms": (lambda d: d["num_sms"].update(value=0), "num_sms", "positive"),
    "non_integer": (lambda d: d["num_sms"].update(value=132.5), "num_sms", "integer"),
    "not_a_number": (lambda d: d["hbm"]["bandwidth_gbps"].update(value="fast"), "hbm.bandwidth_gbps", "number"),
    "bool_is_not_a_number": (lambda d: d["dma"]["engines"].update(value=True), "dma.engines", "number"),
    "efficiency_above_one": (lambda d: d["link"]["efficiency"].update(value=1.2), "link.efficiency", "at most"),
    "missing_source": (lambda d: d["num_sms"].pop("source"), "num_sms.source", "source"),
    "blank_source": (lambda d: d["clock_mhz"].update(source="  "), "clock_mhz.source", "source"),
    "numeric_source": (lambda d: d["clock_mhz"].update(source=1830), "clock_mhz.source", "source"),
    "unknown_kind": (lambda d: d["num_sms"].update(kind="guess"), "num_sms.kind", "must be one of"),
    "bare_number": (lambda d: d.update(num_sms=132), "num_sms", "value, kind and source"),
    "unknown_dtype": (lambda d: d["peak_tflops"].update(int4={"value": 1, "kind": "datasheet", "source": "x"}),
                      "peak_tflops.int4", "unknown dtype"),
    "empty_peaks": (lambda d: d.update(peak_tflops={}), "peak_tflops", "dtypes"),
    "empty_tiles": (lambda d: d["gemm"].update(tiles=[]), "gemm.tiles", "non-empty"),
    "tile_too_many_threads": (lambda d: d["gemm"]["tiles"][0]["threads"].update(value=4096),
                              "gemm.tiles.0.threads", "exceeds"),
    "tile_too_much_smem": (lambda d: d["gemm"]["tiles"][1]["smem_kib"].update(value=300),
                           "gemm.tiles.1.smem_kib", "per-block limit"),
    "tile_too_many_registers": (lambda d: d["gemm"]["tiles"][2]["registers"].update(value=1024),
                                "gemm.tiles.2.registers", "register file"),
    "comm_block_too_big": (lambda d: d["comm_kernel"]["smem_kib"].update(value=228),
                           "comm_kernel.smem_kib", "per-block limit"),
    "block_limit_above_sm": (lambda d: d["sm"]["max_smem_per_block_kib"].update(value=300),
                             "sm.max_smem_per_block_kib", "exceeds"),
    "p2p_no_chunk": (lambda d: d["comm_kernel"]["p2p"]["chunk_kib"].update(value=0),
                     "comm_kernel.p2p.chunk_kib", "positive"),
    "p2p_per_peer_above_channels": (lambda d: d["comm_kernel"]["p2p"]["per_peer"].update(value=64),
                                    "comm_kernel.p2p.per_peer", "exceeds"),
    "p2p_missing_field": (lambda d: d["comm_kernel"]["p2p"].pop("ll_kib_per_channel"),
                          "comm_kernel.p2p.ll_kib_per_channel", "missing"),
    "unknown_fully_connected_algorithm": (lambda d: d["comm_kernel"]["fully_connected"].update(value="tree"),
                                          "comm_kernel.fully_connected", "must be one of"),
    "unknown_gemm_kernel": (lambda d: d["gemm"]["kernel"].update(value="stream-k"), "gemm.kernel", "must be one of"),
    "unknown_dispatch": (lambda d: d["dispatch"].update(value="greedy"), "dispatch", "must be one of"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile_names_file_and_field(tmp_path, case):
    edit, field, words = BAD_PROFILES[case]
    err, path = _load_error(tmp_path, _mutated(edit))
    assert err.where == str(path)
    assert err.field == field
    assert words in err.message
    assert str(path) in str(err) and field in str(err)   # the one-line form the CLI prints


def test_valid_copy_of_template_loads(tmp_path):
    """The mutation cases above start from a profile that is itself valid."""
    gpu = load_gpu(_write(tmp_path, _mutated(lambda d: None), "ok.yaml"))
    assert gpu.num_sms == 132
