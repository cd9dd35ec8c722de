"""``ficco-sim explore`` and ``ficco-sim recommend``: argparse hooks. The lead's
``ficco_sim/cli.py`` calls :func:`add_explore_parser` and :func:`add_recommend_parser`;
each handler (``args.func``) parses, calls the library, prints, returns an exit code."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ..errors import InputError

EXPLORE_HELP = """\
Sweep overlap schedules over scenarios, GPUs and topologies; report per scenario the best
schedule, its speedup over no overlap, the ideal speedup (serial / max(compute, comm)),
the share of the ideal gain reached, and where the rest went: dil_compute (decomposition
loss), cil_compute / cil_comm (contention losses), exposed_comm (time with no GEMM running).

With no arguments: the built-in default study (12 Llama-3-70B / Mixtral-8x7B / GPT-3 layers
on 8 GPUs, H100 behind NVSwitch vs MI300X fully connected). By default every valid schedule of
the full space (grouping, channels, priority, shared memory, shard dimension) is ranked by the
closed-form engine and the 5 fastest of each scenario, with `none`, are confirmed by the
discrete-event engine, which gives the answer (--engine confirm, --space full).

Output (--out DIR): points.jsonl (append-only resume log: a JSON record, a tab and its
checksum per line; ficco_sim.explore.sweep.read_points reads it, pandas reads points.csv), points.csv,
summary.csv (best per scenario, with the space and engine that found it), models.csv (per
model: its pairs summed, none vs best), + .parquet with pyarrow, invalid.csv (--show-invalid),
PNG plots (--plots).
Re-running into the same DIR resumes: a point is known by the scenario's content (kind, sizes,
dtype, GPUs, routing, shard dimension; `scenario_id` in the tables), the content of the GPU
profile and topology, the schedule and the engine, so edits are never answered from the log.
Ctrl-C stops at once and keeps every finished point; one sweep writes into a DIR at a time.

examples:
  ficco-sim explore
  ficco-sim explore --gpu mi300x --topology fc:8 --topology switch:8 --scenarios builtin --engine analytical --space full
  ficco-sim explore --scenarios my_layers.yaml --jobs 8 --out study/ --plots
  ficco-sim explore --space presets --out presets/       (the libraries side by side on each layer)
  ficco-sim explore --fit-heuristics
"""

RECOMMEND_HELP = """\
Pick a schedule from operator sizes alone, in milliseconds, and say why: the closed-form engine
predicts every candidate with contention weights and a margin fitted against the discrete-event
optimum. The candidates, decomposed along --shard-dim: no overlap; shard-level p2p and a2a and
FiCCO a2a on SMs (normal and high priority) and on copy engines, FiCCO at every compute
grouping; for GEMM -> reduce-scatter the fused kernel (each tile sent as it is done, by an SM
kernel or a copy engine), for all-gather -> GEMM the fused one (each band of tiles run as copy
engines bring its rows, Flux's all-gather GEMM); a GEMM beside an independent collective: side by side on SMs (normal
and high priority; alone, with the GEMM shaped by extra shared memory per block, or kept off the
SMs the collective needs) or on copy engines. Channel counts and fused-st are not candidates, nor
shaping and SM margins of the dependent schedules (with them the DES's best gains under 5% in
every library case): `ficco-sim explore --space full` searches them all.

examples:
  ficco-sim recommend --gpu mi300x --topology fc:8 --scenario ag-gemm --m 16384 --n 8192 --k 8192
  ficco-sim recommend --gpu a100 --scenario ar-par-gemm --m 4096 --n 4096 --k 4096 --gemm-first
"""


def add_explore_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``explore``; its handler is ``args.func``."""
    p = subparsers.add_parser("explore", help="sweep schedules over scenarios, GPUs and topologies",
                              description=EXPLORE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", action="append", default=[], help="GPU profile (repeat to pair with --topology; "
                   "default: the default study's h100 and mi300x)")
    p.add_argument("--topology", action="append", default=[], help="topology, e.g. switch:8, fc:8 (repeatable; "
                   "default: switch:8 for h100, fc:8 for mi300x)")
    p.add_argument("--scenarios", default=None, help="'builtin' (model-layer library) or a YAML file; "
                   "default: the default study's dozen layers")
    p.add_argument("--engine", default="confirm", choices=["confirm", "des", "analytical"],
                   help="confirm (default: the closed form ranks every schedule, the discrete-event engine "
                        "confirms the --top fastest per scenario and answers), des (discrete-event on every "
                        "point, the reference; slow on the full space) or analytical (closed form only: every "
                        "scenario of one structure in one vector evaluation, for wide sweeps)")
    p.add_argument("--space", default="full", choices=["basic", "full", "presets"],
                   help="full (default: grouping, channels, priority, smem, shard dimension, fused kernels), "
                   "basic schedules, or presets: what NCCL, async-TP, TransformerEngine, Flux, ConCCL, FiCCO and Cui & Pericas "
                   "run on each layer, side by side (every one confirmed by the DES; presets.csv, "
                   "presets_models.csv)")
    p.add_argument("--top", type=int, default=5, metavar="K",
                   help="--engine confirm: schedules per scenario the DES confirms (default 5)")
    p.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                   help="local worker processes (default: the CPU count, at most 8)")
    p.add_argument("--ray", nargs="?", const=True, default=False, metavar="ADDRESS",
                   help="run on Ray (local, or the cluster at ADDRESS); needs ficco-sim[ray]")
    p.add_argument("--out", "-o", default=None, help="output folder (resumable; default: none, print only)")
    p.add_argument("--plots", action="store_true", help="write PNG plots to --out (default explore_out/)")
    p.add_argument("--show-invalid", action="store_true", help="list invalid schedule points with reasons")
    p.add_argument("--fit-heuristics", nargs="?", const="", default=None, metavar="FILE",
                   help="fit the recommend knobs against the DES optimum table (validation/heuristic/) "
                   "and write them with the date and the accuracy on held-out model families")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_explore)
    return p


def add_recommend_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``recommend``; its handler is ``args.func``."""
    p = subparsers.add_parser("recommend", help="pick a schedule from sizes alone, and say why",
                              description=RECOMMEND_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", default="h100", help="profile name or YAML path (default h100)")
    p.add_argument("--topology", default=None, help="default switch:<gpus>")
    from ..workload import KINDS
    p.add_argument("--scenario", required=True, choices=list(KINDS), help="the scenario kind")
    p.add_argument("--m", type=int, required=True, help="rows of the GEMM (tokens)")
    p.add_argument("--n", type=int, required=True, help="columns of the GEMM")
    p.add_argument("--k", type=int, required=True, help="the reduced dimension")
    p.add_argument("--gpus", type=int, default=None, help="GPUs (default: the topology's, else 8)")
    p.add_argument("--dtype", default="float16", help="element type (default float16, as simulate)")
    p.add_argument("--shard-dim", default="M", choices=["M", "K"],
                   help="ag-gemm: M (default) or K (weight gradients: tokens are K)")
    p.add_argument("--skew", type=float, default=0.0, help="a2a-gemm: as simulate --skew (uneven routing)")
    p.add_argument("--hot-expert", action="store_true", help="with --skew: as simulate --hot-expert (GPU 0 popular)")
    p.add_argument("--heuristics", default=None, help="thresholds file (default: the shipped one)")
    p.add_argument("--gemm-first", action="store_true",
                   help="*-par-gemm: the GEMM is already running when the collective is issued (e.g. DDP's "
                        "gradient all-reduce fired during backward compute); the side-by-side candidates and "
                        "presets issue it first (-gf), where occupancy shaping and SM margins decide whether the "
                        "collective gets SMs at all. Default: the collective is issued first")
    from ..cli import output_args
    output_args(p, ": the pick and why; csv / json: a row per candidate the pick was made among and per preset "
                "(kind, name, schedule, picked, makespan, speedup, losses, reason)")
    p.set_defaults(func=run_recommend)
    return p


def run_explore(args: argparse.Namespace) -> int:
    import contextlib
    import sys
    from rich.console import Console
    from ..files import folder_lock
    from .library import load_scenarios
    from .study import default_pairs, default_scenarios, run_study, write_tables
    con = Console(width=None if sys.stdout.isatty() else 160)
    if args.fit_heuristics is not None:
        from .heuristics import THRESHOLDS_FILE, fit_and_save
        path = Path(args.fit_heuristics or THRESHOLDS_FILE)
        doc = fit_and_save(path)
        ho = doc["held_out"]
        con.print(f"wrote {path}: knobs {doc['thresholds']}")
        con.print(f"against the DES optimum, model families held out: top-1 {ho['top1']:.0%} (with ties within 1%: "
                  f"{ho['top1_ties']:.0%}), within 5% {ho['within5']:.0%} of {ho['cases']} cases")
        return 0
    t0 = time.perf_counter()
    scenarios = default_scenarios() if args.scenarios is None else load_scenarios(args.scenarios)
    pairs = default_pairs(args.gpu, args.topology)
    if args.scenarios is None and not args.gpu and not args.topology:
        how = {"confirm": "run by the discrete-event engine" if args.space == "presets" else
                          f"ranked by the closed form, the {args.top} fastest per scenario confirmed by the "
                          "discrete-event engine",
               "des": "run by the discrete-event engine", "analytical": "run by the closed form"}[args.engine]
        con.print("[bold]Default study[/]: 12 layers of Llama-3-70B, Mixtral-8x7B and GPT-3 on 8 GPUs, "
                  f"H100 + NVSwitch vs MI300X fully connected; every valid schedule of the {args.space} space "
                  f"{how}.")
    out = Path(args.out) if args.out else (Path("explore_out") if args.plots else None)
    with folder_lock(out, "an explore sweep") if out is not None else contextlib.nullcontext():
        if args.top < 1:
            raise InputError("--top", None, f"must be at least 1, got {args.top}")
        points, summary = run_study(scenarios, pairs, engine=args.engine, space=args.space, workers=args.jobs,
                                    ray=args.ray, out=out, progress=not args.quiet, top=args.top)
        for note in points.attrs.get("notes", []):
            con.print(f"[yellow]topology[/]: {note}")
        _print_summary(con, summary, points)
        _print_models(con, summary, args)
        extra = _print_presets(con, points, scenarios) if args.space == "presets" else []
        if args.show_invalid and points.attrs.get("invalid"):
            _print_invalid(con, points.attrs.get("invalid", []))
        if out is not None:
            files = write_tables(points, summary, out,
                                 invalid=points.attrs.get("invalid") if args.show_invalid else None, extra=extra)
            if args.plots:
                from .plots import write_plots
                files += write_plots(points, summary, out)
            con.print(f"wrote {', '.join(str(f) for f in files)}")
    con.print(f"{len(points)} points in {time.perf_counter() - t0:.1f} s")
    return 0


def _print_models(con, summary, args) -> None:
    from rich.table import Table
    from .study import model_totals
    totals = model_totals(summary)
    if not totals.empty:
        t = Table(title="Per model: the study's pairs of each model summed (forward and backward), "
                        "best schedule per pair")
        for col in ("gpu / topology", "model", "tokens", "GPUs", "pairs", "none ms", "best ms", "speedup"):
            t.add_column(col, justify="left" if col in ("gpu / topology", "model") else "right")
        for _, r in totals.iterrows():
            t.add_row(f"{r.gpu} {r.topology}", str(r.model), str(r.tokens), str(r.gpus), str(r.pairs),
                      f"{r.t_none * 1e3:.3f}", f"{r.t_best * 1e3:.3f}", f"{r.speedup:.2f}x")
        con.print(t)
    if args.space == "presets":
        con.print(f"[yellow]These are the best of the libraries' presets[/] ({args.engine} engine, every preset "
                  "run by the DES with --engine confirm); `--space full` searches every schedule.")
    elif args.space != "full":
        con.print(f"[yellow]These are the best of the {args.space} schedules[/] ({args.engine} engine); "
                  "`--space full` also tries grouping, channels, priority, shaping and dimension (finer "
                  "schedules can win where basic ones lose), `--engine analytical` makes that sweep fast.")
    elif args.engine == "confirm":
        con.print(f"Best of the full schedule space: every valid schedule ranked by the closed form, the "
                  f"{args.top} fastest per scenario (and none) run by the discrete-event engine, which gives "
                  "every number above.")
    else:
        con.print(f"Best of the full schedule space ({args.engine} engine).")


def _print_presets(con, points, scenarios) -> list:
    """The presets side by side per layer and per model; returns the tables to write."""
    from rich.table import Table
    from .preset_table import preset_models, preset_rows, preset_wide
    long = preset_rows(points, scenarios)
    wide = preset_wide(long)
    if wide.empty:
        return []
    names = [c for c in wide.columns if c not in ("gpu", "topology", "scenario")]
    t = Table(title="Presets side by side: speedup over no overlap per layer (-: does not apply, see presets.csv)")
    for col in ["gpu / topology", "scenario"] + names:
        t.add_column(col, justify="left" if col in ("gpu / topology", "scenario") else "right")
    for _, r in wide.iterrows():
        t.add_row(f"{r.gpu} {r.topology}", r.scenario, *[f"{r[n]:.2f}x" if r[n] == r[n] else "-" for n in names])
    con.print(t)
    models = preset_models(long)
    if len(models):
        m = models.pivot_table(index=["gpu", "topology", "model", "tokens"], columns="preset", values="speedup",
                               sort=False).reset_index()
        t = Table(title="Presets per model (layers summed; a layer a preset does not apply to runs without overlap)")
        for col in ["gpu / topology", "model", "tokens"] + [n for n in names if n in m.columns]:
            t.add_column(col, justify="left" if col in ("gpu / topology", "model") else "right")
        for _, r in m.iterrows():
            t.add_row(f"{r.gpu} {r.topology}", str(r.model), str(r.tokens),
                      *[f"{r[n]:.2f}x" for n in names if n in m.columns])
        con.print(t)
    return [("presets", long), ("presets_models", models)]


def _print_summary(con, summary, points) -> None:
    from rich.table import Table
    t = Table(title="Best schedule per scenario (speedup over no overlap; losses of the best schedule)")
    for col in ("gpu / topology", "scenario", "best", "speedup", "ideal", "of ideal", "DIL", "CIL comp",
                "CIL comm", "exposed ms", "none ms"):
        t.add_column(col, justify="left" if col in ("gpu / topology", "scenario", "best") else "right")
    for _, r in summary.iterrows():
        t.add_row(f"{r.gpu} {r.topology}", r.scenario, r.best, f"{r.speedup:.2f}x", f"{r.ideal_speedup:.2f}x",
                  f"{max(0.0, r.of_ideal):.0%}" if r.of_ideal == r.of_ideal else "-", f"{r.dil_compute:.0%}",
                  f"{r.cil_compute:.0%}", f"{r.cil_comm:.0%}", f"{r.exposed_comm * 1e3:.3f}", f"{r.t_none * 1e3:.3f}")
    con.print(t)
    con.print("speedup: none's time / best time. ideal: (compute + comm) / max(compute, comm), isolated. "
              "of ideal: share of that gain reached. DIL: extra GEMM time from how the schedule runs it, "
              "alone (pieces, shaping, SM margins); "
              "CIL: slowdown of GEMM pieces / transfers by running together; exposed: time with no GEMM running.")
    bad = points[points["status"] != "ok"] if "status" in points else points.iloc[:0]
    if len(bad):
        con.print(f"[yellow]{len(bad)} points did not run[/] (status invalid/error; see points.csv 'reason'): "
                  f"{bad['reason'].iloc[0]}")


def _print_invalid(con, invalid: list[dict]) -> None:
    from collections import Counter
    from rich.table import Table
    t = Table(title=f"Invalid schedule points ({len(invalid)}), by reason")
    t.add_column("points", justify="right")
    t.add_column("reason")
    t.add_column("example")
    ex: dict = {}
    for r in invalid:
        ex.setdefault(r["reason"], r["schedule"])
    for reason, n in Counter(r["reason"] for r in invalid).most_common():
        t.add_row(str(n), reason, ex[reason])
    con.print(t)


def run_recommend(args: argparse.Namespace) -> int:
    import sys
    from rich.console import Console
    from .heuristics import load_heuristic, preset_lines, recommend
    con = Console(width=None if sys.stdout.isatty() else 200)     # piped: a line per reason, unwrapped
    from ..topology import load_topology
    topo = args.topology or f"switch:{args.gpus or 8}"
    gpus = load_topology(topo, args.gpu).num_gpus
    if args.gpus is not None and args.gpus != gpus:
        raise InputError("--gpus", None, f"{args.gpus} GPUs but topology {topo} has {gpus}")
    from ..cli import make_scenario      # the one reading of the scenario flags (sizes, skew, hot expert)
    sc = make_scenario(args, gpus)
    h = load_heuristic(args.heuristics) if args.heuristics else load_heuristic()
    t0 = time.perf_counter()
    rec = recommend(sc, args.gpu, topo, h, gemm_first=args.gemm_first)
    ms = (time.perf_counter() - t0) * 1e3
    from ..cli import emit, write_atomic
    if args.format != "table":
        emit(recommend_rows(rec), args.format, args.output)
        return 0
    if args.output:     # the same text, to a file
        import io
        con = Console(record=True, width=200, file=io.StringIO())
    con.print(f"[bold]{rec['schedule']}[/] for {sc.label()} on {args.gpu} {topo}")
    for w in rec["reasons"]:
        con.print(f"  - {w}")
    des = (f"ficco-sim simulate --gpu {args.gpu} --topology {topo} --scenario {args.scenario} --m {args.m} "
           f"--n {args.n} --k {args.k} --dtype {args.dtype}"
           + (f" --shard-dim {args.shard_dim}" if args.shard_dim != "M" else "")
           + (f" --skew {args.skew:g}" if args.skew else "") + (" --hot-expert" if args.hot_expert else "")
           + f" --schedule {rec['schedule']}" + (",none" if rec["schedule"] != "none" else ""))
    con.print(f"  no overlap {rec['t_none'] * 1e3:.3f} ms (closed-form engine); decided in {ms:.0f} ms; the "
              f"discrete-event reference: {des}", highlight=False, soft_wrap=True)
    con.print("[bold]in the libraries' terms[/] (presets at their defaults; `ficco-sim list`):")
    for line in preset_lines(rec["presets"]):
        con.print(f"  - {line}", highlight=False)
    if args.output:
        write_atomic(args.output, con.export_text())
    return 0


METRICS = ("makespan", "speedup", "of_ideal", "dil_compute", "cil_compute", "cil_comm", "exposed_comm")


def recommend_rows(rec: dict) -> list[dict]:
    """``recommend``'s answer as rows: every candidate it chose among (closed form, the profile's
    contention rule, the numbers the table shows; ``picked`` the pick, with its reasons) and every
    preset at its defaults (``picked`` where it maps to the pick; where one does not apply, ``reason``
    says why)."""
    base = {k: rec["rows"][0][k] for k in ("scenario", "gpu", "topology")} if rec["rows"] else {}
    rows = [{**base, "kind": "candidate", "name": r["schedule"], "schedule": r["schedule"],
             "picked": r["schedule"] == rec["schedule"], **{k: r.get(k) for k in METRICS},
             "reason": "; ".join(rec["reasons"]) if r["schedule"] == rec["schedule"] else ""}
            for r in sorted(rec["rows"], key=lambda r: r["makespan"])]
    for p in rec["presets"]:
        m = p.get("metrics", {})
        rows.append({**base, "kind": "preset", "name": p["preset"], "schedule": p.get("schedule", ""),
                     "picked": p.get("schedule") == rec["schedule"], **{k: m.get(k) for k in METRICS},
                     "reason": p.get("reason", "")})
    return rows


def main(argv=None) -> int:
    """Stand-alone entry (``python -m ficco_sim.explore.cli explore ...``) until the lead wires the CLI."""
    import sys
    p = argparse.ArgumentParser(prog="ficco-sim")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_explore_parser(sub)
    add_recommend_parser(sub)
    args = p.parse_args(argv)
    try:
        return args.func(args)
    except InputError as e:
        print(f"ficco-sim: error: {e.line()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
