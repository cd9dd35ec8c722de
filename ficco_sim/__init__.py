"""ficco-sim: predict how fast multi-GPU compute-communication overlap runs.

>>> from ficco_sim import load_gpu, gemm_time
>>> gemm_time(load_gpu("h100"), 8192, 8192, 8192) > 0
True
"""

from .errors import InputError
from .hardware import GpuProfile, load_gpu
from .schedules import Schedule, basic_schedules, lower, parse_schedule
from .simulate import Result, baseline, collective_time, gemm_time, simulate, simulate_many
from .topology import Topology, load_topology
from .workload import Scenario

__version__ = "0.1.0"

__all__ = ["GpuProfile", "InputError", "Result", "Scenario", "Schedule", "Topology", "basic_schedules", "baseline",
           "collective_time", "gemm_time", "load_gpu", "load_topology", "lower", "parse_schedule", "simulate",
           "simulate_many"]
