"""Size-based schedule heuristics (ficco.md section 5): pick a schedule without a sweep.

Features, all computable before running anything (milliseconds):

* ``ratio``: T_comm / T_comp, isolated, from the analytical model;
* per candidate schedule, its pipeline in closed form (:func:`_parts`): the GEMM pieces
  each grouping makes and their isolated times from the GEMM model (so the predicted
  decomposition loss ``dil`` and waves per piece, which catch memory-bound pieces that
  re-read the whole weight matrix), and the communication steps' times from the
  topology (links shared by the transfers of one step: p2p vs a2a, switch vs fully
  connected) and the engine (copy-command overhead per command, SM channels);
* the topology kind and the collective.

Rule: predict each candidate's makespan with a two-stream pipeline (:func:`_pipeline`:
compute pieces wait for the steps they consume, steps for the pieces they send), slowed
by contention while both run (SMs held by communication kernels, HBM shared), and pick
the simplest candidate within ``margin`` of the fastest prediction (``none`` before
``shard`` before FiCCO, coarse compute groups before fine ones). The contention weights
and the margin are fitted (:func:`fit`) on a training split of simulated scenarios.

>>> f = {"ratio": 0.01, "t_comp": 1e-3, "t_comm": 1e-5, "t_none": 1.01e-3, "topology_kind": "fc",
...      "parts": {"shard-p2p-dma": {"steps": [1e-5], "pieces": [(1e-3, -1), (1e-4, 0)], "before": [],
...                "add": 0.0, "rs": False, "launch": 4e-6, "sm_share": 0.0, "hbm_comp": 0.0, "hbm_comm": 0.0,
...                "dil": 0.1, "waves": 1.0}}}
>>> Heuristic().pick(f)[0]
'none'
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import math
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..errors import InputError
from collections import Counter, defaultdict

from ..gemm_model import isolated_time, plan_gemm
from ..hardware import GpuProfile, load_gpu
from ..schedules import Schedule, parse_schedule
from ..topology import Topology, load_topology
from ..workload import Scenario
from .space import group_sizes, steps_of

THRESHOLDS_FILE = Path(__file__).with_name("heuristics.json")


@dataclass(frozen=True)
class Heuristic:
    """Fitted knobs of the closed-form pipeline prediction (defaults: a prior before fitting).

    ``sm_loss``: weight of the SMs an SM communication kernel holds (compute slowdown
    ``1 + sm_loss * channels / (SMs - channels)``); ``hbm``: compute and communication
    slowdown while they overlap (share of the profile's HBM-contention coefficients);
    ``margin``: a candidate must be predicted this much faster than a simpler one to be picked.
    """

    sm_loss: float = 1.0
    hbm: float = 1.0
    margin: float = 0.0

    def predict(self, f: dict) -> dict[str, float]:
        """Predicted time (s) of every candidate from the features' pipeline parts."""
        out = {"none": f["t_none"]}
        for name, p in f["parts"].items():
            cs = 1.0 + self.sm_loss * p["sm_share"] + self.hbm * p["hbm_comp"]
            ms = 1.0 + self.hbm * p["hbm_comm"]
            out[name] = _pipeline(p, cs, ms)
        return out

    def pick(self, f: dict) -> tuple[str, list[str]]:
        """(schedule name, reasons) for features ``f`` (see :func:`features`)."""
        t = self.predict(f)
        # simplest first: none, shard, then FiCCO from the coarsest compute grouping down
        order = sorted(t, key=_simplicity)
        best = min(t.values())
        name = next(c for c in order if t[c] <= best * (1.0 + self.margin))
        why = [f"comm/compute ratio {f['ratio']:.2f} (compute {f['t_comp'] * 1e3:.3f} ms, "
               f"communication {f['t_comm'] * 1e3:.3f} ms) on {f['topology_kind']}"]
        if name == "none":
            why.append("no overlapped schedule is predicted to beat running communication then compute")
        else:
            p = f["parts"][name]
            why.append(f"predicted {t['none'] / t[name]:.2f}x over no overlap; its GEMM pieces lose "
                       f"{p['dil']:.0%} to decomposition (waves per piece {p['waves']:.2f}); "
                       f"{len(p['steps'])} communication steps of {1e3 * sum(p['steps']) / len(p['steps']):.3f} ms")
        runner = sorted((c for c in t if c != name), key=t.get)[:2]
        why.append("next best: " + ", ".join(f"{c} ({t['none'] / t[c]:.2f}x)" for c in runner))
        return name, why


def _simplicity(name: str) -> tuple:
    if name == "none":
        return (0, 0, 0)
    gran = 1 if name.startswith("shard") else 2
    group = int(name.rsplit("-g", 1)[1]) if "-g" in name else 1
    return (gran, -group, "sm" in name)


def _pipeline(p: dict, comp_slow: float, comm_slow: float) -> float:
    """Makespan of one GPU's pipeline: compute pieces on one stream, communication steps on
    another; a piece waits for the step it consumes (``after``), a step for the piece it sends
    (``before``) and, on a ring reduce-scatter, for the previous step's add (``add``)."""
    steps = [c * comm_slow for c in p["steps"]]
    pieces = p["pieces"]
    launch = p["launch"]
    comm_end = [0.0] * len(steps)
    t_comp, t_comm = 0.0, 0.0
    piece_end = []
    if p["rs"]:
        for dur, _ in pieces:
            t_comp += launch + dur * comp_slow
            piece_end.append(t_comp)
        for s, c in enumerate(steps):
            start = max(t_comm, piece_end[min(p["before"][s], len(piece_end) - 1)])
            t_comm = start + c + p["add"]
        return max(t_comp, t_comm)
    for s, c in enumerate(steps):
        t_comm += c
        comm_end[s] = t_comm
    for dur, after in pieces:
        ready = comm_end[after] if after >= 0 else 0.0
        t_comp = max(t_comp, ready) + launch + dur * comp_slow
    return max(t_comp, t_comm)


# ----------------------------------------------------------------------------------------
# Closed-form pipeline prediction per candidate (no task graph, no sweep)

def _step_times(sc: Scenario, gran: str, pattern: str, engine: str, gpu: GpuProfile, topo: Topology,
                channels: int) -> list[float]:
    """Seconds of each communication step on the slowest GPU: transfers of one step share
    links (alpha-beta), copy commands queue per engine, SM transfers share the kernel's channels."""
    n = sc.gpus
    subs = n if gran == "ficco" else 1
    rs = sc.kind == "gemm-rs"
    if sc.kind == "a2a-gemm":
        counts = sc.tokens()
        rows = lambda p, q: counts[p][q] / subs  # noqa: E731
        width = sc.k
    elif rs:
        rows = lambda p, q: sc.shard_rows / subs  # noqa: E731
        width = sc.n
    elif sc.meta.get("shard_dim") == "K":
        rows = lambda p, q: sc.k / n / subs  # noqa: E731
        width = sc.m
    else:
        rows = lambda p, q: sc.shard_rows / subs  # noqa: E731
        width = sc.k
    e = sc.element_bytes
    if pattern == "a2a":
        offsets_per_step = [list(range(1, n))] * subs
    elif rs:
        offsets_per_step = [[1]] * (subs * (n - 1))    # ring: always the next GPU
    else:
        offsets_per_step = [[t] for t in range(1, n) for _ in range(subs)]
    out, rate = [], 0.0
    for offs in offsets_per_step:
        xfers = []   # (src, dst, bytes, issuer, engine slot)
        for g in range(n):
            for t in offs:
                src, dst = (g, (g + t) % n) if rs else ((g - t) % n, g)
                issuer = src if rs else dst
                slot = 0 if pattern == "p2p" else ((t - 1) if not rs else (t - 1)) % gpu.dma.engines
                xfers.append((src, dst, rows(src, dst) * width * e, issuer, slot))
        rnd, pos = {}, Counter()
        for i, (_, _, _, iss, slot) in enumerate(xfers):
            rnd[i] = pos[(iss, slot)] if engine == "dma" else 0
            pos[(iss, slot)] += 1
        share = Counter()
        for i, (s, d, *_r) in enumerate(xfers):
            for link in topo.path_links(s, d):
                share[(link, rnd[i])] += 1
        per_src = Counter(x[0] for x in xfers)
        busy: dict = defaultdict(float)
        for i, (s, d, nb, iss, slot) in enumerate(xfers):
            bw = min(topo.graph.edges[lk]["bandwidth"] / share[(lk, rnd[i])] for lk in topo.path_links(s, d))
            if engine == "dma":
                bw, fixed = min(bw, gpu.dma.bandwidth), gpu.dma.command_overhead
            else:
                bw, fixed = min(bw, channels * gpu.comm_kernel.channel_bandwidth / per_src[s]), 0.0
            bw = min(bw, gpu.hbm_effective)
            t = fixed + topo.path_latency(s, d) + nb / bw
            rate = max(rate, nb / t)
            if engine == "dma":
                busy[(iss, slot)] += t
            else:
                busy[(iss, i)] = max(busy[(iss, i)], t)
        out.append(max(busy.values()) + (gpu.launch_overhead if engine == "sm" else 0.0))
    return out, rate


def _gemm_iso(gpu: GpuProfile, m: float, n: int, k: float, dtype: str, acc: bool = False) -> tuple[float, object]:
    plan = plan_gemm(gpu, max(1, int(round(m))), n, max(1, int(round(k))), dtype, accumulate=acc)
    return isolated_time(gpu, plan, launch=False), plan


def _parts(sc: Scenario, name: str, gpu: GpuProfile, topo: Topology, t_comp: float) -> dict:
    """The pipeline of candidate ``name`` in closed form: step times, GEMM pieces (time, the
    step they wait for), decomposition loss, and contention inputs (see :func:`_pipeline`)."""
    s = parse_schedule(name)
    n, dt, ct = sc.gpus, sc.dtype, gpu.contention
    subs = n if s.granularity == "ficco" else 1
    channels = s.channels or gpu.comm_kernel.channels
    steps, rate = _step_times(sc, s.granularity, s.pattern, s.engine, gpu, topo, channels)
    nsteps = len(steps)
    pieces: list[tuple[float, int]] = []
    before: list[int] = []
    add = 0.0
    rs = sc.kind == "gemm-rs"
    e = sc.element_bytes
    plans = []

    def gemm(m, k, acc=False):
        t, plan = _gemm_iso(gpu, m, sc.n, k, dt, acc)
        plans.append((t, plan))
        return t

    if rs:
        sub = sc.shard_rows / subs
        if s.pattern == "a2a":
            grps = [list(range(i, min(subs, i + s.group))) for i in range(0, subs, s.group)]
            pieces = [(gemm(len(gp) * n * sub, sc.k), -1) for gp in grps]
            before = [next(i for i, gp in enumerate(grps) if j in gp) for j in range(subs)]
            add = sub * sc.n * e * (n + 1) / gpu.hbm_effective + gpu.launch_overhead
        else:
            order = subs * n
            pieces = [(gemm(min(s.group, order - i) * sub, sc.k), -1) for i in range(0, order, s.group)]
            before = [(j * n + t - 1) // s.group for j in range(subs) for t in range(1, n)]
            add = sub * sc.n * e * 3 / gpu.hbm_effective + gpu.launch_overhead
    else:
        if sc.kind == "a2a-gemm":
            counts = sc.tokens()
            g = max(range(n), key=sc.expert_rows)
            local = counts[g][g]
            peers = [(g - t) % n for t in range(1, n)]
            per_step = [sum(counts[p][g] for p in peers) / subs] * subs if s.pattern == "a2a" else \
                [counts[p][g] / subs for p in peers for _ in range(subs)]
        else:
            local = sc.k // n if sc.meta.get("shard_dim") == "K" else sc.shard_rows
            per = local / subs
            per_step = [per * (n - 1)] * subs if s.pattern == "a2a" else [per] * nsteps
        kdim = sc.kind == "ag-gemm" and sc.meta.get("shard_dim") == "K"
        if local:
            pieces.append((gemm(sc.m, local) if kdim else gemm(local, sc.k), -1))
        for i in range(0, nsteps, s.group):
            rows = sum(per_step[i:i + s.group])
            if rows:
                pieces.append((gemm(sc.m, rows, True) if kdim else gemm(rows, sc.k), min(nsteps, i + s.group) - 1))
    t_pieces = sum(d for d, _ in pieces)
    biggest_t, biggest = max(plans, key=lambda x: x[0])
    gemm_rate = biggest.hbm_bytes / max(biggest_t, 1e-12)
    sm_share = channels / max(1, gpu.num_sms - channels) if s.engine == "sm" else 0.0
    return {"steps": steps, "pieces": pieces, "before": before, "add": add, "rs": rs, "launch": gpu.launch_overhead,
            "sm_share": sm_share, "hbm_comp": ct.compute_per_hbm_util * rate / gpu.hbm_bandwidth,
            "hbm_comm": ct.comm_per_hbm_util * gemm_rate / gpu.hbm_bandwidth,
            "dil": t_pieces / max(t_comp - gpu.launch_overhead, 1e-12) - 1.0,
            "waves": min(p.grid / (gpu.num_sms * p.occupancy) for _, p in plans)}


def features(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str) -> dict:
    """The heuristic's features for one scenario (see module docstring)."""
    from .fast import estimate_many
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    row = estimate_many([scenario], ["none"], gpu, topo)[0]
    n = scenario.gpus
    shape = max(scenario.gemm_shapes(), key=lambda g: g.m)
    if scenario.kind == "ag-gemm" and scenario.meta.get("shard_dim") == "K":
        piece = (shape.m, shape.n, max(1, shape.k // n ** 2))
    else:
        piece = (max(1, shape.m // n ** 2), shape.n, shape.k)
    plan = plan_gemm(gpu, *piece, shape.dtype)
    waves = plan.grid / (gpu.num_sms * plan.occupancy)
    cmd = scenario.comm_bytes_per_rank / n / (n if scenario.kind != "ag-gemm" else 1)
    parts = {c: _parts(scenario, c, gpu, topo, row["t_comp_iso"]) for c in candidate_schedules(n) if c != "none"}
    return {"ratio": row["t_comm_iso"] / row["t_comp_iso"], "waves": waves, "cmd_bytes": cmd, "parts": parts,
            "topology_kind": topo.kind, "collective": scenario.collective.kind, "gpus": n,
            "steps": steps_of(scenario, Schedule("ficco")), "t_comp": row["t_comp_iso"], "t_comm": row["t_comm_iso"],
            "t_none": row["makespan"]}


def candidate_schedules(gpus: int) -> list[str]:
    """The schedules the heuristic can pick (the oracle is taken over the same set)."""
    out = ["none"] + [f"shard-p2p-{e}" for e in ("sm", "dma")]
    for e in ("sm", "dma"):
        out += [f"ficco-a2a-{e}" + (f"-g{g}" if g > 1 else "") for g in group_sizes(gpus)]
    return out


# ----------------------------------------------------------------------------------------
# Fitting

GRID = {
    "sm_loss": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0],
    "hbm": [0.0, 0.5, 1.0, 2.0, 4.0],
    "margin": [0.0, 0.01, 0.02, 0.05],
}
TIE = 0.01   # schedules within 1% of the optimum count as tied for top-1


def split(label: str, test_share: float = 0.3) -> str:
    """Deterministic train/test assignment of a scenario (by a hash of its label)."""
    return "test" if (zlib.crc32(label.encode()) % 1000) < test_share * 1000 else "train"


def oracle_table(cases: Sequence[tuple[Scenario, str, str]]) -> list[dict]:
    """For each (scenario, gpu, topology): features and simulated speedup of every candidate."""
    from .fast import estimate_many
    out = []
    for sc, gpu, topo in cases:
        cands = candidate_schedules(sc.gpus)
        rows = {r["schedule"]: r["speedup"] for r in estimate_many([sc], cands, gpu, topo)}
        out.append({"scenario": sc.label(), "gpu": gpu, "topology": topo, "features": features(sc, gpu, topo),
                    "speedups": rows})
    return out


def score(h: Heuristic, table: Sequence[dict]) -> dict:
    """Shares of cases where the pick is the simulated optimum (``top1``), within 1% of it
    (``top1_ties``: several schedules often tie) and within 5% (``within5``)."""
    top1 = ties = within = 0
    for c in table:
        sp = c["speedups"]
        best = max(sp.values())
        pick, _ = h.pick(c["features"])
        got = sp.get(pick, 0.0)
        top1 += got >= best - 1e-12
        ties += got >= (1.0 - TIE) * best
        within += got >= 0.95 * best
    n = max(1, len(table))
    return {"top1": top1 / n, "top1_ties": ties / n, "within5": within / n, "cases": len(table)}


def fit(table: Sequence[dict]) -> Heuristic:
    """Grid-search the knobs that maximize (within-5%, tie-aware top-1, top-1) on ``table``."""
    best, best_key = Heuristic(), (-1.0, -1.0, -1.0)
    names = list(GRID)
    for values in itertools.product(*(GRID[k] for k in names)):
        h = Heuristic(**dict(zip(names, values)))
        s = score(h, table)
        key = (s["within5"], s["top1_ties"], s["top1"])
        if key > best_key:
            best, best_key = h, key
    return best


def training_cases() -> list[tuple[Scenario, str, str]]:
    """Built-in library scenarios on H100 behind a switch and MI300X fully connected."""
    from .library import builtin_library
    cases = []
    for sc in builtin_library():
        if sc.gpus > 8:
            continue
        cases.append((sc, "h100", f"switch:{sc.gpus}"))
        cases.append((sc, "mi300x", f"fc:{sc.gpus}"))
    return cases


def fit_and_save(path: str | Path = THRESHOLDS_FILE, cases=None) -> dict:
    """Simulate the cases (fast engine), fit on the training split, score the held-out
    split, and write thresholds + date + accuracy to ``path`` (JSON)."""
    table = oracle_table(cases or training_cases())
    train = [c for c in table if split(c["scenario"] + c["gpu"]) == "train"]
    test = [c for c in table if split(c["scenario"] + c["gpu"]) == "test"]
    h = fit(train)
    doc = {"thresholds": {k: (None if math.isinf(v) else v) for k, v in asdict(h).items()},
           "fitted": _dt.date.today().isoformat(), "engine": "fast (vectorized analytical model)",
           "split": "30% of scenarios held out by a hash of scenario label + GPU (split()); knobs fitted on the rest",
           "train": score(h, train), "held_out": score(h, test),
           "oracle": "best simulated speedup over the candidate schedules (candidate_schedules)"}
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def load_heuristic(path: str | Path = THRESHOLDS_FILE) -> Heuristic:
    """Thresholds from ``path`` (shipped: ``heuristics.json``); the prior if none."""
    p = Path(path)
    if not p.exists():
        return Heuristic()
    try:
        th = json.loads(p.read_text())["thresholds"]
        return Heuristic(**{k: (math.inf if v is None else float(v)) for k, v in th.items()})
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(str(p), "thresholds", f"not a heuristics file: {e}") from None


def recommend(scenario: Scenario, gpu: str, topology: str, heuristic: Heuristic | None = None) -> dict:
    """The heuristic's pick for one scenario, with the features and the reasons."""
    f = features(scenario, gpu, topology)
    name, why = (heuristic or load_heuristic()).pick(f)
    return {"schedule": name, "reasons": why, "features": f}
