"""The validation workflow: simulate, replay the very same task graphs, compare, report.

>>> from ficco_sim.validate.workflow import parse_scenario
>>> parse_scenario("gemm-rs:m=64,n=32,k=16", gpus=2).label()
'gemm-rs m=64 n=32 k=16 x2 float32'
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import torch

from ..errors import InputError
from ..hardware import load_gpu
from ..workload import KINDS, SCENARIO_KINDS, Scenario
from . import report
from .compare import halves, median_notch
from .predict import GAP_PARTS, simulate_pairs
from .executor import Job, ReplayOptions, replay

# The committed case sets. On a CPU: communication-heavy shapes (a rank's transfers take about
# as long as its GEMM, so the transfer model is what is checked) of ~15 ms a run, because at
# 512^3 (~3 ms a run) a 2-core host's run-to-run spread (the report's measured_min/max_s) is
# about as large as the run itself.
DEFAULT_SIZES = {"cpu": {"ag-gemm": (4096, 128, 1024), "a2a-gemm": (4096, 128, 1024), "gemm-rs": (2048, 1024, 256)},
                 "cuda": {}}
FALLBACK_SIZES = {"cpu": (512, 512, 512), "cuda": (8192, 8192, 8192)}


def parse_scenario(text: str | Scenario, gpus: int, dtype: str = "float32") -> Scenario:
    """``kind[:m=..,n=..,k=..,gpus=..,dtype=..]`` -> Scenario (``gpus`` defaults to the
    world size)."""
    if isinstance(text, Scenario):
        return text
    kind, _, rest = str(text).partition(":")
    if kind not in SCENARIO_KINDS:
        raise InputError("--scenarios", None, f"{text!r}: kind must be one of {', '.join(SCENARIO_KINDS)} "
                         "(e.g. ag-gemm:m=512,n=512,k=512)")
    kw: dict = {"gpus": gpus, "dtype": dtype}
    for part in filter(None, rest.split(",")):
        key, eq, val = part.partition("=")
        if not eq or key not in ("m", "n", "k", "gpus", "dtype"):
            raise InputError("--scenarios", None, f"{text!r}: bad part {part!r} (use m=, n=, k=, gpus=, dtype=)")
        if key == "dtype":
            kw[key] = val
        else:
            try:
                kw[key] = int(val)
            except ValueError:
                raise InputError("--scenarios", None, f"{text!r}: {key} must be an integer, got {val!r}") from None
    for key in ("m", "n", "k"):
        if key not in kw:
            raise InputError("--scenarios", None, f"{text!r}: missing {key}= (e.g. {kind}:m=512,n=512,k=512)")
    return Scenario(kind, kw["gpus"], kw["m"], kw["n"], kw["k"], dtype=kw["dtype"])


def default_profile(device: str) -> str:
    """The profile the predictions use when none is named: ``h100`` for GPUs (a CPU replay
    uses :func:`host_profile`, this host's own calibration)."""
    return "h100"


def this_machine() -> str:
    """This host as a CPU profile names it (``host.machine``)."""
    import os
    import socket

    from ..calibrate.bench import environment
    from ..calibrate.cpu_profile import machine_id
    return machine_id(socket.gethostname(), environment(torch, torch.device("cpu"))["device_name"],
                      os.cpu_count() or 1)


def host_profile(out_dir: str | Path, world_size: int, *, recalibrate: bool = False) -> Path:
    """This host's CPU profile, ``<out_dir>/<machine>/cpu.yaml``: the one calibrated here, or,
    when there is none (or it names another host, or this one before it last started:
    :func:`~ficco_sim.calibrate.cpu_profile.machine_id`), a fresh ``calibrate --device cpu`` with
    ``world_size`` ranks (about 10 s). A profile measured on another host is never used."""
    import yaml

    from ..calibrate.workflow import calibrate_device
    path = Path(out_dir) / report.machine_name("cpu") / "cpu.yaml"
    if path.exists() and not recalibrate:
        try:
            mine = (yaml.safe_load(path.read_text()) or {}).get("host", {}).get("machine") == this_machine()
        except (yaml.YAMLError, AttributeError):
            mine = False
        if mine:
            return path
    calibrate_device("cpu", out=path, force=True, raw_csv=path.with_name("cpu_ranks.csv"), world_size=world_size,
                     progress=False)
    return path


def default_scenarios(device: str, gpus: int) -> list[Scenario]:
    dtype = "float32" if device == "cpu" else "float16"
    out = []
    # the committed case set: the dependent pairs (independent ones: --scenarios ag-par-gemm:...)
    for kind in SCENARIO_KINDS:
        if not KINDS[kind].independent:
            m, n, k = DEFAULT_SIZES[device].get(kind, FALLBACK_SIZES[device])
            out.append(Scenario(kind, gpus, m - m % gpus, n, k, dtype=dtype))
    return out


def measured_parts(parts: dict[str, float], span: float) -> dict[str, float]:
    """The runner's measured parts (mean over ranks) in :data:`GAP_PARTS` terms; ``imbalance``
    is the span beyond the mean rank's own run."""
    if not parts:
        return {}
    own = sum(parts.values())
    return {"compute": parts["compute"], "issue": parts["post"] + parts["loop"], "wait": parts["wait"],
            "imbalance": max(0.0, span - own)}


def validate(device: str = "cpu", world_size: int = 2, gpu_profile: str | None = None,
             scenarios: list | None = None, schedules: list[str] | None = None, repeats: int = 5, warmup: int = 1,
             out_dir: str | Path = "validation", *, mode: str | None = None, topology: str | None = None,
             allow_fallback: bool = False, command: str = "", stamp: str | None = None,
             profile_dir: str | Path | None = None, recalibrate: bool = False) -> tuple[pd.DataFrame, dict]:
    """Simulate every (scenario, schedule) with ``gpu_profile`` (on a CPU by default this host's
    own profile, :func:`host_profile`; ``recalibrate``: measure it again), replay the same task graphs
    on ``device`` (warm-up, ``repeats`` timed runs, median), check every result against
    the unscheduled reference, and write ``<out_dir>/<machine>/<date>.{csv,md,png}``.
    ``profile_dir``: also write one profiled replay per pair and rank there (Kineto
    traces, see :func:`.executor.trace_path`). Returns the table and the written paths."""
    mode = mode or "distributed"
    opts = ReplayOptions(device=device, world_size=world_size, mode=mode, warmup=warmup, repeats=repeats,
                         allow_fallback=allow_fallback, profile_dir=str(profile_dir) if profile_dir else None)
    opts.check()
    if gpu_profile is None:
        gpu_profile = (str(host_profile(out_dir, world_size, recalibrate=recalibrate)) if device == "cpu"
                       else default_profile(device))
    dtype = "float32" if device == "cpu" else "float16"
    scens = ([parse_scenario(s, world_size, dtype) for s in scenarios] if scenarios
             else default_scenarios(device, world_size))
    for sc in scens:
        if mode == "distributed" and sc.gpus != world_size:
            raise InputError("--scenarios", None, f"{sc.label()}: {sc.gpus} GPUs, but --world-size is {world_size}")
    profile = load_gpu(gpu_profile)
    pairs, pair_notes = simulate_pairs(scens, schedules, profile, topology, fold=mode == "single-gpu")
    if not pairs:
        raise InputError("--schedules", None, "no valid (scenario, schedule) pair to validate")
    from .executor import prepare
    jobs = []
    for sc, s, graph, _, _, _ in pairs:
        try:
            prepare(graph)
        except InputError as e:   # a lowering the executor cannot replay: say so, keep going
            pair_notes.append(f"not replayed: {sc.label()} / {s.name}: {e.line()}")
            continue
        jobs.append(Job(f"{sc.key()}|{s.name}", graph, sc.key()))
    if not jobs:
        raise InputError("--schedules", None, "no replayable (scenario, schedule) pair: " + "; ".join(pair_notes))
    results = {r.name: r for r in replay(jobs, opts)}
    now = dt.datetime.now(dt.timezone.utc)
    stamp = stamp or now.strftime("%Y-%m-%d")
    device_label = next(iter(results.values())).device
    rows, notes, details = [], list(pair_notes), set()
    for sc, s, _, predicted, topo_name, pred_parts in pairs:
        r = results.get(f"{sc.key()}|{s.name}")
        if r is None:
            continue
        measured = r.median
        got = measured_parts(r.parts, measured)
        gaps = {f"gap_{k}_s": got[k] - pred_parts[k] for k in GAP_PARTS if k in got and k in pred_parts}
        dominant = max(gaps, key=lambda k: abs(gaps[k]))[4:-2] if gaps else ""
        details.update(r.not_honoured)
        notes += [f"{sc.label()} / {s.name}: {n}" for n in r.notes if "staged through" not in n]
        rows.append({"scenario": sc.label(), "schedule": s.name, "predicted_s": predicted,
                     "measured_s": measured, "err": (predicted - measured) / measured if measured else float("nan"),
                     "correct": r.correct, "not_honoured": ";".join(sorted({k.split(":")[0] for k in r.not_honoured})),
                     "torch": torch.__version__, "device": r.device, "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "kind": sc.kind, "gpus": sc.gpus, "m": sc.m, "n": sc.n, "k": sc.k, "dtype": sc.dtype,
                     "mode": mode, "world_size": world_size, "gpu_profile": gpu_profile,
                     "topology": topo_name, "repeats": repeats, "measured_min_s": min(r.times),
                     "measured_max_s": max(r.times), "measured_notch_s": median_notch(r.times),
                     **dict(zip(("measured_even_s", "measured_odd_s"), halves(r.times))),
                     "gap_mechanism": dominant, **gaps})
    df = pd.DataFrame(rows)
    context = {"title": f"{device_label} ({device}, {mode}, {world_size} ranks) vs profile {gpu_profile}",
               "date": now.strftime("%Y-%m-%d %H:%M UTC"), "command": command, "device": device_label,
               "torch": torch.__version__, "mode": mode, "world_size": world_size, "gpu_profile": gpu_profile,
               "topology": topology or f"switch:{world_size}", "repeats": repeats, "warmup": warmup,
               "not_honoured_details": sorted(details), "notes": notes,
               "gap": report.CPU_GAP if device == "cpu" else ""}
    paths = report.write_all(df, out_dir, report.machine_name(device, device_label), stamp, context)
    return df, paths
