"""What two new users met following the README (2026-11-29), each now as they expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from ficco_sim.cli import main
from ficco_sim.hardware import load_gpu
from ficco_sim.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_ring_of_two_gives_its_one_neighbour_every_port():
    """ring:2's two neighbours are the same GPU: half the ports to each had halved its link."""
    gpu = load_gpu("h100")
    bw = {k: load_topology(f"{k}:2", gpu).path_bandwidth(0, 1) for k in ("ring", "fc", "switch")}
    assert bw["ring"] == bw["fc"] == bw["switch"]
    assert load_topology("ring:8", gpu).path_bandwidth(0, 1) == pytest.approx(bw["ring"] / 2)


def test_rows_too_few_for_ficco_pieces_leave_ficco_out_not_every_schedule(capsys):
    """m = 32 on 8 GPUs: 4 rows a GPU cannot be cut into 8 FiCCO pieces; every schedule (none
    too) used to fail on a 0-row GEMM."""
    code, out, err = run(capsys, "simulate", "--topology", "switch:8", "--m", "32", "--n", "1024", "--k", "1024")
    assert code == 0 and "shard-p2p-dma" in out and "ficco-a2a" not in out
    assert "left out: ficco-a2a-sm (ficco cuts each GPU's 4 M-rows into 8 pieces" in err and "no row" in err
    code, _, err = run(capsys, "simulate", "--topology", "switch:8", "--m", "32", "--n", "1024", "--k", "1024",
                       "--schedule", "ficco-a2a-dma")
    assert code == 2 and "its last GEMM would have no row" in err


def test_an_odd_size_is_refused_as_no_whole_number_of_elements(capsys):
    """``--bytes 1001``: 500.5 float16 elements, read as 500 where 3 B was refused."""
    code, _, err = run(capsys, "predict", "collective", "--kind", "reduce-scatter", "--bytes", "1001")
    assert code == 2 and "not a whole number of float16 elements" in err


def test_all_and_more_schedules_together(capsys):
    code, out, _ = run(capsys, "simulate", "--scenario", "gemm-rs", "--topology", "switch:4", "--m", "4096", "--n",
                       "4096", "--k", "4096", "--schedule", "all,fused-dma", "--format", "csv")
    assert code == 0 and "fused-dma" in out and "ficco-a2a-dma" in out and out.count(",none,des,") == 1


def test_a_pair_simulated_on_another_gpu_is_not_projected_onto_the_trace(capsys):
    """A CPU (gloo) trace's pair simulated on an H100: its time cannot be projected onto the
    CPU's measured one (it read 7 ms for a 4 ms measured pair and 33 us simulated)."""
    import json
    traces = sorted(str(p) for p in (ROOT / "traces").glob("cpu_ag_mm.rank*.json.gz"))
    code, out, _ = run(capsys, "trace", "whatif", *traces, "--pair-gpu", "h100", "--json")
    assert code == 0
    pairs = json.loads(out)["pairs"]
    rows = [r for p in pairs for r in p["schedules"] if r["makespan"] is not None]
    assert rows and all(r["projected"] is None for r in rows)
    assert all(p["m"] > 0 for p in pairs if p["scenario"])


def test_a_pair_on_its_own_gpu_is_projected_by_what_the_schedule_saves():
    """Projected = measured + (simulated - simulated none): what the model does not explain
    (a host's gaps, waits) stays as measured, not scaled by the simulated ratio."""
    from ficco_sim.traces import load_trace
    from ficco_sim.traces.replay import find_pairs, pair_whatif
    t = load_trace([ROOT / "traces" / "real" / "hta_128ranks_sampled_rank0.json.gz"])
    pair = next(p for p in find_pairs(t) if p.scenario is not None)
    rows = pair_whatif(pair, gpu="a100")
    base = rows[0].makespan
    for r in rows:
        if r.makespan is not None and r.projected is not None:
            assert r.projected == pytest.approx(pair.measured + r.makespan - base)
    assert all(r.projected is None for r in pair_whatif(pair, gpu="a100", on_trace_gpu=False))


def test_all_along_k_decomposes_along_k_and_grouped_ficco_keeps_small_shards(capsys):
    """``--shard-dim K`` with no schedule named ran ``none`` alone (the basic set taken along M,
    every overlapped schedule refused); FiCCO computed 2 pieces at a time runs a GPU's 7 rows
    (its last group gets one), where ungrouped it cannot (its last piece has none)."""
    code, out, _ = run(capsys, "simulate", "--scenario", "ag-gemm", "--m", "64", "--n", "64", "--k", "64",
                       "--shard-dim", "K", "--format", "csv")
    assert code == 0 and "ficco-a2a-sm-dimK" in out and "shard-p2p-dma-dimK" in out
    for kind in ("ag-gemm", "gemm-rs"):
        code, _, err = run(capsys, "simulate", "--scenario", kind, "--m", "56", "--n", "64", "--k", "64",
                           "--schedule", "ficco-a2a-sm-g2")
        assert code == 0, err
        code, _, err = run(capsys, "simulate", "--scenario", kind, "--m", "56", "--n", "64", "--k", "64",
                           "--schedule", "ficco-a2a-sm")
        assert code == 2 and "its last GEMM would have no row" in err


def test_a_latency_the_rows_press_to_zero_is_said(tmp_path):
    """The 4 x H100 quiet runs, all at one GPU count, pin link and LL latency at 0: the
    calibration says so in its notes and in the written source, where it wrote 0 silently."""
    from ficco_sim.calibrate.workflow import calibrate_from_files
    logs = sorted((ROOT / "validation" / "nccl-tests").glob("h100x4_quiet_*.txt"))
    cal = calibrate_from_files(logs, "h100", out=tmp_path / "h.yaml")
    note = next(n for n in cal.notes if n.startswith("fitted at 0"))
    assert "link.latency_us" in note and "every run is on 4 GPUs" in note
    assert "at 0, the bottom of its range" in cal.updates["link.latency_us"][2]


# --- a third user's read (2026-11-29): a GEMM beside an independent collective ---------------------

def test_recommend_shows_the_closed_form_number_simulate_gives_and_names_a_missing_heuristics_file(capsys):
    """recommend printed its pick's speedup from the heuristic's ranking weights (SM term 0): 1.46x
    where `simulate --engine analytical` gives 1.37x; a --heuristics path that does not exist was
    ignored silently (the profile's rule answered instead)."""
    import re
    from ficco_sim import Scenario, simulate
    code, out, _ = run(capsys, "recommend", "--gpu", "h100", "--topology", "switch:8", "--scenario", "ar-par-gemm",
                       "--m", "4096", "--n", "4096", "--k", "4096")
    pick = out.split()[0]
    shown = float(re.search(r"predicted ([0-9.]+)x over no overlap", out).group(1))
    sc = Scenario("ar-par-gemm", 8, 4096, 4096, 4096)
    engine = simulate(sc, pick, "h100", "switch:8", engine="analytical").metrics["speedup"]
    assert code == 0 and shown == pytest.approx(engine, abs=0.006)
    code, _, err = run(capsys, "recommend", "--scenario", "ag-gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                       "--heuristics", "/no/such/file.json")
    assert code == 2 and err.strip() == "ficco-sim: error: --heuristics: /no/such/file.json: no such file"


def test_presets_combine_with_other_names_and_csv_keeps_schedule_names(capsys):
    """`--schedule presets,par-sm` was refused ('presets' is no schedule); csv / json wrote
    'te-bulk = par-sm-c16-m16' in the schedule column (the preset has its own); `none` printed
    of ideal -0.000."""
    import io
    import pandas as pd
    code, out, _ = run(capsys, "simulate", "--scenario", "ar-par-gemm", "--m", "4096", "--n", "4096", "--k", "4096",
                       "--schedule", "presets,par-sm", "--format", "csv")
    d = pd.read_csv(io.StringIO(out))
    assert code == 0 and list(d["schedule"]) == ["none", "none", "par-sm-c16-m16", "par-dma", "par-sm"]
    assert list(d["preset"].fillna("")) == ["", "nccl", "te-bulk", "conccl", ""]
    assert (d.loc[d["schedule"] == "none", ["of_ideal", "cil_comm", "dil_compute"]] == 0.0).all().all()
    assert not (d[["of_ideal", "dil_compute", "cil_compute", "cil_comm"]] < 0).any().any()


def test_a_schedule_name_takes_each_modifier_once_and_no_more_channels_than_fit():
    from ficco_sim.errors import InputError
    from ficco_sim.schedules import invalid_reason, parse_schedule
    from ficco_sim import Scenario
    for name in ("par-sm-hi-hi", "ficco-a2a-sm-g2-g4", "shard-p2p-sm-c8-c16"):
        with pytest.raises(InputError, match="each modifier once"):
            parse_schedule(name)
    sc = Scenario("ar-par-gemm", 8, 4096, 4096, 4096)
    why = invalid_reason(sc, parse_schedule("par-sm-c1000"), load_gpu("h100"), load_topology("switch:8"))
    assert why and "run all at once" in why
    assert invalid_reason(sc, parse_schedule("par-sm-c32"), load_gpu("h100"), load_topology("switch:8")) is None


def test_numpy_sizes_are_sizes_and_an_input_error_crosses_processes():
    """A pandas-driven sweep passes numpy integers (refused: 'got np.int64(8)'); a worker's
    InputError could not be unpickled in the parent (a broken process pool, not the message)."""
    import pickle
    import numpy as np
    from ficco_sim import Scenario
    from ficco_sim.errors import InputError
    sc = Scenario("ar-par-gemm", np.int64(8), np.int64(4096), np.int32(4096), 4096)
    assert sc.gpus == 8 and type(sc.m) is int and type(sc.n) is int
    e = pickle.loads(pickle.dumps(InputError("--m", None, "m=4096 must divide evenly over 3 GPUs")))
    assert e.line() == "--m: m=4096 must divide evenly over 3 GPUs"


def test_a_size_the_gpus_cannot_split_names_its_flag(capsys):
    code, _, err = run(capsys, "simulate", "--topology", "switch:3", "--m", "4096")
    assert code == 2 and err.startswith("ficco-sim: error: --m: m=4096 must divide evenly over 3 GPUs")


def test_copy_engine_all_reduce_is_the_copies_then_a_reduction_kernel_in_predict_as_in_schedules(capsys):
    """`predict collective --kind all-reduce --comm-engine dma` was refused ('copy engines cannot
    reduce') while `simulate --schedule par-dma` ran the same all-reduce (copies, then an SM kernel
    adding what arrived): one rule for both."""
    from ficco_sim.simulate import collective_time
    ar = collective_time("a100", "switch:8", "all-reduce", 64 << 20, engine="dma")
    rs = collective_time("a100", "switch:8", "reduce-scatter", 64 << 20, engine="dma")
    assert rs < ar < 3 * rs
    assert collective_time("a100", "switch:8", "all-reduce", 64 << 20, engine="dma", sim="analytical") == \
        pytest.approx(ar, rel=0.02)
    code, _, err = run(capsys, "simulate", "--gpu", "a100", "--dtype", "float8", "--m", "4096")
    assert code == 2 and "a100 has no float8 GEMM rate" in err and "lists bfloat16" in err


def test_sizes_whose_gemm_cannot_fit_the_gpu_are_refused_and_every_profile_names_its_memory(capsys):
    """A 1M x 64K x 64K fp16 GEMM (264 GiB of operands a GPU) ran on an 80 GB H100, and an 8M-row
    one ran past two minutes in the DES: sizes no GPU of the profile can hold are one line, exit 2.
    Every GPU profile but the CPU's states its device memory with a datasheet source."""
    from ficco_sim.hardware import available_profiles
    code, _, err = run(capsys, "simulate", "--scenario", "ar-par-gemm", "--m", "1048576", "--n", "65536",
                       "--k", "65536")
    assert code == 2 and "264.0 GiB, more than h100's 80 GiB of device memory" in err
    for name in available_profiles():
        gpu = load_gpu(name)
        if name != "cpu":
            assert gpu.hbm_capacity >= 32 * 2 ** 30 and gpu.provenance("hbm.capacity_gb").kind == "datasheet"


def test_recommend_says_when_a_runner_up_reads_faster_and_prints_a_des_command_that_runs(capsys):
    """The pick follows the fitted weights, the numbers the profile's rule: where a runner-up reads
    faster it says so (it printed 'next best' slower-looking than the pick, in weight order); the
    discrete-event command it prints had a literal '...'."""
    code, out, _ = run(capsys, "recommend", "--gpu", "a40", "--topology", "ring:8", "--scenario", "a2a-par-gemm",
                       "--m", "8192", "--n", "8192", "--k", "8192", "--dtype", "bfloat16")
    assert code == 0 and "next best: par-dma (1.49x)" in out and "par-dma reads faster here" in out
    des = out.split("discrete-event reference: ")[1].split("\n")[0].split()
    assert des[:2] == ["ficco-sim", "simulate"] and "..." not in des
    code, out, _ = run(capsys, *des[1:])
    assert code == 0 and "par-sm-hi" in out
    code, _, err = run(capsys, "recommend", "--topology", "switch:3", "--scenario", "ag-gemm", "--m", "4096",
                       "--n", "4096", "--k", "4096")
    assert code == 2 and "--m: m=4096 must divide evenly over 3 GPUs" in err


def test_explore_marks_sizes_no_gpu_holds_as_errors_on_every_engine(tmp_path, capsys):
    """explore's closed-form path answered 'ok' for a GEMM of 264 GiB of operands that simulate and
    recommend refuse."""
    import pandas as pd
    f = tmp_path / "big.yaml"
    f.write_text("scenarios:\n  - {name: big, kind: ar-par-gemm, gpus: 8, m: 1048576, n: 65536, k: 65536}\n")
    code, _, _ = run(capsys, "explore", "--scenarios", str(f), "--gpu", "h100", "--topology", "switch:8",
                     "--engine", "analytical", "--space", "basic", "--out", str(tmp_path / "o"), "--quiet")
    d = pd.read_csv(tmp_path / "o" / "points.csv")
    assert (d["status"] != "ok").all() and d["reason"].str.contains("device memory").all()


def test_v100_keeps_the_shaping_that_hands_its_sm_to_the_collective():
    """On V100 the hand-off size (33 KiB) is past the two least (9, 17 KiB) and every tile holds it:
    it stays a point of the space and a candidate, as the cui-pericas preset maps to it."""
    from ficco_sim import Scenario
    from ficco_sim.explore.heuristics import candidate_schedules
    from ficco_sim.explore.space import smem_sizes
    from ficco_sim.schedules.presets import resolve
    sc = Scenario("ar-par-gemm", 8, 16384, 1024, 8192)
    assert smem_sizes(sc, load_gpu("v100")) == [9216, 17408, 33792]
    assert resolve(sc, "cui-pericas", "v100", "switch:8").name == "par-sm-hi-smem33k"
    assert "par-sm-hi-smem33k" in {s.name for s in candidate_schedules(sc, "v100", "switch:8")}
