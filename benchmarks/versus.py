"""One row of a published "library X against GEMM + NCCL" comparison beside ficco-sim's two
presets: both times, both errors, both ratios and whether the ratio's sign agrees
(``benchmarks/flux_issue90.py``, ``benchmarks/kraken_prs.py``)."""

from __future__ import annotations

import argparse


def versus(x: str, published_nccl_s: float, model_nccl_s: float, published_x_s: float, model_x_s: float,
           url: str) -> dict:
    """Columns ``published_nccl_ms, model_nccl_ms, err_nccl, published_<x>_ms, model_<x>_ms,
    err_<x>, published_ratio, model_ratio, sign_agrees, source_url, used_for_fit`` (the
    quoted numbers fit nothing)."""
    return {"published_nccl_ms": published_nccl_s * 1e3, "model_nccl_ms": model_nccl_s * 1e3,
            "err_nccl": model_nccl_s / published_nccl_s - 1,
            f"published_{x}_ms": published_x_s * 1e3, f"model_{x}_ms": model_x_s * 1e3,
            f"err_{x}": model_x_s / published_x_s - 1,
            "published_ratio": published_x_s / published_nccl_s, "model_ratio": model_x_s / model_nccl_s,
            "sign_agrees": (published_x_s > published_nccl_s) == (model_x_s > model_nccl_s),
            "source_url": url, "used_for_fit": False}


def arguments(doc: str) -> argparse.Namespace:
    """The scripts' command line: ``--csv`` to write the rows too."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=None, help="also write the rows here")
    return ap.parse_args()


def print_times(df, title: str, labels: tuple[str, ...]) -> None:
    """A rich table of published against modelled times (columns ``labels``, then
    ``schedule``, ``published_ms``, ``model_ms``, ``err``; a row ``used_for_fit`` says so)."""
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for c in (*labels, "schedule", "published ms", "model ms", "err"):
        t.add_column(c, justify="right")
    for r in df.to_dict("records"):
        t.add_row(*(str(r[c]) for c in labels), r["schedule"], f"{r['published_ms']:.3f}", f"{r['model_ms']:.3f}",
                  f"{r['err']:+.1%}" + (" (fitted on)" if r.get("used_for_fit") else ""))
    Console(width=170).print(t)
