"""A collective hidden in a loop of GEMMs on 8 x MI300X: Z-Y00/ROCM-sdma-rccl-test's published
timings and profiler traces beside ficco-sim (DES, ``mi300x-8``). Quoted; one profile number
(``dma.collective_engines``) was read from the same source (below), nothing else fitted on it.

The repository (at d4046f53, 2026-07) times, per rank of 8 MI300X, bf16, one block of eight
back-to-back GEMMs (Llama-70B's FFN up, 8192 x 28672 x 8192, and down, 8192 x 8192 x 28672) on
a compute stream with one collective issued just before them on another stream: the GEMM loop
alone, the collective alone, and both together (the slowest rank's time per block). Two
collectives: an all-gather of X (8192 x K, each rank's 1024 rows), on the copy engines (RCCL's
zero-CTA path over symmetric memory), and an all-reduce of 8192 x N elements (at most 256 MiB):
RCCL's ring on CUs (``dist.all_reduce``), or every rank's whole vector gathered on the copy
engines and summed by one kernel (the repository's ``sdma`` mode). Its README's table; the model's counterparts: the loop of
``sdma_loop.loop_graph`` (the collective and eight GEMMs chained on the compute stream, on
every GPU), its GEMMs alone, its collective alone (``dma`` or ``sm`` engine).

Launch order, read from the traces: rank 0 issues its all-gather first, yet RCCL's CU kernel stays
resident 6-33 ms (1.3 ms alone) while the GEMMs beside it slow down: some peer's GEMM reached its
CUs first and the collective waited there. Nothing in the program decides which kernel reaches
each GPU first, so the CU collective's counterpart is ``par-sm-mix`` (the odd GPUs' GEMMs first);
the script also prints the share hidden with the collective first everywhere (``par-sm``). With
copy engines the order changes nothing. Those copies go one peer after another on one engine a
rank (``par-dma-c1``, the profile's ``dma.collective_engines``): the repository reports the path's
"per-rank ~47 GB/s ceiling" and proposes more comm streams to lift it; the copy engines' rate is
the profile's, one xGMI link's. That number was read from this source, so the copy-engine
collectives' times alone, which it sets, are marked ``used_for_fit``.

Its traces (rank 0 of the all-gather runs, six blocks each, CU and copy-engine) time every GEMM:
from them this script takes each GEMM's slowdown while the collective is under way, ``s`` in
``t = t_alone + c s / (1 + s)`` (``c``: the time the collective's kernel covers it; GEMMs at
least 90% covered, their median; ``t_alone``: the median GEMM nothing covers), the model's the
same way from its own timeline. The traces carry no license, so they are read from a local
clone (``--traces DIR``: a git clone of the repository, or a folder with its four
``bench/blog_results/traces/*.json``) and only the numbers this script derives from them are
kept, in ``validation/public/sdma_loop_traces.csv``; without ``--traces`` that file is read.
The README's share of the collective hidden, ``(comm - (both - loop)) / comm`` clamped to
[0, 1], is compared by its difference (the model's from its three times).

    python benchmarks/sdma_loop.py [--traces DIR] [--csv validation/public/sdma_loop.csv]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from versus import print_times  # noqa: E402

from ficco_sim.engine.des import simulate_graph  # noqa: E402
from ficco_sim.files import write_stamped_csv  # noqa: E402
from ficco_sim.hardware import load_gpu  # noqa: E402
from ficco_sim.hardware import DTYPE_BYTES  # noqa: E402
from ficco_sim.schedules import collectives, parse_schedule  # noqa: E402
from ficco_sim.schedules.builder import GraphBuilder  # noqa: E402
from ficco_sim.topology import load_topology  # noqa: E402

COMMIT = "d4046f534057e80939f7bc4697ffb7acb86fd169"
URL = f"https://github.com/Z-Y00/ROCM-sdma-rccl-test/blob/{COMMIT}/README.md"
TRACE_URL = f"https://github.com/Z-Y00/ROCM-sdma-rccl-test/tree/{COMMIT}/bench/blog_results/traces"
GPU, TOPO, GPUS, GEMMS, DTYPE = "mi300x", "mi300x-8", 8, 8, "bfloat16"
SHAPES = {"ffn_up": (8192, 28672, 8192), "ffn_down": (8192, 8192, 28672)}
# README "Smoke results": (collective, engine, shape) -> GEMM loop, collective, both together (ms per block)
PUBLISHED_MS = {("all-gather", "dma", "ffn_up"): (51.30, 2.54, 51.95),
                ("all-gather", "dma", "ffn_down"): (49.59, 8.62, 50.22),
                ("all-reduce", "sm", "ffn_up"): (52.26, 1.75, 53.47),
                ("all-reduce", "sm", "ffn_down"): (50.45, 0.93, 51.55),
                ("all-reduce", "dma", "ffn_up"): (51.65, 39.45, 53.80),
                ("all-reduce", "dma", "ffn_down"): (49.94, 19.79, 51.15)}
WHAT = ("8 GEMMs alone", "collective alone", "collective beside the 8 GEMMs")
CE_ENGINES = load_gpu(GPU).dma.collective_engines   # RCCL's zero-CTA path: one copy stream a rank
COVERED = 0.9    # a GEMM this much covered by the collective's kernel counts as beside it
DERIVED = Path(__file__).resolve().parents[1] / "validation" / "public" / "sdma_loop_traces.csv"


def hidden(loop: float, comm: float, both: float) -> float:
    """The share of the collective the GEMM loop hid (the repository's ``hidden_%`` / 100)."""
    return max(0.0, min(comm, comm - (both - loop))) / comm


def comm_shape(kind: str, shape: str) -> tuple[int, int]:
    """(rows, cols) of the collective's whole buffer: the all-gather's X (8192 x K), the
    all-reduce's 8192 x N elements, at most 256 MiB of bf16 (the repository's cap)."""
    m, n, k = SHAPES[shape]
    if kind == "all-gather":
        return m, k
    elems = min(m * n, (256 << 20) // DTYPE_BYTES[DTYPE])
    return m, elems // m


SCHEDULE = {"sm": "par-sm-mix", "dma": f"par-dma-c{CE_ENGINES}"}    # the schedules the loop's graphs are


def first(engine: str, order: str = "read") -> tuple[int, ...]:
    """The GPUs whose GEMMs reach the GPU before the collective. ``read``: as the traces show
    it, :data:`SCHEDULE`'s (for a collective on CUs ``par-sm-mix``: rank 0's all-gather, issued
    first, stays resident a whole GEMM and more, so some peer's GEMM held its CUs first; with
    copy engines the order changes nothing); ``comm``: the collective first everywhere."""
    sch = parse_schedule(SCHEDULE[engine])
    return tuple(g for g in range(GPUS) if order == "read" and sch.gemm_goes_first(g))


def loop_graph(kind: str | None, engine: str, shape: str, gemms: int = GEMMS, gemm_first: tuple[int, ...] = ()):
    """Every GPU: the collective (``kind``; None: none) and ``gemms`` GEMMs chained on the
    compute stream, issued at once: the collective first (as the repository's program issues
    them) except on the GPUs ``gemm_first``, where the GEMMs reach the GPU first."""
    gpu = load_gpu(GPU)
    topo = load_topology(TOPO, gpu)
    b = GraphBuilder(gpu, GPUS, copy_engines=CE_ENGINES if engine == "dma" else None)
    b.rings = collectives.ring_orders(topo)
    rows, cols = comm_shape(kind or "all-gather", shape)
    b.buffer("X", rows, cols, DTYPE)
    m, n, k = SHAPES[shape]
    prev: dict[int, tuple] = {g: () for g in range(GPUS)}

    def loop(g: int) -> None:
        for i in range(gemms):
            prev[g] = (b.gemm(f"gemm{g}.{i}", g, m, n, k, DTYPE, deps=prev[g], label="GEMM").id,)
    for g in gemm_first:
        loop(g)
    if kind == "all-gather":
        algo = collectives.pick_algorithm("auto", kind, topo.kind, engine, gpus=GPUS, spec=gpu.comm_kernel)
        collectives.all_gather(b, "ag", rows // GPUS, cols, DTYPE, buffer="X", engine=engine, algorithm=algo)
    elif kind == "all-reduce" and engine == "dma":      # every rank's whole vector gathered, then summed
        b.buffer("G", rows * GPUS, cols, DTYPE)
        done = collectives.all_gather(b, "ag", rows, cols, DTYPE, buffer="G", engine=engine, algorithm="direct")
        for g in range(GPUS):
            b.reduce(f"sum{g}", g, rows, cols, DTYPE, GPUS, deps=done[g], label="local sum of the gathered vectors")
    elif kind == "all-reduce":
        b.buffer("R", rows, cols, DTYPE)
        algo = collectives.pick_algorithm("auto", kind, topo.kind, engine, gpus=GPUS, spec=gpu.comm_kernel,
                                          nbytes=rows * cols * DTYPE_BYTES[DTYPE])
        collectives.all_reduce(b, "ar", rows // GPUS, cols, DTYPE, buffer="X", staging="R", engine=engine,
                               algorithm=algo)
    for g in range(GPUS):
        if g not in gemm_first:
            loop(g)
    return b.build(), gpu, topo


def run(kind: str | None, engine: str, shape: str, gemms: int = GEMMS, order: str = "read"):
    """The DES timeline of :func:`loop_graph` (every rank simulated: a mixed order breaks the
    ranks' symmetry)."""
    return simulate_graph(*loop_graph(kind, engine, shape, gemms, first(engine, order)), fold_ranks=False)


def _cover(a: float, b: float, comm: list[tuple[float, float]]) -> float:
    """How long the spans ``comm`` cover the run (a, b)."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in comm)


def slowdowns(gemms: list[tuple[float, float]], comm: list[tuple[float, float]],
              covered: float = COVERED) -> list[float]:
    """Each GEMM's slowdown while covered (``s``; module docstring), of those covered at least
    ``covered`` of their run, against the median uncovered GEMM. ``gemms``, ``comm``: (start, end)."""
    alone = [b - a for a, b in gemms if _cover(a, b, comm) == 0.0]
    if not alone:
        return []
    t0 = statistics.median(alone)
    out = []
    for a, b in gemms:
        c = _cover(a, b, comm)
        if c >= covered * (b - a):
            extra = (b - a) - t0
            out.append(extra / (c - extra) if c > extra else float("inf"))
    return out


def model_rows() -> list[dict]:
    out = []
    for (kind, engine, shape), published in PUBLISHED_MS.items():
        model = tuple(run(c, engine, shape, gemms=g).makespan * 1e3 for c, g in ((None, GEMMS), (kind, 0), (kind, GEMMS)))
        m, n, k = SHAPES[shape]
        case = f"{kind} ({'copy engines' if engine == 'dma' else 'CUs'}) || 8 x GEMM {m}x{n}x{k} bf16"
        row = {"source": "ROCM-sdma-rccl-test", "gpu": GPU, "case": case,
               "schedule": SCHEDULE[engine], "source_url": URL,
               "used_for_fit": False}
        for what, ms, t in zip(WHAT, published, model):
            fitted = engine == "dma" and what == "collective alone"    # dma.collective_engines was read here
            out.append(dict(row, what=what, published_ms=ms, model_ms=t, used_for_fit=fitted))
        out.append(dict(row, what="share of the collective hidden", published=hidden(*published),
                        model=hidden(*model)))
    return out


def trace_file(root: Path, name: str) -> bytes | None:
    """A trace of the repository from a folder, or from a git clone of it at :data:`COMMIT`."""
    for p in (root / name, root / "bench/blog_results/traces" / name):
        if p.is_file():
            return p.read_bytes()
    for git_dir in (root, *sorted(d for d in root.glob("*") if d.is_dir())):
        r = subprocess.run(["git", f"--git-dir={git_dir}" if (git_dir / "HEAD").is_file() else f"-C{git_dir}",
                            "show", f"{COMMIT}:bench/blog_results/traces/{name}"], capture_output=True)
        if r.returncode == 0:
            return r.stdout
    return None


def derive(root: Path) -> pd.DataFrame:
    """The GEMM slowdown beside each all-gather, measured on the repository's traces (rank 0)."""
    out = []
    for shape in SHAPES:
        for engine, tag in (("sm", "cu"), ("dma", "sdma")):
            name = f"ag_gemm_llama70b_{shape}_{tag}_rank0.json"
            raw = trace_file(root, name)
            if raw is None:
                raise SystemExit(f"{root}: no {name} (give a clone of Z-Y00/ROCM-sdma-rccl-test)")
            ks = [e for e in json.loads(raw)["traceEvents"] if e.get("cat") == "kernel"]
            span = lambda e: (e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)  # noqa: E731
            s = slowdowns([span(e) for e in ks if e["name"].startswith("Cijk")],
                          [span(e) for e in ks if not e["name"].startswith("Cijk")])
            out.append({"shape": shape, "engine": engine, "trace": name, "gemms_covered": len(s),
                        "slowdown_median": statistics.median(s) if s else float("nan"),
                        "slowdown_min": min(s, default=float("nan")), "slowdown_max": max(s, default=float("nan"))})
    return pd.DataFrame(out)


def trace_rows() -> list[dict]:
    """The measured slowdowns (:data:`DERIVED`) beside the model's, the same way from its timeline."""
    if not DERIVED.is_file():
        return []
    measured = pd.read_csv(DERIVED, comment="#")
    out = []
    for r in measured[measured["gemms_covered"] > 0].itertuples():
        tl = run("all-gather", r.engine, r.shape)
        gemm = [(x.start, x.end) for x in tl.of_role("compute", 0)]
        comm = [(x.start, x.end) for x in tl.of_role("comm", 0)]
        modelled = [s for s in slowdowns(gemm, comm) if s < float("inf")]
        if not modelled:      # the model's collective covers no GEMM wholly: the one it covers most
            most = max(_cover(a, b, comm) / (b - a) for a, b in gemm)
            modelled = [s for s in slowdowns(gemm, comm, covered=most) if s < float("inf")] or [float("nan")]
        m, n, k = SHAPES[r.shape]
        out.append({"source": "ROCM-sdma-rccl-test", "gpu": GPU,
                    "case": f"all-gather ({'copy engines' if r.engine == 'dma' else 'CUs'}) || GEMM {m}x{n}x{k} bf16",
                    "what": f"GEMM slowdown while the all-gather runs (traces: median of {r.gemms_covered})",
                    "schedule": SCHEDULE[r.engine],
                    "published": r.slowdown_median,
                    "model": statistics.median(modelled), "source_url": TRACE_URL, "used_for_fit": False})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=None, help="also write the rows here")
    ap.add_argument("--traces", default=None, help="derive the measured slowdowns again from a clone of "
                    f"Z-Y00/ROCM-sdma-rccl-test (or its traces' folder) into {DERIVED.name}")
    args = ap.parse_args()
    if args.traces:
        write_stamped_csv(DERIVED, derive(Path(args.traces)), f"GEMM slowdown while the all-gather's kernel covers "
                          f"it, derived from {TRACE_URL} (rank 0; see benchmarks/sdma_loop.py)",
                          "benchmarks/sdma_loop.py --traces")
    rows = pd.DataFrame(model_rows() + trace_rows())
    times = rows[rows["published_ms"].notna()].copy()
    times["err"] = times["model_ms"] / times["published_ms"] - 1.0
    print_times(times, f"A collective beside 8 GEMMs on 8x MI300X, published vs ficco-sim (DES, {TOPO})",
                ("gpu", "case", "what"))
    for r in rows[rows["published_ms"].isna()].to_dict("records"):
        print(f"{r['case']}: {r['what']}: published {r['published']:.1%}, model {r['model']:.1%}")
    held = times[~times["used_for_fit"].astype(bool)]
    print(f"times: median |err| {held['err'].abs().median():.1%} over {len(held)} held-out times "
          f"({len(times) - len(held)} more the profile's dma.collective_engines was read on)")
    for (kind, engine, shape), published in PUBLISHED_MS.items():
        if first(engine):      # the order the traces show against the collective first on every rank
            loop, comm = (run(c, engine, shape, gemms=g).makespan for c, g in ((None, GEMMS), (kind, 0)))
            uniform = run(kind, engine, shape, order="comm").makespan
            print(f"{kind} (CUs) || {shape}: share hidden with the collective first on every rank "
                  f"{hidden(loop, comm, uniform):.0%} (published {hidden(*published):.0%})")
    if args.csv:
        write_stamped_csv(args.csv, rows, f"published timings quoted from {URL}; trace slowdowns from "
                          f"{DERIVED.name}; model by the DES with the shipped profiles; the copy-engine times alone "
                          "are what mi300x's dma.collective_engines was read on (used_for_fit), nothing else fitted",
                          "benchmarks/sdma_loop.py")


if __name__ == "__main__":
    main()
