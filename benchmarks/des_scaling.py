"""How the discrete-event engine scales: CPU seconds, simulated events (settled instants),
max-min fair rate solves and events per CPU-second, peak Python memory, and tasks, for
every collective at 8-512 GPUs on ring, fully connected and switch topologies, and one
whole ag-gemm and a2a-gemm scenario per topology; the closed form's time beside the DES's
as a check.

    python benchmarks/des_scaling.py                    # 8, 64 and 256 GPUs (a few minutes)
    python benchmarks/des_scaling.py --gpus 8 64 256 512 --collectives all-gather
    python benchmarks/des_scaling.py --quick            # 8 and 64 GPUs, 1 MiB only

Each case runs once in this process (cold caches), as ``simulate_graph`` runs it (a
rotation-symmetric graph folded onto one GPU: column "folded"); graph construction is
timed apart from the simulation, and both together. A collective is timed as ``collective_time``
runs it: lowered for GPU 0 alone where it is rotation symmetric by construction (column
"folded": "lowered"; its "tasks" are the whole graph's, made untimed for the closed form).
``--timeout`` skips a case whose previous size took longer.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from rich.console import Console
from rich.table import Table

from ficco_sim import Scenario
from ficco_sim.engine.des import simulate_folded, simulate_graph
from ficco_sim.engine.fold import Folded, folding
from ficco_sim.hardware import load_gpu
from ficco_sim.schedules import lower
from ficco_sim.simulate import _run, collective_folded, collective_graph
from ficco_sim.topology import load_topology

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv")
KINDS = ("ring", "fc", "switch")


def case(gpu, topo, graph) -> dict:
    """One run as ``simulate_graph`` does it (a symmetric graph folded onto one GPU), timed;
    then again under tracemalloc for the peak. ``graph`` may be a collective lowered for GPU 0
    alone (:func:`~ficco_sim.simulate.collective_folded`, as ``collective_time`` runs it)."""
    run = simulate_folded if isinstance(graph, Folded) else simulate_graph
    t0 = time.process_time()
    tl = run(graph, gpu, topo, record=False)
    cpu = time.process_time() - t0
    tracemalloc.start()
    run(graph, gpu, topo, record=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    folded = "lowered" if isinstance(graph, Folded) else "yes" if isinstance(folding(graph, topo), Folded) else "no"
    return {"cpu": cpu, "events": tl.events, "solves": tl.solves, "peak": peak, "makespan": tl.makespan,
            "folded": folded}


CF_HOPS = 2_000_000    # the closed form's link tables grow with transfers x hops x sharers: skip beyond


def closed_form(graph, gpu, topo) -> float:
    """The closed form's makespan, or NaN where its link tables would be too large (an
    all-to-all over hundreds of GPUs on a ring: every link shared by thousands of transfers)."""
    hops = sum(len(topo.path_links(t.src, t.dst)) for t in graph.transfers)
    return _run(graph, gpu, topo, "analytical", "backfill").makespan if hops <= CF_HOPS else float("nan")


def cells(graph, build: float, r: dict, cf: float) -> list[str]:
    return [f"{len(graph.tasks):,}", f"{build:.2f}", f"{r['cpu']:.2f}", f"{build + r['cpu']:.2f}", r["folded"],
            f"{r['events']:,}", f"{r['solves']:,}", f"{r['events'] / max(r['cpu'], 1e-9):,.0f}", f"{r['peak'] / 1e6:.0f}",
            f"{r['makespan'] * 1e3:.4f}", "skipped" if cf != cf else f"{cf * 1e3:.4f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--collectives", nargs="+", default=list(COLLECTIVES), choices=COLLECTIVES)
    ap.add_argument("--topologies", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--mib", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--timeout", type=float, default=60.0, help="skip larger sizes of a case after one this slow")
    ap.add_argument("--quick", action="store_true", help="8 and 64 GPUs, 1 MiB")
    args = ap.parse_args()
    if args.quick:
        args.gpus, args.mib = [8, 64], [1]
    gpu = load_gpu(args.gpu)
    table = Table(title=f"DES scaling on {gpu.name} (1 process; CPU s = simulation, graph built apart)")
    for c in ("case", "GPUs", "size", "tasks", "graph CPU s", "DES CPU s", "both CPU s", "folded", "events",
              "max-min solves", "events/s", "peak MB", "DES ms", "closed form ms"):
        table.add_column(c, justify="right")
    slow: set[tuple] = set()
    add = table.add_row

    def row(*cells: str) -> None:        # the table at the end, and each row as it comes
        add(*cells)
        print(" | ".join(c for c in cells if c), flush=True)

    table.add_row = row  # type: ignore[method-assign]
    for kind in args.topologies:
        for coll in args.collectives:
            for mib in args.mib:
                for n in args.gpus:
                    key = (kind, coll, mib)
                    if key in slow:
                        table.add_row(f"{kind} {coll}", str(n), f"{mib} MiB", "skipped (previous size over "
                                      f"{args.timeout:.0f} s)", *[""] * 10)
                        continue
                    topo = load_topology(f"{kind}:{n}", gpu)
                    t0 = time.process_time()
                    # ring all-reduce behind a switch too (auto would run NVLS on H100 from 5 GPUs), direct
                    # on fully connected ones (auto would run NCCL's rings there, on up to n - 1 of them):
                    # the table compares ring and direct patterns with ASTRA-sim's
                    algo = "direct" if kind == "fc" else ("ring" if coll == "all-reduce" else "auto")
                    # as collective_time: lowered for GPU 0 alone where the collective is symmetric by
                    # construction, else the whole graph (folded by the engine if it can be)
                    lowered = collective_folded(gpu, topo, coll, mib << 20, algorithm=algo)
                    if lowered is None:
                        lowered = collective_graph(gpu, topo, coll, mib << 20, algorithm=algo)
                    build = time.process_time() - t0
                    r = case(gpu, topo, lowered)
                    # the whole graph (not timed): its task count and the closed form's check
                    graph = collective_graph(gpu, topo, coll, mib << 20, algorithm=algo)
                    cf = closed_form(graph, gpu, topo)
                    if r["cpu"] > args.timeout:
                        slow.add(key)
                    table.add_row(f"{kind} {coll}", str(n), f"{mib} MiB", *cells(graph, build, r, cf))
        for scen in ("ag-gemm", "a2a-gemm"):
            n = 8
            topo = load_topology(f"{kind}:{n}", gpu)
            sc = Scenario(scen, n, 16384, 8192, 8192)
            t0 = time.process_time()
            graph = lower(sc, "ficco-a2a-sm", gpu, topo)
            build = time.process_time() - t0
            r = case(gpu, topo, graph)
            cf = closed_form(graph, gpu, topo)
            table.add_row(f"{kind} {scen} ficco-a2a-sm", str(n), "16384x8192x8192", *cells(graph, build, r, cf))
    Console(width=190).print(table)


if __name__ == "__main__":
    main()
