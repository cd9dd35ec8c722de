"""The vectorized estimator (explore/fast.py): merged evaluation, compact contention, symmetry."""

import numpy as np
import pytest

from ficco_sim import Scenario
from ficco_sim.analytical import analytical_timeline
from ficco_sim.explore import fast
from ficco_sim.explore.symmetry import rotation_symmetric
from ficco_sim.explore.fast import estimate_many, evaluate, merge, template
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules import lower
from ficco_sim.topology import load_topology

SCHEDS = ["none", "shard-p2p-sm", "shard-p2p-dma", "ficco-a2a-sm-hi", "ficco-a2a-dma", "ficco-a2a-sm-smem16k"]


def _setup(topo="fc:4"):
    gpu = load_gpu("h100")
    return gpu, load_topology(topo, gpu)


def _dense_contention(tpl, gpu, vals, add, nbytes, gemm_hbm):
    """The contention pass written plainly: every GEMM against every span, other GPUs masked."""
    slow = np.ones_like(add)
    ct = gpu.contention
    gs, ge = vals[:, tpl.gemm_begin], vals[:, tpl.gemm_nodes]
    xs, xe = vals[:, tpl.xfer_begin], vals[:, tpl.xfer_nodes]
    cs, ce = vals[:, tpl.comm_begin], vals[:, tpl.comm_nodes]
    g_gpu, c_gpu = tpl.gpu_of[tpl.gemm_nodes], tpl.gpu_of[tpl.comm_nodes]
    x_src, x_dst = tpl.gpu_of[tpl.xfer_nodes], tpl.dst_of[tpl.xfer_nodes]
    xrate = np.where(xe > xs, nbytes[:, tpl.xfer_nodes] / np.maximum(xe - xs, 1e-300), 0.0)
    grate = np.where(ge > gs, gemm_hbm / np.maximum(ge - gs, 1e-300), 0.0)

    def cover(s, e, spans):
        if e <= s:
            return 0.0
        cov, cur = 0.0, s
        for a, b in sorted(spans):
            a, b = max(a, cur), min(b, e)
            if b > a:
                cov, cur = cov + b - a, b
        return cov / (e - s)

    for p in range(vals.shape[0]):
        for i, node in enumerate(tpl.gemm_nodes):
            s, e, u = gs[p, i], ge[p, i], g_gpu[i]
            comm = [(cs[p, c], ce[p, c], tpl.comm_grid[c]) for c in range(len(c_gpu)) if c_gpu[c] == u]
            xf = [(xs[p, x], xe[p, x], xrate[p, x]) for x in range(len(x_src))
                  if (x_src[x] == u or x_dst[x] == u) and xe[p, x] > xs[p, x]]
            loss = min(0.9, max([g for a, b, g in comm if a < e and b > s] + [0]) / gpu.num_sms)
            rate = max([r for a, b, r in xf if a < e and b > s] + [0.0])
            slow[p, node] = (1.0 + cover(s, e, [(a, b) for a, b, _ in comm]) * loss / (1.0 - loss)
                             + cover(s, e, [(a, b) for a, b, _ in xf]) * ct.compute_per_hbm_util * rate
                             / gpu.hbm_bandwidth)
        for x, node in enumerate(tpl.xfer_nodes):
            s, e = xs[p, x], xe[p, x]
            gm = [(gs[p, i], ge[p, i], grate[p, i]) for i in range(len(g_gpu)) if g_gpu[i] in (x_src[x], x_dst[x])]
            rate = max([r for a, b, r in gm if a < e and b > s] + [0.0])
            slow[p, node] = 1.0 + cover(s, e, [(a, b) for a, b, _ in gm]) * ct.comm_per_hbm_util * rate / \
                gpu.hbm_bandwidth
    return slow


@pytest.mark.parametrize("sc,topo", [(Scenario("ag-gemm", 4, 4096, 2048, 2048), "ring:4"),
                                     (Scenario("gemm-rs", 4, 4096, 2048, 2048), "switch:4"),
                                     (Scenario("a2a-gemm", 4, 4096, 2048, 2048,
                                               routing=((1500, 1000, 1000, 596),) * 4), "fc:4")])
def test_compact_contention_matches_the_plain_pass(sc, topo, monkeypatch):
    gpu, t = _setup(topo)
    sizes = [sc, Scenario(sc.kind, 4, sc.m * 2, sc.n, sc.k, routing=tuple(tuple(2 * x for x in r)
                                                                          for r in sc.routing) if sc.routing else None)]
    for sch in SCHEDS[1:]:
        tpl = template(sc, sch, gpu, t)
        got = evaluate(tpl, gpu, sizes)
        monkeypatch.setattr(fast, "_contention", _dense_contention)
        want = evaluate(tpl, gpu, sizes)
        monkeypatch.undo()
        np.testing.assert_allclose(got["vals"], want["vals"], rtol=1e-12, err_msg=sch)


def test_merged_evaluation_equals_separate_ones():
    gpu, t = _setup("switch:4")
    sc = Scenario("ag-gemm", 4, 4096, 2048, 2048)
    sizes = [sc, Scenario("ag-gemm", 4, 8192, 1024, 4096), Scenario("ag-gemm", 4, 2048, 4096, 1024)]
    fast._CACHE.clear()      # every template from the same reference scenario
    tpls = [template(sc, s, gpu, t) for s in SCHEDS] + [template(sc, "none", gpu, t, comm_only=True)]
    merged, offs = merge(tpls)
    ev = evaluate(merged, gpu, sizes)
    for tpl, a, b in zip(tpls, offs[:-1], offs[1:]):
        alone = evaluate(tpl, gpu, sizes)
        np.testing.assert_allclose(ev["vals"][:, a:b], alone["vals"][:, :-1], rtol=1e-12)
        np.testing.assert_allclose(ev["vals"][:, a:b].max(1), alone["makespan"], rtol=1e-12)


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
@pytest.mark.parametrize("topo", ["ring:4", "fc:4", "switch:4"])
def test_reference_scenario_matches_analytical_timeline(kind, topo):
    sc = Scenario(kind, 4, 4096, 2048, 1024)
    fast._CACHE.clear()      # templates built from this very scenario: exact, not rescaled
    rows = estimate_many([sc], SCHEDS, "h100", topo)
    for r in rows:
        tl = analytical_timeline(lower(sc, r["schedule"], "h100", topo), "h100", topo)
        assert r["makespan"] == pytest.approx(tl.makespan, rel=1e-9), r["schedule"]


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
@pytest.mark.parametrize("topo", ["fc:4", "switch:4"])   # ring:4 is not: see the report on routing ties
def test_rotation_symmetric_scenarios_give_every_gpu_the_same_timeline(kind, topo):
    """Rotating GPU ids maps ag-gemm, gemm-rs and uniform a2a-gemm onto themselves, so every
    GPU's GEMMs must start and end at the same times (a precondition for evaluating one GPU)."""
    gpu, t = _setup(topo)
    sc = Scenario(kind, 4, 4096, 2048, 1024)
    sizes = [sc, Scenario(kind, 4, 8192, 2048, 1024)]
    fast._CACHE.clear()
    for sch in SCHEDS:
        tpl = template(sc, sch, gpu, t)
        ev = evaluate(tpl, gpu, sizes)
        g = tpl.gpu_of[tpl.gemm_nodes]
        per_gpu = [np.sort(ev["vals"][:, tpl.gemm_nodes[g == u]], axis=1) for u in np.unique(g)]
        for other in per_gpu[1:]:
            np.testing.assert_allclose(other, per_gpu[0], rtol=1e-9, err_msg=sch)
        x = tpl.xfer_nodes
        ends = {u: np.sort(ev["vals"][:, x[tpl.gpu_of[x] == u]], axis=1) for u in np.unique(tpl.gpu_of[x])}
        for u in ends:
            np.testing.assert_allclose(ends[u], ends[0], rtol=1e-9, err_msg=sch)


@pytest.mark.parametrize("gpu_name,topo_name", [("h100", "ring:4"), ("mi300x", "fc:4")])
def test_templates_reused_across_sizes_still_agree_with_the_analytical_model(gpu_name, topo_name):
    """Templates are cached by structure, not size: a template built for one size must give
    the analytical model's answer for every other size, whatever the call order."""
    from ficco_sim import basic_schedules
    gpu, schedules = load_gpu(gpu_name), [s.name for s in basic_schedules()]
    topo = load_topology(topo_name, gpu)
    fast._CACHE.clear()
    for kind in ("ag-gemm", "gemm-rs", "a2a-gemm"):
        first, later = Scenario(kind, 4, 4096, 2048, 2048), Scenario(kind, 4, 16384, 512, 1024)
        fast.estimate_many([first], schedules, gpu, topo)
        for row in fast.estimate_many([later, first], schedules, gpu, topo):
            sc = later if row["scenario"] == later.label() else first
            ref = analytical_timeline(lower(sc, row["schedule"], gpu, topo), gpu, topo).makespan
            assert row["makespan"] == pytest.approx(ref, rel=1e-9), (kind, row["schedule"], sc.label())


@pytest.mark.parametrize("sc,topo,collapses", [
    (Scenario("ag-gemm", 4, 4096, 2048, 1024), "switch:4", True),
    (Scenario("gemm-rs", 4, 4096, 2048, 1024), "fc:4", True),
    (Scenario("a2a-gemm", 4, 4096, 2048, 1024), "switch:4", True),
    (Scenario("ag-gemm", 8, 4096, 2048, 1024), "fc:8", True),
    (Scenario("ag-gemm", 4, 4096, 2048, 1024), "ring:4", None),     # only some schedules are symmetric
    (Scenario("a2a-gemm", 4, 4096, 2048, 1024, routing=((1500, 1000, 1000, 596),) * 4), "fc:4", False)])
def test_rotation_quotient_equals_the_full_evaluation(sc, topo, collapses):
    """Merging with ``rotations`` evaluates one task per symmetry class; the times of every
    node must equal the full evaluation's, and asymmetric cases must not collapse (the test
    of each template is applied even where the caller would not ask for it, as on rings)."""
    gpu, t = _setup(topo)
    other = Scenario(sc.kind, sc.gpus, sc.m * 2, sc.n, sc.k // 2,
                     routing=tuple(tuple(2 * x for x in r) for r in sc.routing) if sc.routing else None)
    fast._CACHE.clear()
    tpls = [template(sc, s, gpu, t) for s in SCHEDS] + [template(sc, "none", gpu, t, comm_only=True)]
    full, _ = merge(tpls)
    quot, _ = merge(tpls, rotations=True)
    if collapses is not None:
        assert (quot.quotient is not None) == collapses
    if collapses:
        assert quot.quotient.num_nodes * 2 < full.num_nodes
        assert len(quot.quotient.gemm_targets) * 2 < len(full.gemm_nodes)
    want, got = evaluate(full, gpu, [sc, other]), evaluate(quot, gpu, [sc, other])
    for k in ("vals", "add", "nbytes", "makespan"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, err_msg=k)
    assert rotation_symmetric(sc, t) == bool(collapses)
