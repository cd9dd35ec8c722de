"""The host model of the CPU replay (``host`` in a profile), against its closed forms.

Ranks are processes on one host with ``cores`` cores, ``cores / ranks`` each. A transfer
costs ``c`` core-seconds per byte, half at each end, so alone it moves at
``min(link, share / (c / 2))`` and an exchange shares each rank's cores between its send and
its receive. Where a rank's compute thread and a message's thread want more than its share,
they split it evenly (the kernel's fair scheduler): the message moves at ``1 / c`` on a
1-core share and the compute runs at half speed meanwhile. Communication kernels hold no
compute slot. Each rank has one issuing thread: a compute op holds it while it runs; a
message is posted on it at both ends (``post_s + bytes x post_s_per_byte``) once no compute
op holds it, before the next compute op, and moves once both ends have posted it.
Switching any of these off in the engine turns a test here red.
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import ideal
from ficco_sim.engine.des import simulate_graph
from ficco_sim.gemm_model import plan_gemm
from ficco_sim.hardware import HostSpec
from ficco_sim.taskgraph import Kernel, Stream, TaskGraph, Transfer
from ficco_sim.topology import switch

LINK, LAT, C = 3e9, 100e-6, 1e-9         # gloo stream B/s, latency s, core-seconds per byte
B = 8e6


def host_gpu(cores=2, host=True, post=0.0, post_per_byte=0.0):
    g = ideal("cpu")
    return dataclasses.replace(
        g, host=HostSpec(cores, C, post_s=post, post_s_per_byte=post_per_byte) if host else None, hbm_bandwidth=1e15,
        dma=dataclasses.replace(g.dma, engines=64, bandwidth=LINK, command_overhead=0.0),
        comm_kernel=dataclasses.replace(g.comm_kernel, channels=1, channel_bandwidth=LINK))


def graph(*tasks, ranks=2):
    streams = [Stream(g, s, 0) for g in range(ranks) for s in ("compute", "comm", "copy0", "copy1")]
    return TaskGraph.build(ranks, streams, tasks)


def gemm(gpu, rank, m=256):
    p = plan_gemm(gpu, m, 512, 512, "float32")
    return Kernel(f"g{rank}", rank, "compute", "gemm", p.grid, p.block, p.block_time, p.block_hbm_bytes)


def copy(i, src, dst, engine=0):
    return Transfer(f"x{i}", src, dst, B, "dma", src, f"copy{engine}", dma_engine=engine)


def end(gr, gpu, tid):
    return simulate_graph(gr, gpu, switch(gr.num_gpus, LINK, LAT)).by_id()[tid].end


def test_a_transfer_moves_at_the_link_or_the_cores_it_may_use():
    assert end(graph(copy(0, 0, 1)), host_gpu(), "x0") == pytest.approx(LAT + B / min(LINK, 1 / (C / 2)), rel=1e-9)
    assert end(graph(copy(0, 0, 1)), host_gpu(host=False), "x0") == pytest.approx(LAT + B / LINK, rel=1e-9)


def test_an_exchange_shares_the_host_cores():
    gr = graph(copy(0, 0, 1), copy(1, 1, 0))
    assert end(gr, host_gpu(), "x0") == pytest.approx(LAT + B * C, rel=1e-9)     # a send and a receive per core
    assert end(gr, host_gpu(cores=8), "x0") == pytest.approx(LAT + B / LINK, rel=1e-9)   # cores to spare


def test_compute_and_a_message_split_a_ranks_cores_evenly():
    gpu = host_gpu()                          # 2 cores, 2 ranks: one core each
    alone = end(graph(gemm(gpu, 0, m=4096)), gpu, "g0")
    assert alone > LAT + B * C / 2            # the message ends while the GEMMs still run
    gr = graph(gemm(gpu, 0, m=4096), gemm(gpu, 1, m=4096), copy(0, 0, 1))
    tl = simulate_graph(gr, gpu, switch(2, LINK, LAT)).by_id()
    # after the path latency, half a core at each end moves the bytes at 1/c (below the link)
    # and each GEMM runs at half speed until they have crossed
    assert 1 / C < LINK
    assert tl["x0"].end == pytest.approx(LAT + B * C, rel=1e-9)
    assert tl["g0"].end == pytest.approx(alone + B * C / 2, rel=1e-9)
    assert tl["g1"].end == pytest.approx(alone + B * C / 2, rel=1e-9)
    # three cores, 1.5 a rank: each thread gets 0.75 of a core (neither can use more than the
    # other's leftover); the message moves at 0.75 / (c / 2) and the GEMMs run at 0.75
    tl = simulate_graph(gr, host_gpu(cores=3), switch(2, LINK, LAT)).by_id()
    span = B / (0.75 / (C / 2))
    assert tl["x0"].end == pytest.approx(LAT + span, rel=1e-9)
    assert tl["g0"].end == pytest.approx(alone + 0.25 * span, rel=1e-9)


def test_a_message_shares_its_senders_core_not_a_bystanders():
    gpu = host_gpu(cores=4)                       # a core per rank
    alone = end(graph(gemm(gpu, 1, m=4096), ranks=4), gpu, "g1")
    gr = graph(gemm(gpu, 1, m=4096), copy(0, 1, 0), copy(1, 2, 3), ranks=4)
    tl = simulate_graph(gr, gpu, switch(4, LINK, LAT)).by_id()
    assert alone > LAT + B * C / 2
    assert tl["x0"].end == pytest.approx(LAT + B * C, rel=1e-9)                     # rank 1 computes
    assert tl["x1"].end == pytest.approx(LAT + B / min(LINK, 2 / C), rel=1e-9)      # rank 2 does not
    assert tl["g1"].end == pytest.approx(alone + B * C / 2, rel=1e-9)


def test_a_communication_kernel_holds_no_compute_slot():
    gpu = host_gpu(cores=8)
    assert gpu.num_sms == 1 and gpu.sm.max_blocks == 1       # a comm block would take the only slot
    alone = end(graph(gemm(gpu, 0)), gpu, "g0")
    k = Kernel("c", 0, "comm", "comm", 1, gpu.comm_kernel.block, 0.0, 0.0, (), "comm")
    t = Transfer("s", 0, 1, B, "sm", 0, None, ("c",))
    tl = simulate_graph(graph(gemm(gpu, 0), k, t), gpu, switch(2, LINK, LAT)).by_id()
    assert tl["g0"].end == pytest.approx(alone, rel=1e-9)
    assert tl["s"].end == pytest.approx(LAT + B / LINK, rel=1e-9)
    # on a GPU (no host section) the same kernel does take the slot: the GEMM waits for it
    gpu_like = dataclasses.replace(gpu, host=None)
    tl = simulate_graph(graph(k, gemm(gpu_like, 0), t), gpu_like, switch(2, LINK, LAT)).by_id()
    assert tl["g0"].start >= tl["c"].end - 1e-12


def _sm_message(name, src, dst, deps=()):
    k = Kernel(f"c{name}", src, "comm", "comm", 1, ideal("cpu").comm_kernel.block, 0.0, 0.0, deps, "comm")
    r = Kernel(f"r{name}", dst, "comm", "comm", 1, ideal("cpu").comm_kernel.block, 0.0, 0.0, deps, "comm")
    return k, r, Transfer(f"s{name}", src, dst, B, "sm", src, None, (k.id, r.id))


def test_posting_a_message_takes_the_issuing_thread_before_the_next_compute_op():
    P, Q = 300e-6, 0.25e-9                   # s per message, s per byte
    gpu = host_gpu(cores=8, post=P, post_per_byte=Q)
    alone = end(graph(gemm(gpu, 0)), gpu, "g0")
    k, r, t = _sm_message(1, 0, 1)
    tl = simulate_graph(graph(gemm(gpu, 0), k, r, t), gpu, switch(2, LINK, LAT)).by_id()
    assert tl["g0"].end == pytest.approx(P + B * Q + alone, rel=1e-9)     # ready together: the post goes first
    assert tl["s1"].end == pytest.approx(P + B * Q + LAT + B / LINK, rel=1e-9)
    # a copy-engine message is posted at both its ends too
    tl = simulate_graph(graph(gemm(gpu, 1), copy(0, 0, 1)), gpu, switch(2, LINK, LAT)).by_id()
    assert tl["g1"].end == pytest.approx(P + B * Q + alone, rel=1e-9)
    assert tl["x0"].end == pytest.approx(P + B * Q + LAT + B / LINK, rel=1e-9)
    # on a GPU (no host section) a kernel's launch does not hold up another stream's GEMM
    gpu_like = dataclasses.replace(gpu, host=None)
    k, r, t = _sm_message(1, 0, 1)
    tl = simulate_graph(graph(gemm(gpu_like, 0), k, r, t), gpu_like, switch(2, LINK, LAT)).by_id()
    assert tl["g0"].start < P


def test_a_message_that_becomes_ready_during_a_compute_op_is_posted_when_it_ends():
    gpu = host_gpu(cores=8)                  # cores to spare: the GEMM does not slow the bytes
    alone = end(graph(gemm(gpu, 0, m=2048)), gpu, "g0")
    k1, r1, t1 = _sm_message(1, 0, 1)
    k2, r2, t2 = _sm_message(2, 0, 1, deps=("c1",))     # the second step waits for the first
    assert LAT + B / LINK < alone                        # ... which ends while the GEMM runs
    tl = simulate_graph(graph(k1, r1, t1, k2, r2, t2, gemm(gpu, 0, m=2048)), gpu, switch(2, LINK, LAT)).by_id()
    assert tl["s1"].end == pytest.approx(LAT + B / LINK, rel=1e-9)
    assert tl["s2"].end == pytest.approx(tl["g0"].end + LAT + B / LINK, rel=1e-9)


def test_each_message_moves_as_soon_as_both_its_ends_have_posted_it():
    P = 300e-6
    gpu = host_gpu(cores=16, post=P)          # cores to spare: only the posts hold the messages
    blk = ideal("cpu").comm_kernel.block
    # rank 0 posts a send and a receive (its uplink and its downlink), one per kernel, on its
    # one thread: a first
    ka = Kernel("ca", 0, "comm", "comm", 1, blk, 0.0, 0.0, (), "comm")
    kb = Kernel("cb", 0, "copy0", "comm", 1, blk, 0.0, 0.0, (), "comm")
    r1 = Kernel("r1", 1, "comm", "comm", 1, blk, 0.0, 0.0, (), "comm")
    r2 = Kernel("r2", 2, "comm", "comm", 1, blk, 0.0, 0.0, (), "comm")
    a = Transfer("a", 0, 1, B, "sm", 0, None, ("ca", "r1"))
    b = Transfer("b", 2, 0, B, "sm", 2, None, ("r2", "cb"))
    tl = simulate_graph(graph(ka, kb, r1, r2, a, b, ranks=3), gpu, switch(3, LINK, LAT)).by_id()
    assert tl["a"].end == pytest.approx(P + LAT + B / LINK, rel=1e-9)         # posted first at both ends
    assert tl["b"].end == pytest.approx(2 * P + LAT + B / LINK, rel=1e-9)     # rank 0 posts it second
