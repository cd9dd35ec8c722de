"""What ``validate`` predicts for the pairs it replays, and for measured runs imported from
elsewhere (:mod:`.importer`): one path for both, and no torch, so ``validate --import`` runs on
a machine without it."""

from __future__ import annotations

from ..errors import InputError
from ..workload import Scenario


def simulate_pairs(scenarios: list[Scenario], schedules: list[str] | None, gpu, topology: str | None, *,
                   fold: bool = False):
    """(scenario, schedule, task graph, predicted makespan or NaN) for every valid pair,
    plus notes on skipped pairs and failed predictions. The graph is the one the
    simulator timed, so the executor replays exactly what was predicted."""
    from ..engine.des import simulate_graph
    from ..hardware import load_gpu
    from ..schedules.lowering import invalid_reason, lower
    from ..schedules.schedule import basic_schedules, parse_schedule
    from ..topology import load_topology
    gpu = load_gpu(gpu)
    pairs, notes = [], []
    for sc in scenarios:
        topo = load_topology(topology or f"switch:{sc.gpus}", gpu)
        wanted = [parse_schedule(s) for s in schedules] if schedules else basic_schedules(sc)
        for s in wanted:
            why = invalid_reason(sc, s, gpu, topo)
            if why:
                notes.append(f"skipped (invalid here): {sc.label()} / {s.name}: {why}")
                continue
            graph = lower(sc, s, gpu, topo)
            parts: dict[str, float] = {}
            try:
                # Single-GPU replays run every rank on one device: predict that folded program.
                tl = simulate_graph(graph.folded() if fold else graph, gpu, topo)
                parts = predicted_parts(tl, graph, gpu, fold)
                predicted = tl.makespan + parts.get("skew", 0.0)
            except InputError as e:
                predicted = float("nan")
                notes.append(f"no prediction for {sc.label()} / {s.name} (replayed anyway): {e.line()}")
            pairs.append((sc, s, graph, predicted, topo.name, parts))
    return pairs, notes


GAP_PARTS = ("compute", "issue", "wait", "imbalance")


def predicted_parts(tl, graph, gpu, fold: bool = False) -> dict[str, float]:
    """Where the prediction says a rank's time goes, mean over ranks, in the CPU runner's
    terms (:attr:`.cpu.CpuRankRunner.parts`): ``compute`` (compute kernels' spans), ``issue``
    (an op's issue cost per task, and on a host posting its messages), ``wait`` (the rest of
    the rank's run) and ``imbalance``
    (the span beyond the mean rank's run: ranks ending apart, plus the start spread a
    distributed CPU replay adds to its measured span)."""
    ranks = max(1, graph.num_gpus)
    compute = sum(r.end - r.start for r in tl.records if r.role == "compute" and r.kind != "transfer") / ranks
    issue = gpu.launch_overhead * sum(1 for t in graph.tasks if not (hasattr(t, "kind") and t.kind == "comm")) / ranks
    if gpu.host is not None:     # every message is posted by the threads at both its ends
        issue += sum(2 * gpu.host.post_cost(t.nbytes) for t in graph.transfers if t.src != t.dst) / ranks
    ends = [max((r.end for r in tl.records if r.gpu == g), default=0.0) for g in range(graph.num_gpus)]
    wait = max(0.0, sum(ends) / ranks - compute - issue)
    skew = gpu.host.start_skew if gpu.host is not None and not fold else 0.0
    return {"compute": compute, "issue": issue, "wait": wait, "imbalance": max(ends) - sum(ends) / ranks + skew,
            "skew": skew}
