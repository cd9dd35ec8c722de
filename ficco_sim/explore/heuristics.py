"""The ``recommend`` heuristic: pick a schedule from sizes alone, in milliseconds, and say why.

It reads everything from the closed-form engine on the lowered graphs of its candidates
(:func:`candidate_schedules`: valid points of the schedule space, so every pick is a
schedule ``simulate`` accepts, decomposed along the scenario's shard dimension):
each candidate's predicted makespan with the contention rule scaled by fitted weights
(:class:`~ficco_sim.contention.Weights`), its decomposition loss and communication
share. Rule: among the candidates predicted within ``margin`` of the fastest, the
simplest (``none``, then shard, then FiCCO from the coarsest compute grouping down);
where the closed form cannot tell a high-priority communication stream from a normal
one (it does not model starvation), ``prefer_high`` says which to take, except beside persistent
GEMMs (H100/H200), where a higher priority buys nothing (measured on the H200) and the plain
schedule is the simpler.

The knobs are fitted (:func:`fit`) against the discrete-event optimum
(``validation/heuristic/des_oracle.csv``, made by ``benchmarks/heuristic_oracle.py``) and
scored on held-out model families (:func:`cross_validate`): every case is scored by knobs
fitted without its family.

>>> from ficco_sim.workload import Scenario
>>> rec = recommend(Scenario("ag-gemm", 4, 4096, 4096, 4096), "h100", "switch:4")
>>> rec["schedule"] in {s.name for s in candidate_schedules(Scenario("ag-gemm", 4, 4096, 4096, 4096), "h100",
...                                                             "switch:4")}
True
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import pandas as pd

from ..contention import PROFILE, Weights
from ..errors import InputError
from ..files import write_text_atomic
from ..hardware import GpuProfile, load_gpu
from ..schedules import Schedule, parse_schedule
from ..topology import Topology, load_topology
from ..workload import Scenario
from .estimate import estimate_many

THRESHOLDS_FILE = Path(__file__).with_name("heuristics.json")
ORACLE_FILE = Path(__file__).resolve().parents[2] / "validation" / "heuristic" / "des_oracle.csv"
TIE = 0.01   # schedules within 1% of the optimum count as tied for top-1
FAMILIES = {"llama3-405b": "llama", "llama3-70b": "llama", "llama-70b": "llama", "mixtral-8x7b": "mixtral",
            "mixtral-8x22b": "mixtral", "gpt3-175b": "gpt"}


def candidate_schedules(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str, *,
                        gemm_first: bool = False) -> list[Schedule]:
    """The schedules the heuristic can pick (the oracle is taken over the same set): the valid
    points of the space's ``candidates`` level, so every pick is one ``simulate`` accepts.
    ``gemm_first``: a GEMM beside an independent collective is already running when the
    collective is issued (the side-by-side candidates issue it first: ``-gf``)."""
    from .space import valid_schedules
    cands = valid_schedules(scenario, gpu, topology, level="candidates")
    if gemm_first and not scenario.spec.independent:
        raise InputError("--gemm-first", None, f"a launch order of a GEMM beside an independent collective; "
                         f"{scenario.kind} is dependent")
    return [replace(s, gemm_first=True) if gemm_first and s.granularity == "par" else s for s in cands]


@dataclass(frozen=True)
class Heuristic:
    """Fitted knobs: contention weights of the closed-form prediction, the margin a
    candidate must win by over a simpler one, and the tie-break on stream priority."""

    sm: float = 1.0
    hbm: float = 1.0
    margin: float = 0.0
    prefer_high: bool = True

    @property
    def weights(self) -> Weights:
        return Weights(self.sm, self.hbm)

    def choose(self, predicted: dict[str, float], persistent: bool = False) -> str:
        """The pick among predicted makespans (see module docstring); ``persistent``: the GPU's
        GEMMs are persistent kernels."""
        best = min(predicted.values())
        order = sorted(predicted, key=lambda c: _simplicity(c, self.prefer_high and not persistent))
        return next(c for c in order if predicted[c] <= best * (1.0 + self.margin))


def _simplicity(name: str, prefer_high: bool) -> tuple:
    s = parse_schedule(name)
    gran = ("none", "par", "shard", "ficco", "fused").index(s.granularity)
    high = (s.priority == "high") != prefer_high
    return (gran, -s.group, s.engine == "sm", high, s.margin > 0, s.smem > 0)


def predictions(scenarios: Sequence[Scenario], gpu: GpuProfile | str, topology: Topology | str,
                weights: Weights = Weights(), *, gemm_first: bool = False) -> list[list[dict]]:
    """Closed-form rows of every candidate of every scenario (one list per scenario),
    batched: scenarios with the same candidate set share one estimate call."""
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    by_cands: dict[tuple, list[int]] = defaultdict(list)
    for i, sc in enumerate(scenarios):
        by_cands[tuple(s.name for s in candidate_schedules(sc, gpu, topo, gemm_first=gemm_first))].append(i)
    out: list[list[dict]] = [[] for _ in scenarios]
    for cands, idx in by_cands.items():
        rows = estimate_many([scenarios[i] for i in idx], cands, gpu, topo, weights=weights)
        for a, i in enumerate(idx):
            out[i] = rows[a * len(cands):(a + 1) * len(cands)]
    return out


def recommend(scenario: Scenario, gpu: GpuProfile | str, topology: Topology | str,
              heuristic: Heuristic | None = None, *, gemm_first: bool = False) -> dict:
    """The heuristic's pick for one scenario, with the closed-form rows and the reasons.
    ``gemm_first``: see :func:`candidate_schedules` (the presets are issued so too)."""
    h = heuristic or load_heuristic()
    gpu = load_gpu(gpu)
    topo = load_topology(topology, gpu)
    scenario.check_fits(gpu)
    ranked = predictions([scenario], gpu, topo, h.weights, gemm_first=gemm_first)[0]
    name = h.choose({r["schedule"]: r["makespan"] for r in ranked}, gpu.gemm.persistent)
    # the fitted weights rank the candidates; the numbers shown are the closed form's with the
    # profile's rule (`simulate --engine analytical`), as the presets' below
    rows = ranked if h.weights == PROFILE else predictions([scenario], gpu, topo, gemm_first=gemm_first)[0]
    t = {r["schedule"]: r["makespan"] for r in rows}
    by = {r["schedule"]: r for r in rows}
    base, pick = by["none"], by[name]
    why = [f"comm/compute ratio {base['t_comm_iso'] / base['t_comp_iso']:.2f} (compute "
           f"{base['t_comp_iso'] * 1e3:.3f} ms, communication {base['t_comm_iso'] * 1e3:.3f} ms) on {topo.kind}"]
    if name == "none":
        why.append("no overlapped candidate is predicted to beat communication then compute")
    else:
        losses = (f"its GEMM runs {_share(pick['cil_compute'])} slower beside the collective, which runs "
                  f"{_share(pick['cil_comm'])} slower beside the GEMM" if scenario.spec.independent else
                  f"its GEMM pieces lose {pick['dil_compute']:.0%} to decomposition and {pick['cil_compute']:.0%} "
                  "to contention")
        past = (": its own transfers alone are faster than none's collective, whose time the ideal takes"
                if pick["of_ideal"] > 1 else "")
        why.append(f"predicted {t['none'] / t[name]:.2f}x over no overlap ({pick['of_ideal']:.0%} of the ideal "
                   f"{pick['ideal_speedup']:.2f}x{past}); " + losses)
    why += _launch_order_line(scenario, gpu, topo, name, t)
    runner = sorted((c for c in t if c != name), key=t.get)[:2]
    why.append("next best: " + ", ".join(f"{c} ({t['none'] / t[c]:.2f}x)" for c in runner))
    if runner and t[runner[0]] < t[name]:
        why.append(f"{runner[0]} reads faster here, but the pick follows the contention weights fitted against "
                   "the discrete-event engine, which rank it first; simulate both to settle it")
    return {"schedule": name, "reasons": why, "predicted": t, "rows": rows, "ranked": ranked,
            "t_comp": base["t_comp_iso"], "t_comm": base["t_comm_iso"], "t_none": base["makespan"],
            "presets": preset_answers(scenario, gpu, topo, gemm_first=gemm_first)}


def _share(x: float) -> str:
    """A fraction as a whole percentage, rounding error below it shown as 0% (not -0%)."""
    return f"{(0.0 if abs(x) < 0.005 else x):.0%}"


def losses(m: dict) -> list[tuple[str, float]]:
    """Where an overlapped schedule's time goes, largest first, in seconds: decomposition
    (DIL) and contention (CIL) on the GEMM, contention on the communication, and the
    communication left exposed (no GEMM running)."""
    parts = [("DIL", m["dil_compute"] * m["t_comp_iso"]), ("CIL on compute", m["cil_compute"] * m["t_comp_iso"]),
             ("CIL on comm", m["cil_comm"] * m["t_comm_iso"]), ("exposed comm", m["exposed_comm"])]
    return sorted(((k, v) for k, v in parts if v > 0), key=lambda kv: -kv[1])


def _loss_text(m: dict) -> str:
    shown = []
    for name, sec in losses(m)[:2]:
        share = {"DIL": m["dil_compute"], "CIL on compute": m["cil_compute"], "CIL on comm": m["cil_comm"]}.get(name)
        shown.append(f"{name} {sec * 1e3:.3f} ms" + (f" ({share:.0%})" if share is not None else ""))
    return ", ".join(shown) or "nothing measurable"


def _launch_order_line(scenario: Scenario, gpu: GpuProfile, topo: Topology, name: str, t: dict) -> list[str]:
    """For an SM collective picked beside an independent GEMM: what is left where the launch
    order differs across ranks (``-mix``: nothing orders two streams issued at once), and the
    candidate that keeps most either way when the pick loses there."""
    chosen = parse_schedule(name)
    if chosen.granularity != "par" or chosen.engine != "sm" or chosen.gemm_first:
        return []
    sm = [c for c in t if c.startswith("par-sm") and not parse_schedule(c).gemm_first]
    mixed = dict(zip(sm, (r["makespan"] for r in estimate_many([scenario], [replace(parse_schedule(c), mixed=True)
                                                                              for c in sm], gpu, topo))))
    if mixed[name] <= t[name] * (1 + TIE):
        return [f"a launch order differing across ranks ({name}-mix) changes nothing here: {t['none'] / mixed[name]:.2f}x"]
    either = {c: max(t[c], mixed.get(c, t[c])) for c in t}
    safe = min(either, key=either.get)
    return [f"that assumes each rank's collective reaches its GPU before the GEMM; where the order differs across "
            f"ranks ({name}-mix: nothing orders two streams issued at once) it reads {t['none'] / mixed[name]:.2f}x, "
            "the collective waiting for the GEMMs that got there first"
            + (f"; {safe} keeps {t['none'] / either[safe]:.2f}x either way" if safe != name else "")]


def preset_answers(scenario: Scenario, gpu: GpuProfile, topo: Topology, *, gemm_first: bool = False) -> list[dict]:
    """Every preset at its defaults (closed form), best first: its schedule, its speedup over
    no overlap and what it loses; presets that do not apply, with the reason, last.
    ``gemm_first``: side-by-side presets with the GEMM issued first."""
    from ..schedules.presets import PRESETS, applicable
    from ..simulate import baseline, simulate
    got = applicable(scenario, gpu, topo)
    base = baseline(scenario, gpu, topo, engine="analytical")
    out = []
    for p in [p for p, s in got.items() if not isinstance(s, str)]:
        s = got[p]
        try:
            r = simulate(scenario, replace(s, gemm_first=True) if gemm_first and s.granularity == "par" else p, gpu,
                         topo, engine="analytical", base=base)
        except InputError as e:    # e.g. a shaping no tile of this GPU can hold
            got[p] = e.message
            continue
        knobs = ", ".join(f"{k.name}={k.default}" for k in PRESETS[p].knobs)
        out.append({"preset": p, "schedule": r.schedule.name, "knobs": knobs, "speedup": r.metrics["speedup"],
                    "losses": _loss_text(r.metrics), "metrics": r.metrics})
    out.sort(key=lambda a: -a["speedup"])
    return out + [{"preset": p, "reason": s} for p, s in got.items() if isinstance(s, str)]


def preset_lines(answers: list[dict]) -> list[str]:
    """``recommend``'s answer in the presets' terms (see :func:`preset_answers`)."""
    ran = [a for a in answers if "speedup" in a]
    if not ran:
        return ["no preset applies here"]
    best = ran[0]
    cfg = f" with {best['knobs']}" if best["knobs"] else ""
    lines = [f"use {best['preset']}{cfg} (= {best['schedule']}; expected {best['speedup']:.2f}x over no overlap)"
             if best["speedup"] > 1.0 + 1e-9 else
             f"overlap loses here: the best preset, {best['preset']}, is {best['speedup']:.2f}x of no overlap; "
             f"it loses {best['losses']}"]
    for a in ran[1:]:
        if a["preset"] == "nccl":
            continue
        verdict = "loses" if a["speedup"] < 1.0 - 1e-9 else "gains"
        lines.append(f"{a['preset']} (= {a['schedule']}): {a['speedup']:.2f}x, {verdict}; it loses {a['losses']}")
    lines += [f"{a['preset']}: does not apply ({a['reason']})" for a in answers if "reason" in a]
    return lines


# ----------------------------------------------------------------------------------------
# Fitting against the DES optimum

GRID = {
    "sm": [0.0, 0.5, 1.0, 2.0],
    "hbm": [0.0, 1.0, 2.0, 4.0],
    "margin": [0.0, 0.01, 0.02, 0.05],
    "prefer_high": [True, False],
}


def training_cases() -> list[tuple[Scenario, str, str]]:
    """Built-in library scenarios (<= 8 GPUs) on H100 behind a switch and MI300X fully connected."""
    from .library import builtin_library
    cases = []
    for sc in builtin_library():
        if sc.gpus > 8:
            continue
        cases.append((sc, "h100", f"switch:{sc.gpus}"))
        cases.append((sc, "mi300x", f"fc:{sc.gpus}"))
    return cases


def family(scenario: Scenario) -> str:
    """The model family a library scenario belongs to (held out together)."""
    return FAMILIES.get(scenario.meta.get("model", ""), scenario.meta.get("model", "user"))


def load_oracle(path: str | Path = ORACLE_FILE) -> pd.DataFrame:
    """The DES optimum table (one row per case x candidate: ``speedup`` from the DES)."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), None, "no DES oracle table: run `python benchmarks/heuristic_oracle.py` first")
    return pd.read_csv(p, comment="#")


def prediction_table(cases: Sequence[tuple[Scenario, str, str]], weights: Weights) -> dict[tuple, dict[str, float]]:
    """Closed-form makespan of every candidate, per (scenario label, gpu, topology)."""
    out = {}
    by_pair: dict[tuple, list[Scenario]] = defaultdict(list)
    for sc, gpu, topo in cases:
        by_pair[(gpu, topo)].append(sc)
    for (gpu, topo), scs in by_pair.items():
        for sc, rows in zip(scs, predictions(scs, gpu, topo, weights)):
            out[(sc.label(), gpu, topo)] = {r["schedule"]: r["makespan"] for r in rows}
    return out


def score(h: Heuristic, preds: dict[tuple, dict[str, float]], oracle: dict[tuple, dict[str, float]],
          keys: Sequence[tuple]) -> dict:
    """Shares of cases ``keys`` where the pick is the DES optimum (``top1``), within 1% of it
    (``top1_ties``) and within 5% (``within5``)."""
    top1 = ties = within = 0
    persistent = {g: load_gpu(g).gemm.persistent for g in {key[1] for key in keys}}
    for key in keys:
        sp = oracle[key]
        best = max(sp.values())
        got = sp[h.choose(preds[key], persistent[key[1]])]
        top1 += got >= best - 1e-12
        ties += got >= (1.0 - TIE) * best
        within += got >= 0.95 * best
    n = max(1, len(keys))
    return {"top1": top1 / n, "top1_ties": ties / n, "within5": within / n, "cases": len(keys)}


def _tables(cases, oracle_df: pd.DataFrame):
    oracle: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in oracle_df.itertuples():
        oracle[(r.scenario, r.gpu, r.topology)][r.schedule] = r.speedup
    preds = {}
    for sm, hbm in itertools.product(GRID["sm"], GRID["hbm"]):
        preds[(sm, hbm)] = prediction_table(cases, Weights(sm, hbm))
    keys = [(sc.label(), g, t) for sc, g, t in cases]
    missing = [k for k in keys if k not in oracle or set(oracle[k]) != set(preds[(1.0, 1.0)][k])]
    if missing:
        raise InputError(str(ORACLE_FILE), None, f"the DES oracle does not cover {missing[0]} with today's candidates: "
                         "re-run `python benchmarks/heuristic_oracle.py`")
    return preds, dict(oracle)


def fit(preds, oracle, keys: Sequence[tuple]) -> Heuristic:
    """Grid-search the knobs that maximize (within-5%, tie-aware top-1, top-1) on ``keys``."""
    best, best_key = Heuristic(), (-1.0, -1.0, -1.0)
    for sm, hbm, margin, high in itertools.product(*GRID.values()):
        h = Heuristic(sm, hbm, margin, high)
        s = score(h, preds[(sm, hbm)], oracle, keys)
        key = (s["within5"], s["top1_ties"], s["top1"])
        if key > best_key:
            best, best_key = h, key
    return best


def cross_validate(cases=None, oracle_path: str | Path = ORACLE_FILE) -> dict:
    """Leave-one-model-family-out: knobs fitted on the other families score each family; the
    pooled score counts every case once. Also the knobs fitted on everything (shipped)."""
    cases = list(cases or training_cases())
    preds, oracle = _tables(cases, load_oracle(oracle_path))
    fam = {(sc.label(), g, t): family(sc) for sc, g, t in cases}
    keys = list(fam)
    folds, picks = {}, []
    for f in sorted(set(fam.values())):
        train = [k for k in keys if fam[k] != f]
        test = [k for k in keys if fam[k] == f]
        h = fit(preds, oracle, train)
        folds[f] = {"knobs": asdict(h), **score(h, preds[(h.sm, h.hbm)], oracle, test)}
        picks += [(h, k) for k in test]
    pooled = {"top1": 0.0, "top1_ties": 0.0, "within5": 0.0}
    for h, k in picks:
        s = score(h, preds[(h.sm, h.hbm)], oracle, [k])
        for m in pooled:
            pooled[m] += s[m] / len(picks)
    shipped = fit(preds, oracle, keys)
    closed_form = score(Heuristic(1.0, 1.0, 0.0, True), preds[(1.0, 1.0)], oracle, keys)
    return {"held_out": {**pooled, "cases": len(picks)}, "folds": folds, "knobs": asdict(shipped),
            "train_all": score(shipped, preds[(shipped.sm, shipped.hbm)], oracle, keys),
            "profile_weights_no_margin": closed_form}


def fit_and_save(path: str | Path = THRESHOLDS_FILE, cases=None, oracle_path: str | Path = ORACLE_FILE) -> dict:
    """Cross-validate, fit on every family, and write the knobs + date + accuracy to ``path``."""
    cv = cross_validate(cases, oracle_path)
    doc = {"thresholds": cv["knobs"], "fitted": _dt.date.today().isoformat(),
           "engine": "closed form (ficco_sim.engine.closed_form) with fitted contention weights",
           "oracle": f"DES optimum over candidate_schedules ({Path(oracle_path).name}, benchmarks/heuristic_oracle.py)",
           "split": "leave one model family out (llama, mixtral, gpt); held_out pools every case scored by knobs "
                    "fitted without its family",
           "held_out": cv["held_out"], "folds": cv["folds"], "train_all": cv["train_all"],
           "profile_weights_no_margin": cv["profile_weights_no_margin"]}
    write_text_atomic(path, json.dumps(doc, indent=2) + "\n")
    return doc


def load_heuristic(path: str | Path = THRESHOLDS_FILE) -> Heuristic:
    """Knobs from ``path`` (shipped: ``heuristics.json``; the profile's rule if it was never
    fitted); a file a user names must exist."""
    p = Path(path)
    if not p.exists():
        if p != Path(THRESHOLDS_FILE):
            raise InputError("--heuristics", None, f"{p}: no such file")
        return Heuristic()
    try:
        th = json.loads(p.read_text())["thresholds"]
        return Heuristic(float(th["sm"]), float(th["hbm"]), float(th["margin"]), bool(th["prefer_high"]))
    except json.JSONDecodeError as e:
        raise InputError(str(p), None,
                         f"not a heuristics file (JSON): line {e.lineno} column {e.colno}: {e.msg}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(str(p), "thresholds", f"not a heuristics file: {e}") from None


__all__ = ["Heuristic", "candidate_schedules", "cross_validate", "fit", "fit_and_save", "load_heuristic",
           "losses", "predictions", "preset_answers", "preset_lines", "recommend", "training_cases"]
