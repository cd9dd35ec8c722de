"""Fault trials of a 2-worker ``explore`` sweep: kill -9 or Ctrl-C at a random moment, then
resume. Each trial counts orphaned worker processes, duplicated log records, the exit time and
message after Ctrl-C, and whether the resumed tables are byte-identical to an uninterrupted
run's. Prints a table and writes it (with when, where and how) to ``--csv``.

    python benchmarks/sweep_faults.py [--trials 20] [--seed 1] [--csv validation/faults/sweep_faults.csv]

The test suite runs three of these trials (tests/test_sweep_faults.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEP = "\n".join(["scenarios:"] + [f"  - {{kind: {k}, gpus: 8, m: {m}, n: 2048, k: 2048}}"
                                    for m in (8192, 16384, 32768) for k in ("ag-gemm", "gemm-rs", "a2a-gemm")]) + "\n"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start(work: Path, out: str) -> subprocess.Popen:
    """``ficco-sim explore`` of :data:`SWEEP` with 2 workers into ``work/out``, in its own session."""
    f = work / "sweep.yaml"
    if not f.exists():
        f.write_text(SWEEP)
    # SIGINT as a terminal's foreground command has it: a shell without job control starts
    # background jobs with SIGINT ignored, and a child inherits that (Ctrl-C would then be lost)
    return subprocess.Popen([sys.executable, "-m", "ficco_sim.cli", "explore", "--scenarios", str(f), "--topology",
                             "switch:8", "--jobs", "2", "--out", str(work / out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_workers(p: subprocess.Popen, n: int = 2, timeout: float = 60.0) -> list[int]:
    t0 = time.time()
    while time.time() - t0 < timeout:
        kids = descendants(p.pid)
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    raise RuntimeError("the sweep never started its workers")


def tables(folder: Path) -> tuple[bytes, bytes]:
    return (folder / "points.csv").read_bytes(), (folder / "summary.csv").read_bytes()


def reference(work: Path) -> tuple[tuple[bytes, bytes], float]:
    """The tables of an uninterrupted run, and how long its workers ran."""
    p = start(work, "ref")
    wait_for_workers(p)
    t0 = time.time()
    if p.wait(300) != 0:
        raise RuntimeError(p.stderr.read().decode())
    return tables(work / "ref"), time.time() - t0


def trial(work: Path, out: str, sig: signal.Signals, delay: float, ref: tuple[bytes, bytes]) -> dict:
    """Interrupt one sweep ``delay`` s after its workers started, then resume it."""
    from ficco_sim.explore.sweep import POINTS_FILE, read_points
    p = start(work, out)
    kids = wait_for_workers(p)
    time.sleep(delay)
    t0 = time.time()
    if sig == signal.SIGINT:
        os.killpg(p.pid, signal.SIGINT)          # what a terminal's Ctrl-C does
    else:
        p.send_signal(sig)
    err = p.communicate(timeout=60)[1].decode()
    exit_s = time.time() - t0
    deadline = time.time() + 5
    while any(alive(k) for k in kids) and time.time() < deadline:
        time.sleep(0.05)
    logged = read_points(work / out / POINTS_FILE)
    keys = [(r["scenario_id"], r["schedule"], r["engine"]) for r in logged]
    again = start(work, out)
    resumed_ok = again.wait(300) == 0
    return {"signal": sig.name, "delay_s": round(delay, 3), "exit_s": round(exit_s, 3), "rc": p.returncode,
            "stderr_lines": len(err.strip().splitlines()), "traceback": "Traceback" in err,
            "workers": len(kids), "orphans": sum(alive(k) for k in kids), "logged": len(logged),
            "duplicated": len(keys) - len(set(keys)),
            "identical": resumed_ok and tables(work / out) == ref}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", default=None, help="also write the trials here")
    args = ap.parse_args()
    import pandas as pd
    from rich.console import Console
    from rich.table import Table
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        ref, span = reference(work)
        rows = [trial(work, f"t{i}", (signal.SIGKILL, signal.SIGINT)[i % 2], rng.uniform(0.0, 0.9 * span), ref)
                for i in range(args.trials)]
    df = pd.DataFrame(rows)
    table = Table(title=f"explore --jobs 2 under kill -9 / Ctrl-C ({args.trials} trials, seed {args.seed})")
    for c in df.columns:
        table.add_column(c, justify="right")
    for r in df.itertuples(index=False):
        table.add_row(*(str(v) for v in r))
    con = Console(width=160)
    con.print(table)
    sigint = df[df["signal"] == "SIGINT"]
    con.print(f"orphans {df['orphans'].sum()}, duplicated records {df['duplicated'].sum()}, "
              f"resumed tables identical {df['identical'].sum()}/{len(df)}, "
              f"Ctrl-C exit max {sigint['exit_s'].max():.2f} s, one-line messages "
              f"{(sigint['stderr_lines'] == 1).sum()}/{len(sigint)}, tracebacks {df['traceback'].sum()}")
    if args.csv:
        from ficco_sim.files import atomic_path
        head = (f"# benchmarks/sweep_faults.py --trials {args.trials} --seed {args.seed}; "
                f"{datetime.datetime.now().isoformat(timespec='seconds')}; host {platform.node()} "
                f"({os.cpu_count()} cores, {platform.platform()}), python {platform.python_version()}\n")
        with atomic_path(args.csv) as tmp:
            tmp.write_text(head + df.to_csv(index=False))
        con.print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
