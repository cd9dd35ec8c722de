"""Calibration: turn measured timings into profile numbers, and measure them first if asked.

* :func:`calibrate_from_files` fits the GEMM cost model (``gemm.efficiency``, ``gemm.k_overhead``,
  ``launch_overhead``) and link alpha-beta parameters to measurement files (the shared vidur
  tables, or our own benchmark CSVs), holding out whole models, and writes a profile.
* :func:`calibrate_device` runs the torch microbenchmarks (:func:`run_benchmarks`) on the CPU
  or a CUDA device and fits the same way.

Modules: ``measurements`` (tidy tables), ``fit_gemm``, ``fit_links``, ``bench``, ``report``,
``writer`` (profile YAML), ``cpu_profile``, ``workflow``, ``cli``.
"""

from ..lazy import lazy_package

_EXPORTS = {"run_benchmarks": ".bench", "fit_gemm": ".fit_gemm", "predict_times": ".fit_gemm",
            "fit_alpha_beta": ".fit_links", "fit_collectives": ".fit_links", "predict_all_reduce": ".fit_links",
            "Calibration": ".workflow", "calibrate_device": ".workflow", "calibrate_from_files": ".workflow"}
lazy_package(__name__, _EXPORTS)

__all__ = ["Calibration", "calibrate_device", "calibrate_from_files", "fit_alpha_beta", "fit_collectives",
           "fit_gemm", "predict_all_reduce", "predict_times", "run_benchmarks"]
