"""The PyTorch executor on CPU: planning, single-GPU mode, a 2-rank gloo validation end to end."""

import dataclasses
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu
from ficco_sim.taskgraph import Slice, TaskGraph
from ficco_sim.validate.executor import Job, ReplayOptions, replay, to_torch_priority
from ficco_sim.validate.plan import plan_local, plan_rank
from ficco_sim.validate.testing import tiny
from ficco_sim.validate.workflow import parse_scenario, validate

SCHEDULES = ["none", "shard-p2p-sm", "shard-p2p-dma", "ficco-a2a-sm-hi", "ficco-a2a-dma", "ficco-p2p-sm",
             "shard-a2a-sm-g2"]


def _children() -> list[int]:
    """Live child processes of this process (from /proc), except Python's own
    multiprocessing resource tracker, which lives as long as the parent by design."""
    me, out = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z" and "resource_tracker" not in cmd:
            out.append(int(pid))
    return out


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
def test_single_gpu_mode_on_cpu_is_exact(kind):
    jobs = []
    for s in SCHEDULES:
        if kind == "a2a-gemm" and s == "none":
            continue   # see test_bad_io_rows_are_input_errors
        jobs.append(Job(s, tiny(kind, s, gpus=2, m=8)))
        jobs.append(Job(s + "/3", tiny(kind, s, gpus=3, m=12, n=5, k=3)))
    results = replay(jobs, ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1))
    assert [r.name for r in results if not r.correct] == []
    assert all(r.max_error == 0.0 for r in results)
    assert any(r.not_honoured for r in results)


def test_ring_topology_forwarding_single_gpu():
    from ficco_sim.schedules.lowering import lower
    from ficco_sim.workload import Scenario
    jobs = [Job(s, lower(Scenario(kind, 3, 12, 4, 4, dtype="float32"), s, "h100", "ring:3"))
            for kind in ("ag-gemm", "gemm-rs") for s in ("none", "shard-p2p-sm")]
    assert all(r.correct for r in replay(jobs, ReplayOptions(device="cpu", mode="single-gpu", warmup=0,
                                                               repeats=1)))


def test_a_wrong_graph_is_caught():
    g = tiny("ag-gemm", "shard-p2p-sm", gpus=2, m=8)
    t = next(x for x in g.transfers if x.dst == 1)
    bad = dataclasses.replace(t, io={"src": t.io["src"], "dst": Slice("A", 4, 8)})  # overwrites rank 1's shard
    g2 = TaskGraph.build(g.num_gpus, g.streams, [bad if x.id == t.id else x for x in g.tasks],
                         buffers=g.buffers, meta=g.meta)
    r = replay([Job("bad", g2)], ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1))[0]
    assert not r.correct and r.max_error > 0


def test_rank_programs_split_transfers():
    g = tiny("ag-gemm", "shard-p2p-sm", gpus=2, m=8)
    kinds = [op.kind for op in plan_rank(g, 0).ops]
    assert kinds.count("send") == 1 and kinds.count("recv") == 1
    local = plan_local(g)
    assert sum(op.kind == "copy" for op in local.ops) == len(g.transfers)
    pos = {op.id: i for i, op in enumerate(local.ops)}
    assert all(pos[d] < pos[op.id] for op in local.ops for d in op.deps)


def test_priority_mapping_clamps():
    assert to_torch_priority(0, [0, 1], (0, -3)) == 0
    assert to_torch_priority(1, [0, 1], (0, -3)) == -1
    assert to_torch_priority(5, [-2, 5], (0, -3)) == -3


def test_bad_io_rows_are_input_errors():
    g = tiny("ag-gemm", "none", gpus=2, m=8)
    stripped = TaskGraph.build(g.num_gpus, g.streams,
                               [dataclasses.replace(t, io={}) if t.id == "gemm0" else t for t in g.tasks],
                               buffers=g.buffers, meta=g.meta)
    with pytest.raises(InputError, match="io lacks"):
        replay([Job("x", stripped)], ReplayOptions(device="cpu", mode="single-gpu"))
    with pytest.raises(InputError, match="no buffers"):
        replay([Job("x", TaskGraph.build(2, g.streams, []))], ReplayOptions(device="cpu", mode="single-gpu"))


@pytest.mark.parametrize("opts, match", [
    (ReplayOptions(device="tpu"), "unknown device"),
    (ReplayOptions(mode="sideways"), "unknown mode"),
    (ReplayOptions(repeats=0), "timed repeat"),
    (ReplayOptions(world_size=3), "world size"),
])
def test_bad_options_are_input_errors(opts, match):
    with pytest.raises(InputError, match=match):
        replay([Job("x", tiny())], opts)


def test_cuda_without_gpu_is_an_input_error():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(InputError, match="cuda"):
        replay([Job("x", tiny())], ReplayOptions(device="cuda"))


def test_bad_scenario_specs():
    for text in ("ag-gemm:m=8,n=8", "matmul:m=8,n=8,k=8", "ag-gemm:m=8,n=8,k=x", "ag-gemm:m=8,n=8,k=8,q=1"):
        with pytest.raises(InputError):
            parse_scenario(text, 2)
    assert parse_scenario("a2a-gemm:m=16,n=8,k=8", 2).gpus == 2


def test_two_rank_gloo_validation_end_to_end(tmp_path):
    before = set(_children())
    df, paths = validate("cpu", 2, "h100", ["ag-gemm:m=32,n=16,k=16", "gemm-rs:m=32,n=16,k=16"],
                         ["none", "shard-p2p-sm", "ficco-a2a-dma"], repeats=2, warmup=1, out_dir=tmp_path,
                         stamp="test")
    assert len(df) == 6 and df["correct"].all()
    assert (df["measured_s"] > 0).all() and (df["predicted_s"] > 0).all()
    assert set(["scenario", "schedule", "predicted_s", "measured_s", "err", "correct", "not_honoured", "torch",
                "device", "date"]) <= set(df.columns)
    assert "dma" in df.loc[df["schedule"] == "ficco-a2a-dma", "not_honoured"].iloc[0]
    for p in paths.values():
        assert p.exists() and p.stat().st_size > 0
    assert paths["csv"].parent.parent == tmp_path
    assert len(pd.read_csv(paths["csv"])) == 6
    text = paths["md"].read_text()
    assert "MAPE" in text and "Kendall tau" in text and "top-1" in text
    assert set(_children()) - before == set()


def test_an_sm_margin_is_reported_as_not_honoured():
    from ficco_sim import Scenario, lower
    from ficco_sim.validate.executor import audit
    g = lower(Scenario("ag-par-gemm", 2, 64, 32, 32, dtype="float32"), "par-sm-m16", "h100", "switch:2")
    assert any(x.startswith("margin:") for x in audit(g, ReplayOptions()))
    assert not any(x.startswith("margin:") for x in audit(tiny("ag-par-gemm", "par-sm"), ReplayOptions()))


# The CI case: two of the committed case set's shapes (~20 ms a run). On a 2-core host a woken
# rank thread can wait a scheduler slice (~1-2 ms) behind the other rank's compute; at ~3 ms a
# run that alone moved the median by 50% (the former 1024x512x128 case failed CI at 0.52).
CI_MAPE_BOUND = 0.5    # the committed case set's bar is 20% (issue 18)


def test_cpu_validation_predicts_with_this_hosts_profile_within_its_bound(tmp_path):
    """End to end as CI runs it: no profile named, so this host is calibrated first (gloo
    ranks), then the replay is predicted with that profile and stays within its bound."""
    from ficco_sim.validate.report import machine_name
    from ficco_sim.validate.workflow import GAP_PARTS, this_machine
    df, paths = validate("cpu", 2, None, ["gemm-rs:m=2048,n=1024,k=256", "ag-gemm:m=4096,n=128,k=1024"],
                         ["none", "shard-p2p-sm", "ficco-a2a-sm"], repeats=7, warmup=2, out_dir=tmp_path,
                         stamp="ci")
    prof = tmp_path / machine_name("cpu") / "cpu.yaml"
    gpu = load_gpu(prof)
    assert gpu.host is not None and this_machine() in prof.read_text()
    assert (prof.parent / "cpu_ranks.csv").exists()
    assert df["correct"].all() and len(df) == 6
    assert set(df["gap_mechanism"]) <= set(GAP_PARTS)
    assert "gap (measured - predicted, ms)" in paths["md"].read_text()
    mape = float(df["err"].abs().mean())
    assert mape <= CI_MAPE_BOUND, df[["scenario", "schedule", "predicted_s", "measured_s", "err"]].to_string()


def test_a_profile_from_another_host_is_never_used(tmp_path, monkeypatch):
    import ficco_sim.calibrate.workflow as cw
    from ficco_sim.validate import workflow as vw
    calls = []

    def fake(device, *, out, **kw):
        calls.append(out)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(f"host:\n  machine: {json.dumps(vw.this_machine())}\n")

    monkeypatch.setattr(cw, "calibrate_device", fake)
    path = vw.host_profile(tmp_path, 2)
    assert calls == [path]
    assert vw.host_profile(tmp_path, 2) == path and len(calls) == 1         # this host's: reused
    path.write_text('host:\n  machine: "elsewhere | some CPU | 64 cores"\n')
    vw.host_profile(tmp_path, 2)
    assert len(calls) == 2                                                  # another host's: recalibrated
    path.write_text("{{not yaml")
    vw.host_profile(tmp_path, 2)
    assert len(calls) == 3
    # the same name, CPU and cores (fresh virtual machines of one image), another boot: recalibrated
    from ficco_sim.calibrate.cpu_profile import machine_id
    host, cpu, cores = vw.this_machine().split(" | ")[:3]
    other = machine_id(host, cpu, int(cores.split()[0]), boot="00000000")
    assert other != vw.this_machine() or not Path("/proc/sys/kernel/random/boot_id").exists()
    path.write_text(f"host:\n  machine: {json.dumps(other)}\n")
    vw.host_profile(tmp_path, 2)
    assert len(calls) == 4 or other == vw.this_machine()


def test_the_schedules_of_one_scenario_take_turns_run_by_run():
    """A slow spell of the host must fall on every schedule of a scenario alike: runs go
    round by round, each round every job once, the starting job rotating."""
    from ficco_sim.validate.launch import groups_of, turns
    order = turns(3, 6)
    assert all(sorted(r) == [0, 1, 2] for r in order)
    assert [r[0] for r in order] == [0, 1, 2, 0, 1, 2]
    g = TaskGraph(1, (), ())
    jobs = [Job("a", g, "s1"), Job("b", g, "s1"), Job("c", g, "s2"), Job("d", g), Job("e", g)]
    assert [[j.name for j in b] for b in groups_of(jobs)] == [["a", "b"], ["c"], ["d"], ["e"]]
