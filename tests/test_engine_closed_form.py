"""The closed-form engine: against the plain-Python oracle, against the DES where they must
agree (no overlap), and invariant under what is cosmetic (labels, executor io)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ficco_sim import Scenario, collective_time, lower, simulate
from ficco_sim.engine import closed_form_contention, closed_form_overlap, closed_form_tables
from ficco_sim.engine.closed_form import closed_form_timeline, compile_graph, evaluate, kernel_isolated_time
from ficco_sim.engine.closed_form_merge import merge
from ficco_sim.engine.des import simulate_graph
from ficco_sim.gemm_model import isolated_time, plan_gemm
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules.builder import GraphBuilder
from ficco_sim.taskgraph import Kernel, Stream, TaskGraph
from ficco_sim.topology import load_topology

from reference_closed_form import _cover as cover, reference

SHAPES = [(1, 8192, 8192), (16, 4096, 4096), (512, 1024, 8192), (2048, 8192, 1024), (4096, 4096, 4096),
          (8192, 28672, 8192), (16384, 8192, 8192), (300, 7000, 1300)]
SCHEDS = ["none", "none-dma", "shard-p2p-sm", "shard-p2p-dma", "ficco-a2a-sm-hi", "ficco-a2a-dma", "ficco-p2p-sm-g2",
          "ficco-a2a-sm-smem16k", "shard-a2a-sm-c8"]


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
@pytest.mark.parametrize("topo", ["ring:4", "fc:4", "switch:4"])
def test_vectorized_engine_equals_the_plain_oracle(kind, topo):
    gpu = load_gpu("h100")
    t = load_topology(topo, gpu)
    routing = ((1500, 1000, 1000, 596),) * 4 if kind == "a2a-gemm" else None
    sc = Scenario(kind, 4, 4096, 2048, 1024, routing=routing)
    for sched in SCHEDS:
        _matches_the_oracle(lower(sc, sched, gpu, t), gpu, t, sched)


def _matches_the_oracle(g, gpu, t, tag) -> None:
    want = reference(g, gpu, t)
    got = closed_form_timeline(g, gpu, t).by_id()
    for tid, (s, e) in want.items():
        assert got[tid].start == pytest.approx(s, rel=1e-9, abs=1e-15), (tag, tid)
        assert got[tid].end == pytest.approx(e, rel=1e-9, abs=1e-15), (tag, tid)


def test_the_oracle_agrees_with_a_residency_term_in_the_profile():
    """The contention rule's residency term (``compute_beside_comm_kernel``) as both apply it,
    and it moves the answer where communication kernels sit beside GEMMs."""
    import dataclasses
    base = load_gpu("h100")
    gpu = dataclasses.replace(base, contention=dataclasses.replace(base.contention, compute_beside_comm_kernel=0.2))
    t = load_topology("switch:4", gpu)
    moved = 0
    for sc, sched in ((Scenario("ag-gemm", 4, 4096, 2048, 1024), "ficco-a2a-sm"),
                      (Scenario("ag-gemm", 4, 4096, 2048, 1024), "ficco-a2a-dma"),
                      (Scenario("ar-par-gemm", 4, 8192, 8192, 8192), "par-sm")):
        g = lower(sc, sched, gpu, t)
        _matches_the_oracle(g, gpu, t, sched)
        moved += closed_form_timeline(g, gpu, t).makespan > closed_form_timeline(g, base, t).makespan * (1 + 1e-9)
    assert moved >= 1


@pytest.mark.parametrize("sc,sched", [(Scenario("ag-gemm", 4, 32768, 1536, 4096, dtype="bfloat16"), "ficco-a2a-sm"),
                                      (Scenario("ag-gemm", 4, 32768, 1536, 4096, dtype="bfloat16"), "ficco-a2a-sm-hi"),
                                      (Scenario("gemm-rs", 4, 16384, 8192, 8192, dtype="bfloat16"), "ficco-a2a-sm-g2"),
                                      (Scenario("gemm-rs", 4, 2048, 8192, 3584, dtype="bfloat16"), "shard-p2p-dma")])
def test_oracle_agrees_where_kernels_wait_for_sms(sc, sched, monkeypatch):
    """Sizes where communication kernels wait behind GEMM blocks and reduce kernels share SMs
    with them: the dispatch and occupancy rules against the oracle (which must use them)."""
    import reference_closed_form as ref
    used = []
    for name in ("_comm_hold", "_memory_hold"):
        orig = getattr(ref, name)
        monkeypatch.setattr(ref, name, lambda *a, f=orig: used.append(f(*a)) or used[-1])
    gpu = load_gpu("h100")
    t = load_topology("switch:4", gpu)
    g = lower(sc, sched, gpu, t)
    want = ref.reference(g, gpu, t)
    got = closed_form_timeline(g, gpu, t).by_id()
    for tid, (s, e) in want.items():
        assert got[tid].start == pytest.approx(s, rel=1e-9, abs=1e-15), tid
        assert got[tid].end == pytest.approx(e, rel=1e-9, abs=1e-15), tid
    assert any(u is not None for u in used)


@pytest.mark.parametrize("gpu_name", ["h100", "a100", "a40", "mi300x"])
def test_isolated_gemm_des_equals_closed_form(gpu_name):
    gpu = load_gpu(gpu_name)
    topo = load_topology("switch:2", gpu)
    for m, n, k in SHAPES:
        plan = plan_gemm(gpu, m, n, k)
        b = GraphBuilder(gpu, 2)
        b.gemm("g", 0, m, n, k, "float16")
        g = b.build()
        des = simulate_graph(g, gpu, topo).makespan
        assert des == pytest.approx(isolated_time(gpu, plan), rel=1e-6), (m, n, k)
        assert closed_form_timeline(g, gpu, topo).makespan == pytest.approx(des, rel=1e-6)
        assert kernel_isolated_time(gpu, g.kernel("g")) == pytest.approx(isolated_time(gpu, plan), rel=1e-12)


@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv"])
@pytest.mark.parametrize("topo", ["ring:8", "fc:8", "switch:8", "ring:4"])
@pytest.mark.parametrize("engine", ["sm", "dma"])
def test_collectives_agree_within_5_percent(kind, topo, engine):
    if engine == "dma" and kind == "all-reduce":
        pytest.skip("copy engines cannot reduce")
    # All-to-all on a ring routes 1- to 4-hop flows over shared links: flows of unequal
    # length finish at different times, which the DES's max-min sharing follows at every
    # instant and the closed form's passes (a time-averaged share, then what the others leave)
    # only on average: there it reads within 7% below to twice above.
    multi_hop = topo.startswith("ring") and (kind == "all-to-all" or (engine == "dma" and kind == "reduce-scatter"))
    for size in (1 << 20, 64 << 20):
        des = collective_time("h100", topo, kind, size, engine=engine)
        ana = collective_time("h100", topo, kind, size, engine=engine, sim="analytical")
        if multi_hop:
            assert des * 0.93 <= ana <= 2 * des, (kind, topo, engine, size)
        else:
            assert ana == pytest.approx(des, rel=0.05), (kind, topo, engine, size)


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
@pytest.mark.parametrize("gpu_name,topo", [("h100", "switch:8"), ("mi300x", "fc:8"), ("a100", "ring:4")])
def test_unoverlapped_schedules_agree_within_5_percent(kind, gpu_name, topo):
    gpu = load_gpu(gpu_name)
    t = load_topology(topo, gpu)
    sc = Scenario(kind, t.num_gpus, 8192, 4096, 4096)
    for sched in ("none", "none-dma"):
        g = lower(sc, sched, gpu, t)
        des = simulate_graph(g, gpu, t).makespan
        assert closed_form_timeline(g, gpu, t).makespan == pytest.approx(des, rel=0.05), sched


def test_overlapped_schedules_are_close_and_below_serial():
    gpu = load_gpu("h100")
    t = load_topology("switch:8", gpu)
    sc = Scenario("ag-gemm", 8, 16384, 8192, 8192)
    none = closed_form_timeline(lower(sc, "none", gpu, t), gpu, t).makespan
    for sched in ("shard-p2p-sm", "ficco-a2a-dma", "shard-p2p-dma"):
        g = lower(sc, sched, gpu, t)
        des = simulate_graph(g, gpu, t).makespan
        ana = closed_form_timeline(g, gpu, t).makespan
        assert ana < none
        assert ana == pytest.approx(des, rel=0.15), sched


def _relabelled(graph: TaskGraph) -> TaskGraph:
    """Every label replaced by one string and every io emptied: what people and the executor
    read, none of which may change an answer."""
    tasks = [dataclasses.replace(t, label="x", io={}) for t in graph.tasks]
    return TaskGraph.build(graph.num_gpus, graph.streams, tasks, buffers=graph.buffers, meta=graph.meta)


@pytest.mark.parametrize("sched", ["none", "ficco-a2a-sm", "shard-p2p-dma", "ficco-a2a-dma-g2"])
@pytest.mark.parametrize("topo", ["ring:8", "switch:8"])
def test_labels_and_io_change_no_answer_of_any_engine(sched, topo):
    gpu = load_gpu("h100")
    t = load_topology(topo, gpu)
    for sc in (Scenario("ag-gemm", 8, 8192, 2048, 2048), Scenario("gemm-rs", 8, 8192, 2048, 2048)):
        g = lower(sc, sched, gpu, t)
        r = _relabelled(g)
        assert closed_form_timeline(r, gpu, t).makespan == closed_form_timeline(g, gpu, t).makespan
        assert simulate_graph(r, gpu, t, record=False).makespan == simulate_graph(g, gpu, t, record=False).makespan


def test_a_relabelled_ring_all_gather_keeps_its_time():
    """The bug that made labels decide link sharing: a 64 MiB ring all-gather on ring:8 moved
    from 2.39 to 16.6 ms when its transfers were relabelled."""
    from ficco_sim.simulate import collective_graph
    gpu = load_gpu("h100")
    t = load_topology("ring:8", gpu)
    g = collective_graph(gpu, t, "all-gather", 64 << 20)
    tasks = [dataclasses.replace(x, label=f"transfer {i}") for i, x in enumerate(g.tasks)]
    r = TaskGraph.build(g.num_gpus, g.streams, tasks, meta=g.meta)
    des = simulate_graph(g, gpu, t).makespan
    assert closed_form_timeline(r, gpu, t).makespan == pytest.approx(des, rel=0.02)


def test_concurrency_steps_decide_link_sharing():
    """Switching the step mechanism off (every transfer alone) must change an all-to-all whose
    seven flows per GPU share its one switch uplink and the kernel's channels: with steps
    the closed form is the DES's answer."""
    from ficco_sim.simulate import collective_graph
    gpu = load_gpu("h100")
    t = load_topology("switch:8", gpu)
    g = collective_graph(gpu, t, "all-to-all", 64 << 20)
    alone = TaskGraph.build(g.num_gpus, g.streams, [dataclasses.replace(x, step=None) if hasattr(x, "step") else x
                                                   for x in g.tasks], meta=g.meta)
    stepped = closed_form_timeline(g, gpu, t).makespan
    assert stepped == pytest.approx(simulate_graph(g, gpu, t).makespan, rel=1e-6)
    assert closed_form_timeline(alone, gpu, t).makespan < 0.95 * stepped


def test_link_sharing_passes_are_the_average_concurrency():
    """Closed form of the sharing rule: two 1 MB copies on one 100 GB/s link, the second
    issued when the first is half done. First pass: each alone at 100 GB/s (10 us, spans
    [0, 10] and [5, 15] us); second: both overlap half their span, 1.5 sharers, 15 us each
    ([0, 15], [5, 20]); third: 2/3 of each span overlapped, 5/3 sharers, 16.67 us."""
    from ficco_sim.hardware import BlockShape
    from ficco_sim.taskgraph import Transfer
    from ficco_sim.topology import fully_connected
    gpu = load_gpu("h100")
    gpu = dataclasses.replace(gpu, dma=dataclasses.replace(gpu.dma, bandwidth=1e15, command_overhead=0.0))
    topo = fully_connected(2, 100e9, 0.0)
    wait = Kernel("wait", 0, "c1", "opaque", 1, BlockShape(32, 32, 0), 5e-6 - gpu.launch_of("opaque"))
    tasks = [wait, Transfer("a", 0, 1, 1e6, "dma", 0, "c0", label="first"),
             Transfer("b", 0, 1, 1e6, "dma", 0, "c2", deps=("wait",), label="second")]
    g = TaskGraph.build(2, [Stream(0, "c0"), Stream(0, "c1"), Stream(0, "c2")], tasks)
    got = {r.label: r for r in closed_form_timeline(g, gpu, topo, contention=False).records}
    assert got["first"].end - got["first"].start == pytest.approx(50e-6 / 3, rel=1e-6)
    assert got["second"].start == pytest.approx(5e-6, rel=1e-6)


def test_template_rescales_gemm_shapes_from_the_typed_field_not_io():
    gpu = load_gpu("h100")
    t = load_topology("switch:4", gpu)
    sc, big = Scenario("ag-gemm", 4, 4096, 2048, 2048), Scenario("ag-gemm", 4, 16384, 2048, 2048)
    g = lower(sc, "ficco-a2a-dma", gpu, t)
    stripped = _relabelled(g)
    tpl = compile_graph(stripped, gpu, t, sc)
    got = evaluate(tpl, gpu, [big])["makespan"][0]
    assert got == pytest.approx(closed_form_timeline(lower(big, "ficco-a2a-dma", gpu, t), gpu, t).makespan,
                                rel=1e-9)


def _dense_slowdowns(tpl, gpu, vals, nbytes, gemm_hbm, weights, base=None, before=None):
    """The contention pass written plainly: every GEMM against every span, other GPUs masked
    (``before``: the GEMMs' again, with durations ``base``; the transfers' kept)."""
    from ficco_sim.contention import comm_slowdown, compute_slowdown, covered_excess
    from reference_closed_form import _factor as plain_factor
    from reference_closed_form import hbm_slowed as plain_hbm_slowed
    slow = np.ones_like(vals) if before is None else before.copy()
    gs, ge = vals[:, tpl.gemm_begin], vals[:, tpl.gemm_nodes]
    xs, xe = vals[:, tpl.xfer_begin], vals[:, tpl.xfer_nodes]
    cs, ce = vals[:, tpl.comm_begin], vals[:, tpl.comm_nodes]
    g_gpu, c_gpu = tpl.gpu_of[tpl.gemm_nodes], tpl.gpu_of[tpl.comm_nodes]
    x_src, x_dst = tpl.gpu_of[tpl.xfer_nodes], tpl.dst_of[tpl.xfer_nodes]
    xrate = np.where(xe > xs, nbytes[:, tpl.xfer_nodes] / np.maximum(xe - xs, 1e-300), 0.0)
    grate = np.where(ge > gs, gemm_hbm / np.maximum(ge - gs, 1e-300), 0.0)

    for p in range(vals.shape[0]):
        for i, node in enumerate(tpl.gemm_nodes):
            s, e, u = gs[p, i], ge[p, i], g_gpu[i]
            comm = [(cs[p, c], ce[p, c], tpl.comm_grid[c]) for c in range(len(c_gpu)) if c_gpu[c] == u]
            xf = [(xs[p, x], xe[p, x], xrate[p, x]) for x in range(len(x_src))
                  if (x_src[x] == u or x_dst[x] == u) and xe[p, x] > xs[p, x]]
            held = max([g for a, b, g in comm if a < e and b > s] + [0])
            rate = max([r for a, b, r in xf if a < e and b > s] + [0.0])
            sm = cover(s, e, [(a, b) for a, b, _ in comm])
            other = compute_slowdown(gpu, 0.0, held_sms=float(held), sm_cover=sm, resident_cover=sm,
                                     weights=weights) - 1.0
            slow[p, node] = plain_hbm_slowed(gpu, s, e, other, [((a, b), r) for a, b, r in xf], weights,
                                             run=None if base is None else base[p, node])
        for x, node in enumerate(tpl.xfer_nodes if before is None else ()):
            s, e = xs[p, x], xe[p, x]
            gm = [(gs[p, i], ge[p, i], grate[p, i]) for i in range(len(g_gpu)) if g_gpu[i] in (x_src[x], x_dst[x])]
            rate = max([r for a, b, r in gm if a < e and b > s] + [0.0])
            spans = [(a, b) for a, b, _ in gm]
            b = comm_slowdown(gpu, rate, weights=weights) - 1.0 if cover(s, e, spans) > 0 else 0.0
            slow[p, node] = plain_factor(s, e, 0.0, b, lambda t, s=s, b=b, spans=spans:
                                         covered_excess(cover(s, s + t, spans) * t, b))
    return slow


@pytest.mark.parametrize("sc,topo", [(Scenario("ag-gemm", 4, 4096, 2048, 2048), "ring:4"),
                                     (Scenario("gemm-rs", 4, 4096, 2048, 2048), "switch:4")])
def test_compact_contention_matches_the_plain_pass(sc, topo, monkeypatch):
    from ficco_sim.engine import closed_form
    gpu = load_gpu("h100")
    t = load_topology(topo, gpu)
    sizes = [sc, Scenario(sc.kind, 4, sc.m * 2, sc.n, sc.k)]
    for sch in SCHEDS[2:]:
        tpl = compile_graph(lower(sc, sch, gpu, t), gpu, t, sc)
        got = evaluate(tpl, gpu, sizes)
        monkeypatch.setattr(closed_form, "slowdowns", _dense_slowdowns)
        want = evaluate(tpl, gpu, sizes)
        monkeypatch.undo()
        np.testing.assert_allclose(got["vals"], want["vals"], rtol=1e-12, err_msg=sch)
    assert closed_form_contention.slowdowns is not _dense_slowdowns


def test_merged_evaluation_equals_separate_ones():
    gpu = load_gpu("h100")
    t = load_topology("switch:4", gpu)
    sc = Scenario("ag-gemm", 4, 4096, 2048, 2048)
    sizes = [sc, Scenario("ag-gemm", 4, 8192, 1024, 4096), Scenario("ag-gemm", 4, 2048, 4096, 1024)]
    tpls = [compile_graph(lower(sc, s, gpu, t), gpu, t, sc) for s in SCHEDS]
    merged, offs = merge(tpls)
    ev = evaluate(merged, gpu, sizes)
    for tpl, a, b in zip(tpls, offs[:-1], offs[1:]):
        alone = evaluate(tpl, gpu, sizes)
        np.testing.assert_allclose(ev["vals"][:, a:b], alone["vals"][:, :-1], rtol=1e-12)


def test_a_symmetry_quotient_gives_every_node_the_full_evaluations_time():
    """Sweeps evaluate one node per symmetry class (engine.symmetry) and copy the answer:
    node by node it must be the full evaluation, and it must really collapse the GPUs."""
    from ficco_sim.engine.symmetry import quotient
    gpu = load_gpu("h100")
    t = load_topology("switch:4", gpu)
    sc = Scenario("ag-gemm", 4, 4096, 2048, 2048)
    sizes = [sc, Scenario("ag-gemm", 4, 8192, 1024, 4096)]
    tpls = [compile_graph(lower(sc, s, gpu, t), gpu, t, sc) for s in SCHEDS]
    merged, _ = merge(tpls)
    full = evaluate(merged, gpu, sizes)
    stride = 1 + max(int(max(x.gpu_of.max(), x.dst_of.max())) for x in tpls)     # GPUs of one template
    merged.quotient, merged.orbit = quotient(merged, stride, 4)
    assert merged.quotient is not None and merged.quotient.num_nodes * 3 < merged.num_nodes
    got = evaluate(merged, gpu, sizes)
    np.testing.assert_allclose(got["vals"], full["vals"], rtol=1e-12)
    # GPU 0 routes its tokens unlike the others: its nodes must keep classes of their own
    from ficco_sim.workload import skewed_routing
    rows = [list(r) for r in skewed_routing(4, 4096, 1.0)]
    rows[0][1], rows[0][3] = rows[0][3], rows[0][1]
    odd = Scenario("a2a-gemm", 4, 4096, 2048, 2048, routing=tuple(map(tuple, rows)))
    tpls = [compile_graph(lower(odd, s, gpu, t), gpu, t, odd) for s in ("none", "ficco-a2a-sm", "ficco-a2a-dma")]
    merged, _ = merge(tpls)
    full = evaluate(merged, gpu, [odd])
    merged.quotient, merged.orbit = quotient(merged, stride, 4)
    if merged.quotient is not None:
        np.testing.assert_allclose(evaluate(merged, gpu, [odd])["vals"], full["vals"], rtol=1e-12)


def test_contention_is_charged_where_compute_and_communication_overlap():
    """Switching the contention pass off must change an overlapped SM schedule, not ``none``."""
    gpu = load_gpu("h100")
    t = load_topology("switch:8", gpu)
    sc = Scenario("ag-gemm", 8, 16384, 8192, 8192)
    for sched, moves in (("ficco-a2a-sm", True), ("none", False)):
        g = lower(sc, sched, gpu, t)
        on = closed_form_timeline(g, gpu, t).makespan
        off = closed_form_timeline(g, gpu, t, contention=False).makespan
        assert (on > off * 1.001) == moves, sched


def test_single_simulation_and_sweep_agree_on_cil_comm():
    """The bug: explore's estimator printed cil_comm 3.81 where the analytical model said 0.017."""
    from ficco_sim.explore.estimate import estimate_many
    sc = Scenario("ag-gemm", 8, 16384, 8192, 8192)
    row = estimate_many([sc], ["ficco-a2a-sm"], "h100", "switch:8")[0]
    one = simulate(sc, "ficco-a2a-sm", "h100", "switch:8", engine="analytical", whole_graph=True).metrics
    des = simulate(sc, "ficco-a2a-sm", "h100", "switch:8").metrics
    assert row["cil_comm"] == pytest.approx(one["cil_comm"], rel=1e-9)
    assert -1e-9 <= row["cil_comm"] < 0.5 and -1e-9 <= des["cil_comm"] < 0.5


def test_transfers_a_gemm_releases_tile_by_tile_are_not_read_as_faster_than_alone():
    """fused-dma's epilogue stores: the GEMM's tiles release them one at a time; alone they are
    all ready at once and queue behind one another. Summed, their spans read the overlapped
    run 64% faster than alone (cil_comm -0.64, the bug); the time some transfer is under way
    does not count that queueing: slower beside the GEMM, by its HBM traffic."""
    from ficco_sim.explore.estimate import estimate_many
    sc = Scenario("gemm-rs", 4, 4096, 4096, 4096)
    des = simulate(sc, "fused-dma", "h100", "switch:4").metrics["cil_comm"]
    cf = estimate_many([sc], ["fused-dma"], "h100", "switch:4")[0]["cil_comm"]
    assert 0.0 <= des < 0.3 and 0.0 <= cf < 0.3


# Each case goes red when its mechanism is switched off in the closed form (the times say
# what the closed form gave without it; HBM contention as fitted on arXiv 2507.03114):
MECHANISMS = {
    # FiCCO reduce-scatter pieces by copy engines: three engines serve a step's seven commands
    # per GPU, so the commands of one step meet on the switch links in the first pass but
    # spread out in the DES; the sharing passes follow them. DES 0.476 ms, closed form -3.4%.
    "links shared by observed overlap": (Scenario("gemm-rs", 8, 8192, 6144, 2048, dtype="bfloat16"), "switch:8",
                                         "ficco-a2a-dma", 0.04),
    # Each step's sum kernel starts in the last wave of the GEMM piece it follows and keeps
    # the SMs it took; the next piece's blocks (nothing fits beside a sum block) wait for it.
    # DES 1.834 ms; closed form -4.7%, -7.5% if the next piece started at once.
    "GEMMs wait for a memory kernel's SMs": (Scenario("gemm-rs", 8, 32768, 6144, 2048, dtype="bfloat16"), "switch:8",
                                             "ficco-a2a-dma", 0.06),
    # Each step's sum kernel starts while the next GEMM piece runs, whose blocks (384 threads x
    # 168 registers) leave no room beside them: it gets SMs only in that GEMM's last wave.
    # DES 2.017 ms; closed form -7.4% (it does not share HBM between the GEMM and the sum
    # kernel beside it, as the DES does), -11.7% with the sum kernels at full speed from their
    # launch, -12.0% without the GEMM waits.
    "memory kernels beside a GEMM": (Scenario("gemm-rs", 8, 32768, 6144, 2048, dtype="bfloat16"), "switch:8",
                                     "shard-p2p-dma", 0.09),
    # Each piece's normal-priority communication kernel reaches the SMs with the next GEMM
    # piece, issued before it, which fills every SM (nothing fits beside its blocks): it starts
    # when that GEMM's last wave leaves SMs free. DES 2.129 ms; closed form -2.0%.
    "comm kernels wait for SMs": (Scenario("gemm-rs", 8, 32768, 6144, 2048, dtype="bfloat16"), "switch:8",
                                  "ficco-a2a-sm", 0.05),
    # A high-priority communication kernel and the next persistent GEMM piece, released together
    # by the piece before: the GEMM, queued on its stream, reaches the SMs first whatever the
    # priorities (the collective is woken by the piece's event), and keeps them tile to tile.
    # DES 1.876 ms (= the normal-priority schedule); closed form +2.5%.
    "a collective released with a persistent GEMM": (Scenario("gemm-rs", 8, 8192, 8192, 8192), "switch:8",
                                                      "ficco-a2a-sm-hi-g4", 0.035),
    # The same release on a Llama-3-70B output projection (k = 1024 per GPU: short pieces): the
    # closed form's tie rule must put the queued GEMM first too. DES 0.640 ms; closed form -0.1%,
    # -13.5% with the high-priority collective first. Checked at an LL128 step of 1.2 us (the
    # fit of 2026-11-28 had 3.3): below ~1 us (the present H100 fit, 0.61) the uncontended pass,
    # from which the closed form decides who waits for SMs, launches the next piece's collective
    # 0.5 us before its GEMM piece; in the DES they tie, the queued GEMM goes first, and the closed
    # form reads 7% fast (validation/public/README.md, "Closed form, one gap").
    "a queued GEMM piece before a collective its event wakes": (Scenario("gemm-rs", 8, 8192, 8192, 1024, "bfloat16"),
                                                                 "switch:8", "ficco-a2a-sm-hi-g2", 0.03),
}
LL128_STEP = {"a queued GEMM piece before a collective its event wakes": 1.2e-6}


@pytest.mark.parametrize("case", list(MECHANISMS))
def test_closed_form_mechanisms_match_the_des(case):
    sc, topo, sched, rel = MECHANISMS[case]
    gpu = load_gpu("h100")
    if case in LL128_STEP:
        ck = gpu.comm_kernel
        gpu = dataclasses.replace(gpu, comm_kernel=dataclasses.replace(ck, protocols=tuple(
            dataclasses.replace(p, latency=LL128_STEP[case]) if p.name == "LL128" else p for p in ck.protocols)))
    t = load_topology(topo, gpu)
    g = lower(sc, sched, gpu, t)
    des = simulate_graph(g, gpu, t, record=False).makespan
    assert closed_form_timeline(g, gpu, t).makespan == pytest.approx(des, rel=rel)

def test_groups_joins_equal_their_dense_definition():
    """The contention pass's member lists (built by sorting joins, merged templates being
    thousands of GPUs wide) are the dense definition: per GPU of a GEMM, its comm kernels and
    the transfers leaving or entering it; per (src, dst) pair of the target transfers, the
    GEMMs on either end."""
    rng = np.random.default_rng(7)

    def dense(member):      # row r: the columns set in it, ascending, padded with the width
        width = max([1] + [int(r.sum()) for r in member])
        return np.array([sorted(np.flatnonzero(r)) + [member.shape[1]] * (width - int(r.sum())) for r in member],
                        dtype=np.int64).reshape(len(member), width)

    for _ in range(60):
        G, M, C, X = (int(v) for v in rng.integers(1, 30, 4))
        gg, cg, xs, xd = rng.integers(0, G, M), rng.integers(0, G, C), rng.integers(0, G, X), rng.integers(0, G, X)
        tx = np.sort(rng.choice(X, int(rng.integers(1, X + 1)), replace=False))
        got = closed_form_tables.groups(gg, cg, rng.random(C), xs, xd, None, tx)
        gpus = np.unique(gg)
        assert np.array_equal(got.comm, dense(gpus[:, None] == cg[None, :]))
        assert np.array_equal(got.near, dense((gpus[:, None] == xs[None, :]) | (gpus[:, None] == xd[None, :])))
        pairs = sorted({(int(a), int(b)) for a, b in zip(xs[tx], xd[tx])})
        assert got.pair_row.tolist() == [pairs.index((int(a), int(b))) for a, b in zip(xs[tx], xd[tx])]
        p = np.array(pairs)
        assert np.array_equal(got.pair_gemms, dense((p[:, :1] == gg[None, :]) | (p[:, 1:] == gg[None, :])))


def test_link_sweep_equals_the_pairwise_max_min_sharing():
    """:func:`link_coefs` sweeps each link once per pass; its answer is the pairwise definition:
    a link's rate divided by the sum over transfers on it of their overlap with the target's
    span, over that span (at least one), then twice raised to what the others leave of the link
    at their rates (max-min: their rates times their overlap, over the span), each transfer capped
    by its own bound. Spans with ties, empty spans and transfers never reached (+inf: swept at a
    time after every finite one) included."""
    from types import SimpleNamespace
    rng = np.random.default_rng(3)
    for _ in range(40):
        X, L, Lmax, P = int(rng.integers(1, 40)), int(rng.integers(1, 6)), int(rng.integers(1, 4)), 3
        links = np.full((X, Lmax), L, dtype=np.int64)
        for x in range(X):
            k = int(rng.integers(0, Lmax + 1))
            links[x, :k] = rng.choice(L, min(k, L), replace=False).tolist() + [L] * (k - min(k, L))
        s = np.round(rng.random((P, X)) * 4) / 4                       # coarse: many ties
        e = s + np.round(rng.random((P, X)) * 4) / 4 * (rng.random((P, X)) > 0.2)
        e[rng.random((P, X)) < 0.05] = np.inf
        s[rng.random((P, X)) < 0.03] = np.inf
        e = np.maximum(e, s)
        vals = np.concatenate([s, e], axis=1)
        tx = np.sort(rng.choice(X, int(rng.integers(1, X + 1)), replace=False))
        tpl = SimpleNamespace(xfer_nodes=np.arange(X, 2 * X), xfer_begin=np.arange(X), xfer_links=links,
                              link_bw=np.append(rng.uniform(1, 10, L), np.inf), xfer_cap=rng.uniform(1, 20, X),
                              xfer_targets=tx, level_cache={})
        with np.errstate(invalid="ignore"):
            got = closed_form_overlap.link_coefs(tpl, vals)
        for p in range(P):
            crossing = (links < L).any(1)
            fin = np.concatenate([s[p, crossing], e[p, crossing]])
            fin = fin[np.isfinite(fin)]
            late = 2.0 * max(fin.max() if len(fin) else 0.0, 0.0) + 1.0
            S, E = np.where(np.isfinite(s[p]), s[p], late), np.where(np.isfinite(e[p]), e[p], late)
            with np.errstate(invalid="ignore"):
                span = e[p] - s[p]        # as measured: a span never ended is infinite, its shares the whole link

            def over(x, on):
                return np.clip(np.minimum(E[x], E[on]) - np.maximum(S[x], S[on]), 0, None)

            part = {}
            for x in range(X):
                for lk in links[x][links[x] < L]:
                    on = np.flatnonzero((links == lk).any(1))
                    conc = over(x, on).sum() / span[x] if span[x] > 0 else 1.0
                    part[(x, lk)] = tpl.link_bw[lk] / max(conc, 1.0)

            def rates():
                return np.array([min([part[(x, lk)] for lk in links[x][links[x] < L]] + [tpl.xfer_cap[x]])
                                 for x in range(X)])
            rate = rates()
            for _ in range(2):
                for x in range(X):
                    for lk in links[x][links[x] < L]:
                        on = np.flatnonzero((links == lk).any(1))
                        others = (rate[on] * over(x, on)).sum() / span[x] - rate[x] if span[x] > 0 else 0.0
                        part[(x, lk)] = max(part[(x, lk)], tpl.link_bw[lk] - max(others, 0.0))
                rate = rates()
            for i, x in enumerate(tx):
                if not np.isfinite(e[p, x]):
                    continue            # a transfer never reached: its rate does not matter
                assert got[p, i] == pytest.approx(1.0 / rate[x], rel=1e-9)


def test_a_kernel_fits_beside_the_lighter_sms_of_an_uneven_wave():
    """504 GEMM blocks at two per CU on MI300X's 304 CUs: the dispatcher spreads them evenly, so
    104 CUs hold one block and have room for a communication kernel's blocks, which start at
    once (the DES); counting every CU as holding two left them no slot and held each step's
    kernel until the GEMM ended (+38% against the DES). The plain oracle agrees task by task."""
    import reference_closed_form as ref
    gpu = load_gpu("mi300x")
    t = load_topology("fc:8", gpu)
    g = lower(Scenario("ag-gemm", 8, 2048, 2304, 16384, dtype="bfloat16"), "ficco-a2a-sm-g2", gpu, t)
    got = closed_form_timeline(g, gpu, t)
    assert got.makespan == pytest.approx(simulate_graph(g, gpu, t, record=False).makespan, rel=0.15)
    by_id = got.by_id()
    for tid, (s, e) in ref.reference(g, gpu, t).items():
        assert by_id[tid].start == pytest.approx(s, rel=1e-9, abs=1e-15), tid
        assert by_id[tid].end == pytest.approx(e, rel=1e-9, abs=1e-15), tid


def test_a_ring_across_a_slow_bridge_agrees_with_the_des(tmp_path):
    """Two 4-GPU switches joined by a 100 GB/s bridge (a user's topology): a ring GPU's later
    steps cross the bridge while its first one still does; shared by the time-averaged count
    alone, the closed form read the ring collectives 13% slower than the DES (the bridge's rate
    over 7 steps); with what the others leave of each link, within 3%."""
    (tmp_path / "islands.yaml").write_text(
        "name: two-islands\ngpus: 8\ndefaults: {bandwidth_gbps: 396, latency_us: 0.2}\nlinks:\n"
        + "".join(f"  - {{from: gpu{i}, to: sw{i // 4}}}\n" for i in range(8))
        + "  - {from: sw0, to: sw1, bandwidth_gbps: 100, latency_us: 2.0}\n")
    topo = str(tmp_path / "islands.yaml")
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        des = collective_time("h100", topo, kind, 256 << 20)
        ana = collective_time("h100", topo, kind, 256 << 20, sim="analytical")
        assert ana == pytest.approx(des, rel=0.03), (kind, ana / des - 1)
