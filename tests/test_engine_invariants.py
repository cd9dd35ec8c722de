"""Invariants that hold for every simulation, checked on random scenarios and schedules."""

from __future__ import annotations

import importlib
import math
import re

import pytest
from conftest import check_timeline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ficco_sim import Scenario, baseline, lower, simulate
from ficco_sim.errors import InputError
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


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sparse_filling_equals_the_dense_oracle(data):
    """The engine's array-based max-min filling gives the rates of the plain dense one."""
    from ficco_sim.engine.fluid import Activity, max_min_rates
    from reference_fluid import dense_max_min
    n_res = data.draw(st.integers(1, 6))
    caps = {f"r{i}": data.draw(st.sampled_from([0.0, 1.0, 5.0, 10.0, 1e3])) for i in range(n_res)}
    acts = []
    for i in range(data.draw(st.integers(1, 8))):
        used = data.draw(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=n_res, unique=True))
        usage = {f"r{j}": data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for j in used}
        acts.append(Activity(f"a{i}", 1.0, usage, cap=data.draw(st.sampled_from([math.inf, 0.5, 2.0, 7.0])),
                             weight=data.draw(st.sampled_from([1.0, 0.5, 2.0]))))
    got, ref = max_min_rates(acts, caps), dense_max_min(acts, caps)
    assert got.keys() == ref.keys()
    for k in ref:
        assert got[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_the_none_schedule_is_its_own_baseline(engine, monkeypatch):
    """simulate(none) takes its baseline from its own runs, not lowering and running the none
    graph again (two runs, no baseline call): every metric as with the baseline computed
    apart; simulate_many with none among its schedules computes no baseline either."""
    sim = importlib.import_module("ficco_sim.simulate")    # (the package's attribute is the function)
    gpu = load_gpu("h100")
    topo = load_topology("switch:8", gpu)
    scenarios = (Scenario("ag-gemm", 8, 16384, 8192, 8192), Scenario("gemm-rs", 8, 4096, 8192, 3584))
    whole = {"whole_graph": True}   # the closed form's template path runs no graph (tested apart)
    apart = {(sc, name): simulate(sc, name, gpu, topo, engine=engine, base=baseline(sc, gpu, topo, engine=engine),
                                  **whole) for sc in scenarios for name in ("none", "nccl")}
    runs = []
    real_run = sim._run

    def counted(*args, **kwargs):
        runs.append(args[0])
        return real_run(*args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("the none schedule computed a baseline apart")

    monkeypatch.setattr(sim, "_run", counted)
    monkeypatch.setattr(sim, "baseline", refused)
    for (sc, name), want in apart.items():
        runs.clear()
        assert simulate(sc, name, gpu, topo, engine=engine, **whole).metrics == pytest.approx(
            want.metrics, rel=1e-12, nan_ok=True)
        assert len(runs) == 2
    many = sim.simulate_many(scenarios[0], ["ficco-a2a-dma", "none"], gpu, topo, engine=engine, **whole)
    assert many[1].metrics == pytest.approx(apart[(scenarios[0], "none")].metrics, rel=1e-12, nan_ok=True)
    assert [r.schedule.name for r in many] == ["ficco-a2a-dma", "none"]


def _ran(*args, **kwargs):
    raise AssertionError("an engine ran over the whole graph")


def test_closed_form_points_are_the_templates_and_their_timeline_comes_on_demand(monkeypatch):
    """simulate --engine analytical evaluates the compiled templates sweeps evaluate: it
    lowers no whole graph and runs no engine over one until the result's graph or timeline
    is asked for; then the timeline is the whole graph's closed form, whose makespan and
    metrics equal the template's (presets and shard dimensions included)."""
    sim = importlib.import_module("ficco_sim.simulate")
    gpu = load_gpu("h100")
    cases = [(Scenario("ag-gemm", 8, 16384, 8192, 8192), "switch:8", "ficco-a2a-sm"),
             (Scenario("gemm-rs", 4, 4096, 2048, 2048), "fc:4", "te-pipeline"),
             (Scenario("ag-gemm", 4, 4096, 1024, 2048, shard_dim="K"), "switch:4", "ficco-a2a-dma-dimK"),
             (Scenario("a2a-gemm", 4, 4096, 2048, 2048), "ring:4", "none")]
    for sc, topo_name, name in cases:
        topo = load_topology(topo_name, gpu)
        want = simulate(sc, name, gpu, topo, engine="analytical", whole_graph=True)
        lowered = []
        real_lower = sim.lower
        monkeypatch.setattr(sim, "lower", lambda *a, **k: lowered.append(a) or real_lower(*a, **k))
        monkeypatch.setattr(sim, "_run", _ran)
        got = simulate(sc, name, gpu, topo, engine="analytical")
        assert not lowered
        assert got.metrics == pytest.approx(want.metrics, rel=1e-9, abs=1e-15, nan_ok=True), name
        monkeypatch.undo()
        assert got.timeline.makespan == pytest.approx(want.makespan, rel=1e-12)
        assert len(got.graph.tasks) == len(want.graph.tasks) and got.makespan == got.metrics["makespan"]
    # several schedules without none among them: the templates keep their own baseline, none is run apart
    sc, topo = cases[0][0], load_topology(cases[0][1], gpu)
    want = sim.simulate_many(sc, ["ficco-a2a-sm", "shard-p2p-dma"], gpu, topo, engine="analytical", whole_graph=True)
    monkeypatch.setattr(sim, "baseline", _ran)
    monkeypatch.setattr(sim, "_run", _ran)
    got = sim.simulate_many(sc, ["ficco-a2a-sm", "shard-p2p-dma"], gpu, topo, engine="analytical")
    for g, w in zip(got, want):
        assert g.metrics == pytest.approx(w.metrics, rel=1e-9, abs=1e-15, nan_ok=True)


@pytest.mark.parametrize("topo_name", ["switch:4", "ring:4"])
def test_every_kind_and_preset_reads_the_same_from_templates_and_whole_graphs(topo_name):
    """Over every scenario kind, every preset and a sample of each kind's schedule space, the
    template path simulate --engine analytical takes equals the whole graph run through the
    closed form, metric for metric (symmetric topology: GPU 0's share and its quotient; ring:
    whole templates)."""
    from ficco_sim.explore.space import valid_schedules
    from ficco_sim.schedules.presets import PRESETS
    from ficco_sim.workload import SCENARIO_KINDS
    gpu = load_gpu("h100")
    topo = load_topology(topo_name, gpu)
    checked = 0
    for kind in SCENARIO_KINDS:
        sc = Scenario(kind, 4, 2048, 2048, 1024)
        names = [s.name for s in valid_schedules(sc, gpu, topo)]
        for name in names[::max(1, len(names) // 6)] + list(PRESETS):
            try:
                want = simulate(sc, name, gpu, topo, engine="analytical", whole_graph=True)
            except InputError as e:       # a preset that does not apply here: refused alike on both paths
                with pytest.raises(InputError, match=re.escape(e.line())):
                    simulate(sc, name, gpu, topo, engine="analytical")
                continue
            got = simulate(sc, name, gpu, topo, engine="analytical")
            assert got.metrics == pytest.approx(want.metrics, rel=1e-9, abs=1e-15, nan_ok=True), (kind, name)
            checked += 1
    assert checked > 60
