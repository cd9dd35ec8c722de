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
