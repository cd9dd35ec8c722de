"""``ficco-sim trace``: import, replay, what-if and export of measured traces.

Thin: parse, call :mod:`ficco_sim.traces`, print. ``add_trace_parser(subparsers)`` is
what :mod:`ficco_sim.cli` calls; ``python -m ficco_sim.traces.cli`` runs it alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import InputError


HELP = """\
Trace-driven simulation. Give one trace file per rank of the same run (or the
directory holding them):

  Kineto / PyTorch-profiler JSON (.json or .json.gz), written by
      with torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True) as p: ...
      p.export_chrome_trace(f"rank{rank}.json")
  Chakra .et protobuf (one per rank), or a PyTorch execution trace linked with
  its Kineto trace (ET+: chakra_trace_link or PARAM's trace_link.py); a linked
  GPU node is timed at its launch and starts when its stream is free.

How a trace becomes a task graph (ficco_sim/traces/graph.py, host.py):
  * GPU kernels keep their stream, priority and launch footprint (grid, threads,
    registers, shared memory) and get a class from their name (gemm, conv,
    attention, embedding, elementwise, ...); NCCL/RCCL kernels are communication,
    their kind (all-gather, all-to-all, ...) and bytes from the trace's metadata or
    the nccl:* / c10d:: operator that launched them. Nothing is dropped. Peer and
    same-device copies become copy-engine transfers; host copies keep their time.
  * Dependencies: stream order; cudaStreamWaitEvent and host synchronisations
    (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize) with their
    real scope, inferred from the launching thread when the trace has no CUPTI sync
    events, and never one the measured run contradicts; flow arrows; on CPU traces
    the launch and first consumer of an async collective.
  * A collective with all its ranks in the trace is split into waiting and transfer
    and ends together on all of them, in a replay and in a what-if.
  * Where the GPU waited for its host's launch, the host keeps its pace: each thread
    launches so long after its previous launch (or after what a synchronisation, or a
    call that returned only once its op was done, waited for) as in the trace, whatever
    the GPU; other idle time before an op is kept as an 'idle' block. So a replay paces
    like the run did, and a what-if on a faster GPU cannot outrun the host.
  * The GPU comes from the trace (deviceProperties); one with no built-in profile
    (or a trace that names none) needs --source-gpu. Files of different runs are
    refused; missing ranks are said; --steps N[-M] keeps some profiler steps.
"""

EXAMPLES = """\
examples:
  ficco-sim trace import traces/cpu_ag_mm.rank0.json.gz traces/cpu_ag_mm.rank1.json.gz
  ficco-sim trace import traces/real/param_dlrm_v100_8ranks_worker*.json.gz
  ficco-sim trace replay traces/real/hta_a100_16ranks_rank0.json.gz --exact --steps 551
  ficco-sim trace whatif traces/real/param_dlrm_v100_8ranks_worker*.json.gz --gpu h100
  ficco-sim trace replay traces/synthetic_gpu_ag_gemm.rank*.json --gantt replay.png
  ficco-sim trace whatif traces/synthetic_gpu_ag_gemm.rank*.json --comm-engine dma
  ficco-sim trace whatif traces/synthetic_gpu_ag_gemm.rank*.json --comm-priority 2 --no-pairs
  ficco-sim trace whatif traces/cpu_ag_mm.rank*.json.gz --schedule ficco-a2a-dma --pair-gpu h100
  ficco-sim trace export traces/cpu_ag_mm.rank*.json.gz --out ag_mm.json --gantt ag_mm.png
  ficco-sim trace whatif traces/synthetic_gpu_ag_gemm.rank*.json --gpu b200 --schedule presets -o whatif.json
"""


def _steps(text: str) -> list[int]:
    """``12``, ``12,14`` or ``12-14`` -> step numbers."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        if not a.isdigit() or (b and not b.isdigit()) or (b and int(b) < int(a)):
            raise argparse.ArgumentTypeError(f"{text!r}: give step numbers like 12, 12,14 or 12-14")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _files(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="TRACE", help="one trace file per rank of the same run, or a "
                   "directory holding them")
    p.add_argument("--steps", type=_steps, metavar="N[-M]", help="only the GPU work launched in these "
                   "profiler steps (ProfilerStep#N ranges), e.g. 12 or 12-14 (default: the whole trace)")


def _source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-gpu", "--gpu", dest="source_gpu", metavar="GPU",
                   help="profile of the GPU the trace ran on, a built-in name or a YAML file (default: from the "
                   "trace's deviceProperties; a GPU that matches no built-in profile is an error, never a "
                   "silent substitute)")


def _hw(p: argparse.ArgumentParser, *, gpu_help: str) -> None:
    p.add_argument("--gpu", help=gpu_help)
    p.add_argument("--topology", help="interconnect, e.g. switch:8, fc:8, ring:8 or a YAML file "
                   "(default: the topology a ficco-sim export names, else switch:<ranks>)")


def add_trace_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``trace`` with its subcommands on an argparse ``subparsers`` object."""
    tp = subparsers.add_parser("trace", help="import, replay, what-if and export measured traces",
                               description=HELP, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = tp.add_subparsers(dest="trace_cmd", metavar="{import,replay,whatif,export}")

    p = sub.add_parser("import", help="read traces and summarise what was found (ops, streams, deps, pairs)",
                       description="Import traces and print what ficco-sim made of them: ops per category, "
                       "streams and priorities, cross-stream dependencies, the trace's own span, and the "
                       "communication -> GEMM pairs that the what-if can rewrite.")
    _files(p)
    p.add_argument("--ops", action="store_true", help="also list every op")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("replay", help="simulate the trace with its measured durations; compare makespans",
                       description="Replay-as-measured: every kernel takes its measured time (compute kernels keep "
                       "their footprint, so kernels that overlapped compete for SMs again), communication "
                       "kernels hold their measured time, copies are modelled from their bytes. Reports the "
                       "simulated makespan against the trace's own (first op start to last op end).")
    _files(p)
    _source(p)
    p.add_argument("--topology", help="interconnect, e.g. switch:8, fc:8, ring:8 or a YAML file "
                   "(default: the topology a ficco-sim export names, else switch:<ranks>)")
    p.add_argument("--exact", action="store_true", help="one block per kernel: no SM re-sharing "
                   "(checks dependencies and pacing only)")
    p.add_argument("--out", "-o", help="also write the replayed timeline as Chrome-trace JSON (.json or .json.gz)")
    p.add_argument("--gantt", help="also write a Gantt PNG of the replay")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("whatif", help="change GPU, topology, comm engine or priority; rewrite comm->GEMM pairs",
                       description="What-if on a measured trace. Hardware changes: --gpu scales measured compute "
                       "(GEMMs by peak FLOP/s, other kernels by HBM bandwidth; waves recomputed from footprints); "
                       "--topology / --comm-engine model communication from its bytes (the report then shows the "
                       "modelled baseline too, so a change is not mistaken for model error); --comm-priority sets "
                       "every communication stream's priority. Pairs: every all-gather -> GEMM, GEMM -> "
                       "reduce-scatter or all-to-all -> GEMM found becomes a scenario simulated under the "
                       "schedules given (default: none, shard-p2p-sm, ficco-a2a-sm, ficco-a2a-dma; presets, 'all' "
                       "and 'presets' too). A pair's link says how it was found: dependency (the trace records "
                       "it), stream (same stream, next in order) or timing (the next GEMM on the rank, nothing "
                       "recorded: a guess, its measured span may hold unrelated work).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _files(p)
    p.add_argument("--source-gpu", help="profile the trace ran on (default: from the trace's deviceProperties; "
                   "a GPU that matches no built-in profile is an error, never a silent substitute)")
    _hw(p, gpu_help="profile to run on instead (e.g. a100, mi300x)")
    p.add_argument("--comm-engine", choices=("sm", "dma"), help="move all communication to SM kernels or copy "
                   "engines (default: as traced)")
    p.add_argument("--comm-priority", type=int, metavar="N",
                   help="priority of streams carrying communication (larger = more urgent; 0 = normal)")
    p.add_argument("--schedule", action="append", metavar="NAME",
                   help="schedule for the pair rewrite (repeatable), e.g. shard-p2p-sm-hi, ficco-a2a-dma")
    p.add_argument("--pair-gpu", help="profile to simulate pairs on (default: --gpu, else the source GPU)")
    p.add_argument("--no-pairs", action="store_true", help="skip the comm->GEMM pair rewrite")
    p.add_argument("--exact", action="store_true", help="one block per kernel (see replay --exact)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--out", "-o", help="also write the what-if's timeline as Chrome-trace JSON (Perfetto)")
    p.add_argument("--gantt", help="also write the what-if's timeline as a Gantt PNG")
    p.set_defaults(func=cmd_whatif)

    p = sub.add_parser("export", help="write the replayed timeline as Chrome-trace JSON (Perfetto) and a Gantt PNG",
                       description="Replay the trace and write its timeline: one process per GPU, one thread "
                       "per stream, SM transfers on their own tracks, counters for resident blocks, busy copy "
                       "engines and link load. Open the JSON at https://ui.perfetto.dev.")
    _files(p)
    _source(p)
    p.add_argument("--topology", help="interconnect, e.g. switch:8, fc:8, ring:8 or a YAML file "
                   "(default: the topology a ficco-sim export names, else switch:<ranks>)")
    p.add_argument("--out", "-o", required=True, help="Chrome-trace JSON to write (.json or .json.gz)")
    p.add_argument("--gantt", help="also write a Gantt PNG")
    p.add_argument("--idle", action="store_true", help="include the idle (gap) blocks")
    p.set_defaults(func=cmd_export)
    tp.set_defaults(func=lambda args: (tp.print_help(), 2)[1])      # no subcommand: nothing was done
    return tp


def _us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:,.1f} us"


def _check_out(path: str | None, flag: str) -> None:
    from ..files import check_output
    check_output(path, flag, figure=flag == "--gantt")


def cmd_import(args) -> int:
    from . import load_trace
    from .replay import find_pairs
    t = load_trace(args.files, steps=args.steps)
    pairs = find_pairs(t)
    s = t.summary()
    if args.json:
        s["pairs"] = [{"kind": p.kind, "rank": p.rank, "comm": p.comm.name, "gemm": p.gemm.name, "link": p.link,
                       "scenario": p.scenario.label() if p.scenario else None, "why_not": p.why_not} for p in pairs]
        if args.ops:
            s["op_list"] = [{"id": o.id, "rank": o.rank, "stream": o.stream, "name": o.name, "category": o.category,
                             "kind": o.kind, "start_s": o.start, "dur_s": o.dur, "deps": o.deps} for o in t.ops]
        print(json.dumps(s, indent=2, default=str))
        return 0
    print(f"{len(t.sources)} file(s), format {t.fmt}, {t.num_ranks} rank(s), "
          f"{'GPU' if t.on_gpu else 'CPU'} trace{' (' + t.device + ')' if t.device else ''}")
    print(f"  ops: {s['ops']}  " + "  ".join(f"{k}: {v}" for k, v in sorted(s["by_category"].items())))
    print(f"  streams: {s['streams']}  cross-stream dependencies: {s['cross_stream_deps']}  span: {_us(t.makespan)}")
    if s["collectives"]:
        print("  collectives: " + "  ".join(f"{k}: {v}" for k, v in s["collectives"].items()))
        if s["comm_wait_s"]:
            print(f"  communication time {_us(s['comm_s'])}, of which waiting for peers {_us(s['comm_wait_s'])} "
                  f"({s['comm_wait_s'] / s['comm_s']:.0%}; collectives with every rank in the trace)")
    for (rank, stream), prio in sorted(t.stream_priority.items()):
        if prio:
            print(f"  priority: rank {rank} {stream} = {prio}")
    for n in t.notes:
        print(f"  note: {n}")
    for p in pairs:
        sc = p.scenario.label() if p.scenario else f"no scenario: {p.why_not}"
        print(f"  pair {p.kind} on rank {p.rank} ({p.link}): {p.comm.name[:40]} -> {p.gemm.name[:40]}: {sc}")
    if args.ops:
        for o in t.ops:
            print(f"    {o.id:14s} r{o.rank} {o.stream:22s} {o.category:7s} {o.kind:7s} {_us(o.start):>14s} "
                  f"+{_us(o.dur):>12s}  {o.name[:50]}" + (f"  after {', '.join(o.deps)}" if o.deps else ""))
    return 0


def cmd_replay(args) -> int:
    from . import load_trace, replay, write_chrome_trace, write_gantt
    _check_out(args.out, "--out")
    _check_out(args.gantt, "--gantt")
    t = load_trace(args.files, steps=args.steps)
    r = replay(t, args.source_gpu, args.topology, footprints=not args.exact)
    if args.out:
        write_chrome_trace(r.timeline, args.out, r.graph)
    if args.gantt:
        write_gantt(r.timeline, args.gantt, title=f"replay of {Path(t.sources[0]).name}")
    if args.json:
        print(json.dumps({"trace_makespan_s": r.trace_makespan, "sim_makespan_s": r.sim_makespan, "error": r.error,
                          "rank_errors": r.rank_errors, "gpu": r.gpu, "topology": r.topology,
                          "tasks": len(r.graph.tasks)}, indent=2))
        return 0
    # one rank and no interconnect named: the default topology only stands in (nothing crosses it)
    where = (r.topology if args.topology or t.topology or t.num_ranks > 1 else
             "one rank (no interconnect: a collective keeps its measured time)")
    print(f"replay on {r.gpu}, {where}, {len(r.graph.tasks)} tasks"
          f"{' (exact: measured times, one block per kernel)' if args.exact else ''}")
    print(f"  trace makespan     {_us(r.trace_makespan)}")
    print(f"  simulated makespan {_us(r.sim_makespan)}   error {r.error * 100:+.2f}%")
    if len(r.rank_errors) > 1:
        worst = max(r.rank_errors.items(), key=lambda kv: abs(kv[1]))
        print(f"  per rank           worst {worst[1] * 100:+.2f}% (rank {worst[0]}) of {len(r.rank_errors)} ranks")
    for n in r.graph.meta.get("notes", []):
        print(f"  note: {n}")
    other = _other_source(t, args.source_gpu, r.gpu)
    if other:
        print(f"  note: {other}")
    return 0


def _other_source(t, source: str | None, used: str) -> str:
    """A note when --source-gpu names another GPU than the trace's deviceProperties ("" if not)."""
    if not (source and t.device):
        return ""
    from ..hardware import load_gpu, profile_for_device
    named = profile_for_device(t.device)
    if named and load_gpu(named).name != load_gpu(source).name.removesuffix(":sustained"):
        return (f"the trace ran on {t.device!r} ({named}); replayed with {used}'s profile as --source-gpu says, its "
                "measured times kept (to move the trace to another GPU: trace whatif --gpu)")
    return ""


def cmd_whatif(args) -> int:
    from ..hardware import load_gpu
    from . import load_trace
    from .replay import DEFAULT_PAIR_SCHEDULES, find_pairs, pair_whatif, source_gpu, whatif
    if args.no_pairs and (args.schedule or args.pair_gpu):
        raise InputError("--no-pairs", None, f"{'--schedule' if args.schedule else '--pair-gpu'} applies to the "
                         "pairs' rewrite, which --no-pairs turns off")
    _check_out(args.out, "--out")
    _check_out(args.gantt, "--gantt")
    t = load_trace(args.files, steps=args.steps)
    w = whatif(t, source=args.source_gpu, gpu=args.gpu, topology=args.topology, engine=args.comm_engine,
               comm_priority=args.comm_priority, footprints=not args.exact)
    from . import write_chrome_trace, write_gantt
    if args.out:
        w.variant.graph.meta.update(gpu=w.variant.gpu, topology=w.variant.topology)
        write_chrome_trace(w.variant.timeline, args.out, w.variant.graph)
    if args.gantt:
        write_gantt(w.variant.timeline, args.gantt, title=f"what-if: {'; '.join(w.changes)}")
    out: dict = {"changes": w.changes, "trace_makespan_s": w.baseline.trace_makespan,
                 "replay_makespan_s": w.baseline.sim_makespan,
                 "model_baseline_makespan_s": w.model_baseline.sim_makespan if w.model_baseline else None,
                 "whatif_makespan_s": w.variant.sim_makespan, "change": w.change, "notes": w.notes, "pairs": []}
    if not args.no_pairs:
        try:
            pair_gpu = load_gpu(args.pair_gpu or args.gpu or source_gpu(t, args.source_gpu))
        except InputError as e:
            raise InputError("--pair-gpu" if args.pair_gpu else e.where, e.field, e.message) from None
        schedules = args.schedule or list(DEFAULT_PAIR_SCHEDULES)
        # projected onto the trace only where the pairs are simulated on the GPU the trace ran on
        here = t.on_gpu and pair_gpu.name == source_gpu(t, args.source_gpu).name
        not_projected = ("" if here else "the trace ran on a CPU" if not t.on_gpu else
                         f"simulated on {pair_gpu.name}, not the trace's GPU")
        for p in find_pairs(t):
            entry = {"kind": p.kind, "rank": p.rank, "comm": p.comm.name, "gemm": p.gemm.name, "link": p.link,
                     "measured_s": p.measured, "scenario": p.scenario.label() if p.scenario else None,
                     "why_not": p.why_not, "schedules": [],
                     **({k: getattr(p.scenario, k) for k in ("gpus", "m", "n", "k", "dtype")} if p.scenario else {})}
            if p.scenario is not None:
                entry["not_projected"] = not_projected
                for r in pair_whatif(p, schedules, pair_gpu, None, on_trace_gpu=here):
                    entry["schedules"].append(r.__dict__)
            out["pairs"].append(entry)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(f"what-if: {'; '.join(w.changes)}")
    print(f"  trace makespan              {_us(w.baseline.trace_makespan)}")
    print(f"  replay (as measured)        {_us(w.baseline.sim_makespan)}   error {w.baseline.error * 100:+.2f}%")
    if w.model_baseline:
        measured = any(o.dur > 0 for o in t.ops if o.category == "comm")
        print(f"  replay, comm modelled       {_us(w.model_baseline.sim_makespan)}   " +
              (f"(the comm model on the original hardware: {w.model_baseline.error * 100:+.2f}% vs trace)"
               if measured else "(the trace has no measured communication to compare with)"))
    print(f"  what-if                     {_us(w.variant.sim_makespan)}   change {w.change * 100:+.2f}%")
    for n in w.notes + [x for x in [_other_source(t, args.source_gpu, w.baseline.gpu)] if x]:
        print(f"  note: {n}")
    for e in out["pairs"]:
        print(f"  pair {e['kind']} on rank {e['rank']} ({e['link']}), measured {_us(e['measured_s'])}: "
              f"{e['scenario'] or 'no scenario: ' + e['why_not']}")
        for r in e["schedules"]:
            if r["makespan"] is None:
                print(f"    {r['schedule']:32s} invalid here: {r['note']}")
            else:
                print(f"    {r['schedule']:32s} simulated {_us(r['makespan']):>14s}  speedup {r['speedup']:.3f}x  "
                      + (f"projected on the trace {_us(r['projected'])}" if r["projected"] is not None else
                         f"(not projected: {e['not_projected'] or 'the simulated saving exceeds the measured time'})"))
    for path in (args.out, args.gantt):
        if path:
            print(f"wrote {path} (the what-if's timeline)")
    return 0


def cmd_export(args) -> int:
    from . import load_trace, replay, write_chrome_trace, write_gantt
    _check_out(args.out, "--out")
    _check_out(args.gantt, "--gantt")
    t = load_trace(args.files, steps=args.steps)
    r = replay(t, args.source_gpu, args.topology)
    r.graph.meta.update(gpu=r.gpu, topology=r.topology)     # what a re-import replays it on
    write_chrome_trace(r.timeline, args.out, r.graph, include_idle=args.idle)
    print(f"wrote {args.out} ({len(r.timeline.records)} tasks, makespan {_us(r.sim_makespan)})")
    other = _other_source(t, args.source_gpu, r.gpu)
    if other:
        print(f"note: {other}")
    if args.gantt:
        write_gantt(r.timeline, args.gantt, include_idle=args.idle)
        print(f"wrote {args.gantt}")
    return 0
