"""Inside one GPU: wave quantization, shaping, priorities, DMA engines, HBM sharing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from conftest import ideal
from ficco_sim.engine.des import simulate_graph
from ficco_sim.gemm_model import blocks_per_sm, plan_gemm, roofline
from ficco_sim.hardware import BlockShape
from ficco_sim.taskgraph import Kernel, Stream, TaskGraph, Transfer
from ficco_sim.topology import switch

TOPO1 = switch(2, 100e9, 0.0)   # the engine wants a topology; these tests use GPU 0 only


def one_gpu_graph(*tasks, streams=(("compute", 0), ("comm", 0))):
    return TaskGraph.build(2, [Stream(0, n, p) for n, p in streams] + [Stream(1, "comm", 0)], tasks)


def gemm_kernel(id="k", grid=100, threads=256, smem=0, block_time=1e-3, stream="compute", deps=()):
    return Kernel(id, 0, stream, "gemm", grid, BlockShape(threads, 32, smem), block_time, 0.0, tuple(deps))


@pytest.mark.parametrize("threads,expected_occ", [(1024, 2), (512, 4), (256, 8)])
def test_wave_quantization_ceil_blocks_over_slots(threads, expected_occ):
    gpu = ideal()
    occ = blocks_per_sm(gpu.sm, BlockShape(threads, 32, 0))
    assert occ == expected_occ
    slots = gpu.num_sms * occ
    for grid in (1, slots - 1, slots, slots + 1, 3 * slots + 7):
        tl = simulate_graph(one_gpu_graph(gemm_kernel(grid=grid, threads=threads)), gpu, TOPO1)
        assert tl.makespan == pytest.approx(math.ceil(grid / slots) * 1e-3, rel=1e-9)


def test_one_block_past_a_full_wave_costs_a_whole_wave():
    gpu = ideal()
    slots = gpu.num_sms * 8
    full = simulate_graph(one_gpu_graph(gemm_kernel(grid=slots)), gpu, TOPO1).makespan
    plus1 = simulate_graph(one_gpu_graph(gemm_kernel(grid=slots + 1)), gpu, TOPO1).makespan
    assert plus1 == pytest.approx(2 * full)


def test_gemm_plan_wave_count_matches_des():
    gpu = ideal()
    plan = plan_gemm(gpu, 8192, 4096, 4096)
    k = Kernel("g", 0, "compute", "gemm", plan.grid, plan.block, plan.block_time, plan.block_hbm_bytes)
    tl = simulate_graph(one_gpu_graph(k), gpu, TOPO1)
    slots = gpu.num_sms * plan.occupancy
    full, rest = divmod(plan.grid, slots)
    p = gpu.gemm.roofline_exponent       # each wave: the roofline of its math and its traffic
    wave = lambda blocks: roofline(plan.block_time, blocks * plan.block_hbm_bytes / gpu.hbm_effective, p)  # noqa: E731
    expect = full * wave(slots) + (wave(rest) if rest else 0.0)
    assert expect > math.ceil(plan.grid / slots) * plan.block_time   # the traffic the math does not hide costs
    assert tl.makespan == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("extra_kib", [0, 16, 48, 80, 120])
def test_smem_shaping_lowers_resident_blocks_exactly_as_the_limits_say(extra_kib):
    gpu = ideal("a100")
    base = BlockShape(256, 64, 40 * 1024)
    shaped = BlockShape(256, 64, base.smem + extra_kib * 1024)
    lim = gpu.sm
    expected = min(lim.max_blocks, lim.max_threads // 256, lim.registers // (256 * 64),
                   lim.smem // (shaped.smem + lim.reserved_smem_per_block))
    assert blocks_per_sm(lim, shaped) == expected
    grid = gpu.num_sms * 16
    k = Kernel("g", 0, "compute", "gemm", grid, shaped, 1e-4, 0.0)
    tl = simulate_graph(one_gpu_graph(k), gpu, TOPO1)
    assert tl.by_id()["g"].peak_resident == gpu.num_sms * expected
    assert tl.makespan == pytest.approx(math.ceil(grid / (gpu.num_sms * expected)) * 1e-4)


def _priority_case(priority: int, policy: str = "backfill", persistent: bool = False):
    """A GEMM filling every SM (one big block per SM, 5 waves; ``persistent``: its blocks loop
    over tiles, so an SM one leaves goes to its next tile) and, launched just after it, an SM
    communication kernel whose block needs a whole SM's shared memory."""
    gpu = ideal(gemm=dataclasses.replace(ideal().gemm, persistent=persistent))
    sm_smem = gpu.sm.smem - gpu.sm.reserved_smem_per_block
    gemm = Kernel("gemm", 0, "compute", "gemm", gpu.num_sms * 5, BlockShape(256, 32, sm_smem), 1e-3, 0.0)
    # The comm kernel is launched at 0.5 ms, once a 0.5 ms kernel on the other GPU is done.
    delay = Kernel("delay", 1, "comm", "gemm", 1, BlockShape(32, 32, 0), 0.5e-3)
    comm = Kernel("comm", 0, "comm", "comm", 4, BlockShape(512, 32, 8 * 1024), deps=("delay",), role="comm")
    peer = Kernel("peer", 1, "comm", "comm", 4, BlockShape(512, 32, 8 * 1024), role="comm")
    xfer = Transfer("x", 1, 0, 1e6, "sm", 1, None, ("peer", "comm"))
    g = TaskGraph.build(2, [Stream(0, "compute", 0), Stream(0, "comm", priority), Stream(1, "comm", 0)],
                        [gemm, delay, comm, peer, xfer])
    return simulate_graph(g, gpu, TOPO1, policy=policy)


def test_high_priority_comm_takes_the_first_freed_slots():
    tl = _priority_case(priority=1)
    # The first GEMM wave retires at 1 ms; the comm kernel gets those SMs at once.
    assert tl.by_id()["comm"].start == pytest.approx(1e-3)


def test_normal_priority_comm_waits_behind_the_gemms_pending_blocks():
    tl = _priority_case(priority=0)
    # Every slot freed at 1, 2, 3 and 4 ms goes to the GEMM's pending blocks, queued before
    # it: the comm kernel starts only when the last wave retires (5 ms). The GEMM starves it.
    assert tl.by_id()["comm"].start == pytest.approx(5e-3)
    assert tl.by_id()["comm"].end > _priority_case(priority=1).by_id()["comm"].end + 3e-3


def test_a_persistent_gemm_keeps_its_sms_from_a_high_priority_comm():
    """The SM a persistent GEMM's block leaves takes its next tile, whatever the priorities:
    the high-priority kernel gets an SM only when the GEMM runs out of tiles (5 ms)."""
    tl = _priority_case(priority=1, persistent=True)
    assert tl.by_id()["comm"].start == pytest.approx(5e-3)
    assert tl.by_id()["gemm"].end == pytest.approx(5e-3)


def test_fifo_policy_serialises_in_launch_order():
    tl = _priority_case(priority=1, policy="fifo")
    assert tl.by_id()["comm"].start == pytest.approx(5e-3)


def test_dma_transfers_hold_no_sm():
    gpu = ideal()
    gemm = gemm_kernel(grid=gpu.num_sms * 8 * 3, threads=256)
    copy = Transfer("c", 0, 1, 64e6, "dma", 0, "copy0", (), 0)
    g = TaskGraph.build(2, [Stream(0, "compute", 0), Stream(0, "copy0", 0), Stream(1, "comm", 0)], [gemm, copy])
    tl = simulate_graph(g, gpu, TOPO1)
    assert tl.by_id()["k"].end == pytest.approx(3e-3)   # exactly its isolated time: no SM was taken
    assert max(v for _, v in tl.counters.get("gpu0.blocks.comm", [(0, 0)])) == 0
    assert tl.by_id()["c"].end == pytest.approx(64e6 / 100e9, rel=1e-6)


def test_hbm_sharing_slows_a_concurrent_memory_bound_kernel():
    gpu = ideal()
    hbm = gpu.hbm_effective
    # A memory-bound kernel: one wave asking twice the HBM bandwidth the GPU has.
    grid = gpu.num_sms * 8
    per_block = 2 * hbm * 1e-3 / grid
    mem = Kernel("m", 0, "compute", "memory", grid, BlockShape(256, 32, 0), 1e-3, per_block)
    alone = simulate_graph(one_gpu_graph(mem), gpu, TOPO1).makespan
    assert alone == pytest.approx(2e-3, rel=1e-6)
    # A peer copy on a copy engine (reads this GPU's HBM at the engine's rate) runs beside it,
    # over links fast enough that the engine is its limit, and outlasts the kernel.
    fast = switch(2, 1e12, 0.0)
    copy = Transfer("c", 0, 1, 1e9, "dma", 0, "copy0", (), 0)
    g = TaskGraph.build(2, [Stream(0, "compute", 0), Stream(0, "copy0", 0), Stream(1, "comm", 0)], [mem, copy])
    tl = simulate_graph(g, gpu, fast)
    # Max-min on HBM bytes: the copy asks its engine rate, far less than half of HBM, so it
    # keeps it; the kernel gets the rest.
    assert tl.by_id()["c"].end == pytest.approx(1e9 / gpu.dma.bandwidth, rel=1e-6)
    assert tl.by_id()["m"].end == pytest.approx(2 * hbm * 1e-3 / (hbm - gpu.dma.bandwidth), rel=1e-6)
    assert tl.by_id()["m"].end < tl.by_id()["c"].end
    assert tl.by_id()["m"].end > alone * 1.05


def test_local_copy_runs_at_half_the_hbm_rate():
    """A copy within one GPU reads and writes the same HBM: alone it moves at half the HBM
    rate, not at the peer-link figure of one engine (real same-device Memcpy DtoD: 0.6-1.0
    TB/s on A100, far above its ~235 GB/s peer copies)."""
    gpu = ideal()
    copy = Transfer("c", 0, 0, 1e9, "dma", 0, "copy0", (), 0)
    g = TaskGraph.build(2, [Stream(0, "copy0", 0), Stream(1, "comm", 0)], [copy])
    end = simulate_graph(g, gpu, TOPO1).by_id()["c"].end
    assert end == pytest.approx(gpu.dma.command_overhead + 1e9 / (gpu.hbm_effective / 2), rel=1e-6)
    assert gpu.hbm_effective / 2 > gpu.dma.bandwidth     # so the engine's peer rate would have been slower


def test_interference_coefficient_slows_compute_beside_a_copy():
    gpu = ideal()
    slowed = ideal(contention=type(gpu.contention)(compute_per_hbm_util=0.5, comm_per_hbm_util=0.0))
    gemm = gemm_kernel(grid=gpu.num_sms * 8, threads=256)
    copy = Transfer("c", 0, 1, 10e9, "dma", 0, "copy0", (), 0)
    g = TaskGraph.build(2, [Stream(0, "compute", 0), Stream(0, "copy0", 0), Stream(1, "comm", 0)], [gemm, copy])
    u = min(gpu.dma.bandwidth, 100e9) / gpu.hbm_bandwidth   # the copy's HBM share (reads on gpu0)
    t = simulate_graph(g, slowed, TOPO1).by_id()["k"].end
    assert t == pytest.approx(1e-3 * (1 + 0.5 * u), rel=1e-6)


def test_comm_kernel_starved_on_one_gpu_stalls_its_peer():
    """Cross-GPU coupling: a transfer needs its driver kernels resident on both ends."""
    tl = _priority_case(priority=0)
    assert tl.by_id()["x"].start >= tl.by_id()["comm"].start
    assert tl.by_id()["peer"].end >= tl.by_id()["x"].end


def test_a_folded_graph_runs_every_rank_on_one_gpu():
    """Single-GPU validation predicts the folded program: both ranks' GEMMs share one GPU's
    SMs (about twice the time of one), and transfers become local copies that use no link."""
    from ficco_sim import Scenario, lower
    from ficco_sim.gemm_model import gemm_time
    gpu = ideal()
    g = lower(Scenario("ag-gemm", 2, 8192, 4096, 4096), "shard-p2p-dma", gpu, TOPO1)
    folded = g.folded()
    tl = simulate_graph(folded, gpu, TOPO1)
    assert folded.num_gpus == 1 and all(t.src == t.dst == 0 for t in folded.transfers)
    assert not any(name.startswith("link:") for name in tl.counters)
    assert tl.makespan >= 1.8 * gemm_time(gpu, 8192, 4096, 4096)


def _margin_case(margin: int):
    """``_priority_case`` at normal priority, the GEMM confined to the first SMs and the
    communication kernel to the last ``margin`` (an SM margin / green-context split)."""
    gpu = ideal()
    S = gpu.num_sms
    sm_smem = gpu.sm.smem - gpu.sm.reserved_smem_per_block
    rng = lambda lo, hi: (lo, hi) if margin else None  # noqa: E731
    gemm = Kernel("gemm", 0, "compute", "gemm", S * 5, BlockShape(256, 32, sm_smem), 1e-3, 0.0,
                  sms=rng(0, S - margin))
    delay = Kernel("delay", 1, "comm", "gemm", 1, BlockShape(32, 32, 0), 0.5e-3)
    comm = Kernel("comm", 0, "comm", "comm", 4, BlockShape(512, 32, 8 * 1024), deps=("delay",), role="comm",
                  sms=rng(S - margin, S))
    peer = Kernel("peer", 1, "comm", "comm", 4, BlockShape(512, 32, 8 * 1024), role="comm")
    xfer = Transfer("x", 1, 0, 1e6, "sm", 1, None, ("peer", "comm"))
    g = TaskGraph.build(2, [Stream(0, "compute", 0), Stream(0, "comm", 0), Stream(1, "comm", 0)],
                        [gemm, delay, comm, peer, xfer])
    return gpu, simulate_graph(g, gpu, TOPO1)


@pytest.mark.parametrize("margin", [1, 4, 16])
def test_an_sm_margin_runs_the_gemm_in_waves_of_the_remaining_sms_and_frees_the_rest(margin):
    """SM partitioning: a GEMM confined to S - margin SMs runs ceil(grid / ((S - margin) o))
    waves, and a communication kernel confined to the margin starts when it is launched
    (0.5 ms) instead of waiting for the GEMM's last wave (5 ms without a margin)."""
    gpu, tl = _margin_case(margin)
    S = gpu.num_sms
    assert tl.by_id()["gemm"].end == pytest.approx(math.ceil(S * 5 / (S - margin)) * 1e-3)
    assert tl.by_id()["comm"].start == pytest.approx(0.5e-3)
    assert tl.by_id()["gemm"].peak_resident <= S - margin
    _, plain = _margin_case(0)
    assert plain.by_id()["comm"].start == pytest.approx(5e-3)


def test_sm_margin_schedules_lower_to_confined_kernels_and_agree_with_the_closed_form():
    from ficco_sim import Scenario, lower, simulate
    from ficco_sim.engine.closed_form import kernel_isolated_time
    from ficco_sim.errors import InputError
    from ficco_sim.gemm_model import isolated_time
    from ficco_sim.hardware import load_gpu
    h100 = load_gpu("h100")
    sc = Scenario("ag-par-gemm", 8, 8192, 8192, 8192)
    g = lower(sc, "par-sm-m16", h100, "switch:8")
    gemms = [k for k in g.kernels if k.kind == "gemm"]
    assert all(k.sms == (116, 132) for k in g.kernels if k.kind == "comm")
    assert all(k.sms == (0, 116) and k.gemm.sms == 116 for k in gemms)
    plan = plan_gemm(h100, 8192, 8192, 8192, sms=116)
    assert kernel_isolated_time(h100, gemms[0]) == pytest.approx(isolated_time(h100, plan, sms=116), rel=1e-12)
    # a GEMM alone with a margin: DES = closed form = waves over the 116 SMs
    from ficco_sim.engine.closed_form import closed_form_timeline
    from ficco_sim.schedules.builder import GraphBuilder
    from ficco_sim.topology import load_topology
    topo = load_topology("switch:2", h100)
    for m, n, k in ((8192, 8192, 8192), (4096, 4096, 1024), (256, 1536, 16384)):
        b = GraphBuilder(h100, 2, sm_margin=16)
        b.gemm("g", 0, m, n, k, "float16")
        one = b.build()
        want = isolated_time(h100, plan_gemm(h100, m, n, k, sms=116), sms=116)
        assert simulate_graph(one, h100, topo).makespan == pytest.approx(want, rel=1e-6)
        assert closed_form_timeline(one, h100, topo).makespan == pytest.approx(want, rel=1e-6)
        full = isolated_time(h100, plan_gemm(h100, m, n, k))
        assert want > full if m == 8192 else want >= full     # 96 blocks fit in 116 SMs: no loss
    wide = Scenario("ag-par-gemm", 8, 8192, 4096, 8192)    # its gather a third of the GEMM: the margin pays
    for engine in ("des", "analytical"):
        assert simulate(wide, "par-sm-m16", h100, "switch:8", engine=engine).makespan < \
            0.95 * simulate(wide, "none", h100, "switch:8", engine=engine).makespan
    for bad, why in (("par-dma-m16", "SM margin"), ("none-m16", "SM margin"), ("par-sm-m4", "cannot hold"),
                     ("par-sm-m132", "leaves none")):
        with pytest.raises(InputError, match=why):
            lower(sc, bad, h100, "switch:8")


def test_a_collective_reaches_the_sms_like_any_kernel_and_holds_them_through_its_handshake():
    """The call floor is split: the kernel is dispatchable after a kernel launch, and its first
    transfer waits the rest of the floor with the blocks resident. A collective issued before
    a GEMM on an idle H100 therefore gets its SMs before the GEMM does."""
    from ficco_sim import Scenario, lower
    from ficco_sim.hardware import load_gpu
    from ficco_sim.topology import load_topology
    h100 = load_gpu("h100")
    assert h100.comm_kernel.launch > h100.launch_overhead          # the NVIDIA floors
    assert h100.launch_of("comm") == h100.launch_overhead
    assert h100.handshake_of("comm") == pytest.approx(h100.comm_kernel.launch - h100.launch_overhead)
    topo = load_topology("switch:8", h100)
    g = lower(Scenario("ar-par-gemm", 8, 8192, 8192, 8192), "par-sm", h100, topo)
    tl = simulate_graph(g, h100, topo).by_id()
    comm = [k for k in g.kernels if k.kind == "comm" and k.gpu == 0][0]
    first = min(tl[t.id].start for t in g.transfers if comm.id in t.drivers)
    assert tl[comm.id].start == pytest.approx(h100.launch_overhead)
    assert first - tl[comm.id].start >= h100.handshake_of("comm") * (1 - 1e-9)
    assert tl["gemm0"].start >= tl[comm.id].start
