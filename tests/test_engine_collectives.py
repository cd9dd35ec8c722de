"""Collectives in the discrete-event engine against alpha-beta closed forms."""

from __future__ import annotations

import pytest

from conftest import ideal
from ficco_sim import collective_time
from ficco_sim.topology import fully_connected, ring, switch

MB = 1 << 20


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("engine", ["sm", "dma"])
def test_ring_all_gather_is_n_minus_1_steps_of_alpha_plus_s_over_b(n, engine):
    gpu = ideal()
    bw, alpha, shard = 100e9, 3e-6, 16 * MB
    t = collective_time(gpu, ring(n, bw, alpha), "all-gather", shard, engine=engine, algorithm="ring")
    expected = (n - 1) * (alpha + shard / bw)
    assert t == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("engine", ["sm", "dma"])
def test_fully_connected_direct_all_gather_is_one_step(engine):
    gpu = ideal()
    gpu = ideal(dma=type(gpu.dma)(engines=8, bandwidth=gpu.dma.bandwidth, command_overhead=0.0))
    bw, alpha, shard = 48e9, 2e-6, 8 * MB
    t = collective_time(gpu, fully_connected(8, bw, alpha), "all-gather", shard, engine=engine, algorithm="direct")
    assert t == pytest.approx(alpha + shard / bw, rel=0.01)


def test_copy_engines_limit_direct_all_gather_concurrency():
    """Three copy engines move seven peers' shards in ceil(7/3) = 3 rounds."""
    gpu = ideal()  # h100: 3 engines
    bw, shard = 48e9, 8 * MB
    t = collective_time(gpu, fully_connected(8, bw, 0.0), "all-gather", shard, engine="dma", algorithm="direct")
    assert t == pytest.approx(3 * shard / bw, rel=0.01)


def test_switch_direct_all_gather_is_bound_by_the_uplink():
    gpu = ideal()
    bw, alpha, shard = 300e9, 2e-6, 16 * MB      # below the comm kernel's channels' rate
    t = collective_time(gpu, switch(8, bw, alpha), "all-gather", shard, algorithm="direct")
    # Each GPU pushes 7 shards through its one uplink; the two hops add up to alpha.
    assert t == pytest.approx(alpha + 7 * shard / bw, rel=0.01)
    ring_t = collective_time(gpu, switch(8, bw, alpha), "all-gather", shard, algorithm="ring")
    assert ring_t == pytest.approx(7 * (alpha + shard / bw), rel=0.01)


def test_ring_reduce_scatter_and_all_reduce():
    gpu = ideal()
    n, bw, alpha, size = 4, 100e9, 1e-6, 64 * MB
    rs = collective_time(gpu, ring(n, bw, alpha), "reduce-scatter", size, algorithm="ring")
    assert rs == pytest.approx((n - 1) * (alpha + size / n / bw), rel=0.01)
    ar = collective_time(gpu, ring(n, bw, alpha), "all-reduce", size, algorithm="ring")
    assert ar == pytest.approx(2 * (n - 1) * (alpha + size / n / bw), rel=0.01)


def test_links_are_shared_fairly_when_routes_overlap():
    """On a ring, direct all-to-all routes several flows over each link: the busiest link
    sets the time (max-min sharing), so it is slower than the same bytes on a switch."""
    gpu = ideal()
    n, bw, size = 4, 100e9, 12 * MB
    t_ring = collective_time(gpu, ring(n, bw, 0.0), "all-to-all", size)
    # Per GPU, 3 MiB to each peer; clockwise links carry the 1-hop flow plus half of the
    # 2-hop traffic routed that way: load = 3 MiB x (1 + 1) = 6 MiB per link direction... at
    # least 2 flows per link means at least 2 x 3 MiB / bw.
    assert t_ring >= 2 * (size / n) / bw * 0.99
    t_switch = collective_time(gpu, switch(n, 3 * bw, 0.0), "all-to-all", size)
    assert t_switch == pytest.approx(3 * (size / n) / (3 * bw), rel=0.01)


def test_send_recv_follows_the_route():
    gpu = ideal()
    t = collective_time(gpu, ring(8, 50e9, 1e-6), "send-recv", 8 * MB)
    assert t == pytest.approx(1e-6 + 8 * MB / 50e9, rel=0.01)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_protocols_and_the_call_floor_follow_their_closed_form(sim):
    """A collective call pays the comm kernel's launch floor once, and every ring step the
    latency of the protocol its size picks, sending that protocol's flags with the payload
    (NCCL's LL / Simple). Switching either off in an engine breaks this test."""
    import dataclasses

    from ficco_sim.hardware import Protocol
    base = ideal()
    protos = (Protocol("LL", 1e-6, 0.5), Protocol("Simple", 10e-6, 1.0))
    gpu = dataclasses.replace(base, comm_kernel=dataclasses.replace(base.comm_kernel, launch=7e-6, protocols=protos))
    n, bw, alpha = 4, 100e9, 2e-6
    for shard in (4096, 64 * MB):
        p = protos[gpu.comm_kernel.protocol_index(shard)]
        assert p.name == ("LL" if shard == 4096 else "Simple")
        step = alpha + p.latency + shard / p.efficiency / bw
        ag = collective_time(gpu, ring(n, bw, alpha), "all-gather", shard, algorithm="ring", sim=sim)
        assert ag == pytest.approx(7e-6 + (n - 1) * step, rel=1e-6)
        ar = collective_time(gpu, ring(n, bw, alpha), "all-reduce", shard * n, algorithm="ring", sim=sim)
        assert ar == pytest.approx(7e-6 + 2 * (n - 1) * step, rel=1e-6)   # one call: one floor


@pytest.mark.parametrize("n", [3, 5, 7, 8, 9, 10, 12, 16, 24])
def test_fully_connected_rings_are_link_disjoint_hamiltonian_cycles(n):
    from ficco_sim.schedules.collectives import disjoint_rings
    rings = disjoint_rings(n)
    links = [(r[i], r[(i + 1) % n]) for r in rings for i in range(n)]
    assert all(sorted(r) == list(range(n)) for r in rings)        # every GPU once per ring
    assert len(links) == len(set(links))                          # no link used twice
    assert rings[0] == tuple(range(n))
    if n <= 16:
        assert len(rings) == n - 1                                # every directed link (Tillson: n != 4, 6)


@pytest.mark.parametrize("n,engine", [(8, "sm"), (8, "dma"), (5, "dma"), (6, "dma")])
def test_ring_on_fully_connected_uses_every_link(n, engine):
    """A ring collective on fc:N runs the disjoint rings side by side, each with 1/R of the
    data: with one copy engine per ring, exactly (n-1) steps of (alpha + s/(R b))."""
    from ficco_sim.schedules.collectives import disjoint_rings
    bw, alpha, shard = 48e9, 2e-6, 8 * MB
    gpu = ideal()
    gpu = ideal(dma=type(gpu.dma)(engines=16, bandwidth=gpu.dma.bandwidth, command_overhead=0.0))
    R = len(disjoint_rings(n))
    t = collective_time(gpu, fully_connected(n, bw, alpha), "all-gather", shard, engine=engine, algorithm="ring")
    assert t == pytest.approx((n - 1) * (alpha + shard / R / bw), rel=0.01)
    one = collective_time(gpu, ring(n, bw, alpha), "all-gather", shard, engine=engine, algorithm="ring")
    assert t < one / (R - 0.5)


@pytest.mark.parametrize("engine", ["sm", "dma"])
def test_ring_on_four_fully_connected_gpus_runs_every_order(engine):
    """No three rings of 4 GPUs are link-disjoint (Tillson), so a ring collective on fc:4 runs all
    six orders, as NCCL does there (each on 4 of its 24 channels, logged in
    validation/nccl-tests/h100x4fc_odissei_all_reduce.txt): every link carries two of the six
    ring shares, each step is alpha + 2 (s / 6) / b. The two link-disjoint rings alone would
    leave the diagonals idle: alpha + s / (2 b)."""
    from ficco_sim.schedules.rings import ring_orders
    bw, alpha, shard, n = 48e9, 2e-6, 6 * MB, 4
    gpu = ideal()
    gpu = ideal(dma=type(gpu.dma)(engines=16, bandwidth=gpu.dma.bandwidth, command_overhead=0.0))
    topo = fully_connected(n, bw, alpha)
    rings = ring_orders(topo)
    links = [(r[i], r[(i + 1) % n]) for r in rings for i in range(n)]
    assert len(rings) == 6 and all(links.count(x) == 2 for x in set(links)) and len(set(links)) == n * (n - 1)
    t = collective_time(gpu, topo, "all-gather", shard, engine=engine, algorithm="ring")
    assert t == pytest.approx((n - 1) * (alpha + 2 * shard / 6 / bw), rel=0.01)


@pytest.mark.parametrize("kind,schedule", [("ag-gemm", "none"), ("gemm-rs", "none"), ("ar-par-gemm", "none"),
                                           ("ar-par-gemm", "par-sm"), ("ag-par-gemm", "par-dma")])
def test_multi_ring_collectives_move_the_right_rows(kind, schedule):
    from ficco_sim import Scenario, lower
    from ficco_sim.validate.executor import Job, ReplayOptions, replay
    jobs = []
    for n in (4, 5, 8):
        sc = Scenario(kind, n, 8 * n, 5, 3, dtype="float32")
        g = lower(sc, schedule, "h100", f"fc:{n}", algorithm="ring")
        assert any(".r1" in t.id for t in g.transfers)           # more than one ring
        jobs.append(Job(f"{kind}/{schedule}/{n}", g))
    results = replay(jobs, ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1))
    assert [r.name for r in results if not r.correct] == []


def _two_islands(order: list[int], island_bw=100e9, uplink_bw=20e9, alpha=2e-6):
    """Two islands of GPUs (all-to-all fast links inside), each island behind its own
    switch, the switches joined by one slower link (two nodes joined by one NIC); GPU ids
    ``order`` (its first half forms one island)."""
    import networkx as nx
    from ficco_sim.topology import Topology, gpu_node
    g = nx.DiGraph()
    islands = (order[:len(order) // 2], order[len(order) // 2:])
    for sw, members in zip(("swA", "swB"), islands):
        for a in members:
            g.add_edge(gpu_node(a), sw, bandwidth=island_bw, latency=alpha)
            g.add_edge(sw, gpu_node(a), bandwidth=island_bw, latency=alpha)
            for b in members:
                if a != b:
                    g.add_edge(gpu_node(a), gpu_node(b), bandwidth=island_bw, latency=alpha)
    g.add_edge("swA", "swB", bandwidth=uplink_bw, latency=alpha)
    g.add_edge("swB", "swA", bandwidth=uplink_bw, latency=alpha)
    return Topology("two-islands", "custom", len(order), g)


def _ring_step(topo, ring_order) -> float:
    """Seconds per byte of one ring step: the busiest link's crossings over its bandwidth."""
    from collections import Counter
    n = len(ring_order)
    crossing = Counter(e for i in range(n) for e in topo.path_links(ring_order[i], ring_order[(i + 1) % n]))
    return max(c / topo.graph.edges[e]["bandwidth"] for e, c in crossing.items())


@pytest.mark.parametrize("n", [6, 12])
def test_custom_topology_ring_goes_through_each_island_before_crossing(n):
    """On islands joined by one slow link, the ring NCCL's search would build crosses between
    islands twice (once each way), whatever the GPU numbering: at 6 GPUs the least-loaded
    ring of all orders (brute force), at 12 the greedy ring."""
    import itertools
    from ficco_sim.schedules.collectives import ring_orders
    topo = _two_islands([*range(0, n, 2), *range(1, n, 2)])      # even ids one island, odd the other
    (r,) = ring_orders(topo)
    assert sorted(r) == list(range(n)) and r[0] == 0
    crossings = sum((r[i] % 2) != (r[(i + 1) % n] % 2) for i in range(n))
    assert crossings == 2
    if n <= 8:
        best = min(_ring_step(topo, (0, *p)) for p in itertools.permutations(range(1, n)))
        assert _ring_step(topo, r) == pytest.approx(best, rel=1e-12)
    assert _ring_step(topo, tuple(range(n))) == pytest.approx(n / 2 * _ring_step(topo, r))  # id order: n crossings


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather", "reduce-scatter"])
def test_auto_collective_on_islands_does_not_depend_on_gpu_numbering(kind):
    """``auto`` on a custom topology runs NCCL's ring (not direct), on the searched order: the
    islands numbered contiguously or interleaved give the same time, 3x faster than a ring in
    id order over the interleaved numbering would be."""
    from ficco_sim.schedules.collectives import pick_algorithm
    assert pick_algorithm("auto", kind, "custom") == "ring"
    gpu, size = ideal(), 48 * MB
    contiguous = collective_time(gpu, _two_islands([0, 1, 2, 3, 4, 5]), kind, size)
    interleaved = collective_time(gpu, _two_islands([0, 2, 4, 1, 3, 5]), kind, size)
    assert interleaved == pytest.approx(contiguous, rel=1e-9)
    assert contiguous == pytest.approx(collective_time(gpu, _two_islands([0, 1, 2, 3, 4, 5]), kind, size,
                                                       algorithm="ring"), rel=1e-12)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_a_copy_engine_schedule_queues_its_copies_on_c_engines(sim):
    """``par-dma-c1``: one copy stream a GPU (RCCL's zero-CTA all-gather), so the seven peers'
    shards go one after another, 7 s / b; ``c4``: two rounds; by default all eight engines, one."""
    from ficco_sim import Scenario, simulate
    from ficco_sim.errors import InputError
    gpu = ideal()
    gpu = ideal(dma=type(gpu.dma)(engines=8, bandwidth=gpu.dma.bandwidth, command_overhead=0.0))
    bw, topo = 48e9, fully_connected(8, 48e9, 0.0)
    sc = Scenario("ag-par-gemm", 8, 8192, 256, 4096, "bfloat16")       # X's shard: 1024 x 4096 bf16
    shard = 1024 * 4096 * 2
    for sched, rounds in (("par-dma", 1), ("par-dma-c4", 2), ("par-dma-c1", 7)):
        tl = simulate(sc, sched, gpu, topo, engine=sim).timeline
        comm = tl.of_role("comm", 0) if sim == "des" else [r for r in tl.records if r.role == "comm" and r.gpu == 0]
        assert max(r.end for r in comm) - min(r.start for r in comm) == pytest.approx(rounds * shard / bw, rel=0.02)
    with pytest.raises(InputError, match="has 8"):
        simulate(sc, "par-dma-c9", gpu, topo)
