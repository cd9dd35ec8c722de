"""Traces of ficco-sim's own executor (``ficco-sim validate --profile``): the shipped
ones import and map back to their task graphs, replay as measured reproduces them,
and a profiled replay writes traces that import."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu
from ficco_sim.traces.kineto import load_kineto
from ficco_sim.traces.replay import replay as replay_trace
from ficco_sim.validate.plan import plan_rank
from ficco_sim.workload import Scenario

TRACES = Path(__file__).resolve().parents[1] / "traces"
SHIPPED = {kind: [TRACES / f"executor_{kind.replace('-', '_')}_shard_p2p_sm.rank{r}.json.gz" for r in (0, 1)]
           for kind in ("ag-gemm", "gemm-rs")}


def _meta(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)["ficco"]


def _graph(kind: str):
    """The task graph `ficco-sim validate` replayed for the shipped traces."""
    from ficco_sim.validate.predict import simulate_pairs
    sc = Scenario(kind, 2, 512, 384, 384, dtype="float32")
    pairs, _ = simulate_pairs([sc], ["shard-p2p-sm"], load_gpu("cpu"), None)
    return pairs[0][2]


@pytest.mark.parametrize("kind", sorted(SHIPPED))
def test_shipped_executor_traces_import_and_map_to_tasks(kind):
    files = SHIPPED[kind]
    assert all(p.stat().st_size < 50_000 for p in files)
    t = load_kineto(files)
    assert (t.num_ranks, t.on_gpu) == (2, False)
    graph = _graph(kind)
    for rank in (0, 1):
        assert _meta(files[rank])["job"] == f"{kind} m=512 n=384 k=384 x2|shard-p2p-sm"
        mine = [o for o in t.ops if o.rank == rank]
        # Every op the executor issued on this rank is one range named after it ...
        issued = {op.id: op.kind for op in plan_rank(graph, rank).ops if op.kind != "nop"}
        ranges = {o.name.split(":", 2)[2]: o for o in mine if o.name.startswith("ficco:")}
        assert set(ranges) == set(issued)
        for oid, k in issued.items():
            assert ranges[oid].kind == {"gemm": "gemm", "reduce": "memory", "copy": "memory"}.get(k, "opaque")
            if k == "gemm":
                assert ranges[oid].shapes[0][1] == 384 and ranges[oid].category == "compute"
        # ... and every message is one gloo op on its own stream, after the op before its posting.
        msgs = [o for o in mine if o.category == "comm"]
        assert len(msgs) == sum(k in ("send", "recv") for k in issued.values())
        assert all(o.name in ("gloo:send", "gloo:recv") and o.stream.startswith("gloo.") for o in msgs)
        assert all(o.collective == "send-recv" and o.nbytes > 0 for o in msgs)
        # A GEMM or sum that needs received data waits for the message.
        by_id = t.by_id()
        assert any(by_id[d].category == "comm" for o in mine if o.category == "compute" for d in o.deps)


@pytest.mark.parametrize("kind", sorted(SHIPPED))
def test_shipped_executor_traces_replay_as_measured(kind):
    """Replay keeps every measured duration and the trace's gaps, so it can only drift
    where a dependency ends after the op that waits for it started (gloo's annotation
    closing a few us after ``wait()`` returned): bounded at 0.5 %. The trace's span must
    also agree with the executor's own timer of the same run (``ficco.run_*_s``): the
    timer brackets every range (so the span cannot exceed it, up to 1 % clock jitter),
    and what it adds is the issue loop's bookkeeping between ranges (under 10 %)."""
    files = SHIPPED[kind]
    r = replay_trace(load_kineto(files))
    assert abs(r.error) < 0.005, r.error
    metas = [_meta(p) for p in files]
    timer = max(m["run_end_s"] for m in metas) - min(m["run_start_s"] for m in metas)
    assert 0.90 * timer <= r.trace_makespan <= 1.01 * timer, (r.trace_makespan, timer)


def test_profiled_replay_writes_traces_that_import(tmp_path):
    from ficco_sim.validate.executor import Job, ReplayOptions, replay, trace_path
    from ficco_sim.validate.testing import tiny_ag_gemm
    graph = tiny_ag_gemm()
    out = tmp_path / "prof"
    res = replay([Job("tiny ag|p2p", graph)], ReplayOptions(device="cpu", world_size=2, warmup=0, repeats=1,
                                                            profile_dir=str(out), timeout=120))
    assert res[0].correct and len(res[0].times) == 1       # profiling adds no timed repeat
    files = [trace_path(out, "tiny ag|p2p", r) for r in (0, 1)]
    assert sorted(p.name for p in out.iterdir()) == ["tiny_ag_p2p.rank0.json.gz", "tiny_ag_p2p.rank1.json.gz"]
    assert [p.name for p in files] == sorted(p.name for p in out.iterdir())
    t = load_kineto(files)
    names = {o.name.split(":", 2)[2] for o in t.ops if o.name.startswith("ficco:")}
    assert names == {op.id for r in (0, 1) for op in plan_rank(graph, r).ops if op.kind != "nop"}
    # Replay can only be late (an op waits for a dependency that the trace shows ending a
    # few us after it started); on a ~0.3 ms toy job on a shared 2-core machine that jitter
    # is a larger share than on the shipped traces, hence the loose bound.
    assert -1e-9 <= replay_trace(t).error < 0.25
    # One process (single-gpu mode on CPU): one trace for every rank.
    replay([Job("tiny", graph)], ReplayOptions(device="cpu", mode="single-gpu", warmup=0, repeats=1,
                                               profile_dir=str(out)))
    single = load_kineto([out / "tiny.json.gz"])
    assert {o.kind for o in single.ops} >= {"gemm", "memory"}


def test_profiling_cleans_up_on_errors(tmp_path):
    from ficco_sim.validate.executor import Job, ReplayOptions, profiled, replay
    from ficco_sim.validate.testing import tiny_ag_gemm
    target = tmp_path / "x.rank0.json.gz"
    with pytest.raises(RuntimeError, match="boom"):
        with profiled(target, "cpu", {}):
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="--profile"):
        replay([Job("x", tiny_ag_gemm())], ReplayOptions(mode="single-gpu", profile_dir=str(blocker)))


def test_a_rank_aborting_at_exit_keeps_complete_results(tmp_path):
    """torch can abort a rank while it exits, after the replay is done; results rank 0 wrote for
    every job are kept then, and anything less is still a failure."""
    import json
    from ficco_sim.validate.executor import Job
    from ficco_sim.validate.launch import _complete
    from ficco_sim.validate.testing import tiny_ag_gemm
    jobs = [Job("a", tiny_ag_gemm()), Job("b", tiny_ag_gemm())]
    f = tmp_path / "results.json"
    assert not _complete(str(f), jobs)
    f.write_text(json.dumps([{"name": "a"}]))
    assert not _complete(str(f), jobs)
    f.write_text(json.dumps([{"name": "a"}, {"name": "b"}]))
    assert _complete(str(f), jobs)
    f.write_text('[{"name": "a"}, {"na')
    assert not _complete(str(f), jobs)
