"""Workloads: the data-dependent communication + computation pairs ficco-sim studies.

A :class:`Scenario` is one pair on ``gpus`` GPUs, sizes per GPU:

* ``ag-gemm``: every GPU holds ``m/gpus`` rows of A (m x k); all-gather A along M,
  then C = A @ B with the GPU's own B (k x n). (Sequence-parallel forward.)
* ``gemm-rs``: every GPU computes a partial C = A @ B (m x n, its K shard), then
  reduce-scatter C along M: each GPU ends with ``m/gpus`` summed rows.
* ``a2a-gemm``: MoE dispatch: GPU p sends ``routing[p][q]`` of its token rows (k wide)
  to GPU q, then each GPU runs its expert GEMM (received rows x k) @ (k x n). With no
  routing, every GPU sends ``m/gpus`` rows to every GPU (itself included).

Collective sizes follow the convention of :func:`ficco_sim.collective_time`: the bytes
each rank contributes (the shard for all-gather, the full input for reduce-scatter and
all-reduce, the whole send buffer for all-to-all).

>>> s = Scenario("ag-gemm", gpus=8, m=16384, n=8192, k=8192)
>>> s.shard_rows, s.comm_bytes_per_rank
(2048, 33554432)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .errors import InputError
from .hardware import DTYPE_BYTES

SCENARIO_KINDS = ("ag-gemm", "gemm-rs", "a2a-gemm")
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv")


@dataclass(frozen=True)
class Gemm:
    """C[m, n] = A[m, k] @ B[k, n] in ``dtype``."""

    m: int
    n: int
    k: int
    dtype: str = "float16"


@dataclass(frozen=True)
class Collective:
    """A collective of ``kind`` over ``gpus`` ranks, ``nbytes`` per rank (see module doc)."""

    kind: str
    nbytes: int
    gpus: int


def _positive_int(v: object, where: str, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InputError(where, name, f"must be a positive integer, got {v!r}")
    return v


@dataclass(frozen=True)
class Scenario:
    """One communication + computation pair (see module docstring)."""

    kind: str
    gpus: int
    m: int
    n: int
    k: int
    dtype: str = "float16"
    routing: tuple[tuple[int, ...], ...] | None = None
    name: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        where = self.name or "scenario"
        if self.kind not in SCENARIO_KINDS:
            raise InputError(where, "kind", f"unknown scenario {self.kind!r}; known: {', '.join(SCENARIO_KINDS)}")
        for attr in ("gpus", "m", "n", "k"):
            _positive_int(getattr(self, attr), where, attr)
        if self.gpus < 2:
            raise InputError(where, "gpus", f"need at least 2 GPUs, got {self.gpus}")
        if self.dtype not in DTYPE_BYTES:
            raise InputError(where, "dtype", f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if self.kind in ("ag-gemm", "gemm-rs") and self.m % self.gpus:
            raise InputError(where, "m", f"m={self.m} must divide evenly over {self.gpus} GPUs")
        if self.routing is not None:
            r = self.routing
            if self.kind != "a2a-gemm":
                raise InputError(where, "routing", "only a2a-gemm takes a routing matrix")
            if len(r) != self.gpus or any(len(row) != self.gpus for row in r):
                raise InputError(where, "routing", f"must be a {self.gpus}x{self.gpus} matrix of token counts")
            if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for row in r for x in row):
                raise InputError(where, "routing", "token counts must be non-negative integers")
            if any(sum(row) != self.m for row in r):
                raise InputError(where, "routing", f"each row must route exactly m={self.m} tokens")
        elif self.kind == "a2a-gemm" and self.m % self.gpus:
            raise InputError(where, "m", f"m={self.m} must divide evenly over {self.gpus} GPUs "
                             "(or give a routing matrix)")

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def shard_rows(self) -> int:
        return self.m // self.gpus

    def tokens(self) -> tuple[tuple[int, ...], ...]:
        """Rows sent from GPU p to GPU q (a2a-gemm); uniform when no routing is given."""
        if self.routing is not None:
            return self.routing
        share = self.m // self.gpus
        return tuple(tuple(share for _ in range(self.gpus)) for _ in range(self.gpus))

    def expert_rows(self, gpu: int) -> int:
        """Rows the expert GEMM on ``gpu`` processes (a2a-gemm)."""
        return sum(row[gpu] for row in self.tokens())

    @property
    def collective(self) -> Collective:
        kind = {"ag-gemm": "all-gather", "gemm-rs": "reduce-scatter", "a2a-gemm": "all-to-all"}[self.kind]
        return Collective(kind, self.comm_bytes_per_rank, self.gpus)

    @property
    def comm_bytes_per_rank(self) -> int:
        e = self.element_bytes
        if self.kind == "ag-gemm":
            return self.shard_rows * self.k * e
        if self.kind == "gemm-rs":
            return self.m * self.n * e
        return self.m * self.k * e

    def gemm_shapes(self) -> list[Gemm]:
        """The undecomposed GEMM each GPU runs."""
        if self.kind == "a2a-gemm":
            return [Gemm(self.expert_rows(g), self.n, self.k, self.dtype) for g in range(self.gpus)]
        return [Gemm(self.m, self.n, self.k, self.dtype)] * self.gpus

    def label(self) -> str:
        return self.name or f"{self.kind} m={self.m} n={self.n} k={self.k} x{self.gpus}"


def uniform_routing(gpus: int, tokens: int) -> tuple[tuple[int, ...], ...]:
    share = tokens // gpus
    return tuple(tuple(share for _ in range(gpus)) for _ in range(gpus))


def skewed_routing(gpus: int, tokens: int, skew: float) -> tuple[tuple[int, ...], ...]:
    """Rows per (src, dst) with a hot expert: destination ``(src + 1) % gpus`` gets a
    ``1 + skew`` times larger share. Rows sum to ``tokens`` exactly."""
    rows = []
    for p in range(gpus):
        weights: Sequence[float] = [1.0 + (skew if q == (p + 1) % gpus else 0.0) for q in range(gpus)]
        total = sum(weights)
        counts = [int(tokens * w / total) for w in weights]
        counts[(p + 1) % gpus] += tokens - sum(counts)
        rows.append(tuple(counts))
    return tuple(rows)
