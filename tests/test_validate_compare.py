"""Accuracy metrics and the measured-runs importer on known inputs."""

import math

import numpy as np
import pandas as pd
import pytest

from ficco_sim.errors import InputError
from ficco_sim.validate.compare import kendall_tau, mape, rel_error, summarize, top1_match
from ficco_sim.validate.importer import compare_measured, read_measured


def test_mape_known_values():
    assert mape([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 0.0
    assert mape([1.1, 1.8], [1.0, 2.0]) == pytest.approx(0.1)
    assert math.isnan(mape([1.0], [0.0]))
    assert rel_error(1.5, 1.0) == pytest.approx(0.5)


def test_kendall_tau_known_values():
    assert kendall_tau([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # one swapped pair out of six: (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6, abs=1e-4)
    assert math.isnan(kendall_tau([1, 1], [1, 2]))
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1])


def test_top1_and_summary():
    assert top1_match([2.0, 1.0], [3.0, 0.5])
    assert not top1_match([1.0, 2.0], [3.0, 0.5])
    df = pd.DataFrame({"scenario": ["s1"] * 3 + ["s2"] * 2, "schedule": ["a", "b", "c", "a", "b"],
                       "predicted_s": [1.0, 2.0, 3.0, 1.0, 2.0], "measured_s": [1.0, 2.0, 3.0, 2.0, 1.0]})
    per, overall = summarize(df)
    assert list(per["kendall_tau"]) == [1.0, -1.0]
    assert list(per["top1"]) == [True, False]
    assert overall["top1_rate"] == 0.5 and overall["mean_kendall_tau"] == 0.0
    assert overall["mape"] == pytest.approx((0.5 + 1.0) / 5)


def test_importer_writes_report(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text("kind,m,n,k,gpus,schedule,measured_s\n"
                   "ag-gemm,4096,4096,4096,4,none,0.002\n"
                   "ag-gemm,4096,4096,4096,4,shard-p2p-sm,0.0015\n")
    df, paths = compare_measured(csv, "h100", "switch:4", tmp_path / "out", stamp="test")
    assert list(df["schedule"]) == ["none", "shard-p2p-sm"]
    assert (df["predicted_s"] > 0).all()
    assert paths["csv"].exists() and paths["md"].exists() and paths["png"].exists()
    assert "Kendall tau" in paths["md"].read_text()


@pytest.mark.parametrize("text, field", [
    ("kind,m,n,k,gpus,schedule\nag-gemm,8,8,8,2,none\n", None),                       # no measured_s
    ("kind,m,n,k,gpus,schedule,measured_s\nag-gemm,8,8,8,2,none,-1\n", "row 2.measured_s"),
    ("kind,m,n,k,gpus,schedule,measured_s\nag-gemm,8,x,8,2,none,1\n", "row 2.n"),
    ("kind,m,n,k,gpus,schedule,measured_s\nbogus,8,8,8,2,none,1\n", "row 2.kind"),
    ("kind,m,n,k,gpus,schedule,measured_s,mode\nag-gemm,8,8,8,2,none,1,one-gpu\n", "row 2.mode"),
])
def test_importer_bad_input(tmp_path, text, field):
    csv = tmp_path / "bad.csv"
    csv.write_text(text)
    with pytest.raises(InputError) as e:
        read_measured(csv)
    assert e.value.field == field


def test_importer_missing_file(tmp_path):
    with pytest.raises(InputError):
        read_measured(tmp_path / "nope.csv")


def test_differences_the_measurement_cannot_resolve_are_not_a_ranking():
    """Two schedules whose medians sit within each other's notches are a measured tie: the
    resolved tau and top-1 do not count them, the strict ones do."""
    from ficco_sim.validate.compare import median_notch
    assert median_notch([1.0]) != median_notch([1.0])          # NaN: no spread from one timing
    assert median_notch([1.0, 1.0, 1.0, 1.0]) == 0.0
    df = pd.DataFrame({"scenario": ["s"] * 3, "schedule": ["a", "b", "c"],
                       "predicted_s": [1.0, 1.01, 2.0], "measured_s": [1.02, 1.0, 2.0],
                       "measured_notch_s": [0.03, 0.03, 0.03]})
    per, overall = summarize(df)
    assert per["kendall_tau"].iloc[0] == pytest.approx(1 / 3, abs=1e-4)     # a and b swapped
    assert not per["top1"].iloc[0]
    assert per["kendall_tau_resolved"].iloc[0] == pytest.approx(2 / math.sqrt(6), abs=1e-4)
    assert per["top1_resolved"].iloc[0]
    # resolvable differences still count: with tight notches the swap is a swap
    per, _ = summarize(df.assign(measured_notch_s=0.001))
    assert per["kendall_tau_resolved"].iloc[0] == pytest.approx(1 / 3, abs=1e-4)
    assert not per["top1_resolved"].iloc[0]
    # without notches (an imported CSV of medians only) there is no resolved figure
    per, overall = summarize(df.drop(columns="measured_notch_s"))
    assert per["kendall_tau_resolved"].isna().all() and overall["mean_kendall_tau_resolved"] != \
        overall["mean_kendall_tau_resolved"]


def test_a_run_that_does_not_reproduce_its_own_ranking_says_so(tmp_path):
    """The halves of one run (even and odd repeats) rank the schedules as the run does when
    the schedules stand apart, and disagree when they differ by less than the noise: the
    report prints that ceiling beside the prediction's tau."""
    from ficco_sim.validate.compare import halves
    from ficco_sim.validate.report import markdown
    rng = np.random.default_rng(7)
    apart = [halves(list(rng.normal(mu, 0.01, 30))) for mu in (1.0, 1.5, 2.0)]       # 50% apart, 1% noise
    close = [halves(list(rng.normal(mu, 0.10, 30))) for mu in (1.0, 1.005, 1.01)]   # 0.5% apart, 10% noise
    df = pd.DataFrame({"scenario": ["apart"] * 3 + ["close"] * 3, "schedule": ["a", "b", "c"] * 2,
                       "predicted_s": [1.0, 1.5, 2.0] * 2, "measured_s": [1.0, 1.5, 2.0, 1.0, 1.005, 1.01],
                       "measured_even_s": [h[0] for h in apart + close],
                       "measured_odd_s": [h[1] for h in apart + close]})
    per, overall = summarize(df)
    assert per.set_index("scenario").loc["apart", "kendall_tau_self"] == 1.0
    assert per.set_index("scenario").loc["apart", "top1_self"]
    assert per.set_index("scenario").loc["close", "kendall_tau_self"] < 1.0
    assert overall["mean_kendall_tau_self"] < 1.0
    text = markdown(df.assign(err=0.0, correct=True, not_honoured=""), {}, None)
    assert "the measurement against itself" in text and "tau, run vs itself" in text
    # without the halves (an imported CSV of medians) there is no such line
    assert "against itself" not in markdown(df.drop(columns=["measured_even_s", "measured_odd_s"]).assign(
        err=0.0, correct=True, not_honoured=""), {}, None)


def test_importing_a_gpu_sessions_report_predicts_what_it_replayed(tmp_path):
    """A ``validate --single-gpu`` report's CSV (every rank's work on one H200) imported with
    the profile that session predicted with gives back its predictions: the importer predicts
    the folded program its ``mode`` column names, not the multi-GPU system (66% off)."""
    from pathlib import Path
    session = Path(__file__).resolve().parents[1] / "validation" / "gpu" / "h200" / "2026-11-27"
    report = session / "validation" / "ranks4" / "2026-11-27.csv"
    df, _ = compare_measured(report, str(session / "h200-measured.yaml"), None, tmp_path, stamp="t")
    want = pd.read_csv(report)
    assert list(df["mode"].unique()) == ["single-gpu"]
    assert df["predicted_s"].to_numpy() == pytest.approx(want["predicted_s"].to_numpy(), rel=1e-9)


def test_importing_measured_runs_needs_no_torch(tmp_path):
    """``validate --import`` predicts on any machine: torch is an extra, and the import path
    (measured rows, prediction, report) must not load it."""
    import subprocess
    import sys
    csv = tmp_path / "runs.csv"
    csv.write_text("kind,m,n,k,gpus,schedule,measured_s\nag-gemm,512,512,512,2,none,1e-4\n")
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('no torch here')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        f"sys.argv = ['ficco-sim', 'validate', '--import', {str(csv)!r}, '--gpu', 'h100', '--out', {str(tmp_path)!r}]\n"
        "from ficco_sim.cli import entry\n"
        "entry()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "h100-import").is_dir()
