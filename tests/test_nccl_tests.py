"""Raw nccl-tests output read as printed (real runs in validation/nccl-tests/) and
``calibrate --from`` fitting the collective mechanisms on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ficco_sim.calibrate import fit_nccl
from ficco_sim.calibrate.nccl_tests import looks_like, parse, read
from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu

DIR = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests"
QUIET = {c: DIR / f"h100x4_quiet_{c}.txt" for c in ("all_reduce", "all_gather", "reduce_scatter")}
DEBUG = DIR / "h100x4_ring_debug_all_reduce.log"
EXEMPLAR = DIR / "h100x8_exemplar_all_reduce.txt"     # NVIDIA's sample: 8 processes, a forked header


@pytest.mark.parametrize("coll,rows", [("all_reduce", 31), ("all_gather", 28), ("reduce_scatter", 28)])
def test_real_runs_read_every_row(coll, rows):
    d = read(QUIET[coll])
    assert looks_like(QUIET[coll])
    assert len(d) == rows and set(d["collective"]) == {coll} and set(d["gpus"]) == {4} and set(d["hosts"]) == {1}
    assert set(d["device"]) == {"NVIDIA H100 80GB HBM3"}
    assert d["size_bytes"].is_monotonic_increasing and (d["time_us_oop"] > 0).all()
    # nccl-tests' own columns agree with each other: algbw = size / time (GB/s, us), to its rounding
    big = d[d["size_bytes"] >= 1 << 20]
    assert ((big["size_bytes"] / big["time_us_oop"] / 1e3) / big["algbw_oop"] - 1).abs().max() < 0.01


def test_a_run_of_one_process_per_gpu_with_extra_header_fields_reads_as_one_host():
    """NVIDIA's exemplar sample: 8 ranks in 8 processes on one host, its header carrying the
    fork's extra fields (side_work, work_sms, direction), sizes from 8 B to 16 GiB."""
    d = read(EXEMPLAR)
    assert looks_like(EXEMPLAR)
    assert len(d) == 32 and set(d["collective"]) == {"all_reduce"} and set(d["gpus"]) == {8}
    assert set(d["hosts"]) == {1} and set(d["device"]) == {"NVIDIA H100 80GB HBM3"}
    assert d["size_bytes"].tolist() == [2 ** p for p in range(3, 35)]
    big = d[d["size_bytes"] >= 1 << 20]
    assert ((big["size_bytes"] / big["time_us_oop"] / 1e3) / big["algbw_oop"] - 1).abs().max() < 0.01


def test_rows_split_by_nccl_debug_lines_are_joined():
    """NCCL_DEBUG=INFO writes ``... sum -1<host>:1417:1417 [0] NCCL INFO AllReduce ...``: the
    row's head before the log, its tail on a later line."""
    d = read(DEBUG)
    assert d["size_bytes"].tolist() == [2 ** p for p in range(28, 34)]
    big = d.assign(bw=d["size_bytes"] / d["time_us_oop"] / 1e3)
    assert ((big["bw"] / big["algbw_oop"]) - 1).abs().max() < 0.01


SUPERBENCH = {c: DIR / f"a100x8_superbench_{c}.txt" for c in ("all_gather", "reduce_scatter", "all_reduce", "alltoall")}


@pytest.mark.parametrize("coll", list(SUPERBENCH))
def test_nccl_tests_of_2021_read_as_printed(coll):
    """microsoft/superbenchmark's logs: Rank lines without ``Group``, no ``root`` column,
    alltoall's ``redop`` printed blank (its rows one value short of the header), zero-size
    warm-up rows first, a pasted NCCL INFO line from a host the Rank lines do not name."""
    d = read(SUPERBENCH[coll])
    assert looks_like(SUPERBENCH[coll])
    assert set(d["collective"]) == {coll} and set(d["gpus"]) == {8} and set(d["hosts"]) == {1}
    assert set(d["device"]) == {"A100-SXM4-40GB"}
    assert d["size_bytes"].max() == 8 << 30 and d["size_bytes"].is_monotonic_increasing
    big = d[d["size_bytes"] >= 1 << 20]
    assert ((big["size_bytes"] / big["time_us_oop"] / 1e3) / big["algbw_oop"] - 1).abs().max() < 0.01


def test_an_old_alltoall_row_split_by_a_log_line_reads_whole():
    """The blank redop column is told from the table's values as one stream, so a first row
    cut by an NCCL INFO line (NCCL_DEBUG=INFO) reads like the rest."""
    text = SUPERBENCH["alltoall"].read_text().replace(
        "           0             0   float             1.63",
        "           0             0   float localhost:1:1 [0] NCCL INFO Launch mode Parallel\n            1.63", 1)
    assert "NCCL INFO Launch mode Parallel\n            1.63" in text
    assert parse(text, "alltoall.txt").equals(read(SUPERBENCH["alltoall"]).assign(source="alltoall.txt (run 1)"))



@pytest.mark.parametrize("coll", ["all_gather", "all_reduce", "alltoall"])
def test_a_forks_tagged_rows_read_as_printed(coll):
    """abhivijay96/nccl-tests' CoreWeave runs: every row tagged ``[STAT]:`` (often with no
    space before a long size), ``[SETTING]:`` / ``[INIT]:`` lines between the header and the
    table; all-to-all one thread per GPU, the others one thread for all."""
    for n in range(2, 9):
        f = DIR / f"a100x{n}_coreweave_{coll}.txt"
        d = read(f)
        tagged = [line for line in f.read_text().splitlines() if line.startswith("[STAT]:")]
        assert looks_like(f) and len(d) == sum(1 for line in tagged if int(line[7:].split()[0]) > 0)
        assert set(d["gpus"]) == {n} and set(d["device"]) == {"NVIDIA A100-SXM4-80GB"}
        assert set(d["gpus_per_thread"]) == ({1} if coll == "alltoall" else {n})
        assert d["size_bytes"].is_monotonic_increasing and (d["time_us_oop"] > 0).all()

HEAD = """# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 1 on h device  1 [0x2] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
"""
ROW = "    1048576   262144  float  sum  -1   26.76   39.19   58.79   0   27.22   38.52   57.78   0\n"


def test_collective_from_the_command_or_the_file_name():
    assert parse("$ mpirun -np 2 ./build/alltoall_perf -b 8\n" + HEAD + ROW, "x.md")["collective"][0] == "alltoall"
    assert parse(HEAD + ROW, "runs/reduce_scatter.txt")["collective"][0] == "reduce_scatter"
    assert parse(HEAD + ROW, "my_reduce.txt")["collective"][0] == "reduce"
    with pytest.raises(InputError, match="cannot tell which collective"):
        parse(HEAD + ROW, "x.txt")
    with pytest.raises(InputError, match="names all_reduce and all_gather"):
        parse(HEAD + ROW, "all_reduce_vs_all_gather.txt")


@pytest.mark.parametrize("text,why", [
    ("size count\n1 2 3\n", "no '# nThread' header"),
    (HEAD.replace("#       size", "# sz"), "no column header"),
    (HEAD + ROW.rsplit(" ", 3)[0] + "\n", "ends with 12 of a row.s 13 values .* cut short"),
    (HEAD + ROW.replace("26.76", "abc"), "unreadable table row"),
    (HEAD + ROW.replace("26.76", "-3"), "time must be a positive"),
    (HEAD, "no measured rows"),
])
def test_broken_output_is_refused_with_a_reason(text, why):
    with pytest.raises(InputError, match=why):
        parse(text, "all_reduce.txt")


def test_params_land_in_the_profile_as_the_fit_states_them():
    gpu = load_gpu("h100")
    params = {"launch_us": 12.0, "ll_us": 0.5, "ll128_us": 2.5, "simple_us": 40.0, "sm_share": 0.775}
    want = fit_nccl.with_params(gpu, **params).comm_kernel
    vals = fit_nccl.profile_values(gpu, params)
    assert vals["comm_kernel.launch_us"] * 1e-6 == pytest.approx(want.launch)
    assert vals["comm_kernel.protocols.LL128.latency_us"] * 1e-6 == pytest.approx(want.protocols[1].latency)
    assert vals["comm_kernel.channel_bandwidth_gbps"] * 1e9 == pytest.approx(want.channel_bandwidth, rel=1e-4)


def _calibrate(tmp_path, *files, extra=()):
    out = tmp_path / "h100.yaml"
    run = subprocess.run([sys.executable, "-m", "ficco_sim.cli", "calibrate", "--from", *map(str, files), "--gpu",
                          "h100", "--out", str(out), *extra], capture_output=True, text=True)
    return run, out


def test_calibrate_from_raw_output_writes_the_collective_mechanisms(tmp_path):
    run, out = _calibrate(tmp_path, QUIET["all_gather"], QUIET["reduce_scatter"], extra=("--report", str(tmp_path)))
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    for path in ("launch_us", "channel_bandwidth_gbps"):
        line = next(x for x in text.splitlines() if x.strip().startswith(path + ":"))
        assert "kind: fitted" in line and "h100x4_quiet_all_gather.txt" in line
    g = load_gpu(str(out))
    assert g.comm_kernel.launch is not None and g.comm_kernel.channel_bandwidth > 0
    assert "reduce_scatter x4 >= 64 MiB" in run.stdout
    assert (tmp_path / "h100_nccl_tests_points.csv").exists()
    # every row's error beside the profile's before the fit, so a fit that reads the runs worse shows
    pts = pd.read_csv(tmp_path / "h100_nccl_tests_points.csv")
    assert pts["base_error"].notna().all() and pts["error"].notna().all()
    assert set(pts["algorithm_run"]) <= {"ring", "nvls", "direct", "tree"} and pts["not_predicted"].isna().all()
    assert "every row's median |error|" in run.stdout
    # the fitted profile predicts the runs it was fitted on: large sizes within 10%
    rows = fit_nccl.tidy(read(QUIET["all_gather"]), "h100", "switch")
    rows = rows[rows["size_bytes"] >= 64 << 20]
    pred = fit_nccl.predict(rows, {"h100": g})
    assert abs(pred / rows["measured_s"].to_numpy() - 1).max() < 0.10


def test_calibrate_refuses_multi_node_runs(tmp_path):
    two = HEAD.replace("Pid 1 on h device  1", "Pid 1 on other device  1")
    f = tmp_path / "all_reduce.txt"
    f.write_text(two + ROW * 3)
    run, out = _calibrate(tmp_path, f)
    assert run.returncode == 2 and "2 machines" in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()


def test_the_fit_recovers_the_mechanisms_that_made_the_rows():
    """fit on rows made by known parameters (a thread driving 1 or 8 GPUs, small and large
    calls of three collectives on two GPUs): the call floor, the issue time per GPU, the link
    latency, the protocols and the SM share come back, and the rows with them."""
    truth = {"launch_us": 4.0, "issue_us": 5.0, "link_us": 0.4, "ll_us": 0.6, "ll128_us": 3.0, "simple_us": 8.0,
             "sm_share": 0.8}
    rows = pd.DataFrame([{"gpu_profile": g, "topology": f"switch:{n}", "kind": k, "nbytes": b, "algorithm": "ring",
                          "gpus_per_thread": t, "tuner": "call"}
                         for g, n, t in (("h100", 4, 1), ("a100", 8, 8)) for k in ("all-reduce", "all-gather",
                                                                                   "reduce-scatter")
                         for b in (1 << 12, 1 << 16, 1 << 20, 8 << 20, 64 << 20)])
    gpus = {g: fit_nccl.with_params(load_gpu(g), **truth) for g in ("h100", "a100")}
    rows["measured_s"] = fit_nccl.predict(rows, gpus)
    params, err = fit_nccl.fit(rows, evaluations=120)
    assert err < 0.01
    assert params["issue_us"] == pytest.approx(truth["issue_us"], abs=0.5)
    assert params["sm_share"] == pytest.approx(truth["sm_share"], abs=0.02)
    assert params["launch_us"] + 14 * (params["link_us"] + params["ll_us"]) == pytest.approx(
        truth["launch_us"] + 14 * (truth["link_us"] + truth["ll_us"]), rel=0.1)


def test_a_mechanism_no_row_sees_is_kept_not_fitted():
    """Calls of 256 MiB and up run Simple only: the LL and LL128 latencies move no row, so the
    fit keeps them as the base profile has them (a fit of them would be any number); the
    Simple latency and the SM share, which those rows do see, are fitted. Switching
    :func:`fit_nccl.visible` off fits all of them."""
    truth = {"launch_us": 4.0, "link_us": 0.4, "ll_us": 0.6, "ll128_us": 3.0, "simple_us": 8.0, "sm_share": 0.8}
    rows = pd.DataFrame([{"gpu_profile": "h100", "topology": "switch:4", "kind": k, "nbytes": b, "algorithm": "ring",
                          "gpus_per_thread": 1, "tuner": "call"}
                         for k in ("all-gather", "reduce-scatter") for b in (256 << 20, 1 << 30, 4 << 30)])
    base = load_gpu("h100")
    rows["measured_s"] = fit_nccl.predict(rows, {"h100": fit_nccl.with_params(base, **truth)})
    assert {"ll_us", "ll128_us"}.isdisjoint(fit_nccl.visible(rows, {"h100": base}))
    params, _ = fit_nccl.fit(rows, evaluations=60)
    assert "ll_us" not in params and "ll128_us" not in params and {"simple_us", "sm_share"} <= set(params)
    assert params["sm_share"] == pytest.approx(truth["sm_share"], abs=0.02)
    assert fit_nccl.PATHS["ll_us"] not in fit_nccl.profile_values(base, params)


def test_the_reader_says_how_many_gpus_a_thread_drove_and_which_nccl():
    quiet, superbench, nvidia = (read(DIR / f) for f in (
        "h100x4_quiet_all_reduce.txt", "a100x8_superbench_all_gather.txt", "h100x8_exemplar_all_reduce.txt"))
    assert set(quiet["gpus_per_thread"]) == {4} and set(quiet["nccl_version"]) == {"2.29.2"}
    assert set(superbench["gpus_per_thread"]) == {8} and set(superbench["nccl_version"]) == {""}
    assert set(nvidia["gpus_per_thread"]) == {1}
    assert set(fit_nccl.tidy(quiet, "h100", "switch")["tuner"]) == {"call"}
    assert set(fit_nccl.tidy(quiet.assign(nccl_version="2.18.1"), "h100", "switch")["tuner"]) == {"rank"}


# -- what real logs found in public repositories put around the table (a sweep of 23 files, 2026-11-29) --------

def test_launcher_prefixes_are_taken_off():
    """Open MPI's ``--tag-output`` puts ``[1,0]<stdout>:`` before every line and, where two ranks'
    output meets, in the middle of a row (KeitaW/p5-nccl-test's P5 logs); ``srun -l`` puts the
    rank's number (CSCS Alps' GH200 logs). Both read as the bare output."""
    bare = parse(HEAD + ROW, "all_reduce.txt")
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in HEAD.splitlines())
    row = ROW.replace("  -1   26.76", "  -1[1,0]<stdout>:   26.76")
    assert parse(tagged + "[1,0]<stdout>:" + row, "all_reduce.txt").equals(bare)
    srun = "".join(f"0: {line}\n" for line in (HEAD + ROW).splitlines())
    assert parse(srun, "all_reduce.txt").equals(bare)


def test_a_runs_gpus_are_its_own_rank_lines():
    """A README holding a run and, after its table, another run's rank lines without a
    ``# nThread`` header of their own (hisohara/ai-scripts' RCCL smoke test): the run counts
    the rank lines between its header and its table only."""
    other = "\n### the next host\n#  Rank  0 Group  0 Pid 9 on x device  0 [0x1] NVIDIA H100 80GB HBM3\n" * 3
    d = parse(HEAD + ROW + "# Avg bus bandwidth    : 1.0\n" + other, "all_reduce.txt")
    assert set(d["gpus"]) == {2} and set(d["hosts"]) == {1}


def test_rccl_versions_are_read():
    rccl = "# rccl-tests version 2.17.9 rccl-headers=22803 rccl-library=22707\n"
    assert parse(rccl + HEAD + ROW, "all_reduce.txt")["nccl_version"][0] == "2.27.7"
    assert parse("RCCL version : 2.22.3-HEAD:1cbb0f7\n" + HEAD + ROW, "all_reduce.txt")["nccl_version"][0] == "2.22.3"


def test_the_collective_from_a_folder_name():
    """ABCI 2.0's runs are ``allreduce/intra_anode/job08.sh.7280517.nccl``: the folder names it."""
    assert parse(HEAD + ROW, "allreduce/intra_anode/job08.sh.7280517.nccl")["collective"][0] == "all_reduce"
    assert parse(HEAD + ROW, "all-gather/run.log")["collective"][0] == "all_gather"
    with pytest.raises(InputError, match="cannot tell which collective"):
        parse(HEAD + ROW, "results/job08.sh.7280517.nccl")


def test_rows_nccl_tests_found_wrong_are_counted_and_not_fitted(tmp_path):
    bad = ROW.replace("57.78   0\n", "57.78   0\n").replace("58.79   0", "58.79   3")
    d = parse(HEAD + ROW + bad.replace("1048576", "2097152"), "all_reduce.txt")
    assert d["wrong_oop"].tolist() == [0, 3]
    rows = [ROW.replace("1048576", str(s << 20)).replace("26.76", f"{20 + 3 * s:.2f}") for s in (1, 2, 4, 8)]
    f = tmp_path / "all_reduce.txt"
    f.write_text(HEAD + "".join(rows) + rows[-1].replace(str(8 << 20), str(16 << 20)).replace("58.79   0",
                                                                                            "58.79   5"))
    from ficco_sim.calibrate.workflow import calibrate_from_files
    cal = calibrate_from_files([f], "h100")
    assert any(n.startswith("1 row(s) whose results nccl-tests found wrong") for n in cal.notes), cal.notes


def test_a_file_mixing_single_and_multi_node_runs_fits_the_single_node_ones(tmp_path):
    two = HEAD.replace("Pid 1 on h device  1", "Pid 1 on other device  1")
    rows = "".join(ROW.replace("1048576", str(s << 20)) for s in (1, 2, 4, 8))
    f = tmp_path / "all_reduce.txt"
    f.write_text(HEAD + rows + two + rows)
    run, out = _calibrate(tmp_path, f)
    assert run.returncode == 0, run.stderr
    assert out.exists() and "note" in run.stdout
    from ficco_sim.calibrate.workflow import calibrate_from_files
    assert any(n.startswith("1 run(s) across machines left out") for n in calibrate_from_files([f], "h100").notes)


def test_a_table_without_its_header_is_refused_as_such(tmp_path):
    """A table pasted without the output around it (li-plus/playground's notes; a markdown copy
    with its '#' taken off) is not a CSV file: it is said what is missing."""
    f = tmp_path / "notes.md"
    f.write_text("       size   count  type  redop  root   time  algbw  busbw  #wrong\n" + ROW)
    run, out = _calibrate(tmp_path, f)
    assert run.returncode == 2 and "no '# nThread' header" in run.stderr and "\n" not in run.stderr.strip()
    assert not out.exists()


def test_the_runs_gpu_against_the_profile_and_a_fit_at_its_bounds_are_said(tmp_path):
    from ficco_sim.calibrate.nccl_tests import device_mismatch
    assert "built-in profile a100" in device_mismatch(pd.Series(["NVIDIA A100-SXM4-40GB"]), load_gpu("h100"))
    assert device_mismatch(pd.Series(["NVIDIA GH200 120GB"]), load_gpu("h100")) == ""    # no built-in GH200
    assert fit_nccl.at_bounds({"simple_us": 60.0, "launch_us": 0.0}) == ["comm_kernel.protocols.Simple.latency_us"]


@pytest.mark.parametrize("gpu", ["mi300x", "mi250x", "h100"])
def test_one_thread_driving_eight_gpus_pays_the_issue_time_on_every_vendor(gpu):
    """rccl-tests -g 8, like nccl-tests -g 8: the host issues eight kernels one after another,
    so a small collective's floor grows by seven issue times (the AMD profiles carry NVIDIA's)."""
    from ficco_sim.simulate import collective_time
    g = load_gpu(gpu)
    one, eight = (collective_time(g, "fc:8", "all-to-all", 1024, gpus_per_thread=t) for t in (1, 8))
    assert g.comm_kernel.issue > 0
    assert eight - one == pytest.approx(7 * g.comm_kernel.issue, rel=0.05)
