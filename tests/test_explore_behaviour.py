"""Expected behaviour of the model over the schedule space (small sizes, analytical/fast engine)."""

import pytest

from ficco_sim import Scenario, simulate_many
from ficco_sim.explore.estimate import estimate_many
from ficco_sim.explore.space import valid_schedules


def _by(rows):
    return {r["schedule"]: r for r in rows}


@pytest.mark.parametrize("topo", ["switch:4", "fc:4"])
@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
def test_speedup_never_exceeds_ideal(kind, topo):
    sc = Scenario(kind, 4, 4096, 2048, 4096)
    for r in estimate_many([sc], valid_schedules(sc, "h100", topo), "h100", topo):
        assert r["speedup"] <= r["ideal_speedup"] * (1 + 1e-6) or r["makespan"] >= r["ideal"] * (1 - 1e-6), \
            r["schedule"]


def test_speedup_never_exceeds_ideal_des():
    sc = Scenario("ag-gemm", 4, 4096, 2048, 2048)
    for r in simulate_many(sc, ["none", "shard-p2p-dma", "ficco-a2a-dma"], "h100", "fc:4"):
        assert r.makespan >= r.metrics["ideal"] * (1 - 1e-6)


def test_a2a_beats_p2p_on_fully_connected_when_comm_dominates():
    sc = Scenario("ag-gemm", 8, 16384, 1024, 8192)      # comm >> compute
    # SM communication: one comm kernel per step, so shard-p2p really uses one link per step
    fc = _by(estimate_many([sc], ["shard-p2p-sm", "ficco-a2a-sm"], "mi300x", "fc:8"))
    sw = _by(estimate_many([sc], ["shard-p2p-sm", "ficco-a2a-sm"], "h100", "switch:8"))
    assert fc["ficco-a2a-sm"]["t_comm_iso"] > fc["ficco-a2a-sm"]["t_comp_iso"]
    assert fc["ficco-a2a-sm"]["makespan"] < 0.5 * fc["shard-p2p-sm"]["makespan"]
    ratio = sw["ficco-a2a-sm"]["makespan"] / sw["shard-p2p-sm"]["makespan"]
    assert 0.8 < ratio < 1.25


def test_dma_wins_for_large_pieces_loses_for_tiny():
    big = Scenario("ag-gemm", 4, 32768, 8192, 8192)
    b = _by(estimate_many([big], ["shard-p2p-sm", "shard-p2p-dma"], "h100", "switch:4"))
    assert b["shard-p2p-dma"]["makespan"] < b["shard-p2p-sm"]["makespan"]
    assert b["shard-p2p-dma"]["cil_compute"] < b["shard-p2p-sm"]["cil_compute"]
    tiny = Scenario("ag-gemm", 8, 512, 1024, 256)        # FiCCO pieces of 8 rows x 256: 4 KiB per command
    t = _by(estimate_many([tiny], ["shard-p2p-dma", "ficco-a2a-dma", "ficco-a2a-sm"], "h100", "switch:8"))
    # per-command costs dominate tiny pieces: 8x the commands cost far more time, and the SM kernels'
    # per-step latency (NCCL's LL) beats a copy engine's per-command cost
    assert t["ficco-a2a-dma"]["makespan"] > 1.3 * t["shard-p2p-dma"]["makespan"]
    assert t["ficco-a2a-dma"]["makespan"] > 1.05 * t["ficco-a2a-sm"]["makespan"]    # 62.0 / 56.2 us (2026-11-29)


def test_decomposition_loss_grows_as_pieces_shrink_below_a_wave():
    dil = []
    for m in (65536, 8192, 1024):
        sc = Scenario("ag-gemm", 8, m, 4096, 4096)
        dil.append(_by(estimate_many([sc], ["ficco-a2a-dma"], "h100", "switch:8"))["ficco-a2a-dma"]["dil_compute"])
    assert dil[0] < dil[1] < dil[2]
    assert dil[2] > 0.5


def test_parquet_tables_carry_no_attrs(tmp_path):
    """A study's points carry every invalid schedule and its reason in ``attrs``; pandas
    writes ``attrs`` into a Parquet file's metadata (twice), which made a wide sweep's
    points.parquet 300 MB and unreadable (thrift's size limit). The tables hold rows only."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pandas as pd

    from ficco_sim.explore.study import write_tables
    points = pd.DataFrame({"scenario": ["a", "b"], "schedule": ["none", "x"], "makespan": [1.0, 2.0]})
    points.attrs["invalid"] = [{"schedule": f"s{i}", "reason": "r" * 200} for i in range(20_000)]
    summary = pd.DataFrame({"scenario": ["a"], "best": ["x"]})
    write_tables(points, summary, tmp_path)
    f = tmp_path / "points.parquet"
    assert f.stat().st_size < 100_000
    assert pq.read_schema(f).metadata.get(b"PANDAS_ATTRS") is None
    back = pd.read_parquet(f)
    assert back.equals(points) and back.attrs == {}
    assert points.attrs["invalid"]            # the caller's frame keeps its attrs
