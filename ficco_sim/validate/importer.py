"""Import measured runs from elsewhere and compare them with predictions.

The CSV has one row per measured (scenario, schedule), header required:

============  ==========================================================================
column        meaning
============  ==========================================================================
kind          ``ag-gemm`` | ``gemm-rs`` | ``a2a-gemm``
m, n, k       GEMM sizes as in :class:`ficco_sim.workload.Scenario` (integers)
gpus          number of GPUs (ranks)
schedule      a schedule short name (``none``, ``shard-p2p-sm``, ``ficco-a2a-dma-hi``, ...)
measured_s    measured makespan in **seconds** (positive)
dtype         optional, default ``float16``
mode          optional: ``single-gpu`` (every rank's work replayed on one GPU, as
              ``validate --single-gpu`` runs it: predicted as that folded program,
              :meth:`~ficco_sim.taskgraph.TaskGraph.folded`), ``distributed`` or
              ``single-process`` (one GPU per rank; the default)
============  ==========================================================================

A ``validate`` report's own CSV has every one of these columns, so a replay measured on a GPU
can be predicted again with any profile here, on any machine.

Any other column is kept. :func:`compare_measured` simulates each row with the given
profile and topology and writes the same CSV/markdown/PNG report as ``validate``
(``correct`` is empty: nothing was replayed here).

>>> import io
>>> rows = read_measured(io.StringIO("kind,m,n,k,gpus,schedule,measured_s\\nag-gemm,64,64,64,2,none,1e-5\\n"))
>>> rows[0][0].label(), rows[0][1], rows[0][2], rows[0][3]
('ag-gemm m=64 n=64 k=64 x2', 'none', 1e-05, 'distributed')
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..workload import Scenario
from . import report

REQUIRED = ("kind", "m", "n", "k", "gpus", "schedule", "measured_s")


MODES = ("distributed", "single-process", "single-gpu")


def read_measured(source) -> list[tuple[Scenario, str, float, str]]:
    """(scenario, schedule name, measured seconds, replay mode) per row; InputError on bad rows."""
    where = str(source) if isinstance(source, (str, Path)) else "measured CSV"
    try:
        df = pd.read_csv(source)
    except FileNotFoundError:
        raise InputError(where, None, "no such file") from None
    except Exception as e:  # noqa: BLE001 - pandas raises many parse errors
        raise InputError(where, None, f"not a readable CSV ({e})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(where, None, f"missing column(s) {', '.join(missing)}; need {', '.join(REQUIRED)}")
    out = []
    for i, row in enumerate(df.to_dict("records")):
        f = f"row {i + 2}"
        ints = {}
        for c in ("m", "n", "k", "gpus"):
            v = row[c]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise InputError(where, f"{f}.{c}", f"must be an integer, got {v!r}")
            ints[c] = v
        t = row["measured_s"]
        if not isinstance(t, (int, float)) or not t > 0:
            raise InputError(where, f"{f}.measured_s", f"must be a positive number of seconds, got {t!r}")
        dtype = row.get("dtype") if isinstance(row.get("dtype"), str) else "float16"
        try:
            sc = Scenario(str(row["kind"]), ints["gpus"], ints["m"], ints["n"], ints["k"], dtype=dtype)
        except InputError as e:
            raise InputError(where, f"{f}.{e.field or 'kind'}", e.message) from None
        mode = row.get("mode")
        mode = mode if isinstance(mode, str) and mode else "distributed"
        if mode not in MODES:
            raise InputError(where, f"{f}.mode", f"{mode!r}: expected one of {', '.join(MODES)}")
        out.append((sc, str(row["schedule"]), float(t), mode))
    if not out:
        raise InputError(where, None, "no rows")
    return out


def predict_measured(rows: list[tuple[Scenario, str, float, str]], gpu, topology: str | None = None, *,
                     where: str = "measured CSV") -> list[tuple[float, str, str]]:
    """(predicted makespan, topology name, schedule's canonical name) of every :func:`read_measured` row, as ``validate``
    predicts its own replays (:func:`.predict.simulate_pairs`: a single-GPU row's folded
    program, a CPU host's start spread); a schedule invalid there is an error naming its row."""
    from .predict import simulate_pairs
    out = []
    for i, (sc, sched, _, mode) in enumerate(rows):
        pairs, notes = simulate_pairs([sc], [sched], gpu, topology, fold=mode == "single-gpu")
        if not pairs:
            raise InputError(where, f"row {i + 2}.schedule", "; ".join(notes) or f"{sched}: not valid here")
        out.append((pairs[0][3], pairs[0][4], pairs[0][1].name))
    return out


def compare_measured(csv_path: str | Path, gpu: str, topology: str | None = None, out_dir: str | Path = "validation",
                     *, stamp: str | None = None, command: str = "") -> tuple[pd.DataFrame, dict]:
    """Predict every row of ``csv_path`` on ``gpu``/``topology`` (default ``switch:<gpus>``)
    and write ``<out_dir>/<profile>-import/<date>.{csv,md,png}``."""
    from ..hardware import load_gpu
    rows = read_measured(csv_path)
    profile = load_gpu(gpu)
    now = dt.datetime.now(dt.timezone.utc)
    recs = []
    predictions = predict_measured(rows, profile, topology, where=str(csv_path))
    for (sc, _, measured, mode), (predicted, topo_name, sched) in zip(rows, predictions):
        recs.append({"scenario": sc.label(), "schedule": sched, "predicted_s": predicted, "measured_s": measured,
                     "err": (predicted - measured) / measured, "correct": float("nan"), "not_honoured": "",
                     "torch": "", "device": f"imported from {Path(csv_path).name}",
                     "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "kind": sc.kind, "gpus": sc.gpus, "m": sc.m,
                     "n": sc.n, "k": sc.k, "dtype": sc.dtype, "mode": mode, "gpu_profile": profile.name,
                     "topology": topo_name})
    df = pd.DataFrame(recs)
    context = {"title": f"imported {Path(csv_path).name} vs profile {profile.name}", "source": str(csv_path),
               "date": now.strftime("%Y-%m-%d %H:%M UTC"), "command": command, "gpu_profile": profile.name,
               "topology": topology or "switch:<gpus>"}
    paths = report.write_all(df, out_dir, f"{report.sanitize(profile.name)}-import", stamp or now.strftime("%Y-%m-%d"),
                             context)
    return df, paths
