"""One registry of scenario kinds and per-collective algorithms: an unknown name is an error
everywhere, never a fallback."""

import pytest

from ficco_sim import InputError, Scenario, basic_schedules, collective_time, lower, simulate
from ficco_sim.cli import main
from ficco_sim.schedules.collectives import ALGORITHMS, pick_algorithm
from ficco_sim.schedules.lowering import LOWERINGS
from ficco_sim.workload import KINDS


def test_every_kind_lowers_and_runs_both_engines():
    assert set(LOWERINGS) == set(KINDS)
    for kind in KINDS:
        sc = Scenario(kind, 2, 1024, 512, 512)
        for s in basic_schedules(sc):
            for engine in ("des", "analytical"):
                assert simulate(sc, s, "h100", "switch:2", engine=engine).makespan > 0


def test_unknown_kind_is_an_input_error():
    with pytest.raises(InputError, match="unknown scenario"):
        Scenario("all-gather-gemm", 2, 1024, 512, 512)
    assert main(["simulate", "--scenario", "ag-gemm-fused"]) == 2


@pytest.mark.parametrize("kind,dim", [("gemm-rs", "K"), ("a2a-gemm", "K"), ("ag-gemm", "N")])
def test_shard_dim_is_validated_per_kind(kind, dim):
    with pytest.raises(InputError) as e:
        Scenario(kind, 2, 1024, 512, 512, shard_dim=dim)
    assert e.value.field == "shard_dim"


def test_a_k_sharded_scenario_refuses_m_pieces_in_simulate():
    sc = Scenario("ag-gemm", 4, 4096, 1024, 2048, shard_dim="K")
    with pytest.raises(InputError, match="sharded along K"):
        lower(sc, "ficco-a2a-dma", "h100", "switch:4")
    g = lower(sc, "ficco-a2a-dma-dimK", "h100", "switch:4")
    assert all(k.gemm.m == 4096 for k in g.kernels if k.kind == "gemm")
    m_sc = Scenario("ag-gemm", 4, 4096, 1024, 2048)
    with pytest.raises(InputError, match="sharded along M"):
        lower(m_sc, "ficco-a2a-dma-dimK", "h100", "switch:4")


def test_scenario_identity_includes_the_shard_dim():
    a, b = Scenario("ag-gemm", 4, 4096, 1024, 2048), Scenario("ag-gemm", 4, 4096, 1024, 2048, shard_dim="K")
    assert a != b and a.label() != b.label() and a.structure() != b.structure()


@pytest.mark.parametrize("kind,algo", [("all-gather", "tree"), ("all-to-all", "ring"), ("send-recv", "ring")])
def test_an_algorithm_a_collective_lacks_is_an_error(kind, algo):
    with pytest.raises(InputError, match="algorithm"):
        collective_time("h100", "ring:4", kind, 1 << 20, algorithm=algo)


def test_algorithms_are_per_collective():
    assert pick_algorithm("auto", "all-gather", "ring") == "ring"
    assert pick_algorithm("auto", "all-to-all", "ring") == "direct"
    assert pick_algorithm("auto", "reduce-scatter", "ring", "dma") == "direct"
    with pytest.raises(InputError):
        pick_algorithm("ring", "reduce-scatter", "ring", "dma")
    assert set(ALGORITHMS) == {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv"}


# ----------------------------------------------------------------------------------------
# A GEMM beside an independent collective (the C3 / resource-aware experiment)

INDEPENDENT = [k for k, v in KINDS.items() if v.independent]


def _no_interference(gpu_name: str):
    """The profile without its compute <-> communication interference coefficients: what is
    left is the resource model (SMs, copy engines, links, HBM), which has closed forms here."""
    import dataclasses
    from ficco_sim.hardware import load_gpu
    g = load_gpu(gpu_name)
    return dataclasses.replace(g, contention=dataclasses.replace(g.contention, compute_per_hbm_util=0.0,
                                                                 comm_per_hbm_util=0.0))


def test_the_independent_kinds_are_the_three_collectives():
    assert {KINDS[k].collective for k in INDEPENDENT} == {"all-gather", "all-to-all", "all-reduce"}


@pytest.mark.parametrize("kind", INDEPENDENT)
@pytest.mark.parametrize("engine", ["des", "analytical"])
@pytest.mark.parametrize("gpu,topo", [("h100", "switch:8"), ("mi300x", "fc:8")])
def test_independent_pair_closed_forms(kind, engine, gpu, topo):
    """``none`` runs the collective, then the GEMM: exactly T_coll + T_gemm. ``par-dma`` runs
    the GEMM on the SMs and the collective on the copy engines at once: exactly
    max(T_coll, T_gemm), unless a reduction needs SMs the GEMM holds (H100 all-reduce)."""
    g = _no_interference(gpu)
    sc = Scenario(kind, 8, 8192, 8192, 8192)
    none = simulate(sc, "none", g, topo, engine=engine)
    tc, tm = none.metrics["t_comp_iso"], none.metrics["t_comm_iso"]
    assert tc > 0 and tm > 0
    assert none.makespan == pytest.approx(tc + tm, rel=1e-9)
    dma = simulate(sc, "par-dma", g, topo, engine=engine).makespan
    if kind == "ar-par-gemm" and gpu == "h100":
        assert max(tc, tm) * 1.05 < dma < tc + tm    # the DMA all-reduce's add kernels wait for SMs
    else:
        assert dma == pytest.approx(max(tc, tm), rel=1e-9)
    # SM collectives take SM slots the GEMM would use (or fit beside its blocks): between the two
    sm = simulate(sc, "par-sm", g, topo, engine=engine).makespan
    assert sm < none.makespan
    if not (kind == "ar-par-gemm" and gpu == "h100"):     # (the GEMM's tail wave packs a little
        assert dma * (1 - 1e-4) <= sm                       # differently around the comm blocks: 1e-5)


def test_independent_pair_schedules_are_their_own():
    sc = Scenario("ag-par-gemm", 4, 4096, 1024, 1024)
    g = lower(sc, "par-sm", "h100", "switch:4")
    assert all(not k.deps for k in g.kernels if k.kind == "gemm")          # side by side
    g = lower(sc, "none", "h100", "switch:4")
    assert all(k.deps for k in g.kernels if k.kind == "gemm")              # after the collective
    for name in ("shard-p2p-sm", "ficco-a2a-dma"):
        with pytest.raises(InputError, match="nothing to decompose"):
            lower(sc, name, "h100", "switch:4")
    with pytest.raises(InputError, match="side by side"):
        lower(Scenario("ag-gemm", 4, 4096, 1024, 1024), "par-sm", "h100", "switch:4")
    with pytest.raises(InputError, match="no pattern"):
        lower(sc, "par-p2p-sm", "h100", "switch:4")
    with pytest.raises(InputError, match="no pieces"):
        lower(sc, "par-sm-g2", "h100", "switch:4")
    assert [s.name for s in basic_schedules(sc)] == ["none", "par-sm", "par-sm-hi", "par-dma"]


def test_independent_pair_replays_exactly_with_both_results_checked():
    """The executor checks the GEMM's output and the collective's: a replay that loses one
    transfer of the collective is caught even though C is right."""
    import dataclasses
    from ficco_sim.taskgraph import Slice, TaskGraph
    from ficco_sim.validate.executor import Job, ReplayOptions, replay
    from ficco_sim.validate.testing import tiny
    jobs = [Job(f"{k}/{s}", tiny(k, s, gpus=2, m=8)) for k in INDEPENDENT for s in ("none", "par-sm", "par-dma")]
    jobs += [Job(f"{k}/3", tiny(k, "par-sm", gpus=3, m=12, n=5, k=3)) for k in INDEPENDENT]
    results = replay(jobs, ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1))
    assert [r.name for r in results if not r.correct] == []
    g = tiny("ag-par-gemm", "par-dma", gpus=2, m=8)
    t = next(x for x in g.transfers if x.dst == 1)
    wrong = dataclasses.replace(t, io={"src": t.io["src"], "dst": Slice("X", 4, 8)})   # over rank 1's own rows
    g2 = TaskGraph.build(g.num_gpus, g.streams, [wrong if x.id == t.id else x for x in g.tasks],
                         buffers=g.buffers, meta=g.meta)
    bad = replay([Job("wrong", g2)], ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1))[0]
    assert not bad.correct and bad.max_error > 0


def test_independent_pair_in_the_cli(capsys):
    assert main(["simulate", "--scenario", "a2a-par-gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                 "--gpu", "mi300x", "--topology", "fc:8"]) == 0
    out = capsys.readouterr().out
    assert "par-dma" in out and "par-sm-hi" in out and "ficco" not in out
    assert main(["list"]) == 0
    assert "ag-par-gemm" in capsys.readouterr().out


def test_recommend_answers_an_independent_pair_with_its_own_schedules():
    from ficco_sim.explore.heuristics import recommend
    out = recommend(Scenario("ar-par-gemm", 8, 8192, 8192, 8192), "mi300x", "fc:8")
    assert out["schedule"] == "none" or out["schedule"].startswith("par-")
    # side by side (alone, shaped where shaping changes the GEMM's residency, kept off the
    # collective's SMs) and on copy engines; MI300X's 256x256 GEMM holds one block per CU: no shaping
    assert set(out["predicted"]) == {"none", "par-sm", "par-sm-hi", "par-sm-m28", "par-sm-hi-m28", "par-dma"}
    assert "beside the collective" in " ".join(out["reasons"])
