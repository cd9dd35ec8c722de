"""The published error table: one row per fact from the committed sources, fitted rows out of
the medians, every row with a source URL and the command that predicts it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark

ROOT = Path(__file__).resolve().parents[1]


def test_every_published_fact_is_one_row_with_its_source_and_command():
    pt = benchmark("public_table")
    rows = pt.nccl_rows() + pt.dil_rows() + pt.overlap_rows() + pt.flux_rows() + pt.kraken_rows() + pt.prs_rows()
    table = pd.DataFrame(rows, columns=pt.COLUMNS)
    nccl = pd.read_csv(ROOT / "validation" / "public" / "nccl_tests.csv", comment="#")
    assert (table["source"] == "nccl-tests").sum() == len(nccl)
    assert table["source_url"].str.startswith("http").all() and (table["command"].str.len() > 0).all()
    assert set(table["source"]) >= {"ConCCL", "Cui & Pericas", "arXiv 2507.03114", "flux#90", "kraken",
                                    "DIL (Vidur GEMMs)", "symm-mem-recipes", "pytorch PR 172714"}
    assert table["published"].notna().all() and table["predicted"].notna().all()
    fitted = table[table["used_for_fit"]]
    assert len(fitted) and set(fitted["source"]) == {"nccl-tests", "arXiv 2507.03114", "flux#100"}
    # the two averages the contention rule's HBM coefficients are fitted on (benchmarks/fit_contention.py)
    assert set(fitted.loc[fitted["source"] == "arXiv 2507.03114", "fact"].str.contains("mean")) == {True}
    summ = pt.summary(table).set_index("source")
    held = table[~table["used_for_fit"]]
    assert summ.loc["all (relative)", "facts"] == held["error"].notna().sum()   # fitted rows never count
    # a relative error is (predicted - published) / published; DIL near 0 is compared in absolute terms
    r = table[table["source"] == "flux#90"].iloc[0]
    assert r["error"] == (r["predicted"] - r["published"]) / r["published"]
    assert table.loc[table["source"] == "DIL (Vidur GEMMs)", "error"].isna().all()


def test_the_readme_shows_the_committed_table():
    """The README's error-table block is what ``table.csv`` says, written by the same run
    (its stamp); the table's regeneration rewrites it, so the README cannot keep old medians."""
    pt = benchmark("public_table")
    path = ROOT / "validation" / "public" / "table.csv"
    stamp = path.read_text().splitlines()[0].split("; ")[1]
    table = pd.read_csv(path, skiprows=1)      # its facts hold '#' (flux#90): no comment="#"
    readme = (ROOT / "README.md").read_text()
    block = pt.readme_block(table, pt.summary(table), stamp)
    assert block in readme, "README.md's error table is not table.csv's: run python benchmarks/public_table.py --reuse"
    assert readme.count(pt.README_BEGIN) == 1 and readme.count(pt.README_END) == 1


def test_the_readme_block_is_replaced_in_place_and_a_readme_without_one_is_refused():
    pt = benchmark("public_table")
    text = f"intro\n{pt.README_BEGIN}\nold medians\n{pt.README_END}\nrest\n"
    assert pt.with_readme_block(text, f"{pt.README_BEGIN}\nnew\n{pt.README_END}") == \
        f"intro\n{pt.README_BEGIN}\nnew\n{pt.README_END}\nrest\n"
    with pytest.raises(SystemExit, match="no error-table block"):
        pt.with_readme_block("a README without the markers\n", "x")


def test_a_source_csv_keeps_a_hash_inside_a_value(tmp_path, monkeypatch):
    """Only the leading stamp lines are skipped: ``comment="#"`` would cut a row at a '#' in a
    value (a source named after an issue, ``x#12``) and leave its other columns empty."""
    pt = benchmark("public_table")
    (tmp_path / "s.csv").write_text("# stamp; made by a script\nsource,published\nrepo#12,1.5\n")
    monkeypatch.setattr(pt, "PUBLIC", tmp_path)
    d = pt._read("s.csv")
    assert d.to_dict("records") == [{"source": "repo#12", "published": 1.5}]


def test_the_mi300x_loop_facts_compare_times_relatively_and_shares_by_their_difference():
    """Z-Y00/ROCM-sdma-rccl-test: eighteen quoted times (relative error), six shares hidden and
    the traces' GEMM slowdowns (absolute); the slowdown inverts ``t = t0 + c s / (1 + s)``."""
    pt, sl = benchmark("public_table"), benchmark("sdma_loop")
    table = pd.DataFrame(pt.sdma_loop_rows(), columns=pt.COLUMNS)
    times, shares = (table[table["source"] == s] for s in ("ROCM-sdma-rccl-test", "ROCM-sdma-rccl-test (overlap)"))
    assert len(times) == 18 and times["error"].notna().all()
    assert len(shares) >= 6 and shares["error"].isna().all() and shares["fact"].str.contains("slowdown").any()
    # a GEMM of 6 alone, covered wholly by something that slows it 25%: 7.5; partly covered, not counted
    assert sl.slowdowns([(0, 6), (6, 13.5), (13.5, 19.6)], [(6.0, 14.0)]) == pytest.approx([0.25])
    assert sl.hidden(50.0, 2.0, 50.5) == 0.75 and sl.hidden(50.0, 1.0, 51.5) == 0.0


def test_nccl_2_21_through_pytorch_on_8_h100_reads_right_only_with_its_own_tuner():
    """microsoft/tokenweave's figure 5 (8 x H100, PyTorch 2.6 = NCCL 2.21, NVLS off by vLLM):
    reduce-scatter and all-gather of 1-64 MiB read within 15% when the model sizes them by
    one rank's share as NCCL before 2.22 did, and over 20% fast with the 2.22+ tuner."""
    tw = benchmark("tokenweave_collectives")
    df = pd.DataFrame(tw.rows())
    df["default_error"] = df["default_s"] / df["measured_s"] - 1.0
    band = df[(df["collective"] != "all-reduce") & (df["buffer_mib"] <= 64)]
    assert len(df) == 30 and band["error"].abs().median() < 0.15
    assert band["default_error"].median() < -0.2
    assert df["command"].str.contains("--tuner rank").sum() == 20
    assert df.loc[df["collective"] == "all-reduce", "command"].str.contains("--algorithm ring").all()
