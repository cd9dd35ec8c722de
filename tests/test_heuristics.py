"""Heuristics: features, rules, shipped thresholds, fitting on a tiny table."""

import math

from ficco_sim import Scenario
from ficco_sim.explore.heuristics import (THRESHOLDS_FILE, Heuristic, candidate_schedules, features, fit,
                                          load_heuristic, oracle_table, recommend, score)


def test_shipped_thresholds_load_and_pick_a_candidate():
    assert THRESHOLDS_FILE.exists()
    h = load_heuristic()
    rec = recommend(Scenario("ag-gemm", 8, 16384, 8192, 8192), "mi300x", "fc:8", h)
    assert rec["schedule"] in candidate_schedules(8) and rec["reasons"]


def test_features_follow_sizes():
    small = features(Scenario("ag-gemm", 8, 2048, 4096, 4096), "h100", "switch:8")
    big = features(Scenario("ag-gemm", 8, 65536, 4096, 4096), "h100", "switch:8")
    assert big["waves"] > small["waves"] and big["cmd_bytes"] > small["cmd_bytes"]
    assert math.isclose(small["ratio"], big["ratio"], rel_tol=0.5)


def test_fit_is_no_worse_than_the_prior_on_its_training_table():
    cases = [(Scenario("ag-gemm", 4, m, 4096, 4096), "h100", "switch:4") for m in (1024, 8192, 32768)]
    table = oracle_table(cases)
    fitted = fit(table)
    assert score(fitted, table)["within5"] >= score(Heuristic(), table)["within5"]


def test_pipeline_prediction_and_tie_aware_score():
    f = features(Scenario("ag-gemm", 8, 32768, 8192, 8192), "mi300x", "fc:8")
    t = Heuristic().predict(f)
    assert set(t) == set(candidate_schedules(8)) and all(v > 0 for v in t.values())
    # one GEMM per step loses more to decomposition than one GEMM for the whole gather
    dils = [f["parts"][f"ficco-a2a-dma{s}"]["dil"] for s in ("-g8", "")]
    assert 0.0 <= dils[0] <= dils[1] + 1e-9
    table = [{"features": f, "speedups": {c: 1.0 for c in candidate_schedules(8)}}]
    s = score(Heuristic(), table)
    assert s["top1"] == s["top1_ties"] == s["within5"] == 1.0


def test_rules_explain_the_pick():
    rec = recommend(Scenario("gemm-rs", 4, 8192, 4096, 4096), "h100", "switch:4")
    assert any("ratio" in w for w in rec["reasons"]) and any("next best" in w for w in rec["reasons"])
