"""Launch order of an independent pair (``par``): the kernel issued first is dispatched
first, so a GEMM issued before the collective keeps the SMs wave after wave (the collective
waits for its last wave) unless the collective runs at high priority."""

import pytest

from ficco_sim.errors import InputError
from ficco_sim.schedules.schedule import parse_schedule
from ficco_sim.simulate import simulate
from ficco_sim.workload import Scenario


def test_gf_names_round_trip_and_only_par_has_it():
    assert parse_schedule("par-sm-hi-gf").name == "par-sm-hi-gf"
    assert not parse_schedule("par-sm").gemm_first
    for bad in ("shard-p2p-sm-gf", "none-gf", "fused-st-gf"):
        with pytest.raises(InputError, match="par schedules only"):
            parse_schedule(bad)


@pytest.mark.parametrize("engine", ["des", "analytical"])
@pytest.mark.parametrize("gpu", ["h100", "a100"])
def test_a_gemm_issued_first_starves_a_normal_priority_collective(engine, gpu):
    """A100 GEMMs are waves of tile blocks: priority is the remedy (the collective's blocks
    go before the GEMM's pending ones as its blocks retire). H100 GEMMs are persistent
    (cuBLAS nvjet, ``gemm.kernel``): an SM a block leaves goes to the GEMM's next tile, so
    priority buys nothing until the GEMM runs out of tiles."""
    sc = Scenario("ar-par-gemm", 8, 8192, 8192, 8192)
    t = {s: simulate(sc, s, gpu, "switch:8", engine=engine).makespan
         for s in ("none", "par-sm", "par-sm-gf", "par-sm-hi", "par-sm-hi-gf")}
    # collective first: it takes its SMs on arrival and the two overlap (H100: 0.86, A100: 0.95)
    assert t["par-sm"] < {"h100": 0.9, "a100": 0.97}[gpu] * t["none"]
    # GEMM first: the collective's blocks wait for the GEMM's last wave; almost no gain
    assert t["par-sm-gf"] > {"h100": 0.94, "a100": 0.97}[gpu] * t["none"]
    assert t["par-sm-gf"] > {"h100": 1.1, "a100": 1.04}[gpu] * t["par-sm"]
    if gpu == "a100":
        assert t["par-sm-hi-gf"] == pytest.approx(t["par-sm-hi"], rel=1e-9)
    else:
        assert t["par-sm-hi-gf"] == pytest.approx(t["par-sm-gf"], rel=1e-9)


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_two_gemm_blocks_per_sm_starve_even_a_high_priority_collective_until_shaped(engine):
    """Cui & Pericas' premise on an A100: the 4096^3 GEMM (64x64 tiles, two blocks per SM)
    issued first holds every SM; an NCCL block needs more than one retiring GEMM block frees,
    so priority alone buys nothing (the GEMM refills each slot). Shaped to one block per SM
    (2 KiB more per block), each retirement frees an SM and the high-priority collective
    overlaps; shaping without priority loses (the GEMM's pending blocks go first, and it runs
    slower)."""
    sc = Scenario("ar-par-gemm", 8, 4096, 4096, 4096)
    t = {s: simulate(sc, s, "a100", "switch:8", engine=engine).makespan
         for s in ("none", "par-sm-gf", "par-sm-hi-gf", "par-sm-smem2k-gf", "par-sm-hi-smem2k-gf")}
    assert t["par-sm-gf"] > 0.95 * t["none"]                           # naive: almost serial
    assert t["par-sm-hi-gf"] == pytest.approx(t["par-sm-gf"], rel=1e-3)
    assert t["par-sm-hi-smem2k-gf"] < 0.97 * t["par-sm-hi-gf"]
    assert t["par-sm-smem2k-gf"] > t["par-sm-gf"]


def test_kernels_the_host_launched_at_one_instant_are_dispatched_in_launch_order():
    """The dispatcher's rule behind ``gf``: two kernels the host launched with nothing to wait
    for reach the GPU one after the other, so the first fills the SMs even when the second
    is at higher priority; released together by what they waited for, priority decides."""
    import numpy as np

    from ficco_sim.engine.dispatcher import SmPool, Waiting
    from ficco_sim.hardware import BlockShape, SmLimits
    limits = SmLimits(1, 1024, 65536, 1 << 16, 1 << 16, 0, 32)
    for issued, first in ((True, "gemm"), (False, "comm")):
        pool = SmPool(2, limits)
        pool.arrive(Waiting("gemm", BlockShape(256, 32, 0), 8, 0, 0, issued=issued))
        pool.arrive(Waiting("comm", BlockShape(256, 32, 0), 2, 1, 1, issued=issued))
        placed = pool.settle([])
        assert placed[0][0].id == first and int(np.sum(placed[0][1])) == 2


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_a_collective_with_a_shorter_call_floor_does_not_overtake_a_gemm_issued_first(engine):
    """RCCL's call floor (2 us on the AMD profiles) is below their kernel launch (6 us). Issued
    after the GEMM, the collective still reaches the GPU after it: the host issues one launch
    at a time and the GPU takes them in order (``engine.launch``). Without that, ``gf`` on an
    AMD GPU was collective-first under another name (identical makespans)."""
    from ficco_sim.hardware import load_gpu
    gpu = load_gpu("mi250x")
    assert gpu.launch_of("comm") < gpu.launch_overhead
    sc = Scenario("ar-par-gemm", 8, 8192, 8192, 8192)
    r = {s: simulate(sc, s, gpu, "fc:8", engine=engine) for s in ("par-sm", "par-sm-gf")}
    first = {s: {x.id: x.start for x in r[s].timeline.records if x.gpu == 0} for s in r}
    assert first["par-sm-gf"]["gemm0"] == pytest.approx(gpu.launch_overhead, rel=1e-9)
    assert first["par-sm-gf"]["ar.rs.k0"] >= first["par-sm-gf"]["gemm0"]
    assert first["par-sm"]["ar.rs.k0"] == pytest.approx(gpu.launch_of("comm"), rel=1e-9)   # issued first: its own
    assert r["par-sm-gf"].makespan > 1.04 * r["par-sm"].makespan      # the GEMM holds the CUs wave after wave


def test_channels_placed_after_a_gemm_pay_their_own_handshake():
    """8 x H100, a 2048^3 GEMM issued first: its 128 blocks (one per SM) leave 4 of 132 SMs,
    so 4 of the NVLS all-reduce's channels start beside it and the rest when it ends. Each
    pays NVLS's setup (25 us) from its own start: the late ones cannot use the GEMM's time
    for theirs. Before (every channel armed with the first): 1.30x over no overlap, the whole
    setup hidden under the GEMM with 4 channels resident."""
    from ficco_sim.hardware import load_gpu
    gpu = load_gpu("h100")
    sc = Scenario("ar-par-gemm", 8, 2048, 2048, 2048)
    none, gf = (simulate(sc, s, gpu, "switch:8") for s in ("none", "par-sm-gf"))
    rec = {x.id: x for x in gf.timeline.records if x.gpu == 0}
    comm = [x for x in gf.timeline.records if x.gpu == 0 and x.kind == "comm"][0]
    assert comm.start < rec["gemm0"].end                         # some channels start beside the GEMM
    assert gf.makespan > rec["gemm0"].end + gpu.comm_kernel.nvls_latency
    assert 1.05 < none.makespan / gf.makespan < 1.15


def test_mix_names_round_trip_only_par_has_it_and_not_with_gf():
    assert parse_schedule("par-sm-hi-mix").name == "par-sm-hi-mix" and parse_schedule("par-dma-mix").mixed
    for bad, words in (("shard-p2p-sm-mix", "par schedules only"), ("par-sm-gf-mix", "two launch orders"),
                       ("par-sm-mix-gf", "two launch orders"), ("par-sm-mix-mix", "repeats")):
        with pytest.raises(InputError, match=words):
            parse_schedule(bad)


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_a_launch_order_that_differs_across_ranks_holds_the_collective_on_every_rank(engine):
    """``mix``: the odd GPUs' GEMM reaches the GPU first. The collective cannot finish before
    their GEMM lets it in, and on the even GPUs its kernels sit on their SMs all that time, so
    those GEMMs run slower than with every GEMM first (``gf``) and the pair gains nothing over
    ``gf`` where collective-first gains a lot (8 x MI300X: RCCL's all-gather beside a GEMM loop,
    its GEMMs 17-22% slower under the kernel, benchmarks/sdma_loop.py)."""
    sc = Scenario("ag-par-gemm", 8, 16384, 2048, 8192, "bfloat16")
    res = {s: simulate(sc, s, "mi300x", "fc:8", engine=engine) for s in ("none", "par-sm", "par-sm-gf", "par-sm-mix")}
    t = {s: r.makespan for s, r in res.items()}
    assert t["par-sm"] < 0.9 * t["none"]
    assert t["par-sm-mix"] > 1.15 * t["par-sm"] and t["par-sm-mix"] >= t["par-sm-gf"] * (1 - 1e-9)
    if engine == "des":
        rec = {s: res[s].timeline.by_id() for s in ("par-sm-gf", "par-sm-mix")}
        comm_end = max(r.end for r in res["par-sm-mix"].timeline.of_role("comm", 0))
        assert comm_end >= rec["par-sm-mix"]["gemm1"].end      # the even GPU's collective waited for GPU 1's GEMM
        dur = {s: rec[s]["gemm0"].end - rec[s]["gemm0"].start for s in rec}
        assert dur["par-sm-mix"] > 1.1 * dur["par-sm-gf"]          # its kernels held GPU 0's SMs meanwhile


@pytest.mark.parametrize("gpu, topo", [("h100", "switch:8"), ("a100", "switch:8"), ("mi300x", "fc:8")])
def test_the_sweeps_templates_tell_a_mixed_launch_order_from_collective_first(gpu, topo):
    """The closed form's sweep path folds ranks alike into one class: GPUs that issue the same
    kernels in another order are not alike (a mix graph read as par-sm was 27% fast on H100)."""
    from ficco_sim.explore.estimate import clear_cache
    clear_cache()
    sc = Scenario("ar-par-gemm", 8, 16384, 2048, 8192, "bfloat16")
    templ = simulate(sc, "par-sm-mix", gpu, topo, engine="analytical").makespan
    whole = simulate(sc, "par-sm-mix", gpu, topo, engine="analytical", whole_graph=True).makespan
    assert templ == pytest.approx(whole, rel=1e-9)
    assert templ > 1.1 * simulate(sc, "par-sm", gpu, topo, engine="analytical").makespan
