"""NCCL's own tuning table read from an nccl-tests log (NCCL_DEBUG_SUBSYS=TUNING): the ring's
bus bandwidth and LL cap its tuner picks protocols with, on a real 4 x H100 log and in the
layout NCCL printed before 2.19; calibrate writes them into the profile as measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ficco_sim.calibrate.nccl_tuning import ring_tuning
from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu

LOG = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests" / "h100x4_ring_debug_all_reduce.log"

# NCCL before 2.19 printed one header; this table is NCCL's formula for 8 ranks on one node with a
# ring bus bandwidth of 240 GB/s and Ampere's LL cap of 87.7 (AllGather Ring/Simple 240 x 8/7).
OLD = """h:1:2 [0] NCCL INFO comm 0x5 rank 0 nranks 8 cudaDev 0 busId 7000 - Init COMPLETE
h:1:2 [0] NCCL INFO comm 0x5 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0
h:1:2 [0] NCCL INFO Latency/AlgBw |    Tree/    LL |    Tree/ LL128 |    Tree/Simple |    Ring/    LL |    Ring/ LL128 |    Ring/Simple |
h:1:2 [0] NCCL INFO  Max NThreads |            512 |            640 |            512 |            512 |            640 |            512 |
h:1:2 [0] NCCL INFO     Broadcast |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |     7.2/  87.7 |    15.9/ 220.8 |    11.8/ 240.0 |
h:1:2 [0] NCCL INFO     AllGather |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |    10.8/ 100.2 |    27.3/ 252.3 |    32.2/ 274.3 |
"""


@pytest.mark.parametrize("gpus", [2, 4, 6])
def test_the_h100_logs_give_nccls_own_numbers(gpus):
    """The same ring bus bandwidth at 2, 4 and 6 ranks: one number per GPU, as the profile has it."""
    log = LOG.with_name(f"h100x{gpus}_ring_debug_all_reduce.log")
    t = ring_tuning(log.read_text(), str(log))
    assert t == {"ranks": gpus, "bus_bw_gbps": 360.0, "ll_max_bw_gbps": 141.0}
    ck = load_gpu("h100").comm_kernel          # the shipped profile holds what the log says
    assert (ck.ring_bus_bw, ck.ll_max_bw) == (t["bus_bw_gbps"] * 1e9, t["ll_max_bw_gbps"] * 1e9)


def test_the_layout_before_nccl_2_19():
    t = ring_tuning(OLD, "old.log")
    assert t["ranks"] == 8 and t["bus_bw_gbps"] == pytest.approx(240.0, rel=1e-3)
    assert t["ll_max_bw_gbps"] == pytest.approx(87.7, rel=1e-3)


def test_no_table_is_no_tuning_and_broken_tables_are_refused():
    assert ring_tuning("# nThread 1 nGpus 4\n#  size count\n", "plain.log") is None
    with pytest.raises(InputError, match="nRanks"):
        ring_tuning(OLD.replace("nRanks 8 nNodes 1", "ranks eight"), "x.log")
    with pytest.raises(InputError, match="nNodes.*2 nodes"):
        ring_tuning(OLD.replace("nNodes 1", "nNodes 2"), "x.log")
    with pytest.raises(InputError, match="Ring/Simple.*not NCCL's"):
        ring_tuning(OLD.replace("32.2/ 274.3", "n/a"), "x.log")


def test_calibrate_writes_the_tables_numbers_as_measured(tmp_path):
    out = tmp_path / "h100_cal.yaml"
    run = subprocess.run([sys.executable, "-m", "ficco_sim.cli", "calibrate", "--from", str(LOG), "--gpu", "h100",
                          "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    line = next(x for x in out.read_text().splitlines() if x.strip().startswith("bus_bw_gbps:"))
    assert "value: 360" in line and "kind: measured" in line and LOG.name in line


def test_a_table_of_several_nodes_is_not_read_and_the_fit_goes_on(tmp_path):
    log = tmp_path / "two_nodes.log"
    log.write_text(LOG.read_text().replace("nNodes 1", "nNodes 2"))
    out = tmp_path / "h100_cal.yaml"
    run = subprocess.run([sys.executable, "-m", "ficco_sim.cli", "calibrate", "--from", str(log), "--gpu", "h100",
                          "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "several nodes" in run.stdout + run.stderr
    line = next(x for x in out.read_text().splitlines() if x.strip().startswith("bus_bw_gbps:"))
    assert "kind: measured, source: \"the bus bandwidth of NCCL's ring graph on H100" in line   # the base profile's
