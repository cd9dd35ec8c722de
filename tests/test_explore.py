"""explore: schedule space, scenario library, fast estimator, resumable parallel sweeps, CLI."""

import json

import pytest

from ficco_sim import InputError, Scenario, load_gpu, simulate_many
from ficco_sim.explore.cli import main
from ficco_sim.explore import estimate
from ficco_sim.explore.estimate import estimate_many
from ficco_sim.explore.library import builtin_library, load_scenarios
from ficco_sim.explore.space import enumerate_space, valid_schedules
from ficco_sim.explore.sweep import POINTS_FILE, Job, read_points, run_sweep
from ficco_sim.topology import load_topology

SMALL = Scenario("ag-gemm", 4, 4096, 2048, 2048, name="small")


def test_space_lists_invalid_points_with_reasons():
    pts = enumerate_space(SMALL, "h100", "switch:4")
    bad = [p for p in pts if not p.valid]
    assert bad and all(p.reason for p in bad)
    names = [p.schedule.name for p in pts]
    assert len(names) == len(set(names))
    assert any("dma" in n and "hi" in n for n in [p.schedule.name for p in bad])   # copy engines ignore priority
    ok = valid_schedules(SMALL, "h100", "switch:4")
    assert {"none", "ficco-a2a-dma", "shard-p2p-sm-hi", "ficco-a2a-sm-g4"} <= {s.name for s in ok}


def test_k_layout_only_allows_k_decomposition():
    wgrad = Scenario("ag-gemm", 4, 4096, 1024, 2048, shard_dim="K")
    ok = {s.name for s in valid_schedules(wgrad, "h100", "switch:4")}
    assert "ficco-a2a-dma-dimK" in ok and "ficco-a2a-dma" not in ok
    r = {x.schedule.name: x for x in simulate_many(wgrad, ["none", "shard-p2p-dma-dimK"], "h100", "switch:4",
                                                  engine="analytical")}
    accum = [k for k in r["shard-p2p-dma-dimK"].graph.kernels if k.kind == "gemm" and k.gpu == 0 and k.gemm.accumulate]
    assert len(accum) == 3 and all(k.gemm.k == 512 for k in accum)


def test_library_and_yaml(tmp_path):
    lib = builtin_library()
    assert {s.meta["model"] for s in lib} >= {"llama3-405b", "llama3-70b", "mixtral-8x7b", "mixtral-8x22b",
                                              "gpt3-175b"}
    assert {s.gpus for s in lib} == {4, 8, 16}
    ep = [s for s in lib if s.kind == "a2a-gemm"]
    assert ep and all(len(set(r)) > 1 for s in ep for r in s.routing)   # uneven per peer
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {kind: a2a-gemm, gpus: 4, m: 4096, n: 1024, k: 1024, skew: 1.0}\n"
                 "models:\n  - {name: tiny, hidden: 1024, ffn: 4096, heads: 8, kv_heads: 8, tokens: [2048], gpus: [4]}\n")
    got = load_scenarios(f)
    assert len(got) > 3 and got[0].routing is not None
    f.write_text("scenarios:\n  - {kind: ag-gemm, gpus: 4, m: -1, n: 1, k: 1}\n")
    with pytest.raises(InputError) as e:
        load_scenarios(f)
    assert e.value.where == str(f) and e.value.field == "scenarios[0].m"
    f.write_text("scenarios: []\nmodels: []\n")
    with pytest.raises(InputError, match="empty: nothing to run"):
        load_scenarios(f)
    # a model entry names its own fields: a typo or an option it does not take is refused, not ignored
    for entry, field in (("hiden: 8192", "models[0].hiden"), ("hidden: 8192, dtype: float8", "models[0].dtype"),
                         ("hidden: 8192, experts: 8, top_k: 9", "models[0].top_k")):
        f.write_text(f"models:\n  - {{name: mine, {entry}, ffn: 28672, heads: 64, kv_heads: 8, tokens: [4096], "
                     "gpus: [8]}\n")
        with pytest.raises(InputError) as e:
            load_scenarios(f)
        assert e.value.field == field


@pytest.mark.parametrize("sc,topo", [(SMALL, "fc:4"), (Scenario("gemm-rs", 4, 4096, 2048, 2048), "switch:4"),
                                     (Scenario("a2a-gemm", 4, 4096, 2048, 2048), "fc:4"),
                                     (Scenario("ag-gemm", 4, 4096, 2048, 2048), "ring:4"),   # multi-hop routes:
                                     (Scenario("gemm-rs", 6, 6144, 2048, 2048), "ring:6")])  # no symmetry classes
def test_sweep_rows_equal_single_simulations(sc, topo):
    """Every metric of a sweep row equals the single-point closed-form simulation's, to 1e-9
    (sweeps merge templates and evaluate one task per symmetry class: :mod:`ficco_sim.engine.symmetry`)."""
    scheds = valid_schedules(sc, "h100", topo)
    sweep = estimate_many([sc, Scenario(sc.kind, sc.gpus, sc.m * 2, sc.n, sc.k)], scheds, "h100", topo)
    single = simulate_many(sc, scheds, "h100", topo, engine="analytical", whole_graph=True)
    for f, a in zip(sweep, single):
        for k, v in a.metrics.items():
            assert f[k] == pytest.approx(v, rel=1e-9, abs=1e-12, nan_ok=True), (a.schedule.name, k)


def test_sweep_rows_equal_single_simulations_where_rows_split_unevenly_over_rings():
    """NCCL's six rings on 4 fully connected H100s split a rank's rows in whole rows: 512 rows
    split 86/86/85/85/85/85, 576 rows 96 each, so a template compiled at one size does not
    rescale to the other (it did: 0.2% off); each size gets its own, and every row equals its
    own whole-graph simulation."""
    scs = [Scenario("ag-gemm", 4, 2048, 1024, 1024), Scenario("ag-gemm", 4, 2304, 1024, 1024)]
    scheds = ["none", "ficco-a2a-sm"]
    sweep = estimate_many(scs, scheds, "h100", "fc:4")
    for i, sc in enumerate(scs):
        for j, a in enumerate(simulate_many(sc, scheds, "h100", "fc:4", engine="analytical", whole_graph=True)):
            assert sweep[i * len(scheds) + j]["makespan"] == pytest.approx(a.makespan, rel=1e-9), (sc.m, a.schedule.name)


def _jobs(engine="analytical"):
    return [Job("h100", "switch:4", (s,), ("none", "shard-p2p-dma", "ficco-a2a-sm"), engine)
            for s in (SMALL, Scenario("gemm-rs", 4, 2048, 2048, 1024, name="rs"))]


def _strip(rows):
    return [{k: v for k, v in r.items()} for r in rows]


def test_sweep_parallel_identical_and_resumable(tmp_path):
    serial = run_sweep(_jobs(), progress=False)
    par = run_sweep(_jobs(), workers=2, progress=False)
    assert _strip(serial) == _strip(par)
    out = tmp_path / "o"
    first = run_sweep(_jobs()[:1], out=out, progress=False)
    log = out / POINTS_FILE
    with open(log, "a") as f:
        f.write('{"scenario": "small", "torn')          # a crash mid-write
    again = run_sweep(_jobs(), out=out, progress=False)
    rows = read_points(log)
    keys = [(r["scenario"], r["schedule"]) for r in rows]
    assert len(keys) == len(set(keys)) == 6
    assert [json.dumps(r, sort_keys=True) for r in again[:3]] == [json.dumps(r, sort_keys=True) for r in first]


def test_sweep_on_ray():
    ray = pytest.importorskip("ray")
    rows = run_sweep(_jobs()[:1], ray=True, progress=False)
    assert [r["schedule"] for r in rows] == ["none", "shard-p2p-dma", "ficco-a2a-sm"]
    ray.shutdown()


def test_ray_missing_is_an_input_error(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(InputError, match=r"ficco-sim\[ray\]"):
        run_sweep(_jobs()[:1], ray=True, progress=False)


def test_cli_explore_and_recommend(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: a, kind: ag-gemm, gpus: 4, m: 4096, n: 2048, k: 2048}\n")
    assert main(["explore", "--scenarios", str(f), "--topology", "fc:4", "--engine", "analytical", "--out",
                 str(tmp_path / "o"), "--quiet", "--show-invalid"]) == 0
    out = capsys.readouterr().out
    assert "Best schedule" in out and (tmp_path / "o" / "summary.csv").exists()
    assert main(["recommend", "--gpu", "mi300x", "--topology", "fc:8", "--scenario", "ag-gemm", "--m", "16384",
                 "--n", "8192", "--k", "8192"]) == 0
    text = capsys.readouterr().out
    assert "ms" in text
    pick = text.split()[0]
    # the same answer as rows pandas loads: the candidates it chose among (one picked) and the presets
    import pandas as pd
    argv = ["recommend", "--gpu", "mi300x", "--topology", "fc:8", "--scenario", "ag-gemm", "--m", "16384",
            "--n", "8192", "--k", "8192"]
    assert main(argv + ["--format", "csv", "-o", str(tmp_path / "r.csv")]) == 0
    rows = pd.read_csv(tmp_path / "r.csv")
    picked = rows[rows["picked"] & (rows["kind"] == "candidate")]
    assert list(picked["name"]) == [pick] and picked["reason"].str.contains("over no overlap").all()
    assert (rows.loc[rows["picked"] & (rows["kind"] == "preset"), "schedule"] == pick).all()
    assert {"candidate", "preset"} == set(rows["kind"]) and "nccl" in set(rows.loc[rows["kind"] == "preset", "name"])
    none = rows[(rows["kind"] == "candidate") & (rows["name"] == "none")]
    assert float(none["speedup"].iloc[0]) == 1.0 and (rows["makespan"].dropna() > 0).all()
    assert main(argv + ["--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["picked"] in (True, False)
    assert main(argv + ["-o", str(tmp_path / "r.txt")]) == 0 and (tmp_path / "r.txt").read_text().startswith(pick)
    # a popular expert, as simulate states it: the printed discrete-event command says so too
    assert main(["recommend", "--scenario", "a2a-gemm", "--m", "16384", "--n", "4096", "--k", "4096", "--skew", "3",
                 "--hot-expert"]) == 0
    out = capsys.readouterr().out
    assert "x8 routing" in out.splitlines()[0] and "--skew 3 --hot-expert" in out
    assert main(["explore", "--scenarios", str(tmp_path / "nope.yaml")]) == 2


def test_templates_cached_by_earlier_sweeps_rescale_exactly():
    """A template compiled for one size in an earlier call must give every later size exactly
    (the bug: merged templates from different reference sizes rescaled from the wrong one)."""
    first, later = Scenario("ag-gemm", 8, 16384, 1024, 8192), Scenario("ag-gemm", 8, 65536, 4096, 4096)
    estimate_many([first], ["none", "ficco-a2a-sm"], "h100", "switch:8")
    rows = estimate_many([later], ["ficco-a2a-sm", "ficco-a2a-dma"], "h100", "switch:8")
    for r in rows:
        one = simulate_many(later, [r["schedule"]], "h100", "switch:8", engine="analytical", whole_graph=True)[0]
        assert r["makespan"] == pytest.approx(one.makespan, rel=1e-9)
        assert r["dil_compute"] == pytest.approx(one.metrics["dil_compute"], rel=1e-9)


def test_study_reports_per_model_totals_and_says_its_space():
    """The summary says which space and engine produced it; models.csv sums a model's pairs
    (no overlap vs each pair's best) so nobody has to add up points.csv by hand."""
    from ficco_sim.explore.library import MODELS, model_layers
    from ficco_sim.explore.study import model_totals, run_study
    scs = model_layers(MODELS["llama3-70b"], 4096, 4)[:3]
    _, summ = run_study(scs, [("h100", "switch:4")], engine="analytical", space="basic", progress=False)
    assert set(summ["space"]) == {"basic"} and set(summ["engine"]) == {"analytical"}
    assert set(summ["model"]) == {"llama3-70b"}
    tot = model_totals(summ)
    assert len(tot) == 1 and tot.loc[0, "pairs"] == 3
    assert tot.loc[0, "t_none"] == pytest.approx(summ["t_none"].sum())
    assert tot.loc[0, "t_best"] == pytest.approx(summ["makespan"].sum())
    assert tot.loc[0, "speedup"] >= 1.0


def test_a_calibrated_copy_of_a_builtin_profile_is_kept_apart(tmp_path):
    """A calibrated profile keeps its ``name`` (a100); explored beside the built-in one, each
    keeps its rows, named by the --gpu it came from (the summary had dropped one of the two)."""
    from ficco_sim.explore.study import run_study
    from ficco_sim.hardware import PROFILE_DIR
    mine = tmp_path / "a100-mine.yaml"
    mine.write_text((PROFILE_DIR / "a100.yaml").read_text().replace("launch_overhead_us: {value: ",
                                                                     "launch_overhead_us: {value: 1", 1))
    assert load_gpu(mine).name == "a100" and load_gpu(mine).launch_overhead != load_gpu("a100").launch_overhead
    pts, summ = run_study([SMALL], [(str(mine), "switch:4"), ("a100", "switch:4")], engine="analytical",
                          space="basic", progress=False)
    assert set(summ["gpu"]) == {str(mine), "a100"} and len(summ) == 2
    assert set(pts["gpu"]) == {str(mine), "a100"}
    one, _ = run_study([SMALL], [("a100", "switch:4")], engine="analytical", space="basic", progress=False)
    assert set(one["gpu"]) == {"a100"}          # alone, a profile is named as it names itself


def test_scenarios_of_one_shape_keep_their_own_rows_and_models():
    """Two models with a layer of one shape (a dense model's and a MoE's attention): their points
    are shared, but each keeps its summary row, name and model, so per-model totals count both
    (the second one's row was dropped, and the totals changed with the order given)."""
    from ficco_sim.explore.study import model_totals, run_study
    meta = {"tokens": 4096, "phase": "fwd"}
    qkv = [Scenario("ag-gemm", 4, 4096, 2048, 2048, name=f"{m}-qkv", meta={**meta, "model": m, "layer": "qkv"})
           for m in ("dense", "moe")]
    out = Scenario("gemm-rs", 4, 4096, 2048, 2048, name="dense-out", meta={**meta, "model": "dense", "layer": "out"})
    for order in ([*qkv, out], [out, *reversed(qkv)]):
        _, summ = run_study(order, [("h100", "switch:4")], engine="analytical", space="basic", progress=False)
        assert sorted(summ["scenario"]) == ["dense-out", "dense-qkv", "moe-qkv"]
        tot = model_totals(summ).set_index("model")
        assert tot.loc["dense", "pairs"] == 2 and tot.loc["moe", "pairs"] == 1


def test_a_scenario_no_schedule_can_run_on_a_file_topology_is_said():
    """A 4-GPU scenario on an 8-GPU topology file runs nowhere: a note says so (it was listed only
    with --show-invalid), where a parametric topology is resized with a note."""
    from pathlib import Path
    from ficco_sim.explore.study import run_study
    topo = str(Path(__file__).resolve().parents[1] / "topologies" / "dgx-h100.yaml")
    pts, _ = run_study([SMALL], [("h100", topo)], engine="analytical", space="basic", progress=False)
    assert any("1 scenario(s) with no schedule that runs here, e.g. small" in n for n in pts.attrs["notes"])


def test_bounded_evaluation_blocks_change_no_answer(monkeypatch):
    """Sweeps evaluate schedules and scenarios in blocks bounded in memory (EVAL_BUDGET) and keep
    a bounded template cache (NODE_BUDGET); neither may change a number."""
    from ficco_sim.explore import estimate
    scs = [Scenario("ag-gemm", 4, m, 2048, 2048) for m in (4096, 8192, 16384)]
    scheds = ["none", "shard-p2p-sm", "ficco-a2a-dma", "ficco-a2a-sm-hi"]
    whole = estimate.estimate_many(scs, scheds, "h100", "switch:4")
    monkeypatch.setattr(estimate, "EVAL_BUDGET", 1)      # one schedule and one scenario per block
    monkeypatch.setattr(estimate, "NODE_BUDGET", 1)      # nothing stays cached
    estimate.clear_cache()
    blocks = estimate.estimate_many(scs, scheds, "h100", "switch:4")
    assert [r["schedule"] for r in blocks] == [r["schedule"] for r in whole]
    for a, b in zip(whole, blocks):
        for k, v in a.items():
            if isinstance(v, float):
                assert b[k] == pytest.approx(v, rel=1e-12, nan_ok=True), k
            else:
                assert b[k] == v, k
    estimate.clear_cache()


def test_confirmed_study_answers_as_the_des_over_the_whole_space():
    """The default study ranks the full space with the closed form and lets the DES confirm
    the fastest few: its best schedule and numbers are the DES's, and the same as the DES
    run on every schedule of the space."""
    from ficco_sim.explore.study import run_study
    scs = [Scenario("ag-gemm", 4, 8192, 2048, 2048, name="ag"), Scenario("gemm-rs", 4, 8192, 2048, 4096, name="rs")]
    pts, summ = run_study(scs, [("mi300x", "fc:4")], progress=False, top=3)
    assert set(summ["engine"]) == {"confirm"} and set(summ["space"]) == {"full"}
    des = pts[pts["engine"] == "des"]
    assert set(des.groupby("scenario_id").size()) <= {4} and (summ["confirmed"] <= 4).all()
    assert len(pts[pts["engine"] == "rank"]) > len(des)          # the whole space was ranked
    _, full = run_study(scs, [("mi300x", "fc:4")], engine="des", space="full", progress=False)
    got = summ.set_index("scenario")[["best", "makespan"]]
    ref = full.set_index("scenario")[["best", "makespan"]]
    assert (got["best"] == ref["best"]).all()
    assert got["makespan"].to_numpy() == pytest.approx(ref["makespan"].to_numpy(), rel=1e-12)


def test_reduction_grids_rescale_exactly_in_sweeps():
    """A reduce kernel is one wave over all SMs at large sizes but fewer blocks at small ones;
    a template compiled at a large size must give a small one's memory-kernel occupancy
    exactly (the bug: the grid was scaled by bytes from the capped reference grid)."""
    big, small = (Scenario("gemm-rs", 8, m, 8192, 3584, dtype="bfloat16") for m in (32768, 2048))
    scheds = ["shard-p2p-dma", "ficco-a2a-dma"]
    rows = estimate_many([big, small], scheds, "h100", "switch:8")
    single = simulate_many(big, scheds, "h100", "switch:8", engine="analytical", whole_graph=True) + \
        simulate_many(small, scheds, "h100", "switch:8", engine="analytical", whole_graph=True)
    assert [r["makespan"] for r in rows] == pytest.approx([s.makespan for s in single], rel=1e-9)


def test_schedules_with_one_communication_share_its_template():
    """Schedules that differ only on the compute side (here the GEMM's wave grouping) lower
    to the same communication alone: a sweep compiles and evaluates it once, and every row
    still equals its single-point simulation (``cil_comm`` included)."""
    sc, topo = Scenario("ag-gemm", 4, 4096, 4096, 4096), "switch:4"
    scheds = ["none", "shard-p2p-sm", "shard-p2p-sm-g2", "shard-p2p-sm-g3", "ficco-a2a-sm"]
    gpu, t = load_gpu("h100"), load_topology(topo, load_gpu("h100"))
    alone = [estimate.template(sc, s, gpu, t, comm_only=True) for s in scheds]
    assert alone[1] is alone[2] is alone[3] and alone[0] is not alone[1] and alone[4] is not alone[1]
    sweep = estimate_many([sc, Scenario("ag-gemm", 4, 8192, 4096, 4096)], scheds, gpu, t)
    single = simulate_many(sc, scheds, "h100", topo, engine="analytical", whole_graph=True)
    for f, a in zip(sweep, single):
        for k, v in a.metrics.items():
            assert f[k] == pytest.approx(v, rel=1e-9, abs=1e-12, nan_ok=True), (a.schedule.name, k)


def test_rank_rows_equal_single_simulations():
    """The ranking pass of a confirmed study evaluates its templates merged in blocks: each
    makespan and speedup is still the single closed-form simulation's, to 1e-9."""
    from ficco_sim.explore.estimate import rank_many
    sc = [Scenario("gemm-rs", 4, 4096, 2048, 2048), Scenario("gemm-rs", 4, 8192, 2048, 2048)]
    scheds = [s.name for s in valid_schedules(sc[0], "h100", "switch:4")]
    rows = rank_many(sc, scheds, "h100", "switch:4")
    assert len(rows) == 2 * len(scheds)
    for s, base in zip(sc, (0, len(scheds))):
        single = {r.schedule.name: r for r in simulate_many(s, scheds, "h100", "switch:4", engine="analytical",
                                                            whole_graph=True)}
        for row in rows[base:base + len(scheds)]:
            r = single[row["schedule"]]
            assert row["makespan"] == pytest.approx(r.makespan, rel=1e-9), row["schedule"]
            assert row["speedup"] == pytest.approx(r.metrics["speedup"], rel=1e-9), row["schedule"]
