"""ficco-sim: predict how fast multi-GPU compute-communication overlap runs.

>>> from ficco_sim import load_gpu, gemm_time
>>> gemm_time(load_gpu("h100"), 8192, 8192, 8192) > 0
True
"""

import importlib
import sys
import types

__version__ = "0.1.0"

# Loaded on first use, so that ``ficco-sim`` starts (and answers Ctrl-C) before numpy/pandas load.
_EXPORTS = {
    "InputError": "errors", "GpuProfile": "hardware", "load_gpu": "hardware", "Schedule": "schedules",
    "basic_schedules": "schedules", "lower": "schedules", "parse_schedule": "schedules", "Result": "simulate",
    "baseline": "simulate", "collective_time": "simulate", "gemm_time": "simulate", "simulate": "simulate",
    "simulate_many": "simulate", "Topology": "topology", "load_topology": "topology", "Scenario": "workload",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ficco_sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


class _Package(types.ModuleType):
    """Keeps ``ficco_sim.simulate`` the function when its module (of the same name) loads."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
