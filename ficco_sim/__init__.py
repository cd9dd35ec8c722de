"""ficco-sim: predict how fast multi-GPU compute-communication overlap runs.

>>> from ficco_sim import load_gpu, gemm_time
>>> gemm_time(load_gpu("h100"), 8192, 8192, 8192) > 0
True
"""

from .lazy import lazy_package

__version__ = "0.1.0"

# Loaded on first use, so that ``ficco-sim`` starts (and answers Ctrl-C) before numpy/pandas load;
# ``ficco_sim.simulate`` stays the function when its module (of the same name) loads.
_EXPORTS = {
    "InputError": ".errors", "GpuProfile": ".hardware", "load_gpu": ".hardware", "Schedule": ".schedules",
    "basic_schedules": ".schedules", "lower": ".schedules", "parse_schedule": ".schedules", "Result": ".simulate",
    "baseline": ".simulate", "collective_time": ".simulate", "gemm_time": ".simulate", "simulate": ".simulate",
    "simulate_many": ".simulate", "Topology": ".topology", "load_topology": ".topology", "Scenario": ".workload",
}
__all__ = sorted(_EXPORTS)
lazy_package(__name__, _EXPORTS)
