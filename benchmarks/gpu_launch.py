"""What a kernel boundary costs on this GPU: the launch gap of an idle stream, the gap between
kernels already queued on one stream, and the gap across streams through an event.

The engines charge every kernel ``launch_overhead_us`` after its stream predecessor (or its
dependencies) end. On a real GPU that is true only when the GPU waits for the host; a kernel the
host issued ahead starts as soon as the front end turns round. Three numbers, from a Kineto trace
(kernel start and end on the GPU's clock) of tiny kernels (``torch.cuda._sleep`` of ``--cycles``
cycles, one block):

* ``idle``: the host issues one kernel at a time and waits for it (``synchronize``); the time
  from the launch call's start to the kernel's start.
* ``queued``: ``--count`` kernels issued behind a long sleep on one stream: next start - end.
* ``event``: kernels alternating between two streams, each waiting on the other's event, all
  issued ahead behind a sleep: next start (other stream) - end.

Writes one CSV row per gap (``kind, gap_us``) and prints medians.

    python benchmarks/gpu_launch.py --out h200-launch.csv        # ~10 s on an H200
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from ficco_sim.files import write_text_atomic  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--cycles", type=int, default=2000, help="each tiny kernel's sleep (about 1 us)")
    args = ap.parse_args()
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    gate = 50_000_000            # ~25 ms: every launch below is issued before the first kernel runs
    n, cyc = args.count, args.cycles

    def idle() -> None:
        for _ in range(n):
            torch.cuda._sleep(cyc)
            torch.cuda.synchronize()

    def queued() -> None:
        torch.cuda._sleep(gate)
        for _ in range(n):
            torch.cuda._sleep(cyc)
        torch.cuda.synchronize()

    def event() -> None:
        with torch.cuda.stream(a):
            torch.cuda._sleep(gate)
        for i in range(n):
            s, o = (a, b) if i % 2 == 0 else (b, a)
            with torch.cuda.stream(s):
                if i:
                    s.wait_stream(o)
                torch.cuda._sleep(cyc)
        torch.cuda.synchronize()

    # warm up, then one profiled run each
    for fn in (idle, queued, event):
        fn()
    rows = []
    for kind, fn in (("idle", idle), ("queued", queued), ("event", event)):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            prof.export_chrome_trace(str(path))
            events = json.loads(path.read_text())["traceEvents"]
        kern = sorted((e for e in events if e.get("cat") == "kernel"),
                      key=lambda e: e["ts"])
        launch = {e["args"].get("correlation"): e for e in events if e.get("cat") == "cuda_runtime"
                  and "Launch" in e.get("name", "")}
        if kind == "idle":
            gaps = [k["ts"] - launch[k["args"]["correlation"]]["ts"] for k in kern
                    if k["args"].get("correlation") in launch]
        else:
            kern = kern[1:]          # the gate
            gaps = [y["ts"] - (x["ts"] + x["dur"]) for x, y in zip(kern, kern[1:])]
        durs = [k["dur"] for k in kern]
        rows += [(kind, g) for g in gaps]
        print(f"{kind:8s} gaps {len(gaps):4d}: median {np.median(gaps):6.2f} us, p10 {np.percentile(gaps, 10):6.2f}, "
              f"p90 {np.percentile(gaps, 90):6.2f}; kernel {np.median(durs):.2f} us", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# benchmarks/gpu_launch.py on {name}, torch {torch.__version__}, cuda {torch.version.cuda}, host "
             f"{platform.node()}, {stamp}; {n} torch.cuda._sleep({cyc}) kernels per kind, Kineto trace times (us)",
             "kind,gap_us"] + [f"{k},{g:.3f}" for k, g in rows]
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(rows)} gaps")


if __name__ == "__main__":
    main()
