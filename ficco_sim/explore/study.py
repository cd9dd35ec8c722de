"""An explore study: scenarios x (GPU, topology) x schedules -> points, per-scenario summary, files.

>>> from ficco_sim.workload import Scenario
>>> pts, summ = run_study([Scenario("ag-gemm", 2, 2048, 1024, 1024, name="tiny")], [("h100", "switch:2")],
...                       engine="analytical", progress=False)
>>> summ.loc[0, "scenario"], bool(summ.loc[0, "speedup"] >= 1.0)
('tiny', True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from ..errors import InputError
from ..schedules import basic_schedules
from ..topology import BUILDERS
from ..workload import Scenario
from .library import MODELS, model_layers
from .space import enumerate_space
from ..files import atomic_path
from .sweep import ENGINES, Job, run_sweep

DEFAULT_PAIRS = (("h100", "switch:8"), ("mi300x", "fc:8"))
CONFIRM_TOP = 5      # schedules per scenario the DES confirms after the closed form ranked them all
STUDY_ENGINES = ("confirm", "des", "analytical")
LOSSES = ("dil_compute", "cil_compute", "cil_comm", "exposed_comm")


def default_scenarios() -> list[Scenario]:
    """The built-in default study: a dozen layers on 8 GPUs, at two token counts."""
    out = []
    for t in (4096, 16384):
        out += [s for s in model_layers(MODELS["llama-70b"], t, 8) if s.meta["layer"] in ("qkv", "out", "down")
                and s.meta["phase"] == "fwd" or s.meta["phase"] == "wgrad" and s.meta["layer"] == "qkv"]
        out += model_layers(MODELS["mixtral-8x7b"], t, 8)[-1:]   # the EP all-to-all
    out += [s for s in model_layers(MODELS["gpt3-175b"], 4096, 8) if s.meta["layer"] in ("qkv", "up")
            and s.meta["phase"] == "fwd"]
    return out


def topology_for(topology: str, gpus: int) -> str | None:
    """``kind:N`` rescaled to the scenario's GPU count; a file topology as is."""
    kind, sep, _ = topology.partition(":")
    if sep and kind in BUILDERS:
        return f"{kind}:{gpus}"
    return topology


def build_jobs(scenarios: Sequence[Scenario], pairs: Sequence[tuple[str, str]], *, engine: str = "des",
               space: str = "basic", notes: list[str] | None = None) -> tuple[list[Job], list[dict]]:
    """Jobs for every scenario on every (gpu, topology), and the invalid points with reasons.
    A parametric topology is resized to each scenario's GPU count; ``notes`` gets one line per
    resize and per topology the GPU cannot form (its scenarios are then invalid points)."""
    if engine not in ENGINES:
        raise InputError("--engine", None, f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    jobs, invalid = [], []
    said: dict[tuple, list[str]] = {}
    blocked: dict[tuple, list[tuple[str, str]]] = {}
    for gpu, topo in pairs:
        batch: dict = {}
        for sc in scenarios:
            t = topology_for(topo, sc.gpus)
            try:
                pts = enumerate_space(sc, gpu, t, level=space)
            except InputError as e:
                if e.where == "--topology":          # the GPU cannot form this topology
                    said.setdefault((gpu, topo, t, e.message), []).append(sc.label())
                    invalid.append({"gpu": gpu, "topology": t, "scenario": sc.label(), "scenario_id": sc.key(),
                                    "schedule": "*", "reason": e.message})
                    continue
                raise
            if t != topo:
                said.setdefault((gpu, topo, t, ""), []).append(sc.label())
            ok = tuple(p.schedule.name for p in pts if p.valid)
            if not ok and pts:      # nothing of it runs here (a file topology of another GPU count...)
                blocked.setdefault((gpu, t), []).append((sc.label(), pts[0].reason))
            invalid += [{"gpu": gpu, "topology": t, "scenario": sc.label(), "scenario_id": sc.key(),
                         "schedule": p.schedule.name,
                         "reason": p.reason} for p in pts if not p.valid]
            if engine in ("analytical", "rank"):
                batch.setdefault((t, ok), []).append(sc)
            else:
                jobs.append(Job(gpu, t, (sc,), ok, engine))
        jobs += [Job(gpu, t, tuple(scs), ok, engine) for (t, ok), scs in batch.items()]
    if notes is not None:
        for (gpu, t), lost in blocked.items():
            notes.append(f"{gpu} {t}: {len(lost)} scenario(s) with no schedule that runs here, e.g. {lost[0][0]} "
                         f"({lost[0][1]}); --show-invalid lists them")
        for (gpu, asked, got, why), labels in said.items():
            notes.append(f"{gpu} {asked}: {len(labels)} scenario(s) on {got.partition(':')[2]} GPUs "
                         + (f"not run ({why})" if why else f"run on {got}") + f", e.g. {labels[0]}")
    return jobs, invalid


def summarize(points: pd.DataFrame) -> pd.DataFrame:
    """Per (gpu, topology, scenario): the best schedule, its speedup, ideal, share of ideal, losses."""
    ok = points[points["status"] == "ok"]
    rows = []
    for (gpu, topo, _), grp in ok.groupby(["gpu", "topology", "scenario_id"], sort=False):
        best = grp.loc[grp["speedup"].idxmax()]
        sc = best["scenario"]
        m = int(best["m"]) if best["kind"] != "ag-gemm" or "dimK" not in best["schedule"] else int(best["k"])
        rows.append({"gpu": gpu, "topology": topo, "scenario": sc, "scenario_id": best["scenario_id"],
                     "kind": best["kind"], "best": best["schedule"],
                     "speedup": best["speedup"], "ideal_speedup": best["ideal_speedup"], "of_ideal": best["of_ideal"],
                     **{k: best[k] for k in LOSSES}, "t_comp_iso": best["t_comp_iso"],
                     "t_comm_iso": best["t_comm_iso"], "t_none": best["makespan"] * best["speedup"],
                     "makespan": best["makespan"], "piece_rows": m / int(best["gpus"]) ** 2,
                     "schedules": len(grp)})
    return pd.DataFrame(rows)


def run_study(scenarios: Sequence[Scenario], pairs: Sequence[tuple[str, str]], *, engine: str = "confirm",
              space: str = "full", workers: int = 1, ray: bool | str = False, out: str | Path | None = None,
              progress: bool = True, top: int = CONFIRM_TOP) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the sweep and return (points, summary) DataFrames (SI units).

    ``engine="confirm"`` (the default): the closed form ranks every schedule of ``space``,
    then the discrete-event engine runs the ``top`` fastest of each scenario and ``none``;
    the summary's best and losses are the DES's (its ``engine`` column says ``confirm``,
    ``confirmed`` how many schedules the DES ran). ``des`` / ``analytical`` run one engine
    on every point."""
    if engine not in STUDY_ENGINES:
        raise InputError("--engine", None, f"unknown engine {engine!r}; known: {', '.join(STUDY_ENGINES)}")
    notes: list[str] = []
    first = "rank" if engine == "confirm" else engine
    jobs, invalid = build_jobs(scenarios, pairs, engine=first, space=space, notes=notes)
    rows = run_sweep(jobs, workers=workers, ray=ray, out=out, progress=progress)
    if engine == "confirm":
        if space == "presets":    # a handful per scenario, compared side by side: the DES runs them all
            top = max(top, max((len(j.schedules) for j in jobs), default=top))
        rows += run_sweep(confirm_jobs(rows, scenarios, top), workers=workers, ray=ray, out=out, progress=progress)
    points = ordered(named_apart(pd.DataFrame(rows)))
    summary = summarize(points[points["engine"] == "des"] if engine == "confirm" else points)
    if engine == "confirm" and len(summary):
        ranked = points[(points["engine"] == "des") & (points["status"] == "ok")]
        summary["confirmed"] = summary.merge(ranked.groupby(["gpu", "topology", "scenario_id"]).size()
                                             .rename("n").reset_index(), how="left")["n"].to_numpy()
    summary = per_scenario(summary, scenarios)
    summary["engine"], summary["space"] = engine, space
    # (attached last: pandas deep-copies ``attrs`` into every frame an operation makes, and the
    # invalid schedules of a wide sweep are thousands of entries)
    points.attrs["invalid"] = invalid
    points.attrs["notes"] = notes
    return points, summary


def per_scenario(summary: pd.DataFrame, scenarios: Sequence[Scenario]) -> pd.DataFrame:
    """The summary's rows (one per GPU, topology and shape: scenarios of one shape share their
    points), each repeated for every scenario of its shape given (in the order given) with that
    scenario's own name and model, layer, phase and tokens: two models with a layer of one shape
    each keep it."""
    cols = ("model", "layer", "phase", "tokens")
    if summary.empty:
        return summary.assign(**{c: [] for c in cols})
    seen, by_key = set(), {}
    for s in scenarios:
        key = s.key()
        ident = (key, s.label(), tuple(s.meta.get(c) for c in cols))
        if ident not in seen:
            seen.add(ident)
            by_key.setdefault(key, []).append(s)
    rows = []
    for _, r in summary.iterrows():
        for s in by_key.get(r["scenario_id"]) or [None]:
            rows.append({**r.to_dict(), **({"scenario": s.label(), **{c: s.meta.get(c) for c in cols}} if s else
                                           {c: None for c in cols})})
    return pd.DataFrame(rows)


def named_apart(points: pd.DataFrame) -> pd.DataFrame:
    """Points whose GPU profiles share a name but were given apart (a calibrated copy of a
    built-in profile keeps its ``name``, ``--gpu a100-mine.yaml --gpu a100``) named by the
    ``--gpu`` each came from, so the summary, tables and plots keep them apart."""
    if points.empty or "gpu_arg" not in points:
        return points
    args = points.groupby("gpu")["gpu_arg"].nunique()
    clash = points["gpu"].isin(args[args > 1].index)
    return points.assign(gpu=points["gpu"].where(~clash, points["gpu_arg"])) if clash.any() else points


def confirm_jobs(rows: Sequence[dict], scenarios: Sequence[Scenario], top: int) -> list[Job]:
    """DES jobs for the ``top`` fastest schedules (closed form) of every scenario, and ``none``."""
    by_key = {s.key(): s for s in scenarios}
    ranked: dict[tuple, list[tuple[float, str]]] = {}
    for r in rows:
        if r.get("status") == "ok":
            ranked.setdefault((r["gpu_arg"], r["topology_arg"], r["scenario_id"]), []).append((r["makespan"],
                                                                                           r["schedule"]))
    jobs = []
    for (gpu, topo, sid), pts in ranked.items():
        names = [name for _, name in sorted(pts)[:top]]
        names = ["none"] + [n for n in names if n != "none"]
        jobs.append(Job(gpu, topo, (by_key[sid],), tuple(names), "des"))
    return jobs


def model_totals(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (GPU, topology, model, tokens, GPUs): the layer pairs' times summed, forward and
    backward, with no overlap and with each pair's best schedule, and the speedup of the sum."""
    cols = ["gpu", "topology", "model", "tokens", "gpus", "pairs", "t_none", "t_best", "speedup"]
    s = summary[summary["model"].notna() & (summary["model"] != "user")] if "model" in summary else summary.iloc[:0]
    if s.empty:
        return pd.DataFrame(columns=cols)
    s = s.assign(gpus=s["scenario_id"].str.extract(r"/x(\d+)/", expand=False).astype(int))
    g = s.groupby(["gpu", "topology", "model", "tokens", "gpus"], sort=False)
    out = g.agg(pairs=("scenario", "size"), t_none=("t_none", "sum"), t_best=("makespan", "sum")).reset_index()
    out["speedup"] = out["t_none"] / out["t_best"]
    out["tokens"] = pd.to_numeric(out["tokens"]).astype("Int64")    # 4096, not 4096.0 (user rows had made it float)
    return out[cols]


LEADING = ("gpu", "topology", "scenario", "scenario_id", "kind", "gpus", "m", "n", "k", "dtype", "shard_dim",
           "schedule", "engine", "status", "reason", "makespan", "speedup")
INTERNAL = ("gpu_arg", "topology_arg", "hardware_id")   # the sweep's keys, not results


def ordered(points: pd.DataFrame) -> pd.DataFrame:
    """One column order whatever ran the points (fresh, resumed, any executor): the
    identity and headline columns first, then the metrics alphabetically."""
    cols = [c for c in points.columns if c not in INTERNAL]
    head = [c for c in LEADING if c in cols] or list(LEADING)
    return points.reindex(columns=head + sorted(c for c in cols if c not in LEADING))


def write_tables(points: pd.DataFrame, summary: pd.DataFrame, out: Path, *, invalid: list[dict] | None = None,
                 extra: Sequence[tuple[str, pd.DataFrame]] = ()) -> list[Path]:
    """CSV (and Parquet when pyarrow is there) of points and summary (and ``extra`` named
    tables), written atomically."""
    files = []
    tables = [("points", points), ("summary", summary), ("models", model_totals(summary)), *extra]
    for name, df in tables + ([("invalid", pd.DataFrame(invalid))] if invalid else []):
        p = out / f"{name}.csv"
        with atomic_path(p) as tmp:
            df.to_csv(tmp, index=False)
        files.append(p)
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            continue
        p = out / f"{name}.parquet"
        plain = df.copy(deep=False)     # pandas would write ``attrs`` (every invalid schedule and why)
        plain.attrs = {}                # into the file's metadata, twice: 300 MB, unreadable, on a wide sweep
        with atomic_path(p) as tmp:
            plain.to_parquet(tmp, index=False)
        files.append(p)
    return files


def default_pairs(gpus: Sequence[str], topologies: Sequence[str]) -> list[tuple[str, str]]:
    """(gpu, topology) pairs from the CLI: one GPU for every topology, or one each, in order."""
    if not gpus and not topologies:
        return list(DEFAULT_PAIRS)
    gpus = list(gpus) or ["h100"]
    topologies = list(topologies) or ["switch:8"]
    if len(gpus) == 1:
        return [(gpus[0], t) for t in topologies]
    if len(topologies) == 1:
        return [(g, topologies[0]) for g in gpus]
    if len(gpus) != len(topologies):
        raise InputError("--gpu", None, f"give one --gpu, or one per --topology ({len(topologies)}), "
                         f"got {len(gpus)}")
    return list(zip(gpus, topologies))


__all__ = ["CONFIRM_TOP", "DEFAULT_PAIRS", "basic_schedules", "build_jobs", "confirm_jobs", "default_pairs",
           "default_scenarios", "run_study", "summarize", "write_tables"]
