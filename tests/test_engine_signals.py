"""Tile-level signalling and fused epilogue stores, against their closed forms.

A tile signal fires when the producer GEMM's blocks covering the signalled rows are done:
with blocks dispatched in index order in waves of ``SMs x occupancy``, that is wave
``ceil(blocks / slots)`` of ``ceil(grid / slots)``. A fused GEMM whose blocks store their
tiles to a peer at a bounded rate (``gemm.peer_rate``: each has a few KiB in flight) holds its
SMs until the bytes land: each wave computes, then its stores cross the link, so the kernel
takes its isolated time plus its remote bytes over the link. Posted stores (no such rate)
leave the SMs to the next wave: math and stores form a two-stage pipeline.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from conftest import ideal
from ficco_sim.engine.closed_form import closed_form_timeline
from ficco_sim.engine.des import simulate_graph
from ficco_sim.gemm_model import GemmShape, isolated_time, plan_gemm, tile_bytes, tile_prefix_blocks, waves_time
from ficco_sim.schedules import lower
from ficco_sim.taskgraph import Kernel, Stream, TaskGraph, Transfer
from ficco_sim.hardware import load_gpu
from ficco_sim.topology import load_topology, switch
from ficco_sim.workload import Scenario

BW, LAT = 100e9, 2e-6
TOPO = switch(2, BW, LAT)
M, N, K = 8192, 4096, 2048


def producer(gpu, stores=()):
    plan = plan_gemm(gpu, M, N, K, "float16")
    return plan, Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes,
                        gemm=GemmShape(M, N, K, "float16"), stores=tuple(stores))


def graph(*tasks):
    streams = [Stream(g, s, 0) for g in (0, 1) for s in ("compute", "comm", "copy0")]
    return TaskGraph.build(2, streams, tasks)


def signalled_copy(share, gpu_of_consumer=1):
    return Transfer(f"x{share}", 0, 1, 1.0, "dma", gpu_of_consumer, "copy0", signals=(("g", share),))


def expected_signal(gpu, plan, share, latency):
    slots = gpu.num_sms * plan.occupancy
    need = min(plan.grid, tile_prefix_blocks(plan.tile, M, N, share))
    # the waves up to the one holding the last covering block, each the roofline of its math and traffic
    done = min(plan.grid, math.ceil(need / slots) * slots)
    return float(waves_time(gpu, done, plan.occupancy, plan.block_time, plan.block_hbm_bytes, gemm=True)) + latency


@pytest.mark.parametrize("share", [0.05, 0.25, 0.5, 0.75, 1.0])
def test_a_signalled_consumer_starts_when_the_covering_tiles_are_done(share):
    gpu = ideal()
    plan, g = producer(gpu)
    assert math.ceil(plan.grid / (gpu.num_sms * plan.occupancy)) >= 4      # several waves to tell apart
    gr = graph(g, signalled_copy(share, gpu_of_consumer=1))
    want = expected_signal(gpu, plan, share, LAT)                            # the flag crosses GPU 0 -> 1
    des = simulate_graph(gr, gpu, TOPO).by_id()[f"x{share}"].start
    cf = closed_form_timeline(gr, gpu, TOPO).by_id()[f"x{share}"].start
    assert des == pytest.approx(want, rel=1e-9)
    assert cf == pytest.approx(want, rel=1e-9)


def test_a_local_signal_pays_no_link_latency_and_follows_the_tile_order():
    gpu = ideal()
    plan, g = producer(gpu)
    local = Transfer("x", 0, 1, 1.0, "dma", 0, "copy0", signals=(("g", 0.25),))
    tl = simulate_graph(graph(g, local), gpu, TOPO).by_id()
    assert tl["x"].start == pytest.approx(expected_signal(gpu, plan, 0.25, 0.0), rel=1e-9)
    assert tl["x"].start < tl["g"].end / 2                # long before the GEMM ends


def test_every_tile_signal_of_a_fused_schedule_fires_before_its_gemm_ends():
    sc = Scenario("gemm-rs", 4, 16384, 4096, 4096)
    tl = simulate_graph(lower(sc, "fused-dma", "h100", "switch:4"), "h100", "switch:4").by_id()
    for g in range(4):
        sends = sorted(tl[f"rs.s{i}.{g}->{(g + 1 + i) % 4}"].start for i in range(3))
        assert sends[0] < sends[1] < sends[2] < tl[f"gemm{g}"].end      # chunk by chunk, in tile order


@pytest.mark.parametrize("share", [0.5, 0.3])
def test_epilogue_stores_add_their_bytes_over_the_link_and_hold_the_sms(share):
    """The first ``share`` of the rows go to GPU 1: exactly those rows' bytes, a row band
    that straddles the cut sending GPU 1 its rows only (0.3: 2457.6 rows, not whole bands).
    (Blocks move their tiles at a rate each far above the link here: the link bounds every wave.)"""
    gpu = ideal(gemm=dataclasses.replace(ideal().gemm, peer_rate=1e15))
    plan, plain = producer(gpu)
    _, fused = producer(gpu, stores=((share, 1), (1.0, 0)))
    alone = isolated_time(gpu, plan, launch=False)
    remote = share * M * N * 2
    if share == 0.5:
        assert remote == pytest.approx(tile_prefix_blocks(plan.tile, M, N, 0.5) * tile_bytes(plan.tile, "float16"))
    want = alone + remote / BW
    des = simulate_graph(graph(fused), gpu, TOPO).makespan
    cf = closed_form_timeline(graph(fused), gpu, TOPO).makespan
    assert simulate_graph(graph(plain), gpu, TOPO).makespan == pytest.approx(alone, rel=1e-9)
    assert des == pytest.approx(want, rel=1e-6)
    assert cf == pytest.approx(want, rel=1e-6)


def test_a_wave_of_storing_blocks_moves_at_most_blocks_times_the_peer_rate():
    """Each block has a few KiB in flight: a wave of b blocks stores at b x peer_rate when
    that is below the link, so every wave adds one tile over the block's rate."""
    rate = 0.5e9
    gpu = ideal(gemm=dataclasses.replace(ideal().gemm, peer_rate=rate))
    m = 128 * 66                               # 66 x 16 tiles of 128 x 256: 8 full waves of 132
    plan = plan_gemm(gpu, m, N, K, "float16")
    slots = gpu.num_sms * plan.occupancy
    assert plan.grid % slots == 0 and slots * rate < BW                 # full waves, block-bound
    fused = Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes,
                   gemm=GemmShape(m, N, K, "float16"), stores=((1.0, 1),))
    want = isolated_time(gpu, plan, launch=False) + plan.grid // slots * tile_bytes(plan.tile, "float16") / rate
    assert simulate_graph(graph(fused), gpu, TOPO).makespan == pytest.approx(want, rel=1e-6)
    assert closed_form_timeline(graph(fused), gpu, TOPO).makespan == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("bw", [100e9, 2000e9])         # store-bound, math-bound
def test_posted_stores_leave_the_sms_to_the_next_wave_a_two_stage_pipeline(bw):
    """Ampere's epilogue writes to peer memory are posted: the block's SM takes the next tile
    while its bytes cross, so W full waves of math c and stores s each take
    max(W c + s, W s + c), not W (c + s). (Flux on 8 x A100, bytedance/flux#36: the fused
    GEMM + reduce-scatter 0.52 ms against 0.77 ms for cuBLAS then NCCL.)"""
    gpu = ideal(gemm=dataclasses.replace(ideal().gemm, peer_rate=math.inf))
    topo = switch(2, bw, LAT)
    m = 128 * 66                               # 66 x 16 tiles of 128 x 256: 8 full waves of 132
    plan = plan_gemm(gpu, m, N, K, "float16")
    waves = plan.grid // (gpu.num_sms * plan.occupancy)
    assert plan.grid % (gpu.num_sms * plan.occupancy) == 0 and waves == 8
    fused = Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes,
                   gemm=GemmShape(m, N, K, "float16"), stores=((1.0, 1),))
    c_all, s_all = isolated_time(gpu, plan, launch=False), m * N * 2 / bw
    want = max(c_all + s_all / waves, s_all + c_all / waves)
    held = c_all + s_all                       # what holding the SMs until the bytes land would take
    assert abs(want - held) > 0.1 * want       # the two mechanisms are far apart here
    assert simulate_graph(graph(fused), gpu, topo).makespan == pytest.approx(want, rel=1e-3)
    assert closed_form_timeline(graph(fused), gpu, topo).makespan == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("arrive", [0.25, 1.0, 2.0])     # in units of the GEMM's own time
def test_rows_waiting_to_arrive_hold_back_only_their_tiles(arrive):
    """An all-gather GEMM (Flux's, symmetric memory's) spins on a flag per chunk: its first
    half of rows are here, its second half arrive by a copy at ``a``. The first half's 4 full
    waves run at once, the rest once the copy lands: it ends at max(C, a + C / 2), in both
    engines (decomposed into two GEMMs it would pay each piece's launch and tail)."""
    gpu = ideal()
    m = 128 * 66                               # 66 x 16 tiles of 128 x 256: 8 full waves of 132
    plan = plan_gemm(gpu, m, N, K, "float16")
    assert plan.grid // (gpu.num_sms * plan.occupancy) == 8
    alone = isolated_time(gpu, plan, launch=False)
    copy = Transfer("x", 1, 0, arrive * alone * BW, "dma", 0, "copy0")
    fused = Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes,
                   gemm=GemmShape(m, N, K, "float16"), waits=((0.5, ""), (1.0, "x")))
    gr = graph(copy, fused)
    landed = simulate_graph(gr, gpu, TOPO).by_id()["x"].end
    want = max(alone, landed + alone / 2)
    assert simulate_graph(gr, gpu, TOPO).makespan == pytest.approx(want, rel=1e-6)
    assert closed_form_timeline(gr, gpu, TOPO).makespan == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("gpu, topo, shape", [("a100", "switch:8", (1000, 1000, 1000)),   # 256 blocks, waves of 216
                                              ("mi300x", "ring:5", (80, 7168, 8192)),      # bands under a wave
                                              ("h100", "switch:8", (4096, 7168, 8192))])
def test_a_fused_all_gather_gemm_agrees_between_the_engines(gpu, topo, shape):
    """The closed form runs the blocks from a band's first on, once the band lands, as a grid
    of their own (not whole waves: a last band of 48 blocks takes one block time, not the
    GEMM's); the DES spreads each band's blocks over the emptiest SMs (the leftovers went to
    the lowest-numbered SMs that fit one, stacking band on band while others idled)."""
    sc = Scenario("ag-gemm", int(topo.split(":")[1]), *shape)
    graph_ = lower(sc, "fused-dma", gpu, topo)
    des = simulate_graph(graph_, gpu, topo).makespan
    assert closed_form_timeline(graph_, gpu, topo).makespan == pytest.approx(des, rel=0.09)


def test_rows_waiting_to_arrive_are_checked():
    gpu = ideal()
    plan = plan_gemm(gpu, M, N, K, "float16")
    waiting = lambda waits: Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time,  # noqa: E731
                                   plan.block_hbm_bytes, gemm=GemmShape(M, N, K, "float16"), waits=waits)
    copy = Transfer("x", 1, 0, 1.0, "dma", 0, "copy0")
    with pytest.raises(ValueError, match="unknown or comes later"):
        graph(waiting(((0.5, ""), (1.0, "x"))), copy)
    with pytest.raises(ValueError, match="rising to 1"):
        graph(copy, waiting(((0.5, "x"), (0.25, ""))))


def test_local_stores_cost_nothing():
    gpu = ideal()
    plan, fused = producer(gpu, stores=((1.0, 0),))
    assert simulate_graph(graph(fused), gpu, TOPO).makespan == pytest.approx(
        isolated_time(gpu, plan, launch=False), rel=1e-9)


@pytest.mark.parametrize("gpu, topo", [("h100", "ring:8"), ("a40", "ring:8"), ("mi300x", "fc:8"),
                                       ("mi250x", "mi250x-8gcd"), ("a100", "switch:8")])
def test_every_ranks_stores_share_the_links_they_cross_in_both_engines(gpu, topo):
    """Every rank of a fused GEMM + reduce-scatter stores its peers' rows, rank g's i-th peer
    rank 0's plus g: on a ring a store of h hops shares each link with h - 1 other ranks'
    (the closed form read 49% fast there, MI250X's GCD graph 27%, when each rank had its
    links to itself). Held stores (H100's rate per block) and posted ones alike."""
    sc = Scenario("gemm-rs", 8, 4096, 8192, 1024, "float16")
    graph_ = lower(sc, "fused-st", gpu, topo)
    des = simulate_graph(graph_, gpu, topo).makespan
    assert closed_form_timeline(graph_, gpu, topo).makespan == pytest.approx(des, rel=0.06)


@pytest.mark.parametrize("topo", ["switch:4", "ring:4"])
def test_a_lone_storing_gemm_shares_its_links_with_no_one(topo):
    """One GEMM stores a quarter of its rows to each of three peers, which store nothing: its
    links carry its stores alone, and nothing arrives to slow its math (the closed form read
    it +21% on a switch and +43% on a ring when it took every rank to store alike)."""
    gpu = load_gpu("a100")
    plan = plan_gemm(gpu, 8192, 8192, 1024, "float16")
    k = Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes,
               gemm=GemmShape(8192, 8192, 1024, "float16"), stores=((0.25, 1), (0.5, 2), (0.75, 3), (1.0, 0)))
    gr = TaskGraph.build(4, [Stream(g, "compute", 0) for g in range(4)], [k])
    topology = load_topology(topo, gpu)
    des = simulate_graph(gr, gpu, topology).makespan
    assert closed_form_timeline(gr, gpu, topology).makespan == pytest.approx(des, rel=0.08)


@pytest.mark.parametrize("sched", ["fused-st", "fused-dma", "fused-sm"])
def test_fused_schedules_agree_between_the_engines(sched):
    sc = Scenario("gemm-rs", 8, 16384, 8192, 4096)
    des = simulate_graph(lower(sc, sched, "h100", "switch:8"), "h100", "switch:8").makespan
    cf = closed_form_timeline(lower(sc, sched, "h100", "switch:8"), "h100", "switch:8").makespan
    assert cf == pytest.approx(des, rel=0.1)


def test_bad_signals_are_refused():
    gpu = ideal()
    _, g = producer(gpu)
    with pytest.raises(ValueError, match="not an earlier GEMM"):
        graph(Transfer("x", 0, 1, 1.0, "dma", 0, "copy0", signals=(("g", 0.5),)), g)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        graph(g, Transfer("x", 0, 1, 1.0, "dma", 0, "copy0", signals=(("g", 1.5),)))
    with pytest.raises(ValueError, match="rising to 1"):
        graph(producer(gpu, stores=((0.5, 1),))[1])
