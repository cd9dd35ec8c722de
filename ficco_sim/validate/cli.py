"""``ficco-sim validate``: replay schedules on this machine and compare with predictions.

The lead's ``ficco_sim/cli.py`` calls :func:`add_validate_parser`; torch is imported only
when the command runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys

DESCRIPTION = """\
Replay the task graphs the simulator predicts on real hardware, through PyTorch, and
compare predicted with measured times.

How it works: for every (scenario, schedule) the simulator lowers the scenario to a
task graph and predicts its makespan with --gpu's profile. The executor replays the
*same* graph: GEMMs as torch.mm into preallocated views, SM transfers as
torch.distributed send/recv (one batch per communication kernel step), DMA transfers
as contiguous copy_ (copy engines), streams with the graph's priorities, events for
dependencies. It warms up, times --repeats runs, takes the median, and checks every
result against the unscheduled reference (C = cat(A) @ B, the reduce-scatter sum, the
expert outputs) so a fast but wrong schedule is caught.

Process shapes:
  (default)         one process per rank: gloo on --device cpu, NCCL on --device cuda
                    (one GPU per rank)
  --single-gpu      one process and one device hold every rank's buffers; remote
                    transfers become local copies on the same engine. Validates the
                    GPU-internal model (contention, priority, decomposition) on one GPU.
  --single-process  one process, rank g on cuda:g; copies between GPUs use copy engines.

What cannot be honoured is reported, never substituted silently: on CPU stream
priority, DMA engines and shared-memory shaping are recorded as not honoured; with
NCCL, copy-engine transfers across processes are refused unless --allow-fallback
(then they run as send/recv and the report says so).

On a CPU the predictions use this host's own profile, <out>/<machine>/cpu.yaml: when it is
missing, or names another host or this one before it last started (host name, CPU, cores and
boot id), `ficco-sim calibrate --device cpu` runs first (about 10 s,
--world-size gloo ranks): per-thread GEMM rate, gloo latency and stream rate, host cores per
byte moved, per-op issue cost, what posting a message costs the issuing thread, the ranks'
start spread. Compute and gloo's threads share the cores evenly and a rank's compute ops and
posts take turns on its one thread, so overlap mostly disappears on a small host; the report
says per case which part of a rank's time (compute, issue, wait, imbalance) is furthest from
the prediction.

Outputs: <out>/<machine>/<date>.csv (scenario, schedule, predicted_s, measured_s, err,
correct, not_honoured, torch, device, date, ...), <date>.md (MAPE, Kendall tau of the
schedule ranking per scenario, top-1 match, per-schedule table) and <date>.png
(predicted vs measured scatter).
"""

EPILOG = """\
examples:
  ficco-sim validate --device cpu --world-size 2
  ficco-sim validate --device cpu --world-size 2 --scenarios ag-gemm:m=512,n=512,k=512 \\
      --schedules none,shard-p2p-sm,ficco-a2a-sm --repeats 7
  ficco-sim validate --device cuda --single-gpu --world-size 4 --gpu h100
  ficco-sim validate --device cpu --world-size 2 --scenarios ag-gemm:m=512,n=384,k=384 \
      --schedules shard-p2p-sm --repeats 3 --profile prof/     (then: ficco-sim trace replay prof/*.rank*.json.gz)
  ficco-sim validate --device cuda --world-size 8 --gpu h100 --topology dgx-h100 --allow-fallback
  ficco-sim validate --import runs.csv --gpu h100 --topology switch:8
      (runs.csv columns: kind,m,n,k,gpus,schedule,measured_s[,dtype][,mode]; measured_s in seconds;
      mode single-gpu: predicted as the folded one-GPU program; a validate report's CSV is such a file)
"""


def _csv_list(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    if out == ["all"]:
        return None
    return out


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``validate`` on an argparse subparsers object."""
    p = subparsers.add_parser("validate", help="replay schedules through PyTorch and compare with predictions",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to replay (default cpu)")
    p.add_argument("--world-size", type=int, default=2, metavar="N",
                   help="ranks (GPUs) per scenario; processes in the default mode (default 2)")
    p.add_argument("--gpu", metavar="PROFILE", help="profile the predictions use (default: with --device cpu, "
                   "this host's calibrated <out>/<machine>/cpu.yaml, calibrated first if missing; else h100)")
    p.add_argument("--topology", help="ring:N | fc:N | switch:N | name | YAML (default switch:<world size>)")
    p.add_argument("--scenarios", nargs="+", metavar="SPEC",
                   help="kind:m=..,n=..,k=..[,gpus=..][,dtype=..] (default: the three dependent kinds at "
                   "communication-heavy ~15 ms shapes on CPU (see validate.workflow.DEFAULT_SIZES), "
                   "8192^3 on GPUs)")
    p.add_argument("--schedules", nargs="+", metavar="NAME",
                   help="schedule names, space- or comma-separated, or 'all' (default: the basic set of "
                   "`ficco-sim list`)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--single-gpu", action="store_true", help="one process, one device, every rank's buffers")
    mode.add_argument("--single-process", action="store_true", help="one process, rank g on cuda:g")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per schedule; the median is reported "
                   "(default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    p.add_argument("--allow-fallback", action="store_true",
                   help="let NCCL replay copy-engine transfers as send/recv (recorded as not honoured)")
    p.add_argument("--profile", metavar="DIR",
                   help="after the timed runs, replay each schedule once more under torch.profiler and write "
                   "one Kineto trace per rank to DIR/<scenario>_<schedule>.rank<r>.json.gz (ranges named "
                   "after the task ids; read them with `ficco-sim trace import|replay`)")
    p.add_argument("--recalibrate", action="store_true",
                   help="--device cpu: calibrate this host again first, even if <out>/<machine>/cpu.yaml exists")
    p.add_argument("--out", "-o", default="validation", metavar="DIR", help="output folder (default validation/)")
    p.add_argument("--import", dest="import_csv", metavar="CSV",
                   help="do not replay: compare measured runs from CSV (kind,m,n,k,gpus,schedule,measured_s"
                   "[,dtype][,mode]) with predictions; a validate report's own CSV works, single-GPU replays "
                   "included (mode single-gpu: predicted as the one-GPU program they ran)")
    p.set_defaults(func=cmd_validate)
    return p


def cmd_validate(args) -> int:
    command = "ficco-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else ""
    if args.import_csv:
        from .importer import compare_measured
        if not args.gpu:
            from ..errors import InputError
            raise InputError("--gpu", None, "--import needs the profile to predict with (e.g. --gpu h100)")
        df, paths = compare_measured(args.import_csv, args.gpu, args.topology, args.out, command=command)
    else:
        from .workflow import validate
        mode = "single-gpu" if args.single_gpu else "single-process" if args.single_process else "distributed"
        df, paths = validate(args.device, args.world_size, args.gpu, args.scenarios, _csv_list(args.schedules),
                             args.repeats, args.warmup, args.out, mode=mode, topology=args.topology,
                             allow_fallback=args.allow_fallback, command=command, profile_dir=args.profile,
                             recalibrate=args.recalibrate)
    from .compare import summarize
    _, overall = summarize(df)
    print(df[["scenario", "schedule", "predicted_s", "measured_s", "err", "correct"]].to_string(index=False))
    print(f"MAPE {overall['mape'] * 100:.1f}%  mean Kendall tau {overall['mean_kendall_tau']:.3f}  "
          f"top-1 {overall['top1_rate'] * 100:.0f}%")
    if overall["mean_kendall_tau_resolved"] == overall["mean_kendall_tau_resolved"]:
        print(f"counting only differences the measurement resolves (median notches): Kendall tau "
              f"{overall['mean_kendall_tau_resolved']:.3f}  top-1 {overall['top1_resolved_rate'] * 100:.0f}%")
    if overall["mean_kendall_tau_self"] == overall["mean_kendall_tau_self"]:
        print(f"the measurement against itself (even vs odd repeats): Kendall tau "
              f"{overall['mean_kendall_tau_self']:.3f}  same fastest {overall['top1_self_rate'] * 100:.0f}%")
    for kind, path in paths.items():
        print(f"wrote {path}")
    return 0
