"""The libraries side by side on a model's layers (``explore --space presets``).

Every preset (:mod:`ficco_sim.schedules.presets`) at its defaults is mapped onto each layer's
schedule; the study has run those schedules (and ``none``), so each (layer, preset) cell is
that schedule's row: the DES's where it ran, else the closed form's. A preset that does not
apply to a layer keeps its reason, and in a model's total that layer runs without overlap,
as a user of that library would run it.

>>> from ficco_sim.explore.study import run_study
>>> from ficco_sim.workload import Scenario
>>> sc = [Scenario("gemm-rs", 8, 8192, 8192, 3584)]
>>> pts, _ = run_study(sc, [("h100", "switch:8")], space="presets", progress=False)
>>> long = preset_rows(pts, sc)
>>> sorted(long.loc[long["schedule"] != "", "preset"])
['async-tp', 'ficco-bespoke', 'flux', 'nccl', 'te-pipeline', 'te-ring-exchange']
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from ..schedules.presets import PRESETS, applicable
from ..workload import Scenario

META = ("model", "layer", "phase", "tokens")


def preset_rows(points: pd.DataFrame, scenarios: Sequence[Scenario]) -> pd.DataFrame:
    """One row per (GPU, topology, layer, preset): the schedule it maps to (``""`` and the
    ``reason`` where it does not apply), its time, ``none``'s time and the speedup."""
    by_id = {s.key(): s for s in scenarios}
    ok = points[points["status"] == "ok"]
    ok = ok.assign(_rank=ok["engine"].map({"des": 0}).fillna(1)).sort_values("_rank")   # the DES's row first
    rows = []
    for (gpu, topo, sid), grp in ok.groupby(["gpu", "topology", "scenario_id"], sort=False):
        sc = by_id.get(sid)
        if sc is None:
            continue
        first = grp.drop_duplicates("schedule").set_index("schedule")
        if "none" not in first.index:
            continue
        t_none = float(first.loc["none", "makespan"])
        meta = {k: sc.meta.get(k) for k in META}
        for name, got in applicable(sc, gpu, topo).items():
            row = {"gpu": gpu, "topology": topo, "scenario": sc.label(), "scenario_id": sid, **meta, "preset": name,
                   "schedule": "", "engine": "", "makespan": float("nan"), "t_none": t_none,
                   "speedup": float("nan"), "reason": ""}
            if isinstance(got, str):
                row["reason"] = got
            elif got.name in first.index:
                hit = first.loc[got.name]
                row.update(schedule=got.name, engine=hit["engine"], makespan=float(hit["makespan"]),
                           speedup=t_none / float(hit["makespan"]))
            else:
                row["reason"] = f"{got.name} did not run (see points.csv)"
            rows.append(row)
    if not rows:
        return pd.DataFrame(rows)
    # the study's order (its GPU / topology pairs, then its scenarios), whatever order the points came in
    pairs = {p: i for i, p in enumerate(dict.fromkeys(zip(points["gpu"], points["topology"])))}
    order = {s.key(): i for i, s in enumerate(scenarios)}
    out = pd.DataFrame(rows)
    out["_o"] = [(pairs.get((g, t), len(pairs)), order[sid]) for g, t, sid in
                 zip(out["gpu"], out["topology"], out["scenario_id"])]
    return out.sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)


def preset_wide(long: pd.DataFrame) -> pd.DataFrame:
    """Layers down, presets across: the speedup over no overlap (NaN: does not apply)."""
    if long.empty:
        return long
    keys = ["gpu", "topology", "scenario"]
    wide = long.pivot(index=keys, columns="preset", values="speedup")
    order = pd.MultiIndex.from_frame(long[keys].drop_duplicates())      # the study's order, not sorted
    return wide.reindex(index=order, columns=[p for p in PRESETS if p in wide.columns]).reset_index()


def preset_models(long: pd.DataFrame) -> pd.DataFrame:
    """Per (GPU, topology, model, tokens) and preset: the layers' times summed (a layer the
    preset does not apply to runs without overlap) and the speedup of the sum."""
    lib = long[long["model"].notna() & (long["model"] != "user")] if "model" in long else long.iloc[:0]
    if lib.empty:
        return pd.DataFrame(columns=["gpu", "topology", "model", "tokens", "preset", "layers", "applies",
                                     "t_none", "t_preset", "speedup"])
    lib = lib.assign(t_preset=lib["makespan"].fillna(lib["t_none"]), applies=lib["schedule"] != "")
    g = lib.groupby(["gpu", "topology", "model", "tokens", "preset"], sort=False)
    out = g.agg(layers=("scenario", "size"), applies=("applies", "sum"), t_none=("t_none", "sum"),
                t_preset=("t_preset", "sum")).reset_index()
    out["speedup"] = out["t_none"] / out["t_preset"]
    out["tokens"] = pd.to_numeric(out["tokens"]).astype("Int64")
    return out
