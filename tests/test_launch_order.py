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
def test_a_gemm_issued_first_starves_a_normal_priority_collective(engine):
    sc = Scenario("ar-par-gemm", 8, 8192, 8192, 8192)
    t = {s: simulate(sc, s, "h100", "switch:8", engine=engine).makespan
         for s in ("none", "par-sm", "par-sm-gf", "par-sm-hi", "par-sm-hi-gf")}
    # collective first: it takes its SMs on arrival and the two overlap
    assert t["par-sm"] < 0.85 * t["none"]
    # GEMM first: the collective's blocks wait for the GEMM's last wave; almost no gain
    assert t["par-sm-gf"] > 0.93 * t["none"]
    assert t["par-sm-gf"] > 1.1 * t["par-sm"]
    # priority is the remedy: the collective's blocks go before the GEMM's pending ones
    assert t["par-sm-hi-gf"] == pytest.approx(t["par-sm-hi"], rel=1e-9)
