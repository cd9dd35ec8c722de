"""Tiny task graphs for tests and doctests (real lowerings at toy sizes).

>>> tiny_ag_gemm().meta["reference"]["kind"]
'ag-gemm'
"""

from __future__ import annotations

from ..taskgraph import TaskGraph
from ..workload import Scenario


def tiny(kind: str = "ag-gemm", schedule: str = "shard-p2p-sm", gpus: int = 2, m: int = 8, n: int = 4,
         k: int = 4) -> TaskGraph:
    """A lowered graph of a toy scenario (float32, on the h100 profile's fully connected topology)."""
    from ..schedules.lowering import lower
    return lower(Scenario(kind, gpus, m, n, k, dtype="float32"), schedule, "h100", f"fc:{gpus}")


def tiny_ag_gemm() -> TaskGraph:
    return tiny("ag-gemm", "shard-p2p-sm")
