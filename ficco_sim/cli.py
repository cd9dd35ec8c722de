"""The ``ficco-sim`` command line: parse, call the library, print.

Bad input of any kind ends with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Sequence

from .errors import InputError
from .files import write_text_atomic

EPILOG = """\
examples:
  ficco-sim simulate --gpu h100 --topology switch:8 --scenario ag-gemm --m 16384 --n 8192 --k 8192
  ficco-sim simulate --gpu mi300x --topology fc:8 --scenario gemm-rs --m 8192 --n 8192 --k 4096 --schedule all
  ficco-sim predict gemm --gpu a100 --m 4096 --n 8192 --k 8192
  ficco-sim predict collective --gpu h100 --topology ring:8 --kind all-gather --bytes 64MiB
  ficco-sim list
"""

# Workflow commands live beside their code; each module offers add_<name>_parser(subparsers).
WORKFLOWS = [
    ("ficco_sim.explore.cli", "add_explore_parser"),
    ("ficco_sim.explore.cli", "add_recommend_parser"),
    ("ficco_sim.calibrate.cli", "add_calibrate_parser"),
    ("ficco_sim.validate.cli", "add_validate_parser"),
    ("ficco_sim.traces.cli", "add_trace_parser"),
]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_size(text: str, flag: str) -> int:
    """Bytes from ``123``, ``64KiB``, ``64MiB``, ``1GiB``, ``1.5GB``.

    >>> parse_size("64MiB", "--bytes")
    67108864
    """
    units = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}
    t = text.strip().lower()
    num, unit = t.rstrip("kmgib"), t[len(t.rstrip("kmgib")):]
    try:
        value = float(num) * units[unit]
    except (ValueError, KeyError):
        raise InputError(flag, None, f"{text!r} is not a size (e.g. 4096, 64KiB, 64MiB, 1GiB)") from None
    if not value > 0 or not math.isfinite(value) or value != int(value):
        raise InputError(flag, None, f"must be a positive whole number of bytes, got {text!r}")
    if value > 2 ** 44:
        raise InputError(flag, None, f"{text!r} per rank is beyond any device memory (at most 16 TiB)")
    return int(value)


def positive_int(flag: str):
    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, got {v}")
        return v
    return conv


def output_args(p: argparse.ArgumentParser, table: str = "") -> None:
    """``--format table|csv|json`` and ``--out FILE``, as every command that prints rows takes them."""
    p.add_argument("--format", default="table", choices=["table", "csv", "json"],
                   help=f"table (default{table}), csv or json")
    p.add_argument("--out", "--output", "-o", dest="output", metavar="FILE",
                   help="write it here (atomically) instead of stdout")


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a failure leaves the old file."""
    write_text_atomic(path, text, make_dirs=False)


def emit(rows: list[dict], fmt: str, output: str | None, columns: list[tuple[str, str, float]] | None = None,
         title: str = "") -> None:
    """Print or write rows as a rich table, CSV or JSON. ``columns``: (key, header, scale) for the table."""
    if fmt == "csv":
        import pandas as pd
        text = pd.DataFrame(rows).to_csv(index=False)
    elif fmt == "json":
        text = json.dumps(rows, indent=2, default=float) + "\n"
    else:
        from rich.console import Console
        from rich.table import Table
        table = Table(title=title or None)
        cols = columns or [(k, k, 1.0) for k in rows[0]] if rows else []
        for _, header, _ in cols:
            table.add_column(header, justify="right", no_wrap=True)
        for r in rows:
            cells = []
            for key, _, scale in cols:
                v = r.get(key, "")
                cells.append(f"{v * scale:.3f}" if isinstance(v, float) and math.isfinite(v) else str(v))
            table.add_row(*cells)
        if output:
            console = Console(record=True, width=200, file=open(os.devnull, "w"))
            console.print(table)
            text = console.export_text()
        else:
            console = Console()
            if not console.is_terminal:
                console = Console(width=200)
            console.print(table)
            return
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


# ------------------------------------------------------------------------------------------
# simulate

SIM_COLUMNS = [("schedule", "schedule", 1.0), ("makespan", "time ms", 1e3), ("speedup", "speedup", 1.0),
               ("ideal_speedup", "ideal", 1.0), ("of_ideal", "of ideal", 1.0), ("dil_compute", "DIL comp", 1.0),
               ("cil_compute", "CIL comp", 1.0), ("cil_comm", "CIL comm", 1.0),
               ("exposed_comm", "exposed ms", 1e3)]


def add_scenario_args(p: argparse.ArgumentParser) -> None:
    from .workload import KINDS
    p.add_argument("--scenario", default="ag-gemm", choices=list(KINDS),
                   help="ag-gemm: all-gather A along M then GEMM; gemm-rs: GEMM then reduce-scatter along M; "
                        "a2a-gemm: MoE all-to-all dispatch then expert GEMM; ag-par-gemm / a2a-par-gemm / "
                        "ar-par-gemm: every GPU's whole m x n x k GEMM beside an independent all-gather / "
                        "all-to-all / all-reduce of an m x k tensor (n sets the compute against the bytes) "
                        "(default ag-gemm)")
    p.add_argument("--m", type=positive_int("--m"), default=16384, help="rows of A and C over all GPUs "
                   "(tokens per GPU for a2a-gemm; each GPU's own GEMM rows for the *-par-gemm kinds) "
                   "(default 16384)")
    p.add_argument("--n", type=positive_int("--n"), default=8192, help="columns of B and C per GPU (default 8192)")
    p.add_argument("--k", type=positive_int("--k"), default=8192, help="reduction dimension (default 8192)")
    p.add_argument("--dtype", default="float16", help="float16 | bfloat16 | float32 | tfloat32 | float8 (default float16)")
    p.add_argument("--gpus", type=positive_int("--gpus"), help="GPUs (default: the topology's)")
    p.add_argument("--skew", type=float, default=0.0, help="a2a-gemm: extra share of tokens each GPU sends to one "
                   "peer, its next (0 = uniform; 2 = 3x a normal share; every GPU still receives as many)")
    p.add_argument("--hot-expert", action="store_true", help="with --skew: every GPU's larger share goes to GPU 0 "
                   "(a popular expert: GPU 0's expert GEMM is the largest, the others wait for it)")
    p.add_argument("--shard-dim", default="M", choices=["M", "K"], help="dimension A is sharded along: M (token "
                   "rows, default) or K (ag-gemm weight gradients: tokens are the reduction dimension; "
                   "overlapped schedules then decompose along K, e.g. ficco-a2a-dma-dimK)")


def make_scenario(args, gpus: int):
    from .workload import skewed_routing
    from .workload import scenario_kind
    routing = None
    if args.skew:
        if not scenario_kind(args.scenario, "--scenario").routed:
            raise InputError("--skew", None, f"{args.scenario} takes no routing; --skew is for a2a-gemm")
        if args.skew < 0:
            raise InputError("--skew", None, f"must not be negative, got {args.skew}")
        routing = skewed_routing(gpus, args.m, args.skew, hot_expert=args.hot_expert)
    elif args.hot_expert:
        raise InputError("--hot-expert", None, "sets where --skew's larger share goes: give --skew too")
    from .workload import scenario_from_flags
    return scenario_from_flags(args.scenario, gpus, args.m, args.n, args.k, args.dtype, routing=routing,
                               shard_dim=getattr(args, "shard_dim", "M"))


def resolve_topology(args):
    from .hardware import load_gpu
    from .topology import load_topology
    gpu = load_gpu(args.gpu)
    spec = args.topology or f"switch:{args.gpus or 8}"
    topo = load_topology(spec, gpu)
    if args.gpus and args.gpus != topo.num_gpus:
        raise InputError("--gpus", None, f"{args.gpus} GPUs but topology {topo.name} has {topo.num_gpus}")
    return gpu, topo


def cmd_simulate(args) -> int:
    from .schedules.selection import schedule_names, select_schedules
    from .simulate import simulate_many
    gpu, topo = resolve_topology(args)
    scenario = make_scenario(args, topo.num_gpus)
    from .files import check_output
    for flag, path in (("--trace", args.trace), ("--gantt", args.gantt), ("--output", args.output)):
        check_output(path, flag, figure=flag == "--gantt")       # say so before simulating, not after
    names = schedule_names(args.schedule)
    schedules, left_out = select_schedules(names, scenario, gpu, topo)
    results = simulate_many(scenario, schedules, gpu, topo, engine=args.engine, policy=args.policy)
    if names and "none" not in names and "all" not in names and "presets" not in names:
        results = results[1:]
    if args.trace or args.gantt:
        from .traces.export import write_chrome_trace, write_gantt
        best = min(results, key=lambda r: r.makespan)
        if args.trace:
            write_chrome_trace(best.timeline, args.trace, best.graph)
        if args.gantt:
            write_gantt(best.timeline, args.gantt, title=f"{best.schedule.name}: {scenario.label()} on {gpu.name} "
                        f"{topo.name}")
    title = f"{scenario.label()} on {gpu.name} {topo.name} ({args.engine})"
    rows = [dict(r.row(), preset=r.preset) for r in results]
    if args.format == "table":      # a table names a preset beside its schedule; csv / json keep the
        for row in rows:            # schedule's own name (the preset has its column)
            if row["preset"]:
                row["schedule"] = f"{row['preset']} = {row['schedule']}"
    emit(rows, args.format, args.output, SIM_COLUMNS, title)
    if args.format == "table" and not args.output:
        print(legend(rows))
    if left_out:
        print(f"left out: {'; '.join(left_out)}", file=sys.stderr)
    return 0


def legend(rows: list[dict]) -> str:
    """What the table's columns mean, and why a value may be negative."""
    lines = ["speedup: none's time / this time. ideal: (compute + comm) / max(compute, comm), both isolated. "
             "of ideal: share of the ideal gain reached, (t_none - t) / (t_none - t_ideal).",
             "DIL comp: extra GEMM time from how the schedule runs it, alone: cut into pieces, shaped with "
             "extra shared memory or kept off SMs (sum of its kernels' isolated times / the whole GEMM's - 1). "
             "CIL: slowdown of GEMM pieces / transfers from running together (overlapped / isolated - 1). "
             "exposed: time with no GEMM running."]
    if any(r.get("of_ideal", 0) < 0 for r in rows):
        lines.append("A negative 'of ideal' is a schedule slower than no overlap: -1 means it lost as much as "
                     "the ideal would have gained.")
    if any(r.get("of_ideal", 0) > 1 for r in rows):
        lines.append("An 'of ideal' above 1: the ideal is none's, with its collective as the library runs it (NCCL "
                     "on SMs); this schedule's own transfers alone (copy engines, direct copies) are faster than "
                     "that collective, so it can pass it.")
    time = {r["schedule"]: r.get("makespan") for r in rows}
    if any(time.get(n.replace("-hi", "", 1)) == t for n, t in time.items() if "-hi" in n):
        lines.append("A '-hi' schedule as fast as its twin: the priority changed nothing here (the next GEMM "
                     "piece, queued on its stream, reaches the SMs before a collective its event wakes, and keeps "
                     "them while its tiles last if persistent, or while a retiring block leaves no room for one).")
    if any(min(r.get("cil_compute", 0), r.get("cil_comm", 0)) < 0 for r in rows):
        lines.append("A negative CIL: the overlapped pieces or transfers ran faster than the same ones alone, "
                     "e.g. a transfer alone pays a latency that, overlapped, is hidden behind another one.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# predict

def cmd_predict(args) -> int:
    from .simulate import collective_time
    if args.what == "gemm":
        from .gemm_model import describe
        from .hardware import load_gpu
        row = describe(load_gpu(args.gpu), args.m, args.n, args.k, args.dtype)
        cols = [("gpu", "gpu", 1), ("time_s", "time ms", 1e3), ("source", "time from", 1), ("tflops", "TFLOP/s", 1),
                ("tile", "tile", 1), ("blocks", "blocks", 1), ("blocks_per_sm", "blocks/SM", 1), ("waves", "waves", 1),
                ("kernel", "kernel", 1), ("math_s", "math ms", 1e3), ("hbm_s", "HBM ms", 1e3), ("bound", "bound", 1)]
    else:
        gpu, topo = resolve_topology(args)
        nbytes = parse_size(args.bytes, "--bytes")
        if nbytes % 2:      # the collective moves float16 elements (as 3 B, less than one a piece, is refused)
            raise InputError("--bytes", None, f"{nbytes} B per rank is not a whole number of float16 elements "
                             "(2 B each)")
        t = collective_time(gpu, topo, args.kind, nbytes, engine=args.comm_engine, algorithm=args.algorithm,
                            sim=args.engine, gpus_per_thread=args.gpus_per_thread, tuner=args.tuner)
        from .schedules.collectives import pick_algorithm
        from .simulate import bus_bandwidth, nccl_tests_size
        algo = pick_algorithm(args.algorithm, args.kind, topo.kind, args.comm_engine, gpus=topo.num_gpus,
                              spec=gpu.comm_kernel, nbytes=nbytes)
        size = nccl_tests_size(args.kind, nbytes, topo.num_gpus)
        alg, bus = bus_bandwidth(args.kind, size, topo.num_gpus, t)
        from .simulate import collective_tuning
        proto, channels = collective_tuning(gpu, topo, args.kind, nbytes, engine=args.comm_engine,
                                            algorithm=args.algorithm, tuner=args.tuner)
        row = {"gpu": gpu.name, "topology": topo.name, "kind": args.kind, "bytes": nbytes, "nccl_tests_size": size,
               "engine": args.comm_engine, "algorithm": algo, "protocol": proto, "channels": channels, "time_s": t,
               "algbw_gbps": alg / 1e9, "busbw_gbps": bus / 1e9}
        cols = [("kind", "collective", 1), ("topology", "topology", 1), ("bytes", "bytes/rank", 1),
                ("nccl_tests_size", "nccl-tests size", 1), ("engine", "engine", 1), ("algorithm", "algorithm", 1),
                ("protocol", "protocol", 1), ("channels", "channels", 1), ("time_s", "time us", 1e6),
                ("algbw_gbps", "algbw GB/s", 1), ("busbw_gbps", "busbw GB/s", 1)]
    emit([row], args.format, args.output, cols)
    return 0


# ------------------------------------------------------------------------------------------
# list

def cmd_list(args) -> int:
    from .hardware import available_profiles, load_gpu
    from .schedules import basic_schedules
    from .topology import available_topologies
    print("GPU profiles (hw_profiles/; [GEMM kernels, block dispatch]):")
    for name in available_profiles():
        try:
            g = load_gpu(name)
            print(f"  {name:10s} {g.description} [{'persistent' if g.gemm.persistent else 'waves'}, {g.dispatch}]")
        except InputError as exc:
            print(f"  {name:10s} (invalid: {exc.line()})")
    print("topologies: " + ", ".join(available_topologies()))
    from .workload import KINDS, Scenario
    dep, ind = ([k for k, v in KINDS.items() if bool(v.independent) == want] for want in (False, True))
    print("scenarios:  " + ", ".join(dep) + " (the GEMM consumes or produces the collective's data)")
    print("            " + ", ".join(ind) + " (a GEMM beside an independent collective)")
    print("schedules (--schedule all): " + ", ".join(s.name for s in basic_schedules()))
    par = Scenario(ind[0], 2, 2, 2, 2)
    print("  for " + ", ".join(ind) + ": " + ", ".join(s.name for s in basic_schedules(par)))
    print("  name grammar: none[-dma] | {shard|ficco}-{p2p|a2a}-{sm|dma}[-hi][-smem<N>k][-g<N>][-dimK][-c<N>][-m<N>]"
          " | par-{sm|dma}[-hi][-smem<N>k][-c<N>][-m<N>][-gf|-mix]")
    print("  (hi: high-priority communication; smem: shared-memory shaping; g: steps per GEMM piece; c: channels (dma: engines);"
          " m: an SM margin, GEMMs off the last N SMs; gf: every GPU's GEMM issued first; mix: the odd GPUs')")
    print("  fused-{sm|dma|st}[-hi][-c<N>][-m<N>] (gemm-rs): one GEMM, each peer's rows leave on their tile signal; "
          "st: from the GEMM's own epilogue; fused-dma (ag-gemm): one GEMM, each peer's band of tiles run once copy "
          "engines bring its rows")
    from .schedules.presets import PRESETS
    print("presets (usable wherever a schedule name is; knobs as name:knob=N,knob=N; --schedule presets runs "
          "every one that applies):")
    for p in PRESETS.values():
        knobs = ", ".join(f"{k.name}={k.default}" for k in p.knobs)
        print(f"  {p.name:17s} {p.library}: {p.summary}" + (f" [{knobs}]" if knobs else ""))
    return 0


def cmd_formats(args) -> int:
    """Print the YAML formats users write (profile, topology, scenarios), each with an example."""
    from .explore.library import YAML_HELP as SCENARIO_HELP
    from .hardware import PROFILE_DIR, read_yaml
    from .hardware import MEASURED_HELP
    from .hardware import YAML_HELP as PROFILE_HELP
    from .topology import YAML_HELP as TOPOLOGY_HELP
    parts = [args.what] if args.what else ["profile", "topology", "scenario"]
    for part in parts:
        if part == "profile":
            print("# GPU profile\n" + PROFILE_HELP)
            path = PROFILE_DIR / "h100.yaml"
            for line in _profile_outline(read_yaml(path)):
                print("  " + line)
            print(f"\nThe whole file, every source included: {path}\n\n{MEASURED_HELP}")
            print("A CPU replay's profile (ficco-sim calibrate --device cpu writes one for this host; "
                  "hw_profiles/cpu.yaml)\nadds a host section: the cores every rank shares, the core time a "
                  "transfer costs per byte,\nwhat posting a message costs the issuing thread, and the ranks' start spread:\n")
            for line in _profile_outline({"host": read_yaml(PROFILE_DIR / "cpu.yaml")["host"]}):
                print("  " + line)
            print()
        elif part == "topology":
            print("# Topology\n" + TOPOLOGY_HELP)
        else:
            print("# Scenarios (explore --scenarios FILE)\n" + SCENARIO_HELP)
    return 0


def _profile_outline(data, indent: int = 0) -> list[str]:
    """The keys of a profile with their values, sources left out (the file has them)."""
    out = []
    for key, v in data.items():
        pad = "  " * indent
        if isinstance(v, dict) and "value" in v:
            out.append(f"{pad}{key}: {{value: {v['value']}, kind: {v.get('kind')}, source: ...}}")
        elif isinstance(v, dict):
            out.append(f"{pad}{key}:")
            out += _profile_outline(v, indent + 1)
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out.append(f"{pad}{key}:   # a list, e.g. its first item:")
            first = _profile_outline(v[0], indent + 2)
            out += [f"{pad}  - {first[0].strip()}"] + first[1:]
        else:
            out.append(f"{pad}{key}: {v}")
    return out


# ------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ficco-sim", description="Predict how fast multi-GPU compute-communication overlap runs: "
                "SMs, shared memory, DMA engines, stream priorities and links, simulated.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("simulate", help="time one scenario under overlap schedules",
                       description="Simulate one communication + GEMM pair (data-dependent, or a GEMM beside "
                       "an independent collective: the *-par-gemm kinds) under each schedule and print its time, "
                       "speedup over no overlap, the ideal speedup and the losses.")
    s.add_argument("--gpu", default="h100", help="profile name (see `ficco-sim list`) or YAML path (default h100); "
                   "h100:sustained / h200:sustained: GEMMs at the rate a steady stream of them keeps (clock lowered)")
    s.add_argument("--topology", help="ring:N | fc:N | switch:N | name | YAML path (default switch:8)")
    add_scenario_args(s)
    s.add_argument("--schedule", action="append", default=[], metavar="NAME|PRESET|all|presets",
                   help="schedule name(s) or presets, comma-separated or repeated, e.g. ficco-a2a-dma-hi, "
                   "par-sm-hi-m16, te-pipeline:num_splits=8,num_sm=8, flux (default all: the basic schedules; "
                   "presets: every preset that applies; the grammar and the presets: `ficco-sim list`)")
    s.add_argument("--engine", default="des", choices=["des", "analytical"], help="discrete-event (default) or "
                   "closed-form")
    s.add_argument("--policy", default=None, choices=["backfill", "strict", "fifo"],
                   help="block dispatcher policy (default: the profile's `dispatch`; strict on H100/H200, measured)")
    output_args(s)
    s.add_argument("--trace", help="also write the fastest schedule's timeline as Chrome/Perfetto JSON")
    s.add_argument("--gantt", help="also draw the fastest schedule's timeline as a Gantt chart (PNG)")
    s.set_defaults(func=cmd_simulate)

    pr = sub.add_parser("predict", help="isolated time of one GEMM or one collective")
    psub = pr.add_subparsers(dest="what", metavar="WHAT", required=True, parser_class=_Parser)
    g = psub.add_parser("gemm", help="C[m,n] = A[m,k] @ B[k,n] alone on one GPU")
    g.add_argument("--gpu", default="h100", help="profile name or YAML path (default h100; h200:sustained: steady)")
    g.add_argument("--m", type=positive_int("--m"), required=True, help="rows of A and C")
    g.add_argument("--n", type=positive_int("--n"), required=True, help="columns of B and C")
    g.add_argument("--k", type=positive_int("--k"), required=True, help="the reduced dimension")
    g.add_argument("--dtype", default="float16", help="float16 (default) | bfloat16 | float32 | tfloat32 | float8")
    c = psub.add_parser("collective", help="one collective alone over every GPU of a topology")
    c.add_argument("--gpu", default="h100", help="profile name or YAML path (default h100)")
    c.add_argument("--topology", help="ring:N | fc:N | switch:N | name | YAML path (default switch:8)")
    c.add_argument("--gpus", type=positive_int("--gpus"), help="GPUs of switch:N when no --topology is given")
    c.add_argument("--kind", required=True, choices=["all-gather", "reduce-scatter", "all-reduce", "all-to-all",
                                                       "send-recv"],
                   help="the collective; all-to-all and send-recv are grouped point-to-point calls, each send on the "
                   "channels NCCL's p2p rule gives it (comm_kernel.p2p: 32 / ranks to start, more for parts over "
                   "16 MiB)")
    c.add_argument("--bytes", required=True, help="per-rank buffer: the shard for all-gather, the full input for "
                   "reduce-scatter/all-reduce, the send buffer for all-to-all, the message for send-recv "
                   "(e.g. 64MiB)")
    c.add_argument("--comm-engine", default="sm", choices=["sm", "dma"],
                   help="SM kernels (default, as NCCL/RCCL) or copy engines (a reduce-scatter or all-reduce: "
                        "the copies, then a reduction kernel on SMs adds what arrived)")
    c.add_argument("--algorithm", default="auto", choices=["auto", "ring", "direct", "nvls"],
                   help="auto (default: as NCCL/RCCL would on this topology and GPU count), ring, direct, or nvls "
                   "(all-reduce reduced and multicast by the switch: NVLink SHARP on H100/H200 NVSwitch)")
    c.add_argument("--engine", default="des", choices=["des", "analytical"],
                   help="discrete-event (default) or closed-form")
    c.add_argument("--gpus-per-thread", type=positive_int("--gpus-per-thread"), default=1,
                   help="GPUs one host thread drives, as nccl-tests' -g (its header's nGpus); default 1: a process "
                   "per GPU, as torchrun and mpirun -np N -g 1 run. One thread issues their kernels one after "
                   "another: each more GPU adds comm_kernel.issue_us to a call")
    c.add_argument("--tuner", choices=["call", "rank"],
                   help="the size NCCL's tuner picks an all-gather's or reduce-scatter's protocol and channels on: "
                   "call (NCCL 2.22 and later) or rank (one rank's share: earlier NCCL, e.g. PyTorch 2.6's pinned "
                   "2.21.5); default: the profile's comm_kernel.tuner")
    for q in (g, c):
        output_args(q)
    pr.set_defaults(func=cmd_predict)

    lst = sub.add_parser("list", help="profiles, topologies, scenarios and schedules")
    lst.set_defaults(func=cmd_list)

    fm = sub.add_parser("formats", help="the profile, topology and scenario YAML formats, with examples")
    fm.add_argument("what", nargs="?", choices=["profile", "topology", "scenario"],
                    help="one format only (default: all three)")
    fm.set_defaults(func=cmd_formats)

    for module, fn in WORKFLOWS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue   # that workflow is not part of this build
            raise
        if hasattr(mod, fn):
            getattr(mod, fn)(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:   # --help (0) or a usage error (2, already printed on one line)
            return int(exc.code or 0)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        return int(args.func(args) or 0)
    except InputError as exc:
        sys.stderr.write(f"ficco-sim: error: {exc.line()}\n")
        return 2
    except KeyboardInterrupt as exc:
        sys.stderr.write(f"ficco-sim: interrupted{': ' + str(exc) if str(exc) else ''}\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:       # disk full, I/O error, permission: the file, the reason, nothing half-written
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"ficco-sim: error: {where}{exc.strerror or exc}\n")
        return 2


def entry() -> None:
    """The ``ficco-sim`` command: :func:`main`, then exit without letting a late Ctrl-C (one that
    arrives while the interpreter shuts down, after the work is done and written) print a traceback."""
    code = main()
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    entry()
