"""Workloads: the data-dependent communication + computation pairs ficco-sim studies.

A :class:`Scenario` is one pair on ``gpus`` GPUs, sizes per GPU:

* ``ag-gemm``: every GPU holds ``m/gpus`` rows of A (m x k); all-gather A along M,
  then C = A @ B with the GPU's own B (k x n). (Sequence-parallel forward.)
* ``gemm-rs``: every GPU computes a partial C = A @ B (m x n, its K shard), then
  reduce-scatter C along M: each GPU ends with ``m/gpus`` summed rows.
* ``a2a-gemm``: MoE dispatch: GPU p sends ``routing[p][q]`` of its token rows (k wide)
  to GPU q, then each GPU runs its expert GEMM (received rows x k) @ (k x n). With no
  routing, every GPU sends ``m/gpus`` rows to every GPU (itself included).

Independent pairs (the C3 / resource-aware experiment: a GEMM of one layer running beside a
collective of another, no data shared): every GPU computes C = A @ B (m x k times k x n)
while a collective moves an activation-shaped tensor X (m x k):

* ``ag-par-gemm``: all-gather of X, ``m/gpus`` rows from each GPU;
* ``a2a-par-gemm``: all-to-all of X, ``m/gpus`` rows to every GPU;
* ``ar-par-gemm``: all-reduce of X.

Their schedules are ``none`` (the collective, then the GEMM) and ``par-*`` (both launched
at once, the collective first, with the engine, priority, shaping, channel and SM-margin knobs); the
collective's size against the GEMM's is set by n (compute grows with n, bytes do not).

Collective sizes follow the convention of :func:`ficco_sim.collective_time`: the bytes
each rank contributes (the shard for all-gather, the full input for reduce-scatter and
all-reduce, the whole send buffer for all-to-all).

>>> s = Scenario("ag-gemm", gpus=8, m=16384, n=8192, k=8192)
>>> s.shard_rows, s.comm_bytes_per_rank
(2048, 33554432)
"""

from __future__ import annotations

import numbers

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .errors import InputError
from .hardware import DTYPE_BYTES, NVLS_MIN_BYTES

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


def check_memory(gpu, need: float, where: str, field: str | None, what: str) -> None:
    """Refuse ``need`` bytes a GPU must hold at once (``what`` they are) beyond ``gpu``'s device
    memory (``hbm.capacity_gb``; nothing checked where unknown): callers pass a lower bound of
    what the work holds, so nothing that runs is refused."""
    cap = getattr(gpu, "hbm_capacity", 0.0)
    if cap and need > cap:
        raise InputError(where, field, f"{what} alone take {need / 2 ** 30:.1f} GiB, more than {gpu.name}'s "
                         f"{cap / 2 ** 30:.0f} GiB of device memory")


MAX_GPUS = 1024          # one simulated system (topology too); beyond this no engine here answers in reasonable time
MAX_DIM = 2 ** 24        # rows or columns of one GEMM operand (16.7M): beyond, a typo, not a layer


def _positive_int(v: object, where: str, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:    # numpy's integers too
        raise InputError(where, name, f"must be a positive integer, got {v!r}")
    v = int(v)
    limit = MAX_GPUS if name == "gpus" else MAX_DIM
    if v > limit:
        raise InputError(where, name, f"{v} is beyond what one simulation answers (at most {limit})")
    return v


@dataclass(frozen=True)
class Scenario:
    """One communication + computation pair (see module docstring). ``shard_dim`` is the
    dimension of A the communication moves in shards: ``M`` (token rows, the default) or,
    for ``ag-gemm``, ``K`` (A gathered along the reduction dimension: weight gradients)."""

    kind: str
    gpus: int
    m: int
    n: int
    k: int
    dtype: str = "float16"
    routing: tuple[tuple[int, ...], ...] | None = None
    name: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    shard_dim: str = "M"

    def __post_init__(self) -> None:
        where = self.name or "scenario"
        spec = scenario_kind(self.kind, where)
        for attr in ("gpus", "m", "n", "k"):
            object.__setattr__(self, attr, _positive_int(getattr(self, attr), where, attr))
        if self.gpus < 2:
            raise InputError(where, "gpus", f"need at least 2 GPUs, got {self.gpus}")
        if self.dtype not in DTYPE_BYTES:
            raise InputError(where, "dtype", f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if self.shard_dim not in spec.shard_dims:
            raise InputError(where, "shard_dim", f"{self.kind} moves A in shards along "
                             f"{' or '.join(spec.shard_dims)}, got {self.shard_dim!r}")
        if self.routing is not None and not spec.routed:
            raise InputError(where, "routing", f"only {', '.join(k for k in KINDS if KINDS[k].routed)} "
                             "takes a routing matrix")
        spec.check(self, where)

    @property
    def spec(self) -> "ScenarioKind":
        """The registry entry of this scenario's kind (:data:`KINDS`)."""
        return KINDS[self.kind]

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
        return Collective(self.spec.collective, self.comm_bytes_per_rank, self.gpus)

    @property
    def comm_bytes_per_rank(self) -> int:
        """Bytes each rank contributes to the collective (see module docstring)."""
        rows, cols = self.spec.comm_shape(self)
        return rows * cols * self.element_bytes

    def gemm_shapes(self) -> list[Gemm]:
        """The undecomposed GEMM each GPU runs."""
        return self.spec.gemms(self)

    def check_fits(self, gpu) -> None:
        """Refuse sizes whose GEMM operands alone (A, B and C of the largest GEMM a GPU runs)
        exceed ``gpu``'s device memory (:func:`check_memory`)."""
        from .gemm_model import hbm_traffic     # A, B and C once: the least a GPU holds to run the GEMM
        need = max((hbm_traffic(g.m, g.n, g.k, self.dtype) for g in self.gemm_shapes()), default=0)
        check_memory(gpu, need, self.name or "scenario", "m, n, k", f"the {self.dtype} operands of one GPU's GEMM")

    def structure(self) -> tuple:
        """What the lowering's structure depends on beyond scale: scenarios with equal
        structure lower to task graphs that are exact scaled copies of each other (piece
        rows proportional to M or K, bytes to the communicated shape), so a closed-form
        template compiled from one evaluates the others exactly. An all-reduce's side of
        :data:`~ficco_sim.hardware.NVLS_MIN_BYTES` is part of it (the algorithm NCCL picks)."""
        nvls = (self.comm_bytes_per_rank >= NVLS_MIN_BYTES,) if self.spec.collective == "all-reduce" else ()
        return (self.kind, self.gpus, self.dtype, self.shard_dim, self.spec.split_key(self), *nvls)

    def key(self) -> str:
        """The scenario's identity: every field that changes an answer, never its name.
        Sweeps, resume logs and summaries key on it (two scenarios with one name but
        other sizes stay two)."""
        routing = "" if self.routing is None else f"/routing={self._routing_digest()}"
        return f"{self.kind}/x{self.gpus}/m{self.m}/n{self.n}/k{self.k}/{self.dtype}/dim{self.shard_dim}{routing}"

    def _routing_digest(self) -> str:
        return hashlib.blake2b(repr(self.routing).encode(), digest_size=5).hexdigest()

    def label(self) -> str:
        """The name, or (unnamed) a readable description that tells distinct scenarios apart."""
        if self.name:
            return self.name
        extra = ([self.dtype] if self.dtype != "float16" else []) + \
            ([f"dim{self.shard_dim}"] if self.shard_dim != "M" else []) + \
            ([f"routing {self._routing_digest()}"] if self.routing is not None else [])
        return " ".join([f"{self.kind} m={self.m} n={self.n} k={self.k} x{self.gpus}"] + extra)

    def columns(self) -> dict:
        """The scenario's columns in every result table (label and identity first)."""
        return {"scenario": self.label(), "scenario_id": self.key(), "kind": self.kind, "gpus": self.gpus,
                "m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "shard_dim": self.shard_dim}


# ----------------------------------------------------------------------------------------
# The registry of scenario kinds

@dataclass(frozen=True)
class ScenarioKind:
    """What a scenario kind means, in one place (the registry :data:`KINDS`).

    ``collective``: the collective it overlaps; ``shard_dims``: dimensions A may be
    sharded along; ``routed``: takes a routing matrix; ``comm_scale``: the scenario
    dimensions (of m, n, k) communicated bytes scale with; ``check``: kind-specific
    validation; ``comm_shape``: (rows, cols) each rank contributes; ``gemms``: each GPU's
    whole GEMM; ``steps``: communication steps of an overlapped (granularity, pattern);
    ``split_key``: what piece splits depend on beyond scale (see :meth:`Scenario.structure`);
    ``dim_reason``: why decomposing along a dimension other than the layout's cannot run;
    ``independent``: the GEMM does not consume the collective's data (``par-*`` schedules).
    Lowering (``schedules.lowering.LOWERINGS``) and the executor's reference
    (``validate.reference``) are keyed by the same names and checked complete on import.
    """

    name: str
    collective: str
    shard_dims: tuple[str, ...]
    routed: bool
    comm_scale: tuple[str, str]
    check: Callable[[Scenario, str], None]
    comm_shape: Callable[[Scenario], tuple[int, int]]
    gemms: Callable[[Scenario], list[Gemm]]
    steps: Callable[[Scenario, str, str], int]
    split_key: Callable[[Scenario], tuple]
    dim_reason: str
    independent: bool = False


def scenario_kind(kind: str, where: str = "scenario") -> ScenarioKind:
    """The registry entry of ``kind``; an unknown kind is an input error, never a fallback."""
    spec = KINDS.get(kind)
    if spec is None:
        raise InputError(where, "kind", f"unknown scenario {kind!r}; known: {', '.join(KINDS)}")
    return spec


def _divisible(sc: Scenario, where: str) -> None:
    if sc.m % sc.gpus:
        raise InputError(where, "m", f"m={sc.m} must divide evenly over {sc.gpus} GPUs")


def _check_ag(sc: Scenario, where: str) -> None:
    _divisible(sc, where)
    if sc.shard_dim == "K" and sc.k % sc.gpus:
        raise InputError(where, "k", f"k={sc.k} must divide evenly over {sc.gpus} GPUs to shard A along K")


def _check_a2a(sc: Scenario, where: str) -> None:
    r = sc.routing
    if r is None:
        if sc.m % sc.gpus:
            raise InputError(where, "m", f"m={sc.m} must divide evenly over {sc.gpus} GPUs (or give a routing matrix)")
        return
    if len(r) != sc.gpus or any(len(row) != sc.gpus for row in r):
        raise InputError(where, "routing", f"must be a {sc.gpus}x{sc.gpus} matrix of token counts")
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for row in r for x in row):
        raise InputError(where, "routing", "token counts must be non-negative integers")
    if any(sum(row) != sc.m for row in r):
        raise InputError(where, "routing", f"each row must route exactly m={sc.m} tokens")


def _steps(sc: Scenario, granularity: str, pattern: str, *, ring_rs: bool = False) -> int:
    if granularity == "none":
        return 1
    subs = sc.gpus if granularity == "ficco" else 1
    if pattern == "a2a":
        return subs
    return subs * (sc.gpus if ring_rs else sc.gpus - 1)


def _even(rows: int, parts: int) -> bool:
    return rows % parts == 0


def _split_ag(sc: Scenario) -> tuple:
    shard = sc.k // sc.gpus if sc.shard_dim == "K" else sc.shard_rows
    # shard pieces always scale; FiCCO sub-pieces scale when they split evenly
    return ("even",) if _even(shard, sc.gpus) else ("exact", sc.m, sc.k)


def _split_rs(sc: Scenario) -> tuple:
    return ("even",) if _even(sc.shard_rows, sc.gpus) else ("exact", sc.m)


def _split_a2a(sc: Scenario) -> tuple:
    counts = sc.tokens()
    if all(_even(x, sc.gpus) for row in counts for x in row) and len({x for row in counts for x in row}) == 1:
        return ("uniform",)
    return ("exact", counts)


KINDS: dict[str, ScenarioKind] = {k.name: k for k in (
    ScenarioKind("ag-gemm", "all-gather", ("M", "K"), False, ("m", "k"), _check_ag,
                 lambda s: (s.shard_rows, s.k) if s.shard_dim == "M" else (s.k // s.gpus, s.m),
                 lambda s: [Gemm(s.m, s.n, s.k, s.dtype)] * s.gpus,
                 lambda s, g, p: _steps(s, g, p), _split_ag,
                 "A arrives in shards along the scenario's shard_dim; pieces along another dimension would "
                 "each need every shard"),
    ScenarioKind("gemm-rs", "reduce-scatter", ("M",), False, ("m", "n"), lambda s, w: _divisible(s, w),
                 lambda s: (s.m, s.n),
                 lambda s: [Gemm(s.m, s.n, s.k, s.dtype)] * s.gpus,
                 lambda s, g, p: _steps(s, g, p, ring_rs=True), _split_rs,
                 "K pieces are partial sums of every output row: no row of C is final before the last piece, "
                 "so nothing can be scattered early"),
    ScenarioKind("a2a-gemm", "all-to-all", ("M",), True, ("m", "k"), _check_a2a,
                 lambda s: (s.m, s.k),
                 lambda s: [Gemm(s.expert_rows(g), s.n, s.k, s.dtype) for g in range(s.gpus)],
                 lambda s, g, p: _steps(s, g, p), _split_a2a,
                 "the all-to-all moves token rows (M); a K piece would need every token's full row"),
) + tuple(
    ScenarioKind(name, coll, ("M",), False, ("m", "k"), lambda s, w: _divisible(s, w), shape,
                 lambda s: [Gemm(s.m, s.n, s.k, s.dtype)] * s.gpus,
                 lambda s, g, p: 1, lambda s: ("even",),
                 "the GEMM and the collective share no data: nothing is decomposed", True)
    for name, coll, shape in (("ag-par-gemm", "all-gather", lambda s: (s.shard_rows, s.k)),
                              ("a2a-par-gemm", "all-to-all", lambda s: (s.m, s.k)),
                              ("ar-par-gemm", "all-reduce", lambda s: (s.m, s.k))))}
SCENARIO_KINDS = tuple(KINDS)


def uniform_routing(gpus: int, tokens: int) -> tuple[tuple[int, ...], ...]:
    share = tokens // gpus
    return tuple(tuple(share for _ in range(gpus)) for _ in range(gpus))


def skewed_routing(gpus: int, tokens: int, skew: float, hot_expert: bool = False) -> tuple[tuple[int, ...], ...]:
    """Rows per (src, dst), one destination of each source getting a ``1 + skew`` times larger
    share: ``(src + 1) % gpus`` (uneven per peer; every GPU still receives as many rows), or with
    ``hot_expert`` GPU 0 for every source (a popular expert: GPU 0's expert GEMM is the largest
    and the others wait for it). Rows sum to ``tokens`` exactly.

    >>> skewed_routing(2, 8, 1.0), skewed_routing(2, 8, 1.0, hot_expert=True)
    (((2, 6), (6, 2)), ((6, 2), (6, 2)))
    """
    rows = []
    for p in range(gpus):
        hot = 0 if hot_expert else (p + 1) % gpus
        weights: Sequence[float] = [1.0 + (skew if q == hot else 0.0) for q in range(gpus)]
        total = sum(weights)
        counts = [int(tokens * w / total) for w in weights]
        counts[hot] += tokens - sum(counts)
        rows.append(tuple(counts))
    return tuple(rows)


def scenario_from_flags(*args, **kw) -> Scenario:
    """A :class:`Scenario` from command-line values: a refused size or option names its flag
    (``--m``), not the scenario's field."""
    try:
        return Scenario(*args, **kw)
    except InputError as e:
        if e.where == "scenario" and e.field in ("m", "n", "k", "dtype", "shard_dim"):
            raise InputError(f"--{e.field.replace('_', '-')}", None, e.message) from None
        raise
