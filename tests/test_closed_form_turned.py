"""The closed form compiled from GPU 0's share (:mod:`ficco_sim.engine.closed_form_turned`)
is the whole graph's template: every task's begin and end, node for node, after the
contention passes; sweeps give the same rows either way; a share is refused when any GPU's
tasks differ from GPU 0's turned."""

from __future__ import annotations

import numpy as np
import pytest

from ficco_sim.engine.closed_form import compile_graph, evaluate
from ficco_sim.engine.closed_form_turned import compile_share
from ficco_sim.explore import estimate
from ficco_sim.explore.space import valid_schedules
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules import lower
from ficco_sim.schedules.builder import GraphBuilder
from ficco_sim.schedules.lowering import lower_share
from ficco_sim.taskgraph import Kernel
from ficco_sim.topology import load_topology
from ficco_sim.workload import Scenario

CASES = [  # (gpu, topology, scenario): every kind, on a switch, fully connected links and a ring
    ("h100", "switch:8", Scenario("ag-gemm", 8, 8192, 4096, 8192, dtype="bfloat16")),
    ("h100", "switch:8", Scenario("gemm-rs", 8, 8192, 8192, 4096, dtype="bfloat16")),
    ("mi300x", "fc:8", Scenario("ag-gemm", 8, 4096, 8192, 8192, dtype="bfloat16")),
    ("mi300x", "fc:8", Scenario("gemm-rs", 8, 4096, 4096, 8192, dtype="bfloat16")),
    ("h100", "switch:4", Scenario("a2a-gemm", 4, 4096, 2048, 4096)),
    ("a100", "ring:4", Scenario("ag-gemm", 4, 4096, 4096, 4096)),
    ("a100", "ring:4", Scenario("gemm-rs", 4, 4096, 4096, 4096)),
    ("h100", "switch:8", Scenario("ar-par-gemm", 8, 4096, 4096, 4096)),
]


def _pairs(gpu_name, topo_name, sc):
    gpu = load_gpu(gpu_name)
    topo = load_topology(topo_name, gpu)
    for s in valid_schedules(sc, gpu, topo):
        share = lower_share(sc, s, gpu, topo)
        if share is not None:
            yield gpu, topo, s, share


@pytest.mark.parametrize("gpu_name,topo_name,sc", CASES, ids=lambda x: getattr(x, "kind", x))
def test_a_share_compiles_to_the_whole_graphs_template_task_by_task(gpu_name, topo_name, sc):
    folded = 0
    for gpu, topo, s, share in _pairs(gpu_name, topo_name, sc):
        whole = lower(sc, s, gpu, topo)
        a, b = compile_graph(whole, gpu, topo, sc), compile_share(share, gpu, topo, sc)
        assert b.num_nodes == a.num_nodes, s.name
        va, vb = evaluate(a, gpu, [sc])["vals"][0], evaluate(b, gpu, [sc])["vals"][0]
        per_gpu = b.num_nodes // share.ranks
        seen = [0] * share.ranks
        for t, (begin, end) in zip(whole.tasks, a.tasks.tolist()):
            g = t.gpu
            place = seen[g]
            seen[g] += 1
            if g == 0:
                assert t.id == share.tasks[place].id
            bb, be = (g * per_gpu + b.places[place]).tolist()
            assert vb[bb] == pytest.approx(va[begin], rel=1e-12, abs=1e-15), (s.name, t.id)
            assert vb[be] == pytest.approx(va[end], rel=1e-12, abs=1e-15), (s.name, t.id)
        folded += 1
    assert folded >= 2, "too few schedules of this case fold"


def test_sweep_rows_are_the_same_with_and_without_shares(monkeypatch):
    scs = [Scenario("ag-gemm", 8, m, 4096, 8192, dtype="bfloat16") for m in (4096, 16384)]
    gpu = load_gpu("h100")
    scheds = [s.name for s in valid_schedules(scs[0], gpu, load_topology("switch:8", gpu))][:40]
    estimate.clear_cache()
    turned = estimate.estimate_many(scs, scheds, "h100", "switch:8")
    estimate.clear_cache()
    monkeypatch.setattr(estimate, "SHARES", False)
    whole = estimate.estimate_many(scs, scheds, "h100", "switch:8")
    estimate.clear_cache()
    assert len(turned) == len(whole)
    for x, y in zip(turned, whole):
        for k, v in y.items():
            if isinstance(v, float):
                assert x[k] == pytest.approx(v, rel=1e-9, abs=1e-12, nan_ok=True), (y["schedule"], k)
            else:
                assert x[k] == v


def _builder(offset_of_gpu):
    """GEMMs on every GPU, each GPU's reduce waiting on a tile signal of the GEMM on GPU
    ``g + offset_of_gpu(g)``."""
    b = GraphBuilder(load_gpu("h100"), 4, fold=True)
    for g in range(4):
        b.gemm(f"g{g}", g, 1024, 1024, 1024, "float16")
    for g in range(4):
        b.reduce(f"r{g}", g, 256, 1024, "float16", 2, signals=((f"g{(g + offset_of_gpu(g)) % 4}", 0.5),))
    return b


def test_a_share_is_refused_when_one_gpu_differs_only_in_a_tile_signal():
    share = _builder(lambda g: 1).build_share()
    assert share is not None and len(share.tasks) == 2
    assert _builder(lambda g: 1 if g != 2 else 3).build_share() is None


def test_without_gemms_is_the_share_of_the_communication_alone():
    gpu = load_gpu("h100")
    topo = load_topology("switch:8", gpu)
    sc = Scenario("gemm-rs", 8, 8192, 8192, 4096, dtype="bfloat16")
    from ficco_sim.metrics import comm_only_graph
    share = lower_share(sc, "ficco-p2p-sm", gpu, topo)
    alone = share.without_gemms()
    assert not any(isinstance(t, Kernel) and t.kind == "gemm" for t in alone.tasks)
    a = evaluate(compile_graph(comm_only_graph(lower(sc, "ficco-p2p-sm", gpu, topo)), gpu, topo, sc), gpu, [sc])
    b = evaluate(compile_share(alone, gpu, topo, sc), gpu, [sc])
    assert float(b["makespan"][0]) == pytest.approx(float(a["makespan"][0]), rel=1e-12)
    assert np.allclose(np.sort(a["vals"][0]), np.sort(b["vals"][0]), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm", "ar-par-gemm"])
def test_every_schedule_of_an_even_scenario_on_a_switch_lowers_as_a_share(kind):
    """On a switch, an evenly split scenario gives every GPU the same tasks turned under every
    schedule, so each one is lowered for GPU 0 alone; only ``fused-st`` (a tile flag crossing
    GPUs) and an all-gather GEMM whose rows wait for other GPUs' copies (``fused-dma``) are lowered whole. (The bug: a2a-gemm's SM pieces were made receiver by receiver, so a
    sender's sequence was not its peers' turned and its ``-a2a-sm`` schedules were compiled
    whole, 3x slower.)"""
    gpu = load_gpu("h100")
    topo = load_topology("switch:8", gpu)
    sc = Scenario(kind, 8, 4096, 2048, 2048)
    whole = {s.name for s in valid_schedules(sc, gpu, topo) if lower_share(sc, s, gpu, topo) is None}
    assert whole <= {"fused-st"} | ({"fused-dma"} if kind == "ag-gemm" else set()), sorted(whole)
