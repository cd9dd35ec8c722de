"""``ficco-sim calibrate``: the argparse hook. The lead's ``ficco_sim/cli.py`` calls
:func:`add_calibrate_parser` on its subparsers; the handler parses, calls the library, prints."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError

HELP = """\
Fit a hardware profile's numbers to real timings.

Two ways in:
  on this machine    --device cuda | cuda:1
                     runs torch microbenchmarks (GEMM sweep: squares, decomposed pieces and
                     the built-in models' layer GEMMs; copy bandwidth on DMA and on SMs;
                     GEMM under a concurrent copy; stream priority; launch overhead), then
                     fits. A GPU needs --base (its datasheet profile: SM limits, GEMM tiles).
                     Needs: pip install ficco-sim[torch]
                     --device cpu
                     describes one rank of the CPU replay (`validate --device cpu`) on this
                     host: --world-size gloo processes, one compute thread each, measure a
                     thread's GEMM rate while every rank computes, gloo latency and one
                     stream's rate (one-way), the host cores per byte moved (all-ranks
                     exchange), the issue loop's per-op cost, what posting a send and a
                     receive costs the issuing thread while the ranks compute (fitted per
                     message, alpha-beta), the ranks' start spread, and a GEMM beside an
                     exchange (kept as a check). Raw rows: <out>_bench.csv.
  from files         --from FILE... --gpu a100 [--base PROFILE]
                     vidur gemm_times.csv / collective_times.csv (see shared/measurements)
                     or a benchmark CSV written by an earlier --device run,
                     or raw nccl-tests / rccl-tests output (the text *_perf prints, NCCL_DEBUG
                     lines and all; --topology says what it ran on, switch by default),
                     or the output of mamf-finder.py (stas00/ml-engineering's matmul FLOPS
                     sweep: each shape's median TFLOPS read as its time; families of shapes
                     by M held out),
                     or PyTorch-profiler traces (*.json[.gz], one rank's file each, recorded over
                     several profiler steps): the same kernel's time alone and beside NCCL/RCCL
                     kernels, matched by its place in the step, and the GEMM kernels' grids.

What gets fitted and written into the profile (--out): gemm.efficiency[dtype],
gemm.k_overhead and launch overhead of the GEMM cost model (least squares on log time; whole
models held out and reported separately), with --fit-roofline also gemm.roofline_exponent (how a
wave's math and HBM time combine; a table needs memory- and math-bound shapes to tell it from
the efficiency, as the Vidur tables have); from benchmark files hbm.efficiency and
dma.command_overhead_us (the benchmark copies within one GPU, so they measure HBM, not an
engine's rate to a peer: dma.bandwidth_gbps is kept) and contention.compute_per_hbm_util;
comm_kernel.launch_us, protocol latencies and channel bandwidth from nccl-tests output
(bounded least squares on rows >= 64 KiB, every row's error reported; runs across machines and
rows nccl-tests found wrong left out, with a note), and where the log prints NCCL's own tuning
table (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING) comm_kernel.nccl_ring (the ring's bus bandwidth
and LL cap NCCL's tuner picks protocols with, written as measured, used by the fit);
contention.compute_beside_comm_kernel from traces (the slowdown beside collectives that
the SMs they hold and their HBM traffic leave unexplained; --report DIR writes every
kernel pair) and gemm.kernel (persistent where the GEMM blocks compute more outputs than one
tile: they loop over tiles and keep their SMs; waves where a grid exceeds what the GPU holds
at once); what the traces cannot tell is listed as not fitted. Every fitted number is written
with kind: fitted and a source naming its data and held-out error; the base profile's own GEMM
error on the same rows, before any fit, is reported beside it.
With --keep-times, every GEMM shape of the timings is also written as gemm.measured (its
median time): those shapes cost exactly that in both engines (see `ficco-sim formats profile`);
from traces, every matrix-product operator that recorded its shapes and ran alone (its kernels'
span, plus the profile's launch); the model's error on them is reported either way.
What is fitted and only reported (--report DIR: tables and plots, not written into the
profile): link latency + bandwidth (alpha-beta) from a collective table's send/recv and 2-GPU
all-reduce, with a 2 -> 4 GPU all-reduce prediction check.

examples:
  ficco-sim calibrate --from ../shared/measurements/vidur/gemm_times.csv --gpu a100 --out a100_fit.yaml --report fit/
  all_reduce_perf -b 8 -e 8G -f 2 -g 8 > ar.txt; ficco-sim calibrate --from ar.txt --gpu h100 --out h100_fit.yaml
  ficco-sim calibrate --from traces/real/hta_a100_nccl217_rank0.json.gz --gpu a100 --out a100_fit.yaml
  ficco-sim calibrate --from validation/gemm/h100_mamf_bf16_shisa_gpu0.txt --gpu h100:sustained --out h.yaml
  ficco-sim calibrate --device cpu --out cpu.yaml --quick
"""


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``calibrate`` subcommand; its handler is ``args.func``."""
    p = subparsers.add_parser("calibrate", help="fit a hardware profile to benchmarks or measurement files",
                              description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--device", help="benchmark this device: cpu, cuda or cuda:i")
    src.add_argument("--from", dest="files", nargs="+", metavar="FILE", help="fit to measurement files")
    p.add_argument("--gpu", help="which GPU's rows to fit in the files (a40, a100, h100, ...)")
    p.add_argument("--base", metavar="PROFILE", help="profile to start from (name or YAML); default: --gpu")
    p.add_argument("--out", "-o", required=True, metavar="PATH", help="profile YAML to write")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--report", metavar="DIR", help="write per-point CSVs and predicted-vs-measured PNGs here")
    p.add_argument("--holdout", nargs="*", metavar="MODEL",
                   help="models (groups) to hold out of the fit; default: every third; none: --holdout")
    p.add_argument("--no-launch", action="store_true", help="keep the base profile's launch overhead (do not fit it)")
    p.add_argument("--fit-roofline", action="store_true",
                   help="GEMM tables: fit gemm.roofline_exponent too, how a wave's math and HBM time combine "
                        "(needs memory- and math-bound shapes, as the Vidur tables have; default: keep the profile's)")
    p.add_argument("--keep-times", action="store_true",
                   help="GEMM timings: also write every timed shape into the profile (gemm.measured, its median): "
                        "those shapes then cost exactly that in every engine, the fit serves the rest (a few "
                        "thousand shapes at most: a whole sweep is the fit's job)")
    p.add_argument("--quick", action="store_true", help="benchmarks at tiny sizes (seconds; a smoke test)")
    p.add_argument("--topology", default="switch", choices=["switch", "fc", "ring"],
                   help="--from nccl-tests output: the kind of topology it ran on; the GPU count comes from the "
                        "output (default: switch, NVSwitch nodes)")
    p.add_argument("--world-size", type=int, default=2, metavar="N",
                   help="--device cpu: gloo ranks to measure with, as validate will run them (default 2)")
    p.set_defaults(func=run_calibrate)
    return p


def run_calibrate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .workflow import calibrate_device, calibrate_from_files

    if args.files:
        if not args.gpu:
            raise InputError("--gpu", None, "--from needs --gpu to pick the rows (e.g. --gpu a100)")
        holdout = "auto" if args.holdout is None else args.holdout
        cal = calibrate_from_files(args.files, args.gpu, args.base, holdout=holdout, fit_launch=not args.no_launch,
                                   fit_roofline=args.fit_roofline, out=args.out, force=args.force,
                                   report_dir=args.report, topology=args.topology, keep_times=args.keep_times)
    else:
        if args.fit_roofline:
            raise InputError("--fit-roofline", None, "fits a GEMM table given with --from (a device run's "
                             "benchmark CSV too); a --device run keeps the profile's exponent")
        if args.keep_times and args.device == "cpu":
            raise InputError("--keep-times", None, "keeps GEMM timings given with --from (or a --device cuda run's); "
                             "a CPU replay profile is fitted, not kept")
        if args.gpu and args.device == "cpu":
            raise InputError("--gpu", None, "--gpu selects rows of measurement files; drop it with --device cpu")
        cal = calibrate_device(args.device, out=args.out, base_profile=args.base, force=args.force,
                               report_dir=args.report, quick=args.quick, world_size=args.world_size,
                               keep_times=args.keep_times)
    table = Table(title=f"calibrate {cal.gpu}")
    for col in ("quantity", "value", "note"):
        table.add_column(col)
    for row in cal.summary_rows():
        table.add_row(*row)
    console = Console()
    console.print(table)
    for path in cal.written:
        console.print(f"wrote {path}")
    return 0
