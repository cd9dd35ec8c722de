"""Size-based schedule heuristics (ficco.md section 5): pick a schedule without a sweep.

Features, all computable before running anything:

* ``ratio``: T_comm / T_comp, isolated, from the analytical model (vectorized, :mod:`.fast`);
* ``waves``: waves of a FiCCO GEMM piece (its tiles / (SMs x resident blocks per SM));
* ``cmd_bytes``: bytes one copy command moves for a FiCCO piece (the DMA overhead share);
* the topology kind (``fc`` / ``switch`` / ``ring``) and the collective.

Rules (a decision list; the thresholds are fitted, see :func:`fit`):

1. ``ratio < ratio_min``: nothing to hide -> ``none``.
2. granularity: ``ficco`` when its piece has at least ``waves_fc`` (fully connected) or
   ``waves_switch`` (otherwise) waves, else ``shard``.
3. engine: ``dma`` when a command moves at least ``dma_bytes``, else ``sm``.
4. compute grouping (``ficco``): the smallest group whose GEMM has ``group_waves`` waves.

>>> h = Heuristic()
>>> h.pick({"ratio": 0.01, "waves": 4, "cmd_bytes": 1e6, "topology_kind": "fc", "steps": 8})[0]
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
from ..gemm_model import plan_gemm
from ..hardware import GpuProfile, load_gpu
from ..topology import Topology, load_topology
from ..workload import Scenario
from .space import group_sizes, steps_of

THRESHOLDS_FILE = Path(__file__).with_name("heuristics.json")


@dataclass(frozen=True)
class Heuristic:
    """Fitted thresholds (defaults: a prior before fitting)."""

    ratio_min: float = 0.05
    waves_fc: float = 0.5
    waves_switch: float = 1.0
    dma_bytes: float = 1 << 20
    group_waves: float = 1.0

    def pick(self, f: dict) -> tuple[str, list[str]]:
        """(schedule name, reasons) for features ``f`` (see :func:`features`)."""
        why = [f"comm/compute ratio {f['ratio']:.2f}"]
        if f["ratio"] < self.ratio_min:
            return "none", why + [f"below {self.ratio_min:.2f}: too little communication to hide"]
        need = self.waves_fc if f["topology_kind"] == "fc" else self.waves_switch
        if f["waves"] >= need:
            gran = "ficco"
            why.append(f"a FiCCO piece fills {f['waves']:.2f} waves >= {need:.2f} on {f['topology_kind']}: "
                       "finer pieces pay little decomposition loss")
        else:
            gran = "shard"
            why.append(f"a FiCCO piece fills {f['waves']:.2f} waves < {need:.2f}: decomposition loss would dominate")
        cmd = f["cmd_bytes"] * (f["gpus"] if gran == "shard" and "gpus" in f else 1)
        if cmd >= self.dma_bytes:
            engine = "dma"
            why.append(f"{cmd / 2**20:.2f} MiB per copy command >= {self.dma_bytes / 2**20:.2f} MiB: "
                       "copy engines avoid SM contention")
        else:
            engine = "sm"
            why.append(f"{cmd / 2**20:.2f} MiB per copy command < {self.dma_bytes / 2**20:.2f} MiB: "
                       "per-command overhead would dominate")
        name = f"{gran}-{'a2a' if gran == 'ficco' else 'p2p'}-{engine}"
        if gran == "ficco" and f["waves"] > 0:
            group = next((g for g in group_sizes(f["steps"]) if g * f["waves"] >= self.group_waves), f["steps"])
            if group > 1:
                name += f"-g{group}"
                why.append(f"{group} steps per GEMM reach {self.group_waves:.2f} waves")
        return name, why


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
    from ..schedules import Schedule
    return {"ratio": row["t_comm_iso"] / row["t_comp_iso"], "waves": waves, "cmd_bytes": cmd,
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
    "ratio_min": [0.0, 0.02, 0.05, 0.1, 0.2],
    "waves_fc": [0.0, 0.25, 0.5, 1.0, 2.0, math.inf],
    "waves_switch": [0.0, 0.5, 1.0, 2.0, 4.0, math.inf],
    "dma_bytes": [0.0, 256 << 10, 1 << 20, 4 << 20, 16 << 20, math.inf],
    "group_waves": [0.0, 0.5, 1.0, 2.0, 4.0],
}


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
    """top-1 (the pick is the simulated optimum) and within-5% shares."""
    top1 = within = 0
    for c in table:
        sp = c["speedups"]
        best = max(sp.values())
        pick, _ = h.pick(c["features"])
        got = sp.get(pick, 0.0)
        top1 += got >= best - 1e-12
        within += got >= 0.95 * best
    n = max(1, len(table))
    return {"top1": top1 / n, "within5": within / n, "cases": len(table)}


def fit(table: Sequence[dict]) -> Heuristic:
    """Grid-search the thresholds that maximize (within-5%, top-1) on ``table``."""
    best, best_key = Heuristic(), (-1.0, -1.0)
    names = list(GRID)
    for values in itertools.product(*(GRID[k] for k in names)):
        h = Heuristic(**dict(zip(names, values)))
        s = score(h, table)
        key = (s["within5"], s["top1"])
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
        if sc.kind != "gemm-rs":   # see the report: reduce kernels crash on profiles with no smem reservation
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
