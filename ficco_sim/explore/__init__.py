"""Explore: the schedule space, a model-layer scenario library, parallel resumable sweeps,
closed-form sweeps, plots and size-based heuristics (``ficco-sim explore`` / ``recommend``)."""

from .estimate import estimate_many
from .heuristics import Heuristic, load_heuristic, recommend
from .library import MODELS, builtin_library, load_scenarios
from .space import Point, enumerate_space, valid_schedules
from .study import default_scenarios, run_study
from .sweep import Job, run_sweep

__all__ = ["Heuristic", "Job", "MODELS", "Point", "builtin_library", "default_scenarios", "enumerate_space",
           "estimate_many", "load_heuristic", "load_scenarios", "recommend", "run_study", "run_sweep",
           "valid_schedules"]
