"""Explore: the schedule space, a model-layer scenario library, parallel resumable sweeps,
closed-form sweeps, plots and size-based heuristics (``ficco-sim explore`` / ``recommend``)."""

from ..lazy import lazy_package

_EXPORTS = {"estimate_many": ".estimate", "Heuristic": ".heuristics", "load_heuristic": ".heuristics",
            "recommend": ".heuristics", "MODELS": ".library", "builtin_library": ".library",
            "load_scenarios": ".library", "Point": ".space", "enumerate_space": ".space",
            "valid_schedules": ".space", "default_scenarios": ".study", "run_study": ".study", "Job": ".sweep",
            "run_sweep": ".sweep"}
lazy_package(__name__, _EXPORTS)

__all__ = ["Heuristic", "Job", "MODELS", "Point", "builtin_library", "default_scenarios", "enumerate_space",
           "estimate_many", "load_heuristic", "load_scenarios", "recommend", "run_study", "run_sweep",
           "valid_schedules"]
