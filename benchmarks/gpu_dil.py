"""Decomposition loss (DIL) timed directly on this GPU: a whole GEMM against its row pieces
run back to back, as a FiCCO schedule runs them.

``benchmarks/gpu_gemm_table.py`` times each token count alone with L2 evicted, and
``benchmarks/dil_error.py`` reads DIL off such tables as ``p * t(M / p) / t(M) - 1``. That is
the loss only if a piece costs the same alone and behind its neighbour; here the pieces run the
way a schedule runs them (one stream, back to back, each writing its own rows of one output,
``torch.mm(a[rows], b, out=c[rows])``), so the two readings can be compared on the same
shapes. L2 is evicted before the whole GEMM and before the first piece (not between pieces).

Two effects can make a piece cost less behind its neighbour than alone: the host's launch gap
(an idle GPU waits for each launch; a queued piece does not) and a warm L2 (the shared B
operand). ``--modes evicted`` separates them: every piece is queued behind a sleep kernel (no
launch gap) with L2 evicted before each, and the pieces' own event-timed spans are summed.

For every (model, layer, tensor-parallel degree) of the built-in library
(:func:`ficco_sim.explore.library.layer_gemms`) at M = 2048, 4096, 8192 and p = 1 (whole),
2, 4, 8, 16 pieces: median, min and max of --repeats runs (CUDA events), float16.

    python benchmarks/gpu_dil.py --out h200-dil.csv            # ~1 minute on an H200
    python benchmarks/gpu_dil.py --out t.csv --device cpu --quick
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_gemm_table import setup, timed_ms  # noqa: E402

from ficco_sim.explore.library import layer_gemms  # noqa: E402
from ficco_sim.files import write_text_atomic  # noqa: E402

TPS = (1, 2, 4, 8)
MS = (2048, 4096, 8192)
PIECES = (1, 2, 4, 8, 16)
MODES = ("back-to-back", "evicted")
COLUMNS = "gpu,model,op,tp,m,n,k,dtype,mode,pieces,time_ms_median,time_ms_min,time_ms_max"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=["back-to-back"])
    ap.add_argument("--quick", action="store_true", help="one 256 x 256 x 256 GEMM (a plumbing check)")
    args = ap.parse_args()
    import torch

    env = setup(torch, args.device)
    dev, cuda, name, gpu, dtype, dname, flush, stamp = (env.dev, env.cuda, env.name, env.gpu, env.dtype, env.dname,
                                                       env.flush, env.stamp)
    shapes = [("quick", "mm", 1, 256, 256)] if args.quick else layer_gemms(TPS)
    ms = (256,) if args.quick else MS
    lines = [f"# benchmarks/gpu_dil.py on {name} ({dev}), torch {torch.__version__}, cuda {torch.version.cuda}, "
             f"host {platform.node()}, {stamp}; torch.mm {dname}, pieces of M rows back to back on one stream, "
             f"median of {args.repeats} after 1 warm-up, L2 evicted before each run (CUDA events)", COLUMNS]

    def evicted(parts) -> list[float]:
        """Each piece queued behind a sleep (no launch gap), L2 evicted before each: summed spans."""
        out = []
        for rep in range(args.repeats + 1):
            marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in parts]
            torch.cuda._sleep(4_000_000)            # ~2 ms: everything below is queued before it ends
            for (x, y), (e0, e1) in zip(parts, marks):
                flush.zero_()
                e0.record()
                torch.mm(x, b, out=y)
                e1.record()
            marks[-1][1].synchronize()
            if rep:
                out.append(sum(e0.elapsed_time(e1) for e0, e1 in marks))
        return sorted(out)

    def timed(fn) -> list[float]:
        fn()
        return timed_ms(torch, env, fn, args.repeats)

    a_all = torch.randn(max(ms), max(k for *_, k in shapes), device=dev, dtype=dtype)
    for model, op, tp, n, k in shapes:
        b = torch.randn(k, n, device=dev, dtype=dtype)
        c_all = torch.empty(max(ms), n, device=dev, dtype=dtype)
        for m in ms:
            a, c = a_all[:m, :k].contiguous(), c_all[:m]
            for p in PIECES:
                rows = m // p
                parts = [(a[i * rows:(i + 1) * rows], c[i * rows:(i + 1) * rows]) for i in range(p)]

                def run(parts=parts) -> None:
                    for x, y in parts:
                        torch.mm(x, b, out=y)
                for mode in args.modes:
                    if mode == "evicted" and not cuda:
                        continue
                    t = timed(run) if mode == "back-to-back" else evicted(parts)
                    lines.append(f"{gpu},{model},{op},{tp},{m},{n},{k},{dname},{mode},{p},{t[len(t) // 2]:.6g},"
                                 f"{t[0]:.6g},{t[-1]:.6g}")
            del a
        del b, c_all
        print(lines[-1], flush=True)
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(lines) - 2} rows")


if __name__ == "__main__":
    main()
