"""Record the small CPU traces shipped in ``traces/`` (torch.profiler on CPU, gloo).

Run from the repository root (no GPU, no network needed)::

    python traces/make_cpu_traces.py            # writes traces/cpu_*.json.gz (about 10 s)

Two programs:

* ``cpu_mm_chain.json.gz``: one process, a chain of 6 ``torch.mm`` (each feeds the
  next) of 384 x 384 float32; one thread, so one "stream".
* ``cpu_ag_mm.rank{0,1}.json.gz`` (+ ``cpu_ag_mm_et.rank{0,1}.json.gz``, the PyTorch
  execution trace of the same run): two processes over gloo. Each rank all-gathers a
  256 x 384 shard with ``async_op=True``, runs an independent ``mm`` while the
  gather is in flight, waits, then multiplies the gathered 512 x 384 matrix by its
  384 x 384 weight: the all-gather -> GEMM pair ficco-sim studies.

Traces are made compact before saving (``ficco_sim.traces.kineto_io.compact_trace``, shared
with ``ficco-sim validate --profile``): only complete (``ph: X``) events and the
metadata/flow events ficco-sim reads are kept, numbers rounded to 0.001 us.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))   # run from a checkout without installing

from ficco_sim.traces.kineto_io import compact_trace as compact  # noqa: E402 - after the path fix


def compact_et(raw_path: Path, out_path: Path) -> None:
    with gzip.open(out_path, "wt") as f:
        json.dump(json.loads(raw_path.read_text()), f, separators=(",", ":"))
    raw_path.unlink()


def mm_chain() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(384, 384)
    ws = [torch.randn(384, 384) / 20 for _ in range(6)]
    for w in ws:  # warm-up
        x = torch.mm(x, w)
    raw = HERE / "cpu_mm_chain.raw.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("mm_chain"):
            for w in ws:
                x = torch.mm(x, w)
    prof.export_chrome_trace(str(raw))
    compact(raw, HERE / "cpu_mm_chain.json.gz")


def _ag_mm_rank(rank: int, world: int, port: int) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(rank)
    shard = torch.randn(256, 384)
    weight = torch.randn(384, 384)
    other = torch.randn(384, 384)
    gathered = torch.empty(256 * world, 384)
    ag = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
    for _ in range(2):  # warm-up
        ag(gathered, shard)
        torch.mm(gathered, weight)
    dist.barrier()
    et = ExecutionTraceObserver().register_callback(str(HERE / f"cpu_ag_mm_et.rank{rank}.raw.json"))
    raw = HERE / f"cpu_ag_mm.rank{rank}.raw.json"
    # One warm-up step, one recorded step; the barrier at the top of each step lines the
    # ranks up so that the recorded step is not dominated by process start-up skew.
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et,
                 schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
        for _ in range(2):
            dist.barrier()
            with record_function("ag_then_mm"):
                work = ag(gathered, shard, async_op=True)
                independent = torch.mm(other, weight)  # overlaps the gather
                work.wait()
                out = torch.mm(gathered, weight)  # depends on the gather
            prof.step()
    prof.export_chrome_trace(str(raw))
    et.unregister_callback()
    del independent, out
    dist.barrier()
    dist.destroy_process_group()
    compact(raw, HERE / f"cpu_ag_mm.rank{rank}.json.gz")
    compact_et(HERE / f"cpu_ag_mm_et.rank{rank}.raw.json", HERE / f"cpu_ag_mm_et.rank{rank}.json.gz")


def ag_mm(world: int = 2) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ag_mm_rank, args=(world, port), nprocs=world, join=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["mm_chain", "ag_mm"]
    if "mm_chain" in which:
        mm_chain()
    if "ag_mm" in which:
        ag_mm()
    for p in sorted(HERE.glob("cpu_*.json.gz")):
        print(f"{p.name}: {p.stat().st_size / 1024:.1f} KiB")
