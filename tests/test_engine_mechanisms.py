"""One test per engine mechanism that no other test could see switched off (see
``benchmarks/mutants.py``, which switches each off in a copy and runs the suite)."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import ideal
from ficco_sim import Scenario, lower
from ficco_sim.engine.des import simulate_graph
from ficco_sim.gemm_model import plan_gemm
from ficco_sim.hardware import BlockShape
from ficco_sim.schedules.builder import GraphBuilder
from ficco_sim.taskgraph import Stream, TaskGraph, Transfer
from ficco_sim.topology import fully_connected, ring

MB = 1 << 20
KIB = 1024


def test_shaping_adds_shared_memory_to_every_gemm_block_and_lowers_occupancy():
    """``smem<N>k``: every GEMM block asks N KiB more, so fewer fit on an SM."""
    gpu = ideal("h100")
    sc = Scenario("ag-gemm", 4, 8192, 4096, 4096)
    plain = [k for k in lower(sc, "shard-p2p-sm", gpu, "switch:4").kernels if k.kind == "gemm"]
    shaped = [k for k in lower(sc, "shard-p2p-sm-smem16k", gpu, "switch:4").kernels if k.kind == "gemm"]
    assert len(plain) == len(shaped)
    for a, b in zip(plain, shaped):
        assert b.block.smem == a.block.smem + 16 * KIB and b.gemm.extra_smem == 16 * KIB
    base = plan_gemm(gpu, 2048, 4096, 4096, "float16")
    more = plan_gemm(gpu, 2048, 4096, 4096, "float16", extra_smem=16 * KIB)
    assert more.occupancy <= base.occupancy


def test_one_command_at_a_time_per_copy_engine():
    """Two copies queued on one copy engine from two streams run one after the other; on two
    engines, side by side (each to its own peer over its own link)."""
    gpu = ideal("h100")
    topo = fully_connected(3, 50e9, 0.0)
    size = 64 * MB

    def graph(engines):
        streams = [Stream(0, "a", 0), Stream(0, "b", 0)]
        tasks = [Transfer("x", 0, 1, size, "dma", 0, "a", (), engines[0]),
                 Transfer("y", 0, 2, size, "dma", 0, "b", (), engines[1])]
        return TaskGraph.build(3, streams, tasks)
    one = simulate_graph(graph((0, 0)), gpu, topo).makespan
    two = simulate_graph(graph((0, 1)), gpu, topo).makespan
    per = size / min(50e9, gpu.dma.bandwidth)
    assert two == pytest.approx(per, rel=1e-6)
    assert one == pytest.approx(2 * per, rel=1e-6)


def test_sm_transfers_move_only_as_fast_as_their_resident_channels():
    """A comm kernel of 4 channels on a 2-SM GPU whose SM holds one channel block: only 2
    channels are resident, so the transfer moves at 2 x channel bandwidth, not 4 x."""
    base = ideal("h100")
    big = BlockShape(threads=base.sm.max_threads, registers=16, smem=0)    # one block fills an SM
    gpu = dataclasses.replace(base, num_sms=2, comm_kernel=dataclasses.replace(base.comm_kernel, block=big))
    topo = ring(2, 1e15, 0.0)                                                # links never bind
    b = GraphBuilder(gpu, 2, channels=4)
    k0 = b.comm_kernel("k0", 0).id
    k1 = b.comm_kernel("k1", 1).id
    b.sm_transfer("t", 0, 1, 32 * MB, (k0, k1), step=("s",))
    t = simulate_graph(b.build(), gpu, topo).by_id()["t"]
    rate = 2 * gpu.comm_kernel.channel_bandwidth
    assert t.end - t.start == pytest.approx(32 * MB / min(rate, gpu.hbm_effective), rel=1e-6)


def test_reducing_a_received_chunk_costs_destination_hbm_traffic():
    """A reducing ring step reads the local chunk, reads what arrived and writes the sum: three
    HBM passes at the destination against one for a plain copy. With HBM the bottleneck, a
    2-GPU ring reduce-scatter step takes 4 passes of HBM per GPU (1 send + 3 receive)."""
    base = ideal("h100")
    gpu = dataclasses.replace(base, hbm_bandwidth=20e9, hbm_efficiency=1.0)
    topo = ring(2, 1e15, 0.0)
    b = GraphBuilder(gpu, 2)
    k = [b.comm_kernel(f"k{g}", g).id for g in range(2)]
    size = 16 * MB
    b.sm_transfer("r01", 0, 1, size, (k[0], k[1]), step=("s",), reduce=True)
    b.sm_transfer("r10", 1, 0, size, (k[1], k[0]), step=("s",), reduce=True)
    plain = GraphBuilder(gpu, 2)
    kp = [plain.comm_kernel(f"k{g}", g).id for g in range(2)]
    plain.sm_transfer("c01", 0, 1, size, (kp[0], kp[1]), step=("s",))
    plain.sm_transfer("c10", 1, 0, size, (kp[1], kp[0]), step=("s",))
    t_reduce = simulate_graph(b.build(), gpu, topo).makespan
    t_copy = simulate_graph(plain.build(), gpu, topo).makespan
    assert t_reduce == pytest.approx(size / (20e9 / 4), rel=1e-6)
    assert t_copy == pytest.approx(size / (20e9 / 2), rel=1e-6)


def _gemm_then_collective(gpu, extra_smem: int):
    """GPU 0 runs a 4096^3 A100 GEMM (64x64 tiles, 2 per SM as the library launches it); a
    high-priority NCCL-like kernel reaches the GPU a small copy command later, once the GEMM
    holds every SM. Returns both engines' timelines, the GEMM's plan and its wave count."""
    from ficco_sim.engine.closed_form import closed_form_timeline
    from ficco_sim.topology import load_topology
    topo = load_topology("ring:2", gpu)
    b = GraphBuilder(gpu, 2, comm_priority=1, extra_smem=extra_smem)
    b.gemm("g", 0, 4096, 4096, 4096, "float16")
    b.dma_transfer("late", 0, 0, 1, 4096, step=("late", 0))     # small: its HBM traffic slows nothing
    b.comm_kernel("c", 0, deps=["late"])
    graph = b.build()
    plan = plan_gemm(gpu, 4096, 4096, 4096, extra_smem=extra_smem)
    waves = -(-plan.grid // (gpu.num_sms * plan.occupancy))
    return simulate_graph(graph, gpu, topo), closed_form_timeline(graph, gpu, topo), plan, waves


def test_blocks_retire_one_at_a_time_so_a_big_block_waits_for_the_last_wave_unless_shaped():
    """The starvation Cui & Pericas cure (shared/reference/resource_aware.md 2.3): an NCCL block
    (86.5 KiB of shared memory, 52k registers on an A100) does not fit where one GEMM block of
    two (81 KiB, 16k registers) retired, so however high its priority, the GEMM's pending
    blocks refill each freed slot and the collective gets SMs only once the GEMM has no
    blocks left to place (here when it ends: its last wave leaves no SM with room either).
    Shaped to one GEMM block per SM, each retirement frees a whole SM and the collective takes
    SMs at the end of the first wave. The closed form follows the DES."""
    from ficco_sim.hardware import load_gpu
    gpu = load_gpu("a100")
    des, cf, plan, waves = _gemm_then_collective(gpu, 0)
    assert plan.occupancy == 2 and waves > 3
    g, c = des.by_id()["g"], des.by_id()["c"]
    assert c.ready + gpu.launch_of("comm") > g.start     # arrives once the GEMM holds the SMs
    assert c.ready < g.start + plan.block_time           # ... before its first wave ends
    assert c.start == pytest.approx(g.end, rel=1e-9)
    assert cf.by_id()["c"].start == pytest.approx(c.start, rel=1e-3)
    des, cf, plan, waves = _gemm_then_collective(gpu, 2 * 1024)
    assert plan.occupancy == 1
    g, c = des.by_id()["g"], des.by_id()["c"]
    assert c.start == pytest.approx(g.start + plan.block_time, rel=1e-3)      # the first wave's end
    assert c.start < g.start + 2 * plan.block_time < g.end / 10
    assert cf.by_id()["c"].start == pytest.approx(c.start, rel=1e-2)


@pytest.mark.parametrize("engine", ["des", "closed form"])
def test_a_copy_slows_by_the_hbm_rule_while_a_gemm_covers_it(engine):
    """The rule's other side: a copy a GEMM covers throughout moves its bytes 1 + c slower,
    c = comm_per_hbm_util x the GEMM's HBM rate / peak (here 1.0, the GEMM not slowed in
    turn, so its rate is its rate alone); with the term off the copy takes its time alone."""
    from ficco_sim.contention import comm_slowdown
    from ficco_sim.engine.closed_form import closed_form_timeline
    from ficco_sim.gemm_model import hbm_traffic
    from ficco_sim.topology import load_topology
    base = ideal("h100")
    gpu = dataclasses.replace(base, contention=dataclasses.replace(base.contention, comm_per_hbm_util=1.0))
    topo = load_topology("switch:2", gpu)
    run = simulate_graph if engine == "des" else closed_form_timeline

    def timeline(g, copy=True, gemm=True):
        b = GraphBuilder(g, 2)
        if gemm:
            b.gemm("g", 0, 4096, 4096, 16384, "float16")
        if copy:
            b.dma_transfer("x", 0, 0, 1, 20e6, step=("x", 0))
        return run(b.build(), g, topo).by_id()

    gemm = timeline(gpu, copy=False)["g"]
    rate = hbm_traffic(4096, 4096, 16384, "float16") / (gemm.end - gemm.start)
    alone, beside = timeline(gpu, gemm=False)["x"], timeline(gpu)
    assert beside["x"].end < beside["g"].end                       # covered throughout
    took = (beside["x"].end - beside["x"].start) / (alone.end - alone.start)
    assert took == pytest.approx(float(comm_slowdown(gpu, rate)), rel=0.02)
    assert took > 1.01
    off = timeline(base)["x"]
    assert off.end - off.start == pytest.approx(alone.end - alone.start, rel=1e-9)


def test_a_gemm_slows_by_the_hbm_rule_only_while_a_copy_covers_it_in_both_engines():
    """The contention rule integrated: an 8192^3 H100 GEMM beside a copy that covers part of
    its run goes 1 + b slower at every covered instant (b = compute_per_hbm_util x the copy's
    HBM rate / peak), so it ends w b / (1 + b) late, w the copy's wall time: the DES within 5%
    (the copy's mean rate read off its run; the two slow each other, so rates move a little
    within it), the closed form within 1% of the DES."""
    from ficco_sim.contention import compute_slowdown
    from ficco_sim.engine.closed_form import closed_form_timeline
    from ficco_sim.hardware import load_gpu
    from ficco_sim.topology import load_topology
    gpu = load_gpu("h100")
    assert gpu.contention.compute_per_hbm_util > 1.0               # fitted (benchmarks/fit_contention.py)
    topo = load_topology("switch:2", gpu)

    def graph(copy: bool):
        b = GraphBuilder(gpu, 2)
        b.gemm("g", 0, 8192, 8192, 8192, "float16")
        if copy:
            b.dma_transfer("x", 0, 0, 1, 150e6, step=("x", 0))
        return b.build()

    alone = simulate_graph(graph(False), gpu, topo).by_id()["g"]
    des = simulate_graph(graph(True), gpu, topo).by_id()
    g, x = des["g"], des["x"]
    assert x.end < g.end                                           # the copy covers part of the run
    w = x.end - x.start
    b = compute_slowdown(gpu, 150e6 / w) - 1.0
    assert (g.end - g.start) - (alone.end - alone.start) == pytest.approx(w * b / (1 + b), rel=0.05)
    cf = closed_form_timeline(graph(True), gpu, topo).by_id()["g"]
    assert cf.end == pytest.approx(g.end, rel=1e-2)
    assert cf.end - cf.start > (alone.end - alone.start) * (1 + 0.5 * w * b / (1 + b) / (alone.end - alone.start))
