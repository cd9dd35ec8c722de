"""What the H200 lease of 2026-11-28 measured (validation/gpu/h200/2026-11-28, both runs): a GEMM
beside a kernel that holds SMs (``benchmarks/gpu_sm_hold.py``), which waiting kernel the block
scheduler serves (``gpu_dispatch.py``), a GEMM planned for fewer SMs (``gpu_sm_carveout.py``) and
the SM clock (``gpu_sm_clock.py``); and the engine on the same rows (``benchmarks/sm_hold_model.py``;
never fitted on them)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark

ROOT = Path(__file__).resolve().parents[1]
LEASE = ROOT / "validation" / "gpu" / "h200" / "2026-11-28"
RUNS = [LEASE, LEASE / "rerun"]      # the lease's calls, and the same scripts run again at its end


@pytest.fixture(scope="module", params=RUNS, ids=["first", "rerun"])
def tables(request):
    return benchmark("sm_hold_model").tables("h200", request.param / "sm_hold.csv")


def _first_starts(path: Path) -> pd.DataFrame:
    rows = pd.read_csv(path, comment="#")
    rows = rows[rows["experiment"] == "gemm-first"]
    cells = rows.groupby(["dtype", "m", "n", "k", "held", "priority"])[["spin_first_s", "gemm_end_s"]].median()
    return (cells["spin_first_s"] / (cells["gemm_end_s"] / 3)).unstack("priority")


@pytest.mark.parametrize("run", RUNS, ids=["first", "rerun"])
def test_the_h200_gives_a_queued_gemm_the_sms_before_a_higher_priority_kernel_an_event_wakes(run):
    """The measured facts the dispatcher's arrival order follows: a spin kernel waiting on the
    first GEMM of a chain started in the second GEMM's last tile round whatever its stream's
    priority (bf16, persistent ``nvjet`` kernels: 16 cells within 0.02 of a GEMM); with fp32 GEMMs
    (blocks in waves) the high-priority one started after the second GEMM's first wave, half a
    GEMM earlier than at equal priority."""
    first = _first_starts(run / "sm_hold.csv")
    bf16, fp32 = first.loc["bf16"], first.loc["fp32"]
    assert len(bf16) == 16 and ((bf16["spin-high"] - bf16["same"]).abs() < 0.02).all()
    assert (bf16["same"] > 0.95).all()                    # not before the second GEMM began
    assert ((fp32["same"] - fp32["spin-high"]) > 0.45).all()
    assert fp32["spin-high"].between(1.2, 1.3).all()
    kernels = pd.read_csv(run / "sm_hold_kernels.csv", comment="#").set_index("dtype")["kernel"]
    assert kernels["bf16"].str.startswith("nvjet_sm90").all() and kernels["fp32"].startswith("sm80_xmma")


def test_a_light_block_holds_an_sm_from_the_gemm_as_a_heavy_one_does():
    """The GEMM's block needs the whole register file: with every SM held by a 128-thread block
    with no shared memory the GEMM waits as it does beside 512-thread blocks of 120 KiB."""
    def ends(name):
        rows = pd.read_csv(LEASE / name, comment="#")
        rows = rows[(rows["experiment"] == "hold-first") & (rows["held"] == 132)]
        return rows.groupby(["dtype", "m"]).apply(lambda g: (g["gemm_end_s"] - g["hold_s"]).median(),
                                                  include_groups=False)
    heavy, light = ends("sm_hold.csv"), ends("sm_hold_light.csv")
    assert len(heavy) == 4 and ((light / heavy - 1).abs() < 0.1).all()


def test_tiles_go_on_demand_not_by_block(tables):
    """Held SMs do not delay their blocks' whole share of tiles: with one or two SMs held for up
    to half the GEMM's time the GEMM ends as if nothing were held (a share per block would end it
    that much later), so the engine's persistent GEMMs take tiles on demand."""
    hold, _ = tables
    few = hold[(hold["held"] <= 2) & (hold["hold"] < 0.7)]
    assert len(few) >= 16 and (few["measured"].abs() < 0.05).all()
    assert (few["model"].abs() < 0.02).all()


def test_the_engine_lands_on_the_measured_gemm_ends_beside_held_sms(tables):
    """150 cells (4 bf16 shapes and one fp32, 1-132 SMs held for a quarter to one GEMM time):
    the engine's GEMM end within 0.03 of a GEMM time at the median, 0.15 in nine cells of ten
    (both runs: 0.015 / 0.128 and 0.021 / 0.105).
    Its largest misses: one or two SMs held past the GEMM's end, which the H200's GEMM still
    waits for 10-80 us after they free (the engine's late blocks find no tile left)."""
    hold, _ = tables
    err = hold["error"].abs()
    assert len(hold) == 150 and err.median() < 0.03 and err.quantile(0.9) < 0.15, hold.sort_values("error")


def test_the_engine_starts_the_waiting_kernel_when_the_h200_did(tables):
    """The chain experiment in the engine: every one of 40 cells (both priorities, bf16 and fp32)
    within 0.1 of a GEMM of when the measured spin kernel started. Without the queued-first
    arrival order the high-priority spin would start at the first GEMM's end (0.75-0.92 early on
    bf16); with fp32 GEMMs persistent, at the last wave (0.5 late)."""
    _, first = tables
    assert len(first) == 40 and (first["error"].abs() < 0.1).all(), first


@pytest.mark.parametrize("run", RUNS, ids=["first", "rerun"])
def test_the_h200_block_scheduler_serves_waiting_kernels_head_of_line(run):
    """``benchmarks/gpu_dispatch.py``: a kernel whose blocks do not fit beside a resident one (H)
    and a light kernel whose blocks do (L), issued 20 us apart. When H came first at equal or higher
    stream priority, L started 0.1-0.3 us after H's last block was placed, in every repeat (it
    could have run beside the resident kernel 50-300 us earlier; both runs, 56 repeats); at higher
    priority it went at once (all but one disturbed repeat of the rerun). Head of line: the
    profile's ``dispatch: strict``."""
    rows = pd.read_csv(run / "dispatch.csv", comment="#")
    first = rows[rows["order"] == "H-first"]
    behind = first[first["priority"] != "L-high"]
    gap = behind["l_first_s"] - behind["h_last_s"]
    assert len(behind) == 28 and gap.between(0, 1e-6).all()
    ahead = first[first["priority"] == "L-high"]
    lead = (ahead["h_last_s"] - ahead["l_first_s"]).groupby(ahead["resident"]).median()
    assert (lead > 40e-6).all()


@pytest.mark.parametrize("run", RUNS, ids=["first", "rerun"])
def test_the_engine_holds_back_kernels_behind_a_waiting_one_as_the_h200_did(run):
    """The dispatch experiment in the engine: with the H200's profile (``dispatch: strict``) L waits
    exactly where it waited in most repeats in 10 of 12 cells; the other two are the shared-memory
    carveout (the resident kernel's last block held back where a light block ran first; not
    modelled). With backfill L never waits: 4 cells wrong."""
    disp = benchmark("sm_hold_model").dispatch_table("h200", run / "dispatch.csv")
    measured = disp["measured"] > 0.5
    assert len(disp) == 12
    assert (disp["model"] == measured).sum() == 10
    carveout = disp[disp["model"] != measured]
    assert set(carveout["resident"]) == {"all"} and set(carveout["order"]) == {"L-first"}
    assert (disp["backfill"] == measured).sum() == 6


@pytest.mark.parametrize("run", RUNS, ids=["first", "rerun"])
def test_an_sm_carveout_shrinks_the_persistent_grid_and_the_engine_follows_it_beside_held_sms(run):
    """``benchmarks/gpu_sm_carveout.py``: cuBLASLt's SM count target re-plans the nvjet GEMM for
    fewer SMs (grid 124, 116, 100 blocks for carveouts 8, 16, 32, every shape). Beside a kernel
    holding 8 SMs for three GEMM times, the GEMM planned for the other 124 is back at 0.89-1.10 of
    its time alone (0.99-1.37 without the carveout; both runs). The engine: within 0.15 of every
    GEMM beside held SMs without a carveout (12 cells) and within 0.16 of every GEMM alone on up to
    32 fewer SMs; planned for 66 fewer SMs it reads 1.96-1.98 where the H200 took 1.66-1.84 (an SM
    does more when fewer work: the clock, not modelled)."""
    rows = pd.read_csv(run / "sm_carveout.csv", comment="#")
    alone = rows[rows["experiment"] == "alone"]
    blocks = alone["grid"].str.split("x").map(lambda g: int(g[0]) * int(g[1]))
    assert (blocks[alone["carveout"] == 8] == 124).all() and (blocks[alone["carveout"] == 32] == 100).all()
    carve = benchmark("sm_hold_model").carveout_table("h200", run / "sm_carveout.csv")
    eight = carve[carve["held"] == 8].set_index(["m", "n", "k", "carveout"])["measured"].unstack("carveout")
    assert (eight[8] <= eight[0]).all() and eight[8].between(0.85, 1.12).all()
    beside = carve[(carve["held"] > 0) & (carve["carveout"] == 0)]
    fewer = carve[(carve["held"] == 0) & carve["carveout"].between(1, 32)]
    assert len(beside) == 12 and (beside["error"].abs() <= 0.15).all(), beside
    assert len(fewer) == 12 and (fewer["error"].abs() <= 0.16).all(), fewer
    half = carve[(carve["held"] == 0) & (carve["carveout"] == 66)]
    assert (half["measured"] < 1.85).all() and (half["model"] > 1.9).all()


@pytest.mark.parametrize("run", RUNS, ids=["first", "rerun"])
def test_the_h200_clocks_its_sms_higher_when_fewer_run_gemms(run):
    """``benchmarks/gpu_sm_clock.py``: 8192^3 GEMMs back to back on every SM settle near 1,500-1,560
    MHz (of 1,980), on half the SMs near 1,900-1,970; half the SMs take 1.56-1.67x the time, not 2x,
    and the per-SM rate rises about as the clock does (1.28x against 1.26x; the rerun 1.20x against
    1.31x: within 10%, the 50 ms samples lag the load). The engine's GEMM rate per SM
    does not depend on how many SMs work (what its 0.16-0.32 error on half the SMs is)."""
    rows = pd.read_csv(run / "sm_clock.csv", comment="#")
    samples = rows[(rows["row"] == "sample") & (rows["t_s"] > 0.3)]
    clock = samples.groupby("phase")["sm_mhz"].median()
    assert clock["all-sms"] < 1600 and clock["half-sms"] > 1850
    gemm = rows[rows["row"] == "summary"].set_index("phase")["gemm_s"]
    ratio = gemm["half-sms"] / gemm["all-sms"]
    assert 1.5 < ratio < 1.7
    assert (2 / ratio) == pytest.approx(clock["half-sms"] / clock["all-sms"], rel=0.1)


def test_the_h200_profile_times_gemms_at_burst_clocks():
    """``benchmarks/gpu_gemm_regime.py``: after 1 s of the same GEMM back to back the SM clock sits
    at 1,260-1,530 MHz (1,980 after an idle gap); GEMMs of at least half 8192^3's work take
    1.17-1.18x their burst time, the others 1.08-1.22x but one (not the clock ratio: 1.3-1.6x). The
    H200 profile's GEMM times are burst times (median 0.95 of them over 10 shapes), so in a steady
    run they read about 19% fast (median 0.81)."""
    from ficco_sim.gemm_model import gemm_time
    from ficco_sim.hardware import load_gpu
    rows = pd.read_csv(LEASE / "gemm_regime.csv", comment="#")
    big = rows[rows["m"] * rows["n"] * rows["k"] >= 2 * 8192 ** 3 // 4]
    assert (rows["sustained_mhz"] < 1600).all() and (rows["burst_mhz"] > 1900).all()
    assert (big["sustained_s"] / big["burst_s"]).between(1.1, 1.25).all()
    gpu = load_gpu("h200")
    model = pd.Series([gemm_time(gpu, m, n, k, "bfloat16") for m, n, k in zip(rows["m"], rows["n"], rows["k"])])
    assert 0.9 < (model / rows["burst_s"]).median() < 1.05
    assert (model / rows["sustained_s"]).median() < 0.85


def test_a_sustained_profile_times_gemms_as_a_steady_stream_runs_them(capsys, tmp_path):
    """``h200:sustained`` (``gemm.sustained``: the median burst / sustained time of the same 10 shapes,
    a measured ratio, not fitted to the model) lands on the sustained times as the plain profile lands
    on the burst ones (median 0.94 against 0.95; the five largest within 7%). A profile never timed in
    a steady stream refuses the suffix in one line."""
    from ficco_sim.cli import main
    from ficco_sim.gemm_model import gemm_time
    from ficco_sim.hardware import load_gpu
    rows = pd.read_csv(LEASE / "gemm_regime.csv", comment="#")
    gpu = load_gpu("h200:sustained")
    assert gpu.name == "h200:sustained" and gpu.dispatch == "strict" and gpu.gemm.persistent
    ratio = pd.Series([gemm_time(gpu, m, n, k, "bfloat16") for m, n, k in zip(rows["m"], rows["n"], rows["k"])])
    ratio /= rows["sustained_s"]
    assert 0.9 < ratio.median() < 1.05
    big = (rows["m"] * rows["n"] * rows["k"]).nlargest(5).index
    assert (ratio[big] - 1).abs().max() < 0.07
    assert main(["predict", "gemm", "--gpu", "a100:sustained", "--m", "64", "--n", "64", "--k", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gemm.sustained" in err
    # calibrate writes plain profiles (the burst rate): the lease's bench, timed in bursts, fitted against the
    # steady regime would need 1.06 of the peak there: refused as the burst timings they are, nothing written
    out = tmp_path / "h200.yaml"
    assert main(["calibrate", "--from", str(LEASE.parent / "2026-11-27" / "h200-bench.csv"), "--gpu", "local",
                 "--base", "h200:sustained", "--out", str(out)]) == 2
    assert "timings of a burst" in capsys.readouterr().err and not out.exists()
