"""Closed-form sweeps: many scenarios x many schedules through the closed-form engine
(:mod:`ficco_sim.engine.closed_form`), one compiled template per (scenario structure,
schedule), every metric from :func:`ficco_sim.metrics.schedule_metrics`.

Rows are what :meth:`ficco_sim.Result.row` gives for ``simulate(..., engine="analytical")``
of the same point, to 1e-9 (tested): a template evaluates scenarios of its structure
exactly (:meth:`ficco_sim.workload.Scenario.structure`).

>>> from ficco_sim.workload import Scenario
>>> sc = [Scenario("ag-gemm", 4, m, 4096, 4096) for m in (4096, 8192, 16384)]
>>> rows = estimate_many(sc, ["none", "ficco-a2a-dma"], "h100", "switch:4")
>>> [round(r["speedup"], 2) > 0 for r in rows][:2]
[True, True]
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Sequence

import numpy as np

from ..contention import PROFILE, Weights
from ..engine.closed_form import Template, compile_graph, evaluate
from ..engine.closed_form_merge import merge
from ..engine.closed_form_turned import compile_share
from ..engine.fold import Share, topology_turns
from ..engine.gcpause import paused_gc
from ..engine.symmetry import quotient, rotation_symmetric
from ..gemm_model import gemm_times
from ..hardware import GpuProfile, load_gpu
from ..metrics import NAMES, comm_only_graph, comm_only_key, schedule_metrics
from ..schedules import Schedule, lower, parse_schedule
from ..schedules.collectives import pick_algorithm, ring_orders
from ..schedules.lowering import lower_share
from ..topology import Topology, load_topology
from ..workload import Scenario

# Compiled templates, least recently used first, bounded by their total node count (memory
# grows with nodes, not with how many points a sweep writes); references stay (they are small
# and must not change while templates of their structure live).
_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_SIZES: dict[tuple, int] = {}
_REFS: dict[tuple, Scenario] = {}
NODE_BUDGET = 1_500_000        # nodes kept in compiled templates (~ 0.5 GB)
EVAL_BUDGET = 1_000_000        # scenario x node cells per evaluation (each array ~ 8 MB; at 4M a 16-GPU
                               # sweep peaked at 2.4 GB RSS, at 1M 1.15 GB, 5% slower)


def _get(key):
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
    return hit


def _remember(key, value, nodes: int):
    _CACHE[key] = value
    _SIZES[key] = nodes
    total = sum(_SIZES.values())
    while total > NODE_BUDGET and len(_CACHE) > 1:
        old, _ = _CACHE.popitem(last=False)
        total -= _SIZES.pop(old)
    return value


def clear_cache() -> None:
    _LAST[:] = [None, None]
    _ALIASES.clear()
    _CACHE.clear()
    _SIZES.clear()
    _REFS.clear()


_PRINTS: dict[int, tuple[object, str]] = {}


def fingerprint(obj: GpuProfile | Topology) -> str:
    """Every value of a profile or topology as text: the cache key part that says "same
    hardware" (a profile edited on disk is another profile, whatever its name)."""
    hit = _PRINTS.get(id(obj))
    if hit is None or hit[0] is not obj:
        if len(_PRINTS) > 1000:
            _PRINTS.clear()
        text = repr(obj) if isinstance(obj, GpuProfile) else \
            f"{obj.name}|{sorted(obj.graph.nodes(data=True))}|{sorted(obj.graph.edges(data=True))}"
        hit = _PRINTS[id(obj)] = (obj, text)
    return hit[1]


def structure_on(scenario: Scenario, gpu: GpuProfile, topo: Topology) -> tuple:
    """:meth:`~ficco_sim.workload.Scenario.structure` on this GPU and topology: where the
    scenario's collective runs as rings and the topology has several (a fully connected one:
    :func:`~ficco_sim.schedules.rings.ring_orders`), each rank's rows are split over them in
    whole rows, which scales with the sizes only where they divide evenly: such scenarios
    get templates of their own sizes."""
    structure = scenario.structure()
    if topo.kind != "fc" or gpu.comm_kernel.fully_connected != "ring":
        return structure
    if pick_algorithm("auto", scenario.spec.collective, topo.kind, gpus=scenario.gpus, spec=gpu.comm_kernel,
                      nbytes=scenario.comm_bytes_per_rank) != "ring" or len(ring_orders(topo)) < 2:
        return structure
    return (*structure, "rings", scenario.m, scenario.n, scenario.k)


def template(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile, topo: Topology, *,
             comm_only: bool = False) -> Template:
    """The (cached) template of ``schedule`` for scenarios structured like ``scenario``
    (``comm_only``: of its communication alone, shared by every schedule whose
    communication is the same, :func:`~ficco_sim.metrics.comm_only_key`)."""
    schedule = parse_schedule(schedule)
    # every template of one structure is compiled from the same reference scenario, so that
    # merged templates rescale alike
    structure = structure_on(scenario, gpu, topo)
    scenario = _REFS.setdefault(structure, scenario)
    key = (structure, schedule.name, fingerprint(gpu), fingerprint(topo))
    if comm_only:
        alias = _ALIASES.get(key)
        hit = _get(alias) if alias is not None else None
        if hit is None:
            with paused_gc(kept=True):
                graph = _lowered(key, scenario, schedule, gpu, topo)
                if isinstance(graph, Share):
                    graph = graph.without_gemms()
                    comm = ("comm-only share", graph.ranks, len(graph.tasks),
                            hash((graph.streams, graph.tasks, tuple(graph.where.items()))))
                else:
                    graph = comm_only_graph(graph)
                    comm = ("comm-only", *comm_only_key(graph))
                alias = _ALIASES[key] = (key[0], comm, *key[2:])
                hit = _get(alias)
                if hit is None:
                    tpl = _compiled(graph, gpu, topo, scenario)
                    hit = _remember(alias, (gpu, topo, tpl), tpl.num_nodes)
        return hit[2]
    hit = _get(key)
    if hit is None:
        with paused_gc(kept=True):
            tpl = _compiled(_lowered(key, scenario, schedule, gpu, topo), gpu, topo, scenario)
        hit = _remember(key, (gpu, topo, tpl), tpl.num_nodes)
    return hit[2]


def _compiled(graph, gpu: GpuProfile, topo: Topology, scenario: Scenario) -> Template:
    if isinstance(graph, Share):
        return compile_share(graph, gpu, topo, scenario)
    return compile_graph(graph, gpu, topo, scenario)


_LAST: list = [None, None]      # the last lowered graph and its key: a schedule's template and its
                                # communication-only template are compiled one after the other
_ALIASES: dict[tuple, tuple] = {}   # (structure, schedule, gpu, topology) -> its communication-only key


def _lowered(key: tuple, scenario: Scenario, schedule: Schedule, gpu: GpuProfile, topo: Topology):
    """The schedule's graph, or GPU 0's share of it where every GPU's tasks are GPU 0's turned
    on a topology that turns too (:func:`~ficco_sim.engine.closed_form_turned.compile_share`
    compiles the same template from it, without making the other GPUs' tasks)."""
    if _LAST[0] != key:
        share = None
        if SHARES and gpu.host is None and topology_turns(topo, scenario.gpus):
            share = lower_share(scenario, schedule, gpu, topo)
        _LAST[:] = [key, share if share is not None else lower(scenario, schedule, gpu, topo)]
    return _LAST[1]


SHARES = True       # compile rotation-symmetric graphs from GPU 0's share (off: always the whole graph)


def _merged(tpls: list[Template], scenario: Scenario, topo: Topology) -> tuple[Template, np.ndarray]:
    key = ("merged", *(id(t) for t in tpls))
    hit = _get(key)
    if hit is None:
        with paused_gc(kept=True):
            merged, offs = merge(tpls)
            if rotation_symmetric(scenario, topo):
                stride = 1 + max(int(max(t.gpu_of.max(initial=0), t.dst_of.max(initial=0))) for t in tpls)
                merged.quotient, merged.orbit = quotient(merged, stride, scenario.gpus, _known(tpls))
        hit = _remember(key, (tpls, merged, offs), merged.num_nodes)
    return hit[1], hit[2]


def _known(tpls: list[Template]) -> np.ndarray | None:
    """Classes of the nodes of templates compiled from a share (GPU 0's node each stands
    for, numbered apart per template; -1 for the others: :func:`~ficco_sim.engine.symmetry.quotient`)."""
    if all(t.places is None for t in tpls):
        return None
    out, base = [], 0
    for t in tpls:
        if t.places is None:
            out.append(np.full(t.num_nodes, -1, dtype=np.int64))
        else:
            per = t.num_nodes // len(np.unique(t.gpu_of))
            out.append(base + np.arange(t.num_nodes, dtype=np.int64) % per)
            base += per
    return np.concatenate(out)


def _part(ev: dict, a: int, b: int) -> dict[str, np.ndarray]:
    """One template's share of a merged evaluation (nodes ``a:b``, sentinel column kept)."""
    cols = np.r_[a:b, ev["vals"].shape[1] - 1]
    part = {k: ev[k][:, cols] for k in ("vals", "add", "base", "iso", "nbytes")}
    part["makespan"] = ev["vals"][:, a:b].max(axis=1, initial=0.0)
    return part


def whole_gemm_times(gpu: GpuProfile, scenarios: Sequence[Scenario]) -> np.ndarray:
    """Isolated time (s, launch included) of the slowest GPU's whole GEMM, per scenario."""
    shapes = [[g for g in s.gemm_shapes() if g.m] for s in scenarios]
    out = np.zeros(len(scenarios))
    for dtype in {s.dtype for s in scenarios}:
        idx = [i for i, s in enumerate(scenarios) if s.dtype == dtype]
        flat = np.array([(g.m, g.n, g.k) for i in idx for g in shapes[i]], dtype=float).reshape(-1, 3)
        times = gemm_times(gpu, flat[:, 0], flat[:, 1], flat[:, 2], dtype) + gpu.launch_overhead
        bounds = np.cumsum([0] + [len(shapes[i]) for i in idx])
        for i, a, b in zip(idx, bounds[:-1], bounds[1:]):
            out[i] = times[a:b].max(initial=0.0)
    return out


def _inputs(scenarios: Sequence[Scenario], schedules: Sequence[Schedule | str], gpu: GpuProfile | str,
            topology: Topology | str) -> tuple[GpuProfile, Topology, list[Schedule], list[list[int]]]:
    """Loaded hardware, parsed schedules, and the scenarios' indices grouped by structure
    (one template serves each group)."""
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    by_structure: dict[tuple, list[int]] = defaultdict(list)
    for i, sc in enumerate(scenarios):
        by_structure[structure_on(sc, gpu, topo)].append(i)
    return gpu, topo, [parse_schedule(s) for s in schedules], list(by_structure.values())


def estimate_many(scenarios: Sequence[Scenario], schedules: Sequence[Schedule | str], gpu: GpuProfile | str,
                  topology: Topology | str, *, weights: Weights = PROFILE, engine: str = "analytical") -> list[dict]:
    """Rows like :meth:`ficco_sim.Result.row` for every scenario x schedule, scenario-major.
    ``weights`` scales the contention rule (the heuristic's fitted knobs)."""
    gpu, topo, schedules, groups = _inputs(scenarios, schedules, gpu, topology)
    out: list[dict | None] = [None] * (len(scenarios) * len(schedules))
    for all_idx in groups:
        ref = scenarios[all_idx[0]]
        base = [template(ref, "none", gpu, topo), template(ref, "none", gpu, topo, comm_only=True)]
        for js, tpls, where in _chunks(base, schedules, len(all_idx), ref, gpu, topo):
            per = max(1, EVAL_BUDGET // sum(t.num_nodes for t in tpls))
            for a in range(0, len(all_idx), per):
                _fill(out, scenarios, all_idx[a:a + per], schedules, js, tpls, where, ref, gpu, topo, weights, engine)
    return out  # type: ignore[return-value]


def point_metrics(scenario: Scenario, schedule: Schedule | str, gpu: GpuProfile | str,
                  topology: Topology | str) -> dict[str, float]:
    """Every metric (:data:`~ficco_sim.metrics.NAMES`) of one scenario under one schedule, from
    the templates :func:`estimate_many` evaluates (``simulate --engine analytical``)."""
    row = estimate_many([scenario], [schedule], gpu, topology)[0]
    return {k: row[k] for k in NAMES}


def rank_many(scenarios: Sequence[Scenario], schedules: Sequence[Schedule | str], gpu: GpuProfile | str,
              topology: Topology | str) -> list[dict]:
    """Makespan and speedup over ``none`` of every scenario x schedule from the closed form,
    scenario-major, and nothing else: the ranking pass of a confirmed study (no
    communication-only templates, no metrics; templates merged into blocks within
    :data:`EVAL_BUDGET`, as :func:`estimate_many` does)."""
    gpu, topo, schedules, groups = _inputs(scenarios, schedules, gpu, topology)
    out: list[dict | None] = [None] * (len(scenarios) * len(schedules))
    for idx in groups:
        ref = scenarios[idx[0]]
        base = template(ref, "none", gpu, topo)
        limit = EVAL_BUDGET // max(1, min(len(idx), 64))
        block: list[int] = []
        tpls = [base]

        def flush() -> None:
            per = max(1, EVAL_BUDGET // sum(t.num_nodes for t in tpls))
            for a in range(0, len(idx), per):
                part = idx[a:a + per]
                scs = [scenarios[i] for i in part]
                merged, offs = _merged(tpls, ref, topo)
                vals = evaluate(merged, gpu, scs)["vals"]
                spans = [vals[:, x:y].max(axis=1, initial=0.0) for x, y in zip(offs[:-1], offs[1:])]
                for j, t in zip(block, spans[1:]):
                    for r, i in enumerate(part):
                        out[i * len(schedules) + j] = {
                            **scenarios[i].columns(), "gpu": gpu.name, "topology": topo.name,
                            "schedule": schedules[j].name, "engine": "rank", "makespan": float(t[r]),
                            "speedup": float(spans[0][r] / t[r])}

        for j, sch in enumerate(schedules):
            t = template(ref, sch, gpu, topo)
            if block and sum(x.num_nodes for x in tpls) + t.num_nodes > limit:
                flush()
                block, tpls = [], [base]
            block.append(j)
            tpls.append(t)
        if block:
            flush()
    return out  # type: ignore[return-value]


def _chunks(base, schedules, count, ref, gpu, topo):
    """Blocks of (schedule indices, their distinct templates, where each schedule's template
    and its communication-only template sit among them) whose merged evaluation over
    ``count`` scenarios stays within :data:`EVAL_BUDGET` cells, so memory is bounded whatever
    the sweep's size; each template is compiled (or fetched) once and held only by its block,
    and a communication-only template shared by several schedules is evaluated once."""
    limit = EVAL_BUDGET // max(1, min(count, 64))
    js, tpls, where, pos = [], list(base), [], {id(t): i for i, t in enumerate(base)}
    nodes = sum(t.num_nodes for t in base)
    for j, sch in enumerate(schedules):
        pair = (template(ref, sch, gpu, topo), template(ref, sch, gpu, topo, comm_only=True))
        n = sum(t.num_nodes for t in pair if id(t) not in pos)
        if js and nodes + n > limit:
            yield js, tpls, where
            js, tpls, where, pos = [], list(base), [], {id(t): i for i, t in enumerate(base)}
            nodes = sum(t.num_nodes for t in base)
        for t in pair:
            if id(t) not in pos:
                pos[id(t)] = len(tpls)
                tpls.append(t)
                nodes += t.num_nodes
        js.append(j)
        where.append((pos[id(pair[0])], pos[id(pair[1])]))
    if js:
        yield js, tpls, where


def _fill(out, scenarios, idx, schedules, js, tpls, where, ref, gpu, topo, weights, engine) -> None:
    """Evaluate one block (``tpls``: none, its communication alone, then the block's other
    distinct templates; ``where``: each schedule's template and communication-only template
    among them) for the scenarios ``idx`` and write their rows into ``out``."""
    scs = [scenarios[i] for i in idx]
    t_comp = whole_gemm_times(gpu, scs)
    merged, offs = _merged(tpls, ref, topo)
    ev = evaluate(merged, gpu, scs, weights=weights)
    parts = [_part(ev, a, b) for a, b in zip(offs[:-1], offs[1:])]
    t_none, t_comm = parts[0]["makespan"], parts[1]["makespan"]
    for j, (s, c) in zip(js, where):
        metrics = template_metrics(tpls[s], parts[s], tpls[c], parts[c], ref.gpus, t_comp, t_comm, t_none)
        cols = {k: v.tolist() for k, v in metrics.items()}
        for a, i in enumerate(idx):
            out[i * len(schedules) + j] = {
                **scenarios[i].columns(), "gpu": gpu.name, "topology": topo.name,
                "schedule": schedules[j].name, "engine": engine, **{k: v[a] for k, v in cols.items()}}


def template_metrics(tpl: Template, ev: dict, alone: Template, ev_alone: dict, num_gpus: int, t_comp, t_comm,
                     t_none) -> dict[str, np.ndarray]:
    """:func:`~ficco_sim.metrics.schedule_metrics` of an evaluated template (``alone``: its
    communication-only template, for ``cil_comm``)."""
    vals, L = ev["vals"], tpl.const[tpl.gemm_begin]       # the GEMMs' launch delays
    return schedule_metrics(
        makespan=ev["makespan"], t_comp=t_comp, t_comm=t_comm, t_none=t_none, num_gpus=num_gpus,
        gemm_gpu=tpl.gpu_of[tpl.gemm_nodes], gemm_ready=vals[:, tpl.gemm_begin] - L,
        gemm_start=vals[:, tpl.gemm_begin], gemm_end=vals[:, tpl.gemm_nodes],
        gemm_iso=ev["iso"][:, tpl.gemm_nodes] + L,
        xfer_gpu=tpl.gpu_of[tpl.xfer_nodes], xfer_ready=vals[:, tpl.xfer_begin], xfer_end=vals[:, tpl.xfer_nodes],
        xfer_ready_alone=ev_alone["vals"][:, alone.xfer_begin], xfer_end_alone=ev_alone["vals"][:, alone.xfer_nodes])
