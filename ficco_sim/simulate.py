"""The Python API: simulate a scenario under a schedule, or time one GEMM or collective.

>>> from ficco_sim import simulate, Scenario
>>> r = simulate(Scenario("ag-gemm", 8, 16384, 8192, 8192), "ficco-a2a-dma", "h100", "switch:8")
>>> r.makespan < r.metrics["serial"]
True
>>> round(collective_time("h100", "ring:4", "all-gather", 64 << 20) * 1e3, 3) > 0
True
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

from .engine.closed_form import closed_form_timeline, kernel_isolated_time
from .engine.des import simulate_folded, simulate_graph
from .engine.fold import Folded, topology_turns
from .engine.gcpause import paused_gc
from .errors import InputError
from .explore.estimate import point_metrics
from .gemm_model import gemm_time as _gemm_time
from .hardware import DTYPE_BYTES, GpuProfile, load_gpu
from .metrics import comm_only_graph, compute_metrics
from .schedules import Schedule, lower
from .schedules import collectives as coll
from .schedules.builder import GraphBuilder
from .schedules.presets import is_preset, resolve
from .taskgraph import UNTUNED, TaskGraph
from .timeline import Timeline
from .topology import Topology, load_topology
from .workload import COLLECTIVES, Scenario

ENGINES = ("des", "analytical")


class Result:
    """One simulated (scenario, schedule): its metrics, and the task graph and timeline behind
    them. The closed form's single points are evaluated on the compiled template sweeps use
    (:mod:`ficco_sim.explore.estimate`); their graph and timeline are then made on first use,
    by lowering the whole graph and running the same engine over it (the same numbers, tested)."""

    def __init__(self, scenario: Scenario, schedule: Schedule, gpu: str, topology: str, engine: str, metrics: dict,
                 preset: str = "", *, graph: TaskGraph | None = None, timeline: Timeline | None = None,
                 make: Callable[[], tuple[TaskGraph, Timeline]] | None = None):
        self.scenario, self.schedule, self.gpu, self.topology, self.engine = scenario, schedule, gpu, topology, engine
        self.metrics, self.preset = metrics, preset      # preset: the one asked for (e.g. "te-pipeline:num_splits=8")
        self._graph, self._timeline, self._make = graph, timeline, make

    def _made(self) -> None:
        if self._timeline is None:
            self._graph, self._timeline = self._make()

    @property
    def graph(self) -> TaskGraph:
        if self._graph is None:
            self._made()
        return self._graph

    @property
    def timeline(self) -> Timeline:
        self._made()
        return self._timeline

    @property
    def makespan(self) -> float:
        return self.metrics["makespan"]

    def row(self) -> dict:
        """A flat record (SI units) for tables, CSV and pandas."""
        s = self.scenario
        return {**s.columns(), "gpu": self.gpu, "topology": self.topology, "schedule": self.schedule.name,
                "engine": self.engine, **self.metrics}

    def __repr__(self) -> str:
        return f"Result({self.scenario.label()}, {self.schedule.name}, {self.gpu}, {self.topology}, {self.engine}, " \
               f"makespan={self.makespan:.6g})"


def _run(graph: TaskGraph, gpu: GpuProfile, topo: Topology, engine: str, policy: str, *,
         record: bool = False) -> Timeline:
    """Run one engine; ``record`` keeps the DES's resource counters (only the timeline users see)."""
    if engine == "des":
        return simulate_graph(graph, gpu, topo, policy=policy, record=record)
    if engine == "analytical":
        return closed_form_timeline(graph, gpu, topo)
    raise InputError("--engine", None, f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def _default_topology(topology, scenario: Scenario, gpu: GpuProfile) -> Topology:
    return load_topology(topology if topology is not None else f"switch:{scenario.gpus}", gpu)


def baseline(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str | None = None, *,
             engine: str = "des", policy: str | None = None) -> dict[str, float]:
    """Isolated compute and communication times and the ``none`` makespan (s)."""
    gpu = load_gpu(gpu)
    topo = _default_topology(topology, scenario, gpu)
    none_graph = lower(scenario, Schedule("none"), gpu, topo)
    return _baseline_of(scenario, gpu, _run(none_graph, gpu, topo, engine, policy),
                        _run(comm_only_graph(none_graph), gpu, topo, engine, policy))


def _baseline_of(scenario: Scenario, gpu: GpuProfile, none: Timeline, comm_alone: Timeline) -> dict[str, float]:
    """:func:`baseline` from the timelines of the ``none`` graph and of its communication alone."""
    t_comp = max(_gemm_time(gpu, g.m, g.n, g.k, g.dtype) if g.m else 0.0 for g in scenario.gemm_shapes())
    return {"t_comp": t_comp, "t_comm": comm_alone.makespan, "t_none": none.makespan}


def _templated(engine: str, whole_graph: bool, gpu: GpuProfile) -> bool:
    """Whether :func:`simulate` evaluates the sweeps' templates (the closed form on a GPU)."""
    return engine == "analytical" and not whole_graph and gpu.host is None


def simulate(scenario: Scenario, schedule: Schedule | str = "none", gpu: GpuProfile | str = "h100",
             topology: Topology | str | None = None, *, engine: str = "des", policy: str | None = None,
             base: dict[str, float] | None = None, whole_graph: bool = False) -> Result:
    """Simulate ``scenario`` under ``schedule``. ``topology`` defaults to ``switch:<gpus>``;
    ``engine`` is ``des`` (discrete-event) or ``analytical`` (the closed-form engine);
    ``schedule`` is a schedule name or a preset (:mod:`ficco_sim.schedules.presets`);
    ``base`` reuses a :func:`baseline` computed earlier (saves work when sweeping schedules;
    the closed form's templates keep their own). The closed form evaluates the compiled
    template sweeps evaluate, lowering and timing the whole graph only when the result's
    graph or timeline is asked for; ``whole_graph`` evaluates the whole graph instead (the
    same numbers to 1e-9: the tests' reference for the templates)."""
    gpu = load_gpu(gpu)
    topo = _default_topology(topology, scenario, gpu)
    scenario.check_fits(gpu)
    preset = str(schedule) if is_preset(schedule) else ""
    schedule = resolve(scenario, schedule, gpu, topo)
    if _templated(engine, whole_graph, gpu):
        metrics = point_metrics(scenario, schedule, gpu, topo)

        def make() -> tuple[TaskGraph, Timeline]:
            graph = lower(scenario, schedule, gpu, topo)
            return graph, _run(graph, gpu, topo, engine, policy)

        return Result(scenario, schedule, gpu.name, topo.name, engine, metrics, preset, make=make)
    graph = lower(scenario, schedule, gpu, topo)
    timeline = _run(graph, gpu, topo, engine, policy, record=True)
    comm_only = _run(comm_only_graph(graph), gpu, topo, engine, policy)
    if base is None:        # the none schedule is its own baseline: not lowered and run twice
        base = (_baseline_of(scenario, gpu, timeline, comm_only) if schedule == Schedule("none")
                else baseline(scenario, gpu, topo, engine=engine, policy=policy))
    iso = {k.id: kernel_isolated_time(gpu, k) for k in graph.kernels if k.kind == "gemm"}
    metrics = compute_metrics(graph, timeline, iso, t_comp=base["t_comp"], t_comm=base["t_comm"],
                              t_none=base["t_none"], comm_only=comm_only)
    return Result(scenario, schedule, gpu.name, topo.name, engine, metrics, preset, graph=graph, timeline=timeline)


def simulate_many(scenario: Scenario, schedules: Iterable[Schedule | str], gpu: GpuProfile | str = "h100",
                  topology: Topology | str | None = None, *, engine: str = "des",
                  policy: str | None = None, whole_graph: bool = False) -> list[Result]:
    """:func:`simulate` for several schedules, sharing the baseline."""
    gpu = load_gpu(gpu)
    topo = _default_topology(topology, scenario, gpu)
    scenario.check_fits(gpu)
    schedules = list(schedules)
    none = next((i for i, s in enumerate(schedules) if resolve(scenario, s, gpu, topo) == Schedule("none")), None)
    out: dict[int, Result] = {}
    if none is not None:        # its own baseline (simulate), which the others then share
        out[none] = simulate(scenario, schedules[none], gpu, topo, engine=engine, policy=policy,
                             whole_graph=whole_graph)
        m = out[none].metrics
        base = {"t_comp": m["t_comp_iso"], "t_comm": m["t_comm_iso"], "t_none": m["makespan"]}
    elif not _templated(engine, whole_graph, gpu):     # (the templates keep their own baseline)
        base = baseline(scenario, gpu, topo, engine=engine, policy=policy)
    else:
        base = None
    for i, s in enumerate(schedules):
        if i not in out:
            out[i] = simulate(scenario, s, gpu, topo, engine=engine, policy=policy, base=base,
                              whole_graph=whole_graph)
    return [out[i] for i in range(len(schedules))]


def gemm_time(gpu: GpuProfile | str, m: int, n: int, k: int, dtype: str = "float16") -> float:
    """Isolated time (s) of C[m,n] = A[m,k] @ B[k,n] on one GPU, launch overhead included."""
    return _gemm_time(load_gpu(gpu), m, n, k, dtype)


def collective_graph(gpu: GpuProfile, topo: Topology, kind: str, nbytes: int, *, engine: str = "sm",
                     algorithm: str = "auto", dtype: str = "float16") -> TaskGraph:
    """A task graph of one collective alone (see :func:`collective_time` for sizes)."""
    algo = _collective_checked(gpu, topo, kind, nbytes, engine, algorithm, dtype)
    with paused_gc(kept=True):      # one small frozen task per transfer: no collector passes over them
        return _collective_tasks(gpu, topo, kind, nbytes, engine, algo, dtype)


def collective_folded(gpu: GpuProfile, topo: Topology, kind: str, nbytes: int, *, engine: str = "sm",
                      algorithm: str = "auto", dtype: str = "float16") -> Folded | None:
    """GPU 0's share of :func:`collective_graph` (:class:`~ficco_sim.engine.fold.Folded`), lowered
    for GPU 0 alone, where the collective is rotation symmetric by construction: every GPU
    runs the same steps turned, on a topology that turns onto itself with rings of one stride
    (``g -> g + s``); else None (then the whole graph is lowered and folded if it can be). The
    same answers as folding the whole graph, without making its N^2 transfers (a 512-GPU
    all-reduce lowers 1,000 tasks instead of 525,000)."""
    algo = _collective_checked(gpu, topo, kind, nbytes, engine, algorithm, dtype)
    n = topo.num_gpus
    if n < 2 or kind == "send-recv" or gpu.host is not None or not topology_turns(topo, n):
        return None
    if algo == "ring" and any(len({(b - a) % n for a, b in zip(r, r[1:] + r[:1])}) != 1
                              for r in coll.ring_orders(topo)):
        return None

    def unfold() -> TaskGraph:
        return collective_graph(gpu, topo, kind, nbytes, engine=engine, algorithm=algorithm, dtype=dtype)

    with paused_gc(kept=True):
        return _collective_tasks(gpu, topo, kind, nbytes, engine, algo, dtype, fold=unfold)


def _collective_checked(gpu: GpuProfile, topo: Topology, kind: str, nbytes: int, engine: str, algorithm: str,
                        dtype: str) -> str:
    """The algorithm a collective runs with, once its inputs are checked."""
    if kind not in COLLECTIVES:
        raise InputError("--kind", None, f"unknown collective {kind!r}; known: {', '.join(COLLECTIVES)}")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise InputError("--bytes", None, f"must be a positive integer, got {nbytes!r}")
    if engine not in ("sm", "dma"):
        raise InputError("--comm-engine", None, f"unknown engine {engine!r}; known: sm, dma")
    n = topo.num_gpus
    algo = coll.pick_algorithm(algorithm, kind, topo.kind, engine, gpus=n, spec=gpu.comm_kernel,
                               nbytes=nbytes)
    e = DTYPE_BYTES[dtype]
    # the collectives that cut each rank's buffer into one piece per rank need an element per piece
    pieces = n if kind in ("reduce-scatter", "all-reduce", "all-to-all") else 1
    if nbytes // e // pieces == 0:
        raise InputError("--bytes", None, f"{nbytes} B is less than one {dtype} element per piece: {kind} "
                         f"over {n} GPUs needs at least {pieces * e} B per rank")
    return algo


def _collective_tasks(gpu: GpuProfile, topo: Topology, kind: str, nbytes: int, engine: str, algo: str,
                      dtype: str, fold=None):
    """The collective's task graph; ``fold`` (the whole graph, made on demand): GPU 0's share
    only, or None where the GPUs' steps are not one another's turned."""
    n = topo.num_gpus
    e = DTYPE_BYTES[dtype]
    b = GraphBuilder(gpu, n, fold=fold is not None)
    b.rings = coll.ring_orders(topo)
    cols = 1
    # Express sizes in rows of one element so that any byte count lowers exactly.
    if kind == "all-gather":
        coll.all_gather(b, "ag", nbytes // e, cols, dtype, buffer="X", engine=engine, algorithm=algo)
    elif kind == "reduce-scatter":
        coll.reduce_scatter(b, "rs", nbytes // e // n, cols, dtype, buffer="X", staging="R", engine=engine,
                            algorithm=algo)
    elif kind == "all-reduce":
        coll.all_reduce(b, "ar", nbytes // e // n, cols, dtype, buffer="X", staging="R", engine=engine,
                        algorithm=algo)
    elif kind == "all-to-all":
        share = nbytes // e // n
        coll.all_to_all(b, "a2a", [[share] * n for _ in range(n)], cols, dtype, src_buffer="X", dst_buffer="Y",
                        engine=engine)
    else:
        coll.send_recv(b, "p2p", nbytes // e, cols, dtype, buffer="X", engine=engine)
    b.meta.update(collective=kind, bytes=nbytes, algorithm=algo)
    return b.build_folded(fold) if fold is not None else b.build()


def nccl_tests_size(kind: str, nbytes: int, gpus: int) -> int:
    """nccl-tests' ``size`` of a collective of ``nbytes`` per rank (this project's convention):
    the whole gathered array for all-gather, the per-rank buffer otherwise."""
    return nbytes * gpus if kind == "all-gather" else nbytes


def per_rank_bytes(kind: str, size: int, gpus: int) -> int:
    """The inverse of :func:`nccl_tests_size`."""
    return size // gpus if kind == "all-gather" else size


def bus_bandwidth(kind: str, size: int, gpus: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in B/s as nccl-tests reports them (doc/PERFORMANCE.md): algbw = size /
    time; busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather, reduce-scatter and
    all-to-all, x 1 for send-recv."""
    alg = size / seconds
    factor = {"all-reduce": 2 * (gpus - 1) / gpus, "send-recv": 1.0}.get(kind, (gpus - 1) / gpus)
    return alg, alg * factor


def _with_tuner(gpu: GpuProfile, tuner: str | None) -> GpuProfile:
    """``gpu`` whose NCCL tuner sizes calls as ``tuner`` says (None: as the profile does)."""
    if tuner is None or tuner == gpu.comm_kernel.tuner:
        return gpu
    if tuner not in ("call", "rank"):
        raise InputError("--tuner", None, f"must be call or rank, got {tuner!r}")
    return dataclasses.replace(gpu, comm_kernel=dataclasses.replace(gpu.comm_kernel, tuner=tuner))


def collective_tuning(gpu: GpuProfile | str, topology: Topology | str, kind: str, nbytes: int, *,
                      engine: str = "sm", algorithm: str = "auto", tuner: str | None = None) -> tuple[str, int]:
    """(protocol, channels) the collective's SM transfers run with, as NCCL's tuner picks them
    (:meth:`~ficco_sim.hardware.CommKernelSpec.tuned`, the rule both engines use), read off
    its first transfer (a ring's or a grouped call's are alike); ``("-", 0)`` on copy engines."""
    gpu = _with_tuner(load_gpu(gpu), tuner)
    topo = load_topology(topology, gpu)
    folded = collective_folded(gpu, topo, kind, nbytes, engine=engine, algorithm=algorithm)   # GPU 0's share
    graph = folded.graph if folded is not None else collective_graph(gpu, topo, kind, nbytes, engine=engine,
                                                                     algorithm=algorithm)
    t = next((t for t in graph.transfers if t.engine == "sm" and t.drivers), None)
    if t is None:
        return "-", 0
    spec = gpu.comm_kernel
    call, ranks, steps = t.tune or UNTUNED
    p, channels = spec.tuned(t.nbytes, call, ranks, graph.kernel(t.drivers[0]).grid, steps)
    return spec.protocols[int(p)].name, int(channels)


def collective_time(gpu: GpuProfile | str, topology: Topology | str, kind: str, nbytes: int, *,
                    engine: str = "sm", algorithm: str = "auto", sim: str = "des", gpus_per_thread: int = 1,
                    tuner: str | None = None) -> float:
    """Isolated time (s) of one collective over every GPU of ``topology``.

    ``nbytes`` is the per-rank buffer: the shard for all-gather, the full input for
    reduce-scatter and all-reduce, the whole send buffer for all-to-all, the message
    for send-recv. ``algorithm`` is ``ring``, ``direct`` or ``auto`` (ring on rings).
    ``gpus_per_thread``: GPUs one host thread drives (nccl-tests' ``-g``; 1: a process per
    GPU, as training runs): it issues their kernels one after another, so a call takes
    ``(gpus_per_thread - 1) * comm_kernel.issue`` more. ``tuner``: the NCCL tuner's view of
    an all-gather's or reduce-scatter's size (``call`` or ``rank``, before NCCL 2.22; None:
    the profile's ``comm_kernel.tuner``).
    """
    gpu = _with_tuner(load_gpu(gpu), tuner)
    if isinstance(gpus_per_thread, bool) or not isinstance(gpus_per_thread, int) or gpus_per_thread < 1:
        raise InputError("--gpus-per-thread", None, f"must be a positive integer, got {gpus_per_thread!r}")
    topo = load_topology(topology, gpu)
    from .workload import check_memory
    # a rank holds its input, and an all-gather's output is every rank's
    check_memory(gpu, nbytes * (topo.num_gpus if kind == "all-gather" else 1), "--bytes", None,
                 f"a rank's {kind} buffers")
    issue = (gpus_per_thread - 1) * gpu.comm_kernel.issue
    if sim == "des":     # a symmetric collective: lowered and simulated for one GPU
        folded = collective_folded(gpu, topo, kind, nbytes, engine=engine, algorithm=algorithm)
        if folded is not None:
            return simulate_folded(folded, gpu, topo, record=False).makespan + issue
    graph = collective_graph(gpu, topo, kind, nbytes, engine=engine, algorithm=algorithm)
    return _run(graph, gpu, topo, sim, None).makespan + issue
