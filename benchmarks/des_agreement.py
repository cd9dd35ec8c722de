"""Do two versions of the discrete-event engine give the same answers? Runs the same ~1,000
task graphs (every valid schedule point, one in three, of every scenario kind at two
shapes on 8 x H100 switch, 8 x MI300X fc and 4 x A100 ring; the presets; the three
dispatch policies; independent pairs in both launch orders; every collective at 2-16 GPUs
on ring, fc and switch, SM and copy engines; the CPU host profile's cases) under this
checkout and under another git revision,
and compares every task's ready / start / end / peak residency and every counter series.

    python benchmarks/des_agreement.py --base HEAD~3          # this tree against HEAD~3
    python benchmarks/des_agreement.py --base v0 --rtol 1e-9

The base revision runs from a temporary git worktree (its own code, this process's
Python). Exit status 1 when anything differs beyond ``--rtol``. Counter *order* is not
compared (it is the order series were first written, not an answer), and counters are
compared as step functions. The makespans that moved are summed up per group of cases.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dump(out: str) -> None:
    """Run every case with the ficco_sim on sys.path and pickle the answers to ``out``."""
    from ficco_sim import Scenario
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.explore.space import enumerate_space
    from ficco_sim.hardware import load_gpu
    from ficco_sim.schedules import lower
    from ficco_sim.simulate import collective_graph
    from ficco_sim.topology import load_topology
    from ficco_sim.workload import KINDS

    got = {}

    def run(key, g, gpu, topo, policy="backfill"):
        tl = simulate_graph(g, gpu, topo, policy=policy, record=True)
        got[key] = (tl.makespan, {r.id: (r.ready, r.start, r.end, r.peak_resident) for r in tl.records},
                    {k: list(v) for k, v in tl.counters.items()})

    for gname, tname in [("h100", "switch:8"), ("mi300x", "fc:8"), ("a100", "ring:4")]:
        gpu = load_gpu(gname)
        topo = load_topology(tname, gpu)
        for kind in KINDS:
            for shape in [(16384, 8192, 8192), (2048, 4096, 1024)]:
                sc = Scenario(kind, topo.num_gpus, *shape)
                for p in [p for p in enumerate_space(sc, gpu, topo, level="full") if p.reason is None][::3]:
                    run((gname, tname, kind, shape, p.schedule.name), lower(sc, p.schedule, gpu, topo), gpu, topo)
                for p in enumerate_space(sc, gpu, topo, level="presets"):
                    if p.reason is None:
                        run((gname, tname, kind, shape, "preset", p.schedule.name), lower(sc, p.schedule, gpu, topo),
                            gpu, topo)
    gpu = load_gpu("h100")
    topo = load_topology("switch:8", gpu)
    for policy in ("strict", "fifo"):
        for s in ("ficco-a2a-sm", "ficco-a2a-dma", "none"):
            run(("policy", policy, s), lower(Scenario("ag-gemm", 8, 8192, 8192, 8192), s, gpu, topo), gpu, topo,
                policy)
    for gname, tname in [("h100", "switch:8"), ("mi300x", "fc:8"), ("mi250x", "fc:8")]:
        g, t = load_gpu(gname), load_topology(tname, load_gpu(gname))
        for m in (2048, 8192):       # independent pairs in both launch orders (a GEMM's 2048^3 leaves SMs free)
            for s in ("par-sm", "par-sm-gf", "par-sm-hi-gf"):
                run(("order", gname, m, s), lower(Scenario("ar-par-gemm", 8, m, m, m), s, g, t), g, t)
    for kind in ("ring", "fc", "switch"):
        for n in (2, 8, 16):
            topo = load_topology(f"{kind}:{n}", gpu)
            for coll in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv"):
                for nbytes in (4096, 1 << 20, 64 << 20):
                    run(("coll", kind, n, coll, nbytes), collective_graph(gpu, topo, coll, nbytes), gpu, topo)
                    if coll in ("all-gather", "all-to-all"):
                        run(("coll-dma", kind, n, coll, nbytes), collective_graph(gpu, topo, coll, nbytes,
                                                                                  engine="dma"), gpu, topo)
    cpu = load_gpu(str(ROOT / "hw_profiles" / "cpu.yaml"))
    topo = load_topology("switch:2", cpu)
    for kind in ("ag-gemm", "gemm-rs", "a2a-gemm"):
        sc = Scenario(kind, 2, 2048, 1024, 256, dtype="float32")
        for p in enumerate_space(sc, cpu, topo, level="basic"):
            if p.reason is None:
                run(("cpu", kind, p.schedule.name), lower(sc, p.schedule, cpu, topo), cpu, topo)
    with open(out, "wb") as f:
        pickle.dump(got, f)


def _close(x: float, y: float, rtol: float) -> bool:
    x, y = float(x), float(y)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= rtol * max(abs(x), abs(y)) or abs(x - y) < 1e-15


def compare(base: dict, mine: dict, rtol: float) -> list[str]:
    bad = []
    for key, (mb, rb, cb) in base.items():
        if key not in mine:
            bad.append(f"{key}: missing")
            continue
        mm, rm, cm = mine[key]
        if not _close(mb, mm, rtol):
            bad.append(f"{key}: makespan {mb!r} -> {mm!r}")
        if set(rb) != set(rm):
            bad.append(f"{key}: tasks differ")
        else:
            for tid, vals in rb.items():
                if not all(_close(x, y, rtol) for x, y in zip(vals, rm[tid])):
                    bad.append(f"{key}: {tid} {vals} -> {rm[tid]}")
                    break
        if set(cb) != set(cm):
            bad.append(f"{key}: counters {sorted(set(cb) ^ set(cm))[:3]}")
        else:
            for name, series in cb.items():
                if not _same_steps(series, cm[name], rtol):
                    bad.append(f"{key}: counter {name}")
                    break
    return bad


def _same_steps(a: list, b: list, rtol: float) -> bool:
    """Two counter series equal as step functions: point for point, or (when one has a point
    the other lacks, e.g. a load summed in another order that moved by 1e-16) at every
    instant either names."""
    if len(a) == len(b) and all(_close(t, u, rtol) and _close(v, w, rtol) for (t, v), (u, w) in zip(a, b)):
        return True
    at = lambda s, t: [v for u, v in s if u <= t][-1]  # noqa: E731
    return all(_close(at(a, t), at(b, t), rtol) for t in sorted({p[0] for p in a} | {p[0] for p in b}))


def makespan_changes(base: dict, mine: dict, rtol: float) -> list[str]:
    """Per group of cases (the key's first two parts), how many makespans moved and the largest move."""
    moved: dict[tuple, list[float]] = {}
    for key, (mb, _, _) in base.items():
        if key in mine and not _close(mb, mine[key][0], rtol):
            moved.setdefault(key[:2], []).append(mine[key][0] / mb - 1 if mb else math.inf)
    return [f"{group}: {len(v)} makespans moved, largest {max(v, key=abs):+.3%}" for group, v in sorted(moved.items())]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision to compare against (e.g. HEAD~1)")
    ap.add_argument("--rtol", type=float, default=1e-9, help="relative tolerance (default 1e-9)")
    ap.add_argument("--dump", help=argparse.SUPPRESS)       # internal: run the cases, pickle here
    args = ap.parse_args()
    if args.dump:
        dump(args.dump)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.base],
                       check=True)
        try:
            times = {}
            for name, where in (("base", tree), ("mine", ROOT)):
                t0 = time.perf_counter()
                env = dict(os.environ, PYTHONPATH=str(where))
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "--base", args.base, "--dump",
                                str(Path(tmp) / f"{name}.pkl")], check=True, env=env, cwd=str(where))
                times[name] = time.perf_counter() - t0
            with open(Path(tmp) / "base.pkl", "rb") as f:
                base = pickle.load(f)
            with open(Path(tmp) / "mine.pkl", "rb") as f:
                mine = pickle.load(f)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    bad = compare(base, mine, args.rtol)
    print(f"{len(base)} task graphs; {args.base}: {times['base']:.0f} s, this tree: {times['mine']:.0f} s; "
          f"{len(bad)} differ beyond rtol {args.rtol:g}")
    for line in bad[:20]:
        print("  " + line)
    for line in makespan_changes(base, mine, args.rtol):
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
