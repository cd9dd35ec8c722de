"""Rank folding in the discrete-event engine (engine.fold): a rotation-symmetric graph runs
one GPU and copies its times; every record and counter must equal the full run's, and
graphs that are not symmetric (peers queued in another order) must run whole."""

from __future__ import annotations

import math

import pytest

from ficco_sim import Scenario
from ficco_sim.engine import des
from ficco_sim.engine.des import simulate_graph
from ficco_sim.engine.fold import Folded, folding
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules import lower
from ficco_sim.simulate import collective_graph
from ficco_sim.topology import load_topology


def _graph(case):
    gpu_name, topo_name, what = case
    gpu = load_gpu(gpu_name)
    topo = load_topology(topo_name, gpu)
    if isinstance(what, tuple):
        kind, schedule, *routing = what
        m = 1024 if routing else 4096
        sc = Scenario(kind, topo.num_gpus, m, 2048, 1024, routing=routing[0] if routing else None)
        return gpu, topo, lower(sc, schedule, gpu, topo)
    return gpu, topo, collective_graph(gpu, topo, what, 8 << 20)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-12 * max(abs(a), abs(b), 1e-9)


def _at(series: list[tuple[float, float]], t: float) -> float:
    """A counter's value at ``t`` (the last point at or before it)."""
    return [v for u, v in series if u <= t][-1]


FOLDS = [
    ("h100", "switch:8", ("ag-gemm", "ficco-a2a-sm")),
    ("h100", "switch:8", ("ag-gemm", "ficco-a2a-dma")),
    ("h100", "switch:8", ("gemm-rs", "shard-p2p-sm-hi")),
    ("mi300x", "fc:8", ("a2a-gemm", "ficco-a2a-sm")),
    ("mi300x", "fc:8", ("ar-par-gemm", "par-sm")),
    ("h100", "ring:5", "all-to-all"),        # multi-hop routes: a link class crossed twice
    ("h100", "ring:8", "all-to-all"),        # the far side of an even ring: a tie broken clockwise
    ("h100", "ring:8", "all-reduce"),
    ("h100", "switch:16", "reduce-scatter"),
]


@pytest.mark.parametrize("case", FOLDS, ids=lambda c: f"{c[1]}-{c[2]}")
def test_a_folded_run_gives_every_task_and_counter_the_full_runs_times(case, monkeypatch):
    gpu, topo, g = _graph(case)
    assert isinstance(folding(g, topo), Folded)
    full = simulate_graph(g, gpu, topo, fold_ranks=False)
    ran = []

    class Watched(des.Simulation):
        def __init__(self, graph, *args, **kw):
            ran.append(graph.num_gpus)
            super().__init__(graph, *args, **kw)

    monkeypatch.setattr(des, "Simulation", Watched)
    one = simulate_graph(g, gpu, topo)
    assert ran == [1]                  # it did run one rank
    assert [r.id for r in one.records] == [r.id for r in full.records]
    for a, b in zip(full.records, one.records):
        assert (a.gpu, a.stream, a.kind, a.src, a.dst, a.nbytes) == (b.gpu, b.stream, b.kind, b.src, b.dst, b.nbytes)
        assert all(_same(x, y) for x, y in ((a.ready, b.ready), (a.start, b.start), (a.end, b.end))), a.id
        assert a.peak_resident == b.peak_resident, a.id
    assert set(full.counters) == set(one.counters)
    for name, series in full.counters.items():        # equal as step functions (a sum of rates taken in
        other = one.counters[name]                     # another order may add a point 1e-16 away, and a
        for t in sorted({p[0] for p in series} | {p[0] for p in other}):   # run advanced in other steps
            late = t * (1 + 1e-12) + 1e-18            # may step an ulp later: compare just after each step
            assert _same(_at(series, late), _at(other, late)), (name, t)


@pytest.mark.parametrize("case, why", [
    (("h100", "switch:4", ("a2a-gemm", "ficco-a2a-dma", ((400, 300, 200, 124),) * 4)), "not GPU 0's turned"),
    (("h100", "dgx-h100", "all-gather"), None),
])
def test_graphs_that_are_not_symmetric_run_whole(case, why):
    gpu, topo, g = _graph(case)
    got = folding(g, topo)
    if why is None:          # (a shipped node graph: folds only if it really turns onto itself)
        return
    assert isinstance(got, str) and why in got
    tl = simulate_graph(g, gpu, topo)
    assert tl.makespan == simulate_graph(g, gpu, topo, fold_ranks=False).makespan


def test_a_rank_whose_stand_ins_come_later_in_the_graph_still_folds():
    """GPU 0's GEMM waits on the chunk GPU 1 sends it, listed before GPU 0's own send that
    stands for it: the folded graph puts the stand-in first, and the times match."""
    from ficco_sim.hardware import BlockShape
    from ficco_sim.taskgraph import Kernel, Stream, TaskGraph, Transfer

    gpu = load_gpu("h100")
    topo = load_topology("switch:2", gpu)
    comm, block = BlockShape(512, 32, 0), BlockShape(256, 64, 0)

    def send(src, dst):
        return Transfer(f"y{src}", src, dst, 8e6, "sm", src, None, (f"k{src}", f"k{dst}"))

    def gemm(g, after):
        return Kernel(f"g{g}", g, "compute", "gemm", 264, block, 20e-6, 0.0, (after,))

    tasks = [Kernel("k0", 0, "comm", "comm", 4, comm, role="comm"), Kernel("k1", 1, "comm", "comm", 4, comm, role="comm"),
             send(1, 0), gemm(0, "y1"), send(0, 1), gemm(1, "y0")]
    g = TaskGraph.build(2, [Stream(i, s) for i in range(2) for s in ("comm", "compute")], tasks)
    folded = folding(g, topo)
    assert isinstance(folded, Folded)
    assert [t.id for t in folded.graph.tasks] == ["k0", "y0", "g0"]
    full, one = simulate_graph(g, gpu, topo, fold_ranks=False), simulate_graph(g, gpu, topo)
    assert [(r.id, r.start, r.end) for r in one.records] == [(r.id, r.start, r.end) for r in full.records]


def test_a_topology_that_does_not_turn_onto_itself_runs_whole():
    """A ring whose one link is slower: the collective's graph is symmetric, the topology is
    not, so folding must refuse (a folded run would give every GPU the fast links)."""
    import networkx as nx

    from ficco_sim.topology import _checked, gpu_node
    gpu = load_gpu("h100")
    fair = load_topology("ring:8", gpu)
    g = nx.DiGraph(fair.graph)
    g[gpu_node(3)][gpu_node(4)]["bandwidth"] /= 4
    slow = _checked("ring:8 with one slow link", "ring", 8, g, "test")
    graph = collective_graph(gpu, slow, "all-gather", 64 << 20)
    got = folding(graph, slow)
    assert isinstance(got, str) and "does not turn onto itself" in got
    assert isinstance(folding(graph, fair), Folded)
    whole = simulate_graph(graph, gpu, slow, fold_ranks=False).makespan
    assert simulate_graph(graph, gpu, slow).makespan == whole
    assert whole > simulate_graph(graph, gpu, fair).makespan * 1.5


def test_a_folded_runs_timeline_makes_its_records_on_use_and_pickles_whole():
    import pickle
    gpu = load_gpu("h100")
    topo = load_topology("ring:8", gpu)
    g = collective_graph(gpu, topo, "all-reduce", 1 << 20)
    tl = simulate_graph(g, gpu, topo)
    assert tl._records is None                     # not made yet: the makespan needs none
    whole = simulate_graph(g, gpu, topo, fold_ranks=False)
    assert tl.makespan == pytest.approx(whole.makespan, rel=1e-12)
    back = pickle.loads(pickle.dumps(tl))
    assert [r.id for r in back.records] == [r.id for r in whole.records]
    assert back.makespan == tl.makespan and len(tl.records) == len(g.tasks)
