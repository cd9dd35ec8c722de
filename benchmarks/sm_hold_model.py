"""The discrete-event engine on the rows of ``benchmarks/gpu_sm_hold.py`` (a GEMM beside a kernel
that holds SMs) and ``benchmarks/gpu_dispatch.py`` (which waiting kernel the block scheduler serves
first; validation/gpu/h200/2026-11-28), read the way the scripts read the measurements.

* ``hold-first``: a spin kernel of ``held`` blocks (each one SM for ``hold_s``) reaches the SMs;
  10 us later a one-block delay kernel and then the GEMM on a second stream. Compared: the GEMM's
  end past its end with nothing held, as a share of the GEMM's time alone (``excess``; measured:
  the median repeat; the GEMM's time alone there is its end with every SM held, less ``hold_s``).
* ``gemm-first``: a chain of three GEMMs; the spin kernel (20 us blocks) waits on the first
  GEMM's event, its stream at equal or higher priority. Compared: when its first block starts,
  in GEMMs of the chain (the measured chain's end / 3; the engine's GEMM time alone).
* ``dispatch``: a resident kernel holds all or half the SMs for 300 us; a kernel whose blocks do
  not fit beside it (H) and one whose blocks do (L) arrive 20 us apart. Compared: whether L's
  first block starts over 10 us after L's turn came (it waited for H's blocks: head of line), by
  the profile's dispatch policy and by backfill.
* ``carveout`` (``benchmarks/gpu_sm_carveout.py``): a GEMM planned for fewer SMs (cuBLASLt's SM
  count target; the engine's ``gemm_sms``), alone and beside a spin kernel holding SMs for three
  times the GEMM's time. Compared: time over the GEMM's on every SM.

Never fitted on these rows: the engine's GEMMs are its own (``hw_profiles/h200.yaml``).

    python benchmarks/sm_hold_model.py                 # the four tables and their summaries
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "validation" / "gpu" / "h200" / "2026-11-28" / "sm_hold.csv"
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
DELAY_S = 10e-6
SPIN_S = 20e-6


def _spin_block():
    from ficco_sim.hardware import BlockShape
    return BlockShape(512, 32, 120 * 1024)      # the script's default spin block: one per SM


def beside_spin(gpu, dtype: str, m: int, n: int, k: int, held: int, hold_s: float, carveout: int = 0) -> dict:
    """The engine's records (by id: ``spin``, ``delay``, ``g``) of a GEMM issued 10 us after ``held``
    SMs start spinning for ``hold_s``, planned for ``SMs - carveout`` SMs (with a carveout the spin
    sits on the SMs the GEMM leaves, where the GPU's block scheduler put it, first)."""
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.hardware import BlockShape
    from ficco_sim.schedules.builder import COMPUTE, GraphBuilder
    from ficco_sim.taskgraph import Kernel
    from ficco_sim.topology import switch

    b = GraphBuilder(gpu, 2)
    b.gemm_sms = gpu.num_sms - carveout if carveout else 0
    b.stream(0, COMPUTE)
    if held:
        b.tasks.append(Kernel("spin", 0, b.stream(0, "spin"), "opaque", held, _spin_block(), block_time=hold_s,
                              sms=(gpu.num_sms - carveout, gpu.num_sms) if carveout else None))
    b.tasks.append(Kernel("delay", 0, COMPUTE, "opaque", 1, BlockShape(32, 32, 0), block_time=DELAY_S))
    b.gemm("g", 0, m, n, k, DTYPES[dtype], deps=("delay",))
    return simulate_graph(b.build(), gpu, switch(2, 1e12, 0.0)).by_id()


def hold_first(gpu, dtype: str, m: int, n: int, k: int, held: int, hold_s: float) -> tuple[float, float]:
    """(GEMM end, GEMM time alone) in the engine: ``held`` SMs spun for ``hold_s`` when it is issued."""
    rec = beside_spin(gpu, dtype, m, n, k, held, hold_s)["g"]
    return rec.end, rec.end - rec.start


def gemm_first(gpu, dtype: str, m: int, n: int, k: int, held: int, priority: str) -> float:
    """When the spin kernel's first block starts, in GEMMs of the chain (engine)."""
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.schedules.builder import COMPUTE, GraphBuilder
    from ficco_sim.taskgraph import Kernel
    from ficco_sim.topology import switch

    b = GraphBuilder(gpu, 2)
    b.stream(0, COMPUTE)
    for i in range(3):
        b.gemm(f"g{i}", 0, m, n, k, DTYPES[dtype])
    spin = b.stream(0, "spin", int(priority == "spin-high"))
    b.tasks.append(Kernel("spin", 0, spin, "opaque", held, _spin_block(), block_time=SPIN_S, deps=("g0",)))
    tl = simulate_graph(b.build(), gpu, switch(2, 1e12, 0.0)).by_id()
    return tl["spin"].start / (tl["g0"].end - tl["g0"].start)


def dispatch(gpu, resident: str, order: str, priority: str, policy: str | None = None) -> float:
    """Seconds from L's turn (its delay kernel's end) to its first block in the engine, ``policy``
    the dispatcher's (None: the profile's ``dispatch``)."""
    from ficco_sim.engine.des import simulate_graph
    from ficco_sim.hardware import BlockShape
    from ficco_sim.schedules.builder import GraphBuilder
    from ficco_sim.taskgraph import Kernel
    from ficco_sim.topology import switch

    heavy, light, tiny = _spin_block(), BlockShape(128, 32, 0), BlockShape(32, 32, 0)
    ph, pl = {"H-high": (1, 0), "same": (0, 0), "L-high": (0, 1)}[priority]
    b = GraphBuilder(gpu, 2)
    r, h, lo = b.stream(0, "r"), b.stream(0, "h", ph), b.stream(0, "l", pl)
    dh, dl = (20e-6, 40e-6) if order == "H-first" else (40e-6, 20e-6)
    b.tasks += [Kernel("R", 0, r, "opaque", gpu.num_sms // (1 if resident == "all" else 2), heavy, block_time=300e-6),
                Kernel("dh", 0, h, "opaque", 1, tiny, block_time=dh),
                Kernel("dl", 0, lo, "opaque", 1, tiny, block_time=dl),
                Kernel("H", 0, h, "opaque", gpu.num_sms, heavy, block_time=50e-6),
                Kernel("L", 0, lo, "opaque", gpu.num_sms, light, block_time=50e-6)]
    tl = simulate_graph(b.build(), gpu, switch(2, 1e12, 0.0), policy=policy).by_id()
    return tl["L"].start - tl["dl"].end


def dispatch_table(gpu="h200", path: Path = DATA.with_name("dispatch.csv")):
    """Per (resident, order, priority): the share of repeats in which L waited over 15 us past its
    turn (``measured``), and whether it waits over 10 us in the engine with the profile's policy and
    with backfill."""
    import pandas as pd

    from ficco_sim.hardware import load_gpu
    gpu = load_gpu(gpu)
    rows = pd.read_csv(path, comment="#")
    turn = rows["order"].map({"H-first": 40e-6, "L-first": 20e-6})     # L's delay kernel's end
    rows["waits"] = rows["l_first_s"] - turn > 15e-6                      # 4-5 us of launch and event beside
    out = []
    for (resident, order, priority), grp in rows.groupby(["resident", "order", "priority"]):
        model, backfill = (dispatch(gpu, resident, order, priority, p) for p in (None, "backfill"))
        out.append({"resident": resident, "order": order, "priority": priority,
                    "measured": float(grp["waits"].mean()),
                    "model": model > 10e-6, "backfill": backfill > 10e-6})
    return pd.DataFrame(out)


def carveout_run(gpu, m: int, n: int, k: int, carveout: int, held: int = 0, hold_s: float = 0.0) -> float:
    """The bf16 GEMM's time in the engine from its issue to its end (:func:`beside_spin`)."""
    tl = beside_spin(gpu, "bf16", m, n, k, held, hold_s, carveout)
    return tl["g"].end - tl["delay"].end


def carveout_table(gpu="h200", path: Path = DATA.with_name("sm_carveout.csv")):
    """Per (shape, held, carveout): the GEMM's time over its time alone on every SM, measured
    (median) and in the engine; ``held`` 0 is the GEMM alone."""
    import pandas as pd

    from ficco_sim.hardware import load_gpu
    gpu = load_gpu(gpu)
    rows = pd.read_csv(path, comment="#")
    rows["time_s"] = rows["alone_s"].where(rows["experiment"] == "alone", rows["gemm_end_s"])
    cells = rows.groupby(["m", "n", "k", "held", "carveout"], as_index=False).agg(
        time_s=("time_s", "median"), hold_s=("hold_s", "first"), grid=("grid", "first"))
    out = []
    for (m, n, k), grp in cells.groupby(["m", "n", "k"]):
        base = float(grp.loc[(grp["held"] == 0) & (grp["carveout"] == 0), "time_s"].iloc[0])
        model_base = carveout_run(gpu, m, n, k, 0)
        for r in grp.itertuples():
            hold = float(r.hold_s) if r.held else 0.0
            out.append({"m": m, "n": n, "k": k, "held": r.held, "carveout": r.carveout, "grid": r.grid,
                        "measured": r.time_s / base,
                        "model": carveout_run(gpu, m, n, k, r.carveout, r.held, hold) / model_base})
    out = pd.DataFrame(out)
    out["error"] = out["model"] - out["measured"]
    return out


def tables(gpu="h200", path: Path = DATA):
    """(hold-first, gemm-first) DataFrames of measured and modelled values, a row per cell."""
    import numpy as np
    import pandas as pd

    from ficco_sim.hardware import load_gpu
    gpu = load_gpu(gpu)
    rows = pd.read_csv(path, comment="#")
    cells = rows[rows["experiment"] == "hold-first"].groupby(["dtype", "m", "n", "k", "held", "hold_s"],
                                                             as_index=False)["gemm_end_s"].median()
    hold = []
    for (dtype, m, n, k), grp in cells.groupby(["dtype", "m", "n", "k"]):
        base = float(grp.loc[grp["held"] == 0, "gemm_end_s"].iloc[0])
        full = grp[grp["held"] == grp["held"].max()]
        alone = float(np.median(full["gemm_end_s"] - full["hold_s"]))
        model_base, model_alone = hold_first(gpu, dtype, m, n, k, 0, 0.0)
        for r in grp[grp["held"] > 0].itertuples():
            end, _ = hold_first(gpu, dtype, m, n, k, r.held, r.hold_s)
            hold.append({"dtype": dtype, "m": m, "n": n, "k": k, "held": r.held, "hold": r.hold_s / alone,
                         "measured": (r.gemm_end_s - base) / alone, "model": (end - model_base) / model_alone})
    hold = pd.DataFrame(hold)
    hold["error"] = hold["model"] - hold["measured"]
    chain = rows[rows["experiment"] == "gemm-first"].groupby(["dtype", "m", "n", "k", "priority", "held"],
                                                             as_index=False)[["gemm_end_s", "spin_first_s"]].median()
    first = [{"dtype": r.dtype, "m": r.m, "n": r.n, "k": r.k, "priority": r.priority, "held": r.held,
              "measured": r.spin_first_s / (r.gemm_end_s / 3),
              "model": gemm_first(gpu, r.dtype, r.m, r.n, r.k, r.held, r.priority)} for r in chain.itertuples()]
    first = pd.DataFrame(first)
    first["error"] = first["model"] - first["measured"]
    return hold, first


def main() -> None:
    import argparse

    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="h200", help="profile to run the engine with (default h200)")
    args = parser.parse_args()
    hold, first = tables(args.gpu)
    console = Console()
    carve = carveout_table(args.gpu)
    t = Table(title="carveout: GEMM time over its time alone on every SM (held 0: alone)")
    for c in carve.columns:
        t.add_column(c, justify="right")
    for r in carve.itertuples(index=False):
        t.add_row(*[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r])
    console.print(t)
    disp = dispatch_table(args.gpu)
    t = Table(title=f"dispatch: does L wait for H's blocks? measured (share of repeats), the engine "
                    f"({args.gpu}'s policy), backfill")
    for c in disp.columns:
        t.add_column(c, justify="right")
    for r in disp.itertuples(index=False):
        t.add_row(*map(str, r))
    console.print(t)
    for name, df, cols in (("hold-first: GEMM end past its end alone, in GEMM times", hold, ["held", "hold"]),
                           ("gemm-first: the spin's first block, in GEMMs of the chain", first, ["priority", "held"])):
        t = Table(title=name)
        for c in ["dtype", "m", "n", "k", *cols, "measured", "model", "error"]:
            t.add_column(c, justify="right")
        for r in df.itertuples():
            t.add_row(*[f"{getattr(r, c):.2f}" if isinstance(getattr(r, c), float) else str(getattr(r, c))
                        for c in ["dtype", "m", "n", "k", *cols, "measured", "model", "error"]])
        console.print(t)
        err = df["error"].abs()
        console.print(f"{name}: {len(df)} cells, |error| median {err.median():.3f}, p90 {err.quantile(0.9):.3f}, "
                      f"worst {err.max():.3f}")


if __name__ == "__main__":
    main()
