"""Sweeps under faults: scenario identity, torn logs, kill -9, Ctrl-C, two runs in one folder,
failing writes. Each test names the failure it would have caught on the sweep before these fixes."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from ficco_sim import InputError, Scenario
from ficco_sim.cli import main as cli_main
from ficco_sim.explore.library import load_scenarios
from ficco_sim.explore.sweep import POINTS_FILE, Job, _record, append_points, read_points, run_sweep
from ficco_sim.workload import skewed_routing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import sweep_faults as faults  # noqa: E402  (the fault trials live once, in the benchmark)


# ----------------------------------------------------------------------------------------
# Identity: a scenario is every field that changes its answer, never its name

def test_three_scenarios_the_label_merged_stay_three(tmp_path):
    """The bug: a2a-gemm 16384x4096x4096 with and without skew 6 and in float32 were one row."""
    f = tmp_path / "s.yaml"
    f.write_text(textwrap.dedent("""\
        scenarios:
          - {kind: a2a-gemm, gpus: 8, m: 16384, n: 4096, k: 4096}
          - {kind: a2a-gemm, gpus: 8, m: 16384, n: 4096, k: 4096, skew: 6}
          - {kind: a2a-gemm, gpus: 8, m: 16384, n: 4096, k: 4096, dtype: float32}
        """))
    scs = load_scenarios(f)
    assert len({s.key() for s in scs}) == len({s.label() for s in scs}) == 3
    out = tmp_path / "o"
    assert cli_main(["explore", "--scenarios", str(f), "--topology", "switch:8", "--engine", "analytical",
                     "--out", str(out), "--quiet"]) == 0
    summ = pd.read_csv(out / "summary.csv")
    assert len(summ) == 3 and summ["scenario_id"].nunique() == 3
    t_none = summ["t_none"].tolist()
    assert len(set(t_none)) == 3                                   # each its own answer
    assert t_none[2] > 2 * t_none[0]                               # float32 moves and multiplies twice the bytes
    pts = pd.read_csv(out / "points.csv")
    assert len(pts) == 3 * pts["schedule"].nunique()


def test_duplicate_names_in_one_file_are_an_error(tmp_path):
    """The bug: two scenarios named 'layer' showed the second with the first one's sizes and times."""
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: layer, kind: ag-gemm, gpus: 4, m: 4096, n: 1024, k: 1024}\n"
                 "  - {name: layer, kind: ag-gemm, gpus: 4, m: 8192, n: 1024, k: 1024}\n")
    with pytest.raises(InputError) as e:
        load_scenarios(f)
    assert e.value.field == "scenarios[1].name" and "duplicate name 'layer'" in e.value.message
    f.write_text("scenarios:\n  - {kind: ag-gemm, gpus: 4, m: 4096, n: 1024, k: 1024}\n"
                 "  - {kind: ag-gemm, gpus: 4, m: 4096, n: 1024, k: 1024}\n")
    with pytest.raises(InputError, match="duplicate scenario"):
        load_scenarios(f)


def test_names_are_labels_the_key_is_the_content(tmp_path):
    """Renaming a scenario reuses its logged points; changing a size, dtype or routing does not."""
    a = Scenario("a2a-gemm", 4, 4096, 1024, 1024, name="x")
    assert a.key() == Scenario("a2a-gemm", 4, 4096, 1024, 1024, name="y").key()
    others = [Scenario("a2a-gemm", 4, 4096, 1024, 1024, "bfloat16"),
              Scenario("a2a-gemm", 4, 4096, 1024, 1024, routing=skewed_routing(4, 4096, 6.0)),
              Scenario("a2a-gemm", 4, 4096, 1024, 2048)]
    assert len({a.key()} | {s.key() for s in others}) == 4
    assert len({s.label() for s in others} | {Scenario("a2a-gemm", 4, 4096, 1024, 1024).label()}) == 4
    out = tmp_path / "o"
    first = run_sweep([Job("h100", "switch:4", (a,), ("none",), "analytical")], out=out, progress=False)
    renamed = Scenario("a2a-gemm", 4, 4096, 1024, 1024, name="y")
    again = run_sweep([Job("h100", "switch:4", (renamed,), ("none",), "analytical")], out=out, progress=False)
    assert again == first and len(read_points(out / POINTS_FILE)) == 1


def test_an_edited_profile_is_other_hardware(tmp_path):
    """The bug: resume by profile *name* returned the old profile's numbers after an edit."""
    prof = tmp_path / "mygpu.yaml"
    shutil.copy(ROOT / "hw_profiles" / "h100.yaml", prof)
    job = lambda: [Job(str(prof), "switch:4", (Scenario("ag-gemm", 4, 4096, 2048, 2048),), ("none",),  # noqa: E731
                       "analytical")]
    out = tmp_path / "o"
    before = run_sweep(job(), out=out, progress=False)[0]["makespan"]
    text = prof.read_text()
    assert "float16: {value: 989.4" in text
    prof.write_text(text.replace("float16: {value: 989.4", "float16: {value: 400.0"))
    after = run_sweep(job(), out=out, progress=False)[0]["makespan"]
    fresh = run_sweep(job(), progress=False)[0]["makespan"]
    assert after == fresh and after > 1.2 * before


# ----------------------------------------------------------------------------------------
# The log: checked records, torn at any byte

def _rows(n):
    return [{"gpu_arg": "h100", "topology_arg": "ring:2", "hardware_id": "x", "scenario_id": f"s{i}",
             "schedule": "none", "engine": "des", "makespan": 1.5e-3 * (i + 1), "reason": "tab\there"}
            for i in range(n)]


def test_a_record_torn_at_every_byte_is_dropped_and_never_glued(tmp_path):
    """The bug: a complete record without its newline was accepted, the next append glued onto
    it, and the run after silently dropped a third of the log."""
    log = tmp_path / POINTS_FILE
    rows = _rows(3)
    whole = b"".join(_record(r) for r in rows)
    head = len(_record(rows[0])) + len(_record(rows[1]))
    for cut in range(head, len(whole)):            # every byte of the last record, newline included
        log.write_bytes(whole[:cut])
        assert read_points(log) == rows[:2], cut
        assert log.read_bytes() == whole[:head]     # the torn bytes are gone before anything appends
        append_points(log, rows[2:])
        assert read_points(log) == rows, cut


def test_a_corrupt_record_anywhere_drops_only_itself(tmp_path):
    log = tmp_path / POINTS_FILE
    rows = _rows(4)
    recs = [_record(r) for r in rows]
    for i in range(len(recs)):
        for pos in range(0, len(recs[i]) - 1, 7):   # flip a byte inside record i (not its newline)
            bad = bytearray(recs[i])
            bad[pos] ^= 0x01
            log.write_bytes(b"".join(recs[:i]) + bytes(bad) + b"".join(recs[i + 1:]))
            assert read_points(log) == rows[:i] + rows[i + 1:], (i, pos)
    log.write_bytes(b'{"scenario_id": "s0"}\n' + recs[1])   # a line of an older, unchecked log
    assert read_points(log) == rows[1:2]


# ----------------------------------------------------------------------------------------
# Processes: kill -9, Ctrl-C, a second run

@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_kill_and_ctrl_c_leave_no_orphans_and_resume_to_identical_tables(tmp_path):
    """The bugs: after kill -9 the workers lived on forever; Ctrl-C waited for every submitted job
    and threw their results away, or printed a traceback. (20 such trials: benchmarks/sweep_faults.py.)"""
    ref, _ = faults.reference(tmp_path)
    rng = random.Random(7)
    for i, sig in enumerate((signal.SIGKILL, signal.SIGINT, signal.SIGINT)):
        t = faults.trial(tmp_path, f"t{i}", sig, rng.uniform(0.0, 1.0), ref)
        assert t["workers"] == 2 and t["orphans"] == 0 and t["duplicated"] == 0 and t["identical"], t
        if sig == signal.SIGINT:
            assert t["exit_s"] < 2.0 and t["rc"] == 130 and t["stderr_lines"] == 1 and not t["traceback"], t


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    first = faults.start(tmp_path, "o")
    faults.wait_for_workers(first)
    f = tmp_path / "sweep.yaml"
    with pytest.raises(InputError, match=rf"pid {first.pid}.*writing into this folder"):
        run_sweep([Job("h100", "switch:2", (Scenario("ag-gemm", 2, 1024, 1024, 1024),), ("none",))],
                  out=tmp_path / "o", progress=False)
    assert f.exists() and first.wait(120) == 0
    rows = read_points(tmp_path / "o" / POINTS_FILE)
    assert len(rows) == len({(r["scenario_id"], r["schedule"], r["engine"]) for r in rows})


# ----------------------------------------------------------------------------------------
# Writes that fail: one line, exit 2, the old file intact, no stray files

@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO, errno.EACCES])
def test_a_failing_table_write_is_one_line_and_keeps_the_old_file(tmp_path, capsys, monkeypatch, err):
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: a, kind: ag-gemm, gpus: 4, m: 4096, n: 2048, k: 2048}\n")
    out = tmp_path / "o"
    args = ["explore", "--scenarios", str(f), "--topology", "switch:4", "--engine", "analytical", "--out", str(out),
            "--quiet"]
    assert cli_main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = pd.DataFrame.to_csv

    def failing(self, path=None, *a, **k):
        if path is not None and "summary" in str(path):
            with open(path, "w") as fh:
                fh.write("half a ta")                 # some bytes reach the disk first
            raise OSError(err, os.strerror(err), str(path))
        return real(self, path, *a, **k)
    monkeypatch.setattr(pd.DataFrame, "to_csv", failing)
    f.write_text("scenarios:\n  - {name: a, kind: ag-gemm, gpus: 4, m: 8192, n: 2048, k: 2048}\n")
    capsys.readouterr()
    assert cli_main(args) == 2
    msg = capsys.readouterr().err
    assert msg.count("\n") == 1 and msg.startswith("ficco-sim: error: ") and os.strerror(err) in msg
    assert (out / "summary.csv").read_bytes() == before["summary.csv"]
    assert sorted(p.name for p in out.iterdir()) == sorted(before)   # no temporary file left behind


def test_a_failing_log_append_is_one_line_and_the_log_stays_readable(tmp_path, capsys, monkeypatch):
    import ficco_sim.explore.sweep as sweep
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: a, kind: ag-gemm, gpus: 4, m: 4096, n: 2048, k: 2048}\n"
                 "  - {name: b, kind: gemm-rs, gpus: 4, m: 4096, n: 2048, k: 2048}\n")
    out = tmp_path / "o"
    real = sweep.append_points
    calls = []

    def disk_full(path, rows):
        calls.append(1)
        if len(calls) > 1:
            with open(path, "ab") as fh:
                fh.write(_record(rows[0])[:17])      # the disk fills mid-record
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, rows)
    monkeypatch.setattr(sweep, "append_points", disk_full)
    args = ["explore", "--scenarios", str(f), "--topology", "switch:4", "--out", str(out), "--quiet",
            "--engine", "des", "--space", "basic", "--jobs", "1"]
    assert cli_main(args) == 2
    assert "No space left on device" in capsys.readouterr().err
    kept = read_points(out / POINTS_FILE)
    assert kept and all(r["scenario"] == "a" for r in kept)
    monkeypatch.setattr(sweep, "append_points", real)
    assert cli_main(args) == 0
    assert len(read_points(out / POINTS_FILE)) == 2 * len(kept)


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_atomic_writes_leave_the_old_file_and_no_stray_file(tmp_path, monkeypatch, where):
    """Every output (profiles, tables, traces, plots) goes through files.atomic_path."""
    import ficco_sim.files as files
    target = tmp_path / "profile.yaml"
    target.write_text("old: 1\n")
    if where == "fsync":
        monkeypatch.setattr(files.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    if where == "replace":
        monkeypatch.setattr(files.os, "replace", lambda a, b: (_ for _ in ()).throw(PermissionError(
            errno.EACCES, "Permission denied", str(b))))
    from ficco_sim.errors import InputError
    # the writer's own failures (fsync, replace) name the user's file, not the temporary one
    with pytest.raises(OSError if where == "write" else InputError, match=None if where == "write" else
                       f"{target}: cannot be written"):
        with files.atomic_path(target) as tmp:
            tmp.write_text("new: 2\n")
            if where == "write":
                raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "old: 1\n" and [p.name for p in tmp_path.iterdir()] == ["profile.yaml"]
    monkeypatch.undo()
    files.write_text_atomic(target, "new: 2\n")
    assert target.read_text() == "new: 2\n" and oct(target.stat().st_mode & 0o777) == oct(0o666 & ~files._umask())
