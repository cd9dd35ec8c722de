"""Presets: named after the implementations, listed, simulated wherever they apply, refused
with a one-line reason elsewhere, and what ``recommend`` answers in."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ficco_sim import Scenario, simulate
from ficco_sim.errors import InputError
from ficco_sim.explore.heuristics import losses, preset_answers, preset_lines
from ficco_sim.hardware import available_profiles, load_gpu
from ficco_sim.schedules import lower
from ficco_sim.schedules.presets import PRESETS, applicable, parse_preset, resolve

WANTED = {"nccl", "async-tp", "te-bulk", "te-pipeline", "te-ring-exchange", "flux", "conccl", "ficco-bespoke",
          "cui-pericas"}
GPUS = [g for g in available_profiles() if g != "cpu"]
KINDS = ("ag-gemm", "gemm-rs", "a2a-gemm", "ag-par-gemm", "a2a-par-gemm", "ar-par-gemm")


def test_every_implementation_has_a_preset_with_sources_and_is_listed(capsys):
    from ficco_sim.cli import main
    assert WANTED <= set(PRESETS)
    assert all(p.sources for p in PRESETS.values())
    main(["list"])
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in PRESETS)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_preset_simulates_where_it_applies_and_says_why_not_elsewhere(gpu, kind):
    topo = "fc:8" if gpu.startswith("mi") else "switch:8"
    sc = Scenario(kind, 8, 4096, 2048, 2048)
    for name, got in applicable(sc, gpu, topo).items():
        if isinstance(got, str):
            assert got and "\n" not in got
            with pytest.raises(InputError):
                simulate(sc, name, gpu, topo, engine="analytical")
        else:
            r = simulate(sc, name, gpu, topo, engine="analytical")
            assert r.preset == name and r.schedule == got and r.makespan > 0


def test_knobs_change_the_mapping_and_bad_knobs_are_refused():
    sc = Scenario("gemm-rs", 8, 8192, 8192, 4096)
    assert resolve(sc, "te-pipeline", "h100", "switch:8").name == "ficco-a2a-sm-g2-c16-m16"
    assert resolve(sc, "te-pipeline:num_splits=2,num_sm=8", "h100", "switch:8").name == "ficco-a2a-sm-g4-c8-m8"
    assert resolve(sc, "te-pipeline:atomic_gemm=1", "h100", "switch:8").name == "fused-sm-c16-m16"
    assert resolve(sc, "flux", "h100", "switch:8").name == "fused-st"
    for bad, msg in (("te-pipeline:num_splits=3", "must divide"), ("te-pipeline:bogus=1", "unknown knob"),
                     ("te-pipeline:num_sm=x", "integer"), ("nccl:ce=1", "all-gather and all-to-all")):
        with pytest.raises(InputError, match=msg):
            lower(sc, bad, "h100", "switch:8")
    assert parse_preset("nccl")[1] == {"ctas": 0, "ce": 0}
    # a knob the mapped schedule cannot run is refused in the preset's own words, the mapping beside
    with pytest.raises(InputError, match=r"nccl:ctas=500: does not apply here \(none-c500\): 500 channels"):
        resolve(sc, "nccl:ctas=500", "h100", "switch:8")


def test_a_copy_engine_preset_is_refused_on_a_gpu_without_copy_engines():
    gpu = load_gpu("h100")
    none = dataclasses.replace(gpu, dma=dataclasses.replace(gpu.dma, engines=0))
    sc = Scenario("ag-gemm", 8, 4096, 2048, 2048)
    with pytest.raises(InputError, match="no copy engines"):
        resolve(sc, "async-tp", none, "switch:8")
    assert resolve(sc, "te-ring-exchange:use_ce=0", none, "switch:8").name == "shard-p2p-sm-c1"


def test_recommend_answers_in_presets_and_names_the_loss():
    sc = Scenario("gemm-rs", 8, 4096, 8192, 3584)
    answers = preset_answers(sc, load_gpu("h100"), __import__("ficco_sim.topology").topology.load_topology(
        "switch:8", "h100"))
    ran = [a for a in answers if "speedup" in a]
    assert [a["speedup"] for a in ran] == sorted((a["speedup"] for a in ran), reverse=True)
    lines = preset_lines(answers)
    assert lines[0].startswith(("use ", "overlap loses here"))
    assert any("does not apply" in line for line in lines)
    loser = min(ran, key=lambda a: a["speedup"])
    if loser["speedup"] < 1:
        name, sec = losses(loser["metrics"])[0]
        assert name in loser["losses"] and sec > 0


def test_explore_puts_the_presets_side_by_side_on_each_layer(tmp_path):
    from ficco_sim.explore.preset_table import preset_models, preset_rows, preset_wide
    from ficco_sim.explore.study import run_study
    dep = Scenario("gemm-rs", 8, 4096, 4096, 2048)
    ind = Scenario("ag-par-gemm", 8, 4096, 4096, 2048)
    for s in (dep, ind):
        s.meta.update(model="m", layer=s.kind, phase="fwd", tokens=4096)
    pts, _ = run_study([dep, ind], [("h100", "switch:8")], space="presets", progress=False)
    long = preset_rows(pts, [dep, ind])
    assert len(long) == 2 * len(PRESETS)                           # every preset on every layer
    des = pts[pts["engine"] == "des"].set_index(["scenario_id", "schedule"])["makespan"]
    for r in long.itertuples():
        if r.schedule:       # the DES ran every preset's schedule; the cell is its speedup over none
            assert r.engine == "des"
            assert r.speedup == pytest.approx(des[(r.scenario_id, "none")] / des[(r.scenario_id, r.schedule)])
        else:
            assert r.reason                                          # why it does not apply
    got = long.set_index(["scenario_id", "preset"])
    assert got.loc[(dep.key(), "flux"), "schedule"] == "fused-st"
    assert got.loc[(ind.key(), "flux"), "schedule"] == "" and got.loc[(dep.key(), "conccl"), "schedule"] == ""
    assert list(preset_wide(long).columns[3:]) == [p for p in PRESETS]
    tot = preset_models(long).set_index("preset")
    # a layer a preset does not apply to runs without overlap in the model's total
    t_none = long.groupby("scenario_id")["t_none"].first()
    flux = got.loc[(dep.key(), "flux"), "makespan"] + t_none[ind.key()]
    assert tot.loc["flux", "t_preset"] == pytest.approx(flux) and tot.loc["flux", "applies"] == 1
    assert tot.loc["nccl", "speedup"] == pytest.approx(1.0)


def test_explore_space_presets_writes_the_tables(tmp_path, capsys):
    from ficco_sim.cli import main
    sc = tmp_path / "s.yaml"
    sc.write_text("scenarios:\n  - {kind: gemm-rs, gpus: 8, m: 4096, n: 4096, k: 2048}\n")
    assert main(["explore", "--scenarios", str(sc), "--gpu", "h100", "--topology", "switch:8", "--space", "presets",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert "Presets side by side" in capsys.readouterr().out
    import pandas as pd
    got = pd.read_csv(tmp_path / "o" / "presets.csv")
    assert set(got["preset"]) == set(PRESETS) and got["speedup"].notna().any()


def test_flux_on_8_h100_is_slower_than_gemm_then_nccl_because_blocks_pull_tiles_slowly():
    """bytedance/flux#90: Flux's fused GEMM + reduce-scatter took 1.02-1.25x the time of cuBLAS
    then NCCL on 8 x H100. Its blocks move tiles at gemm.peer_gbps_per_block (fitted on
    flux#100, not #90); with the path's bandwidth alone the fused kernel would win."""
    sc = Scenario("gemm-rs", 8, 4096, 8192, 3584, "float16")
    gpu = load_gpu("h100")
    plain = simulate(sc, "nccl", gpu, "switch:8").makespan
    assert simulate(sc, "flux", gpu, "switch:8").makespan > plain
    fast = dataclasses.replace(gpu, gemm=dataclasses.replace(gpu.gemm, peer_rate=math.inf))
    assert simulate(sc, "flux", fast, "switch:8").makespan < plain


def test_fluxs_all_gather_gemm_waits_on_its_rows_instead_of_cutting_pieces():
    """bytedance/flux#90, all-gather -> GEMM on 8 x H100 (M = 1024, N = 7168 a GPU, K = 8192):
    Flux 0.250 ms against 0.247 for NCCL then cuBLAS. The preset is one GEMM whose tiles wait
    for copy engines to bring their rows (fused-dma); async-tp's eight 128-row GEMMs cost 1.7x."""
    sc = Scenario("ag-gemm", 8, 1024, 7168, 8192, "float16")
    assert resolve(sc, "flux", "h100", "switch:8").name == "fused-dma"
    t = {s: simulate(sc, s, "h100", "switch:8").makespan for s in ("nccl", "flux", "async-tp")}
    assert t["flux"] == pytest.approx(0.250e-3, rel=0.2) and t["async-tp"] > 1.5 * t["flux"]
    nodma = dataclasses.replace(load_gpu("h100"), dma=dataclasses.replace(load_gpu("h100").dma, engines=0))
    with pytest.raises(InputError, match="no copy engines"):
        resolve(sc, "flux", nodma, "switch:8")
    # a host device's ranks post copies from the thread their GEMM holds: it would never end
    with pytest.raises(InputError, match="host device"):
        simulate(Scenario("ag-gemm", 4, 256, 256, 256, "float32"), "fused-dma", "cpu", "switch:4")


def test_cui_pericas_shapes_just_enough_for_a_retiring_gemm_block_to_hand_its_sm_to_the_collective():
    """The bug: at smem_kib=0 the preset took the least shaping that drops one GEMM block per SM
    (and the size a FiCCO piece would need, though a GEMM beside a collective is never cut): on
    8 x MI250X that is 1 KiB (4 -> 3 blocks per CU), after which a retiring block still frees too
    little LDS for a collective block, so the DES ran it as plain priority; the preset now takes
    the least shaping after which a retiring block hands over its SM (6 KiB there, 2 KiB on A100),
    and says so where there is nothing to shape: a persistent GEMM (H100) passes its SMs from tile
    to tile, and on MI250X a 4096^3 GEMM's one block per CU frees the CU as it retires."""
    sc = Scenario("ar-par-gemm", 8, 2048, 2048, 2048, "bfloat16")
    got = resolve(sc, "cui-pericas", "mi250x", "fc:8")
    assert got.name == "par-sm-hi-smem6k"
    t = {s: simulate(sc, s, "mi250x", "fc:8").makespan for s in (got.name, "par-sm-hi", "par-sm-hi-smem1k")}
    assert t[got.name] < 0.95 * t["par-sm-hi"] and t["par-sm-hi-smem1k"] == pytest.approx(t["par-sm-hi"], rel=1e-3)
    assert resolve(sc, "cui-pericas", "a100", "switch:8").name == "par-sm-hi-smem2k"
    assert "persistent" in applicable(sc, "h100", "switch:8")["cui-pericas"]
    big = Scenario("ar-par-gemm", 8, 4096, 4096, 4096, "bfloat16")
    assert "nothing to shape" in applicable(big, "mi250x", "fc:8")["cui-pericas"]


def test_a_collective_block_only_a_shaping_too_large_for_every_tile_lets_in_is_refused_with_the_tile():
    """A calibrated GPU whose collective block takes 48 KiB of LDS: on MI250X-like CUs a 16 KiB GEMM
    block (4 per CU) hands off only at one block per CU, 17 KiB extra, which the profile's 256x128
    tile cannot hold: the preset says so rather than picking a size that lets nothing in."""
    g = load_gpu("mi250x")
    big = dataclasses.replace(g, comm_kernel=dataclasses.replace(
        g.comm_kernel, block=dataclasses.replace(g.comm_kernel.block, smem=48 * 1024)))
    sc = Scenario("ar-par-gemm", 8, 2048, 2048, 2048, "bfloat16")
    from ficco_sim.explore.space import handoff_shaping
    assert handoff_shaping(sc, big) == 17 * 1024
    assert "17 KiB extra leaves no room for the 256x128 GEMM block" in applicable(sc, big, "fc:8")["cui-pericas"]


def test_the_librarys_copy_engine_collectives_queue_on_the_profiles_collective_engines(tmp_path):
    """nccl:ce=1 is NCCL / RCCL's zero-CTA path: RCCL on MI300X queues a rank's copies on one
    engine (dma.collective_engines: 1), so its all-gather takes seven shards' time; a profile
    without the entry spreads them over every engine."""
    sc = Scenario("ag-gemm", 8, 8192, 4096, 4096, "bfloat16")
    assert resolve(sc, "nccl:ce=1", load_gpu("mi300x"), "fc:8").name == "none-dma-c1"
    assert resolve(sc, "nccl:ce=1", load_gpu("h100"), "switch:8").name == "none-dma"
    one = simulate(sc, "nccl:ce=1", "mi300x", "fc:8").metrics
    every = simulate(sc, "none-dma", "mi300x", "fc:8").metrics
    shard = 1024 * 4096 * 2
    comm_one = float(one["makespan"] - one["t_comp_iso"])
    assert comm_one == pytest.approx(7 * shard / load_gpu("mi300x").dma.bandwidth, rel=0.1)
    assert comm_one > 4 * float(every["makespan"] - every["t_comp_iso"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: mi300x\nname: bad\ndma:\n  collective_engines: {value: 9, kind: assumption, source: s}\n")
    with pytest.raises(InputError, match="collective_engines.*at most 8"):
        load_gpu(str(bad))
