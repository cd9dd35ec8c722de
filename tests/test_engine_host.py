"""The host model of the CPU replay (``host`` in a profile), against its closed forms.

Ranks are processes on one host with ``cores`` cores, ``cores / ranks`` each. A transfer
costs ``c`` core-seconds per byte, half at each end, so alone it moves at
``min(link, share / (c / 2))`` and an exchange shares each rank's cores between its send and
its receive. Compute threads run first: transfers move only with the cores compute leaves
at both ends, so with no spare core a message waits for its sender's (or receiver's)
compute to end. Communication kernels hold no compute slot. Switching any of these off in
the engine turns a test here red.
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


def host_gpu(cores=2, host=True):
    g = ideal("cpu")
    return dataclasses.replace(
        g, host=HostSpec(cores, C) if host else None, hbm_bandwidth=1e15,
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


def test_compute_runs_first_and_transfers_take_the_cores_left():
    gpu = host_gpu()
    alone = end(graph(gemm(gpu, 0)), gpu, "g0")
    assert alone > LAT
    gr = graph(gemm(gpu, 0), gemm(gpu, 1), copy(0, 0, 1))
    tl = simulate_graph(gr, gpu, switch(2, LINK, LAT)).by_id()
    assert tl["g0"].end == pytest.approx(alone, rel=1e-9) and tl["g1"].end == pytest.approx(alone, rel=1e-9)
    # both cores compute: no byte moves until they are free, then a core at each end
    assert tl["x0"].end == pytest.approx(alone + B / min(LINK, 2 / C), rel=1e-9)
    # three cores, 1.5 a rank: half a core at each end moves bytes during the GEMMs, then 1.5
    moved = (alone - LAT) * min(LINK, 0.5 / (C / 2))
    assert 0 < moved < B
    assert end(gr, host_gpu(cores=3), "x0") == pytest.approx(alone + (B - moved) / min(LINK, 1.5 / (C / 2)),
                                                             rel=1e-9)


def test_a_message_waits_for_its_senders_compute_not_for_a_bystanders():
    gpu = host_gpu(cores=4)                       # a core per rank
    alone = end(graph(gemm(gpu, 1), ranks=4), gpu, "g1")
    gr = graph(gemm(gpu, 1), copy(0, 1, 0), copy(1, 2, 3), ranks=4)
    tl = simulate_graph(gr, gpu, switch(4, LINK, LAT)).by_id()
    assert tl["x0"].end == pytest.approx(alone + B / min(LINK, 2 / C), rel=1e-9)    # rank 1 computes
    assert tl["x1"].end == pytest.approx(LAT + B / min(LINK, 2 / C), rel=1e-9)      # rank 2 does not


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
