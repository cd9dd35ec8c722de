"""A collective lowered for GPU 0 alone (``collective_folded``) is exactly the whole graph
folded (``engine.fold.folding``): the same tasks, the same peers, the same times and records."""

from __future__ import annotations

import pytest

from ficco_sim.engine.des import simulate_folded, simulate_graph
from ficco_sim.engine.fold import folding
from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules.builder import GraphBuilder
from ficco_sim.simulate import collective_folded, collective_graph, collective_time
from ficco_sim.topology import load_topology

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


def _cases():
    for topo in ("ring:2", "ring:5", "switch:4", "switch:6", "fc:3", "fc:8", "fc:17"):
        for kind in KINDS:
            for engine in ("sm", "dma"):
                for algo in ("ring", "direct", "nvls"):
                    yield topo, kind, engine, algo


@pytest.mark.parametrize("topo,kind,engine,algo", list(_cases()))
def test_lowered_for_one_gpu_is_the_whole_graph_folded(topo, kind, engine, algo):
    gpu = load_gpu("h100")
    t = load_topology(topo, gpu)
    nbytes = 3 << 20
    try:
        whole = collective_graph(gpu, t, kind, nbytes, engine=engine, algorithm=algo)
    except InputError:
        return          # no such algorithm here
    made = collective_folded(gpu, t, kind, nbytes, engine=engine, algorithm=algo)
    ref = folding(whole, t)
    if made is None:      # only where the whole graph does not fold either, or rings of many strides
        assert isinstance(ref, str) or (topo == "fc:8" and algo == "ring")
        return
    assert not isinstance(ref, str), ref
    assert made.ranks == ref.ranks and made.pairs == ref.pairs
    assert {x.id: x for x in made.graph.tasks} == {x.id: x for x in ref.graph.tasks}
    a = simulate_folded(made, gpu, t)
    b = simulate_graph(whole, gpu, t)
    assert a.makespan == b.makespan and a.solves > 0
    assert [(r.id, r.start, r.end, r.src, r.dst) for r in a.records] == \
        [(r.id, r.start, r.end, r.src, r.dst) for r in b.records]


def test_collective_time_lowers_one_gpu_at_scale():
    """A 256-GPU ring all-reduce: 1,000 tasks lowered, not 130,000; same time as the whole graph."""
    gpu = load_gpu("h100")
    t = load_topology("ring:64", gpu)
    made = collective_folded(gpu, t, "all-reduce", 64 << 20, algorithm="ring")
    assert made is not None and len(made.graph.tasks) == 2 * 63 + 1
    whole = collective_graph(gpu, t, "all-reduce", 64 << 20, algorithm="ring")
    assert collective_time(gpu, t, "all-reduce", 64 << 20, algorithm="ring") == \
        simulate_graph(whole, gpu, t, record=False).makespan


def test_a_lowering_whose_gpus_differ_is_not_folded():
    """GPU 1 makes a transfer to its second neighbour where GPU 0 made one to its first: the
    sequences do not match turned, so there is no GPU-0 share (the whole graph must run)."""
    gpu = load_gpu("h100")
    b = GraphBuilder(gpu, 4, fold=True)
    for g in range(4):
        k = b.comm_kernel(f"k{g}", g).id
        peer = (g + (2 if g == 1 else 1)) % 4
        b.sm_transfer(f"t{g}", g, peer, 1024.0, (k,), step=("s",))
    assert b.build_folded(lambda: "never") is None
    with pytest.raises(ValueError):
        b.build()


def test_a_lowering_whose_dependencies_differ_is_not_folded():
    """Same peers, same sizes, but GPU 2's second transfer waits on its kernel where the others'
    wait on their first transfer: the check compares what each task names, not only its shape."""
    gpu = load_gpu("h100")
    b = GraphBuilder(gpu, 4, fold=True)
    for g in range(4):
        k = b.comm_kernel(f"k{g}", g).id
        first = b.sm_transfer(f"a{g}", g, (g + 1) % 4, 1024.0, (k,), step=("s", 1)).id
        b.sm_transfer(f"b{g}", g, (g + 1) % 4, 1024.0, (k,), step=("s", 2), deps=(k,) if g == 2 else (first,))
    assert b.build_folded(lambda: "never") is None
