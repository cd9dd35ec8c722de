"""Invariants that hold for every simulation, checked on random scenarios and schedules."""

from __future__ import annotations

import pytest
from conftest import check_timeline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ficco_sim import Scenario, baseline, lower
from ficco_sim.engine.des import simulate_graph
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules import basic_schedules, parse_schedule
from ficco_sim.taskgraph import Kernel
from ficco_sim.metrics import comm_only_graph
from ficco_sim.topology import load_topology
from ficco_sim.workload import skewed_routing

SCHEDULES = [s.name for s in basic_schedules()] + ["ficco-p2p-sm", "shard-a2a-dma", "ficco-a2a-sm-hi-g2",
                                                    "shard-p2p-sm-hi-smem16k", "ficco-a2a-dma-g4"]


def check_invariants(graph, tl, gpu, topo, t_comp=None, t_comm=None):
    check_timeline(graph, tl, gpu, topo)
    if t_comp is not None:                     # lower bound: no schedule beats either side alone
        assert tl.makespan >= max(t_comp, t_comm) * (1 - 1e-9)


scenarios = st.builds(
    lambda kind, gpus, mult, n, k, skew: Scenario(
        kind, gpus, gpus * gpus * mult, n, k,
        routing=skewed_routing(gpus, gpus * gpus * mult, skew) if kind == "a2a-gemm" and skew else None),
    kind=st.sampled_from(["ag-gemm", "gemm-rs", "a2a-gemm"]),
    gpus=st.sampled_from([2, 4]),
    mult=st.sampled_from([8, 64, 256]),
    n=st.sampled_from([512, 2048, 4096]),
    k=st.sampled_from([256, 1024, 4096]),
    skew=st.sampled_from([0.0, 2.0]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios, schedule=st.sampled_from(SCHEDULES), topo_kind=st.sampled_from(["ring", "fc", "switch"]),
       gpu_name=st.sampled_from(["h100", "a100", "mi300x"]))
def test_every_simulation_keeps_the_invariants(sc, schedule, topo_kind, gpu_name):
    gpu = load_gpu(gpu_name)
    topo = load_topology(f"{topo_kind}:{sc.gpus}", gpu)
    graph = lower(sc, parse_schedule(schedule), gpu, topo)
    tl = simulate_graph(graph, gpu, topo)
    base = baseline(sc, gpu, topo)
    # the communication bound is the schedule's own communication alone: copy engines and
    # p2p patterns may move the bytes faster than the SM collective of the baseline
    own_comm = simulate_graph(comm_only_graph(graph), gpu, topo).makespan
    check_invariants(graph, tl, gpu, topo, base["t_comp"], own_comm)


@pytest.mark.parametrize("policy", ["backfill", "strict"])
def test_invariants_under_other_dispatch_policies(policy):
    gpu = load_gpu("a100")
    topo = load_topology("switch:4", gpu)
    sc = Scenario("gemm-rs", 4, 4096, 2048, 1024)
    for name in ["shard-p2p-sm", "ficco-a2a-sm-hi"]:
        graph = lower(sc, name, gpu, topo)
        check_invariants(graph, simulate_graph(graph, gpu, topo, policy=policy), gpu, topo)


def test_kernels_finish_exactly_their_grid():
    gpu = load_gpu("h100")
    topo = load_topology("switch:4", gpu)
    graph = lower(Scenario("ag-gemm", 4, 8192, 4096, 4096), "ficco-a2a-sm-hi", gpu, topo)
    tl = simulate_graph(graph, gpu, topo)
    for k in graph.kernels:
        assert isinstance(k, Kernel)
        assert tl.by_id()[k.id].peak_resident <= k.grid
