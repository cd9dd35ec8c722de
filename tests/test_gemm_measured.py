"""GEMMs a profile's owner timed (``gemm.measured``): that shape costs exactly its measured
time in both engines, on fewer SMs and shaped alike; every other shape is the model's; bad
entries are refused in one line naming the field."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from ficco_sim import Scenario, simulate
from ficco_sim.errors import InputError
from ficco_sim.gemm_model import describe, gemm_time, gemm_times, measured_factor, plan_gemm, tile_costs
from ficco_sim.hardware import PROFILE_DIR, load_gpu

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _timed(gpu, table):
    """``gpu`` with ``table`` ({(m, n, k, dtype): seconds}) as its measured GEMMs."""
    return dataclasses.replace(gpu, gemm=dataclasses.replace(gpu.gemm, measured=dict(table)))


@pytest.mark.parametrize("name", ["h100", "a100", "mi300x", "a40"])
@pytest.mark.parametrize("ratio", [0.7, 1.0, 1.45])
def test_a_measured_shape_costs_its_time(name, ratio):
    """Persistent (H100), waves (A100, A40), AMD: the isolated time, launch included, is the
    measured one; a shape not in the table is untouched."""
    g = load_gpu(name)
    t = gemm_time(g, 4096, 8192, 2048)
    g2 = _timed(g, {(4096, 8192, 2048, "float16"): ratio * t})
    assert gemm_time(g2, 4096, 8192, 2048) == pytest.approx(ratio * t, rel=1e-9)
    assert gemm_time(g2, 4096, 8192, 4096) == gemm_time(g, 4096, 8192, 4096)
    assert gemm_time(g2, 4096, 8192, 2048, "bfloat16") == gemm_time(g, 4096, 8192, 2048, "bfloat16")
    # the vectorized cost (closed form, heuristics) says the same, per element
    out = gemm_times(g2, np.array([4096, 4096]), np.array([8192, 8192]), np.array([2048, 4096]))
    assert out[0] + g.launch_overhead == pytest.approx(ratio * t, rel=1e-9)
    assert out[1] == pytest.approx(gemm_times(g, 4096, 8192, 4096), rel=1e-12)


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_both_engines_time_a_measured_gemm_as_measured(engine):
    """``none`` of ag-gemm runs the whole GEMM after the collective: measured 30% slower, the
    schedule is exactly that much slower in the DES and the closed form; a schedule of pieces
    moves only by what its measured pieces move."""
    g = load_gpu("h100")
    sc = Scenario("ag-gemm", 8, 8192, 8192, 8192)
    t = gemm_time(g, 8192, 8192, 8192)
    g2 = _timed(g, {(8192, 8192, 8192, "float16"): 1.3 * t})
    base = simulate(sc, "none", g, "switch:8", engine=engine).makespan
    assert simulate(sc, "none", g2, "switch:8", engine=engine).makespan - base == pytest.approx(0.3 * t, rel=1e-6)
    pieces = simulate(sc, "shard-p2p-dma", g, "switch:8", engine=engine).makespan
    assert simulate(sc, "shard-p2p-dma", g2, "switch:8", engine=engine).makespan == pytest.approx(pieces, rel=1e-12)
    slow = _timed(g, {(1024, 8192, 8192, "float16"): 1.5 * gemm_time(g, 1024, 8192, 8192)})
    assert simulate(sc, "shard-p2p-dma", slow, "switch:8", engine=engine).makespan > 1.2 * pieces


def test_the_factor_holds_shaped_and_on_fewer_sms():
    """The measured kernel is the model's tile times a factor: shaped with extra shared memory
    or launched on fewer SMs, the block time carries the same factor."""
    g = load_gpu("a100")
    t = gemm_time(g, 8192, 4096, 4096)
    g2 = _timed(g, {(8192, 4096, 4096, "float16"): 1.25 * t})
    f = measured_factor(g2, 8192, 4096, 4096, "float16")
    for kw in ({"extra_smem": 16 << 10}, {"sms": 96}):
        plain, timed = plan_gemm(g, 8192, 4096, 4096, **kw), plan_gemm(g2, 8192, 4096, 4096, **kw)
        assert timed.tile == plain.tile and timed.grid == plain.grid
        assert timed.block_time == pytest.approx(f * plain.block_time, rel=1e-12)
    tile = plan_gemm(g, 8192, 4096, 4096).tile
    assert tile_costs(g2, tile, 8192, 4096, 4096, "float16", measured=False)[2] == \
        pytest.approx(tile_costs(g, tile, 8192, 4096, 4096, "float16")[2], rel=1e-12)


def test_a_time_below_the_hbm_bound_keeps_the_bound():
    """Faster than its own HBM traffic allows: the math cannot make up for it, so the time
    stays at the traffic's (never below it, never a crash)."""
    g = load_gpu("h100")
    shape = (64, 8192, 8192)            # a thin GEMM: its weights' traffic dominates
    t = gemm_time(g, *shape)
    g2 = _timed(g, {(*shape, "float16"): 0.05 * t})
    fast = gemm_time(g2, *shape)
    assert 0.05 * t < fast < t
    assert describe(g2, *shape)["source"] == "measured" and describe(g, *shape)["source"] == "model"


def test_sustained_scales_measured_times_too(tmp_path: Path):
    """``<gpu>:sustained`` is the profile's GEMMs in a steady stream: a measured (burst) time
    is divided by ``gemm.sustained`` like every modelled one."""
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_with("h200", [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16",
                                                   "time_us": _leaf(1000.0)}]), sort_keys=False))
    g, steady = load_gpu(path), load_gpu(f"{path}:sustained")
    assert gemm_time(g, 4096, 4096, 4096, "bfloat16") == pytest.approx(1e-3, rel=1e-9)
    assert gemm_time(steady, 4096, 4096, 4096, "bfloat16") == pytest.approx(1e-3 / g.gemm.sustained, rel=1e-9)


def _with(name: str, entries) -> dict:
    data = copy.deepcopy(yaml.load((PROFILE_DIR / f"{name}.yaml").read_text(), Loader=_LOADER))
    data["gemm"]["measured"] = entries
    return data


def _leaf(us):
    return {"value": us, "kind": "measured", "source": "a test"}


def test_profile_yaml_reads_measured_gemms(tmp_path: Path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_with("h100", [{"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16",
                                                 "time_us": _leaf(250.0)}]), sort_keys=False))
    g = load_gpu(path)
    assert g.gemm.measured == {(4096, 4096, 4096, "bfloat16"): pytest.approx(250e-6)}
    assert g.provenance("gemm.measured.0.time_us").kind == "measured"
    assert gemm_time(g, 4096, 4096, 4096, "bfloat16") == pytest.approx(250e-6, rel=1e-9)


@pytest.mark.parametrize("entries, field", [
    ({"m": 1}, "gemm.measured"),
    ([[4096, 4096, 4096]], "gemm.measured.0"),
    ([{"m": 0, "n": 8, "k": 8, "dtype": "float16", "time_us": _leaf(1.0)}], "gemm.measured.0.m"),
    ([{"m": 8, "n": 8.5, "k": 8, "dtype": "float16", "time_us": _leaf(1.0)}], "gemm.measured.0.n"),
    ([{"m": 8, "n": 8, "k": 8, "dtype": "int4", "time_us": _leaf(1.0)}], "gemm.measured.0.dtype"),
    ([{"m": 8, "n": 8, "k": 8, "dtype": "float16", "time_us": _leaf(-3.0)}], "gemm.measured.0.time_us"),
    ([{"m": 8, "n": 8, "k": 8, "dtype": "float16", "time_us": 3.0}], "gemm.measured.0.time_us"),
    ([{"m": 8, "n": 8, "k": 8, "dtype": "float16", "time_us": _leaf(3.0)},
      {"m": 8, "n": 8, "k": 8, "dtype": "float16", "time_us": _leaf(4.0)}], "gemm.measured.1"),
    # 8192^3 in 0.5 ms is 2.2 PFLOP/s: beyond the H100's fp16 peak (a unit or dtype slip)
    ([{"m": 8192, "n": 8192, "k": 8192, "dtype": "float16", "time_us": _leaf(500.0)}], "gemm.measured.0.time_us"),
])
def test_bad_measured_gemms_are_refused_in_one_line(tmp_path: Path, entries, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with("h100", entries), sort_keys=False))
    with pytest.raises(InputError) as info:
        load_gpu(path)
    assert info.value.field == field and str(path) in info.value.line() and "\n" not in info.value.line()


def test_the_formats_example_loads(tmp_path: Path):
    """The example `ficco-sim formats profile` prints is a profile section that loads as is."""
    from ficco_sim.hardware import MEASURED_HELP
    block = "\n".join(line for line in MEASURED_HELP.splitlines() if line.startswith("  "))
    entries = yaml.safe_load(block)["gemm"]["measured"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(_with("h100", entries), sort_keys=False))
    (m, n, k, dtype), t = next(iter(load_gpu(path).gemm.measured.items()))
    assert gemm_time(load_gpu(path), m, n, k, dtype) == pytest.approx(t, rel=1e-9)


def test_tfloat32_is_float32_on_tensor_cores():
    """``tfloat32``: float32 operands multiplied on tensor cores (PyTorch's allow_tf32): the
    profiles that have it time a GEMM at the TF32 peak (A100: near the ~130 TFLOP/s of NVIDIA's
    cuBLAS curve at 4096^3), a GPU without TF32 refuses it in one line, and a replay runs it as
    float32 with TF32 matmuls allowed (and sets that back off for any other dtype)."""
    import torch

    from ficco_sim.validate.reference import exec_dtype
    a100 = load_gpu("a100")
    t = gemm_time(a100, 4096, 4096, 4096, "tfloat32")
    assert 110e12 < 2 * 4096 ** 3 / t < 140e12
    assert gemm_time(a100, 4096, 4096, 4096, "float32") > 5 * t
    with pytest.raises(InputError):
        gemm_time(load_gpu("v100"), 4096, 4096, 4096, "tfloat32")
    from ficco_sim.schedules import lower
    graphs = {d: lower(Scenario("ag-gemm", 2, 1024, 512, 512, dtype=d), "none", a100, "switch:2")
              for d in ("tfloat32", "float16")}
    assert exec_dtype(graphs["tfloat32"], "cuda") == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    assert exec_dtype(graphs["float16"], "cuda") == torch.float16 and not torch.backends.cuda.matmul.allow_tf32
