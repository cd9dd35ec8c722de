"""One registry of scenario kinds and per-collective algorithms: an unknown name is an error
everywhere, never a fallback."""

import pytest

from ficco_sim import InputError, Scenario, collective_time, lower, simulate
from ficco_sim.cli import main
from ficco_sim.schedules.collectives import ALGORITHMS, pick_algorithm
from ficco_sim.schedules.lowering import LOWERINGS
from ficco_sim.workload import KINDS


def test_every_kind_lowers_and_runs_both_engines():
    assert set(LOWERINGS) == set(KINDS)
    for kind in KINDS:
        sc = Scenario(kind, 2, 1024, 512, 512)
        for engine in ("des", "analytical"):
            assert simulate(sc, "ficco-a2a-dma", "h100", "switch:2", engine=engine).makespan > 0


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
