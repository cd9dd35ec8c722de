"""Interference measured in real profiler traces (ficco_sim.traces.interference), the
contention rule's residency term it fits, and that term in both engines."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ficco_sim import Scenario, simulate
from ficco_sim.hardware import load_gpu
from ficco_sim.traces.interference import COLUMNS, fit_compute, kernel_pairs, sm_loss_slowdown

ROOT = Path(__file__).resolve().parents[1]
NCCL217 = ROOT / "traces/real/hta_a100_nccl217_rank0.json.gz"     # A100, DDP over NCCL 2.17, 3 profiler steps


@pytest.fixture(scope="module")
def pairs() -> pd.DataFrame:
    return kernel_pairs([NCCL217])


def test_real_trace_pairs_are_the_same_kernel_alone_and_beside(pairs):
    comp = pairs[pairs["side"] == "compute"]
    assert len(comp) >= 30
    assert (comp["alone_n"] >= 1).all() and (comp["beside_n"] >= 1).all()
    assert (comp["share"] > 0.5).all() and (comp["alone_s"] >= 10e-6).all()
    # NCCL's own footprint, from the trace (ncclKernel_AllReduce_RING_LL: 544 threads, 87,568 B)
    assert set(comp["other_smem"]) == {87568} and set(comp["other_threads"]) == {544}
    # the all-reduce's size is in the trace: a finite HBM rate (bytes sent + received per s)
    assert np.isfinite(comp["other_hbm_rate"]).all() and (comp["other_hbm_rate"] > 0).all()
    # measured: compute beside NCCL is slower at the median, not faster
    assert comp["slowdown"].median() > 0


def _planted(slowdown, share=1.0, rate=np.nan, n=9) -> pd.DataFrame:
    row = dict.fromkeys(COLUMNS, 0)
    row.update(trace="x.json", side="compute", alone_n=2, beside_n=2, alone_s=1e-3, share=share,
               other_hbm_rate=rate, grid=0, threads=0)
    rows = []
    for i, s in enumerate(np.broadcast_to(slowdown, (n,))):
        rows.append({**row, "position": i, "slowdown": float(s), "beside_s": 1e-3 * (1 + s)})
    return pd.DataFrame(rows, columns=COLUMNS)


def test_fit_recovers_a_planted_residency_term_and_takes_off_the_hbm_one():
    a100 = load_gpu("a100")
    fit = fit_compute(a100, _planted(0.12))
    assert fit.coef == pytest.approx(0.12) and fit.low == pytest.approx(0.12)
    # half the span overlapped: the same term per unit of share
    assert fit_compute(a100, _planted(0.06, share=0.5)).coef == pytest.approx(0.12)
    # a collective at 40% of HBM: the profile's HBM term explains 0.3 * 0.4 of it
    rate = 0.4 * a100.hbm_bandwidth
    fit = fit_compute(a100, _planted(0.05 + a100.contention.compute_per_hbm_util * 0.4, rate=rate))
    assert fit.coef == pytest.approx(0.05)
    assert fit.hbm_slope == pytest.approx(a100.contention.compute_per_hbm_util + 0.05 / 0.4)


def test_sm_term_is_the_extra_wave_the_collective_blocks_cause():
    a100 = load_gpu("a100")
    # one full wave of 1-per-SM blocks of 140 KiB: no room beside an 87.5 KB NCCL block
    df = _planted(0.0, n=1).assign(grid=a100.num_sms, threads=256, registers=64, smem=140 * 1024,
                                   other_blocks=8.0, other_threads=544, other_registers=96, other_smem=87568)
    assert sm_loss_slowdown(a100, df)[0] == pytest.approx(1.0)           # 2 waves instead of 1
    assert sm_loss_slowdown(a100, df.assign(share=0.5))[0] == pytest.approx(0.5)
    # small blocks that fit beside it: no extra wave
    assert sm_loss_slowdown(a100, df.assign(smem=16 * 1024, registers=32))[0] == 0.0


def _gpu(beside: float):
    g = load_gpu("a100")
    return replace(g, contention=replace(g.contention, compute_per_hbm_util=0.0, comm_per_hbm_util=0.0,
                                         compute_beside_comm_kernel=beside))


@pytest.mark.parametrize("engine", ["des", "analytical"])
def test_residency_term_slows_compute_only_beside_a_communication_kernel(engine):
    """Switching the term off must move this answer: a GEMM beside an SM all-reduce loses
    ``C * b / (1 + b)`` in the DES (rate / (1 + b) while the collective's blocks are resident
    for C), in the closed form between that and ``C * b`` (time scaled over the covered share
    of its run, that share taken again on the run the slowdown made); beside a copy-engine
    all-reduce (no kernel) nothing changes."""
    sc = Scenario("ar-par-gemm", 8, 8192, 8192, 8192)
    b = 0.25
    base, slowed = (simulate(sc, "par-sm", _gpu(x), "switch:8", engine=engine) for x in (0.0, b))
    gemm = lambda r: next(x for x in r.timeline.records if x.id == "gemm0")  # noqa: E731
    g0, g1 = gemm(base), gemm(slowed)
    comm = [x for x in base.timeline.records if x.gpu == 0 and x.kind == "comm"]
    c = sum(max(0.0, min(x.end, g0.end) - max(x.start, g0.start)) for x in comm)
    assert c > 0
    if engine == "des":
        # (to 1e-4: the GEMM's own roofline pace differs a little between the waves C spans)
        assert g1.end - g0.end == pytest.approx(c * b / (1 + b), rel=1e-4)
    else:
        assert c * b / (1 + b) * (1 - 1e-6) <= g1.end - g0.end <= c * b * (1 + 1e-6)
    d0, d1 = (simulate(sc, "par-dma", _gpu(x), "switch:8", engine=engine).makespan for x in (0.0, b))
    assert d1 == d0


def test_calibrate_from_a_trace_writes_the_term(tmp_path):
    out = tmp_path / "a100.yaml"
    run = subprocess.run([sys.executable, "-m", "ficco_sim.cli", "calibrate", "--from", str(NCCL217), "--gpu", "a100",
                          "--out", str(out), "--report", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    g = load_gpu(str(out))
    assert 0 <= g.contention.compute_beside_comm_kernel < 0.1
    text = out.read_text()
    assert "compute_beside_comm_kernel: {value:" in text and "kind: fitted" in text and NCCL217.name in text
    assert (tmp_path / "a100_trace_pairs.csv").exists()


def test_calibrate_from_traces_says_how_their_gemm_kernels_hold_sms(tmp_path):
    """The H200's replay traces: cuBLAS ``nvjet`` GEMMs of 132 blocks computing 4096 x 4096
    outputs (one block per SM looping over tiles) -> ``gemm.kernel: persistent``; they hold no
    kernel both alone and beside a collective, which is said, not fatal. The A100 DDP trace:
    grids of a block per tile, larger than the GPU holds at once -> ``waves``, beside its
    contention term."""
    from ficco_sim.calibrate import calibrate_from_files
    h200 = (ROOT / "validation/gpu/h200/2026-11-27/traces/par4"
            / "ar-par-gemm_x4_m4096_n4096_k4096_float16_dimM_par-sm.json.gz")
    cal = calibrate_from_files([h200], "h200", out=tmp_path / "h200.yaml")
    assert cal.updates["gemm.kernel"][:2] == ("persistent", "measured") and h200.name in cal.updates["gemm.kernel"][2]
    assert "no kernel ran both" in cal.unfitted["contention.compute_beside_comm_kernel"]
    assert load_gpu(str(tmp_path / "h200.yaml")).gemm.persistent
    base = ROOT / "hw_profiles/h100.yaml"        # persistent: the trace says otherwise
    cal = calibrate_from_files([NCCL217], "a100", base, out=tmp_path / "a100.yaml")
    assert cal.updates["gemm.kernel"][0] == "waves" and "contention.compute_beside_comm_kernel" in cal.updates
    assert not load_gpu(str(tmp_path / "a100.yaml")).gemm.persistent


@pytest.mark.parametrize("trace,why", [("traces/cpu_mm_chain.json.gz", "CPU-only"),
                                       ("traces/real/hta_a100_event_sync.json.gz", "no kernel ran both")])
def test_calibrate_refuses_a_trace_with_nothing_to_measure(tmp_path, trace, why):
    out = tmp_path / "x.yaml"
    run = subprocess.run([sys.executable, "-m", "ficco_sim.cli", "calibrate", "--from", str(ROOT / trace), "--gpu",
                          "a100", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and why in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()
