"""What ficco-sim makes of real PyTorch-profiler traces: import, dependencies, collective
kinds, exact and full replay error (whole trace and worst rank), and a what-if's order.

    python validation/traces/real_traces.py                 # the shipped traces/real sets
    python validation/traces/real_traces.py --extra NAME=GPU:FILE[,FILE...] ...

writes ``validation/traces/real_traces.csv`` (one row per set) and prints it. ``--extra``
adds traces that are not shipped (e.g. HolisticTraceAnalysis test data too large to
ship); GPU is the profile to replay on when the trace names none ("-": from the trace).

Columns: ``deps_contradicted`` counts imported dependencies that ended after the op
waiting on them started in the run itself (must be 0); ``comm_unnamed`` NCCL/RCCL
kernels with no collective kind (must be 0); ``whatif_early`` ops that started before
a dependency or stream predecessor ended after ``--gpu`` of the what-if (must be 0).
"""

from __future__ import annotations

import argparse
import csv
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from ficco_sim import __version__
from ficco_sim.errors import InputError
from ficco_sim.traces import load_trace
from ficco_sim.traces.replay import find_pairs, replay, whatif

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "traces" / "real"
SHIPPED = {
    "param_dlrm_v100_8ranks": ("-", sorted(REAL.glob("param_dlrm_v100_8ranks_worker*.json.gz"))),
    "hta_a100_nccl217_rank0": ("-", [REAL / "hta_a100_nccl217_rank0.json.gz"]),
    "hta_a100_16ranks_rank0": ("-", [REAL / "hta_a100_16ranks_rank0.json.gz"]),
    "hta_128ranks_sampled_rank0": ("a100", [REAL / "hta_128ranks_sampled_rank0.json.gz"]),
    "hta_128ranks_sampled_rank1": ("a100", [REAL / "hta_128ranks_sampled_rank1.json.gz"]),
    "hta_a100_event_sync": ("-", [REAL / "hta_a100_event_sync.json.gz"]),
    "hta_a100_event_sync_multi_stream": ("-", [REAL / "hta_a100_event_sync_multi_stream.json.gz"]),
    "hta_mi250_rocm62": ("mi250x", [REAL / "hta_mi250_rocm62.json.gz"]),
    "kineto_v100_resnet50_torch18": ("-", [REAL / "kineto_v100_resnet50_torch18.json.gz"]),
    "tracelens_mi300x_resnet18_ddp_miopen": ("-", [REAL / "tracelens_mi300x_resnet18_ddp_miopen.json.gz"]),
    "tracelens_mi300x_sdpa_rocprofiler_sdk": ("-", [REAL / "tracelens_mi300x_sdpa_rocprofiler_sdk.json.gz"]),
    "tracelens_mi300x_vllm_decode_graph": ("mi300x", [REAL / "tracelens_mi300x_vllm_decode_graph.json.gz"]),
}


def early_starts(trace, result) -> int:
    recs = {r.id: r for r in result.timeline.records}
    last: dict = {}
    early = 0
    for o in sorted(trace.ops, key=lambda o: (o.start, o.order)):
        preds = list(o.deps) + ([last[(o.rank, o.stream)]] if (o.rank, o.stream) in last else [])
        last[(o.rank, o.stream)] = o.id
        early += sum(1 for p in preds if recs[o.id].start < recs[p].end - 1e-12)
    return early


def row(name: str, gpu: str, files: list[Path]) -> dict:
    src = None if gpu == "-" else gpu
    t0 = time.process_time()
    t = load_trace(files)
    import_s = time.process_time() - t0
    by = t.by_id()
    comm = [o for o in t.ops if o.category == "comm"]
    exact = replay(t, src, footprints=False)
    full = replay(t, src)
    target = "h100" if (src or full.gpu) != "h100" else "a100"
    w = whatif(t, source=src, gpu=target)
    pairs = find_pairs(t)
    kinds = {}
    for o in comm:
        kinds[o.collective or "?"] = kinds.get(o.collective or "?", 0) + 1
    return {
        "set": name, "files": len(files), "gpu": full.gpu, "ops": len(t.ops), "ranks_in_trace": len({o.rank for o in t.ops}),
        "collectives": " ".join(f"{k}:{v}" for k, v in sorted(kinds.items())),
        "comm_unnamed": sum(1 for o in comm if not o.collective),
        "cross_stream_deps": sum(len(o.deps) for o in t.ops),
        "deps_contradicted": sum(1 for o in t.ops for d in o.deps if by[d].end > o.start + 1.5e-6),
        "comm_wait_share": round(sum(o.wait or 0 for o in comm) / max(1e-12, sum(o.dur for o in comm)), 4),
        "pairs": len(pairs), "pairs_with_scenario": sum(1 for p in pairs if p.scenario),
        "trace_makespan_us": round(t.makespan * 1e6, 1),
        "exact_error": round(exact.error, 6),
        "exact_worst_rank_error": round(max(map(abs, exact.rank_errors.values()), default=0.0), 6),
        "full_error": round(full.error, 6),
        "whatif_gpu": target, "whatif_change": round(w.change, 4), "whatif_early": early_starts(t, w.variant),
        "import_cpu_s": round(import_s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=GPU:FILES")
    ap.add_argument("--out", default=str(Path(__file__).with_name("real_traces.csv")))
    args = ap.parse_args()
    sets = dict(SHIPPED)
    for spec in args.extra:
        name, _, rest = spec.partition("=")
        gpu, _, files = rest.partition(":")
        sets[name] = (gpu or "-", [Path(f) for f in files.split(",")])
    rows = []
    for name, (gpu, files) in sets.items():
        try:
            rows.append(row(name, gpu, files))
        except InputError as exc:
            rows.append({"set": name, "files": len(files), "error": str(exc)})
    out = Path(args.out)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    tmp = out.with_suffix(".partial")
    with open(tmp, "w", newline="") as fh:
        fh.write(f"# made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by validation/traces/real_traces.py, "
                 f"ficco-sim {__version__}, {platform.node()} ({platform.machine()}, Python {platform.python_version()})\n")
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(out)
    for r in rows:
        print(", ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
