"""Schedules: points in the overlap design space, with stable short names.

A name is dash-separated tokens: granularity (``none`` | ``shard`` | ``ficco`` | ``par`` |
``fused``), then for decomposed schedules the pattern (``p2p`` | ``a2a``), then the engine
(``sm`` | ``dma``, and for ``fused`` also ``st``), then optional modifiers: ``hi`` (communication stream at high priority), ``smem48k``
(48 KiB of extra shared memory per compute block), ``g2`` (2 communication steps per
GEMM piece), ``dimK`` (decompose along K), ``c8`` (8 channels for SM communication; on copy
engines, the engines its copies are queued on: ``par-dma-c1``, one copy at a time a GPU),
``m16`` (an SM margin: GEMMs launched on all SMs but 16, which stay free for communication,
as TransformerEngine's ``set_sm_margin`` or a green context / CU mask would), and for ``par``
``gf`` (launch order: the GEMM is issued before the collective, so its blocks reach the SMs
first and, kernels being dispatched in arrival order, keep them wave after wave; by default
the collective is issued first) or ``mix`` (the order differs across ranks: the odd ranks'
GEMM reaches the GPU first, the even ranks' collective, as two streams issued at once with
nothing deciding which kernel gets there first; the collective then waits on the odd ranks
while its kernels on the even ranks hold their SMs; on a ring topology the closed form reads
it up to a third slower than the discrete-event engine, which moves the even ranks' routed
transfers meanwhile).

>>> parse_schedule("ficco-a2a-dma").pattern
'a2a'
>>> parse_schedule("shard-p2p-sm-hi-smem64k").name
'shard-p2p-sm-hi-smem64k'
>>> Schedule("shard").name
'shard-p2p-sm'
>>> parse_schedule("par-sm-hi").name      # independent pairs: side by side, nothing decomposed
'par-sm-hi'
>>> parse_schedule("par-sm-gf").gemm_first
True
>>> parse_schedule("par-sm-hi-mix").name
'par-sm-hi-mix'

``fused`` keeps one GEMM kernel and signals per tile: each peer's rows leave as soon as the
tiles covering them are done, with no decomposition loss. ``fused-sm`` / ``fused-dma``: a
communication kernel or copy command per peer starts on the signal (TransformerEngine's
atomic GEMM, Triton-distributed); ``fused-st``: the GEMM's own blocks store each tile to
its peer from the epilogue (Flux), holding their SMs while the bytes cross the link, each
block at most ``gemm.peer_gbps_per_block``; where a profile gives no such rate the stores are
posted and the SMs take the next tiles meanwhile (Ampere).

>>> parse_schedule("fused-st").name
'fused-st'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError

GRANULARITIES = ("none", "shard", "ficco", "par", "fused")
PATTERNS = ("p2p", "a2a")
ENGINES = ("sm", "dma", "st")   # st: a fused GEMM's epilogue stores
PRIORITIES = ("normal", "high")
DIMS = ("M", "K", "N")
DEFAULT_PATTERN = {"none": None, "shard": "p2p", "ficco": "a2a", "par": None, "fused": None}


@dataclass(frozen=True)
class Schedule:
    """One point of the design space (see DESIGN.md). ``smem`` is extra bytes per compute block."""

    granularity: str = "none"
    pattern: str | None = None
    engine: str = "sm"
    priority: str = "normal"
    smem: int = 0
    group: int = 1
    dim: str = "M"
    channels: int | None = None
    margin: int = 0
    gemm_first: bool = False
    mixed: bool = False     # par: the launch order differs across ranks (odd ranks: the GEMM first)

    def __post_init__(self) -> None:
        where = "schedule"
        if self.granularity not in GRANULARITIES:
            raise InputError(where, "granularity", f"unknown {self.granularity!r}; known: {', '.join(GRANULARITIES)}")
        if self.pattern is None:
            object.__setattr__(self, "pattern", DEFAULT_PATTERN[self.granularity])
        if self.granularity == "par" and self.pattern is not None:
            raise InputError(where, "pattern", "par runs whole kernels side by side: it has no pattern "
                             "(e.g. par-sm, par-dma)")
        if self.granularity == "fused" and self.pattern is not None:
            raise InputError(where, "pattern", "fused sends each peer's rows on its tile signal: it has no "
                             "pattern (e.g. fused-st, fused-dma)")
        if self.engine == "st" and self.granularity != "fused":
            raise InputError(where, "engine", "st (epilogue stores) is the engine of a fused GEMM only "
                             "(fused-st)")
        if self.granularity in ("shard", "ficco") and self.pattern not in PATTERNS:
            raise InputError(where, "pattern", f"unknown {self.pattern!r}; known: {', '.join(PATTERNS)}")
        if self.engine not in ENGINES:
            raise InputError(where, "engine", f"unknown {self.engine!r}; known: {', '.join(ENGINES)}")
        if self.priority not in PRIORITIES:
            raise InputError(where, "priority", f"unknown {self.priority!r}; known: {', '.join(PRIORITIES)}")
        if self.dim not in DIMS:
            raise InputError(where, "dim", f"unknown {self.dim!r}; known: {', '.join(DIMS)}")
        if self.smem < 0:
            raise InputError(where, "smem", f"must not be negative, got {self.smem}")
        if self.group < 1:
            raise InputError(where, "group", f"must be at least 1, got {self.group}")
        if self.channels is not None and self.channels < 1:
            raise InputError(where, "channels", f"must be at least 1, got {self.channels}")
        if self.margin < 0:
            raise InputError(where, "margin", f"must not be negative, got {self.margin}")
        if self.gemm_first and self.granularity != "par":
            raise InputError(where, "gemm_first", "gf (the GEMM issued before the collective) is a launch order of "
                             "independent pairs: par schedules only (e.g. par-sm-gf)")
        if self.mixed and self.granularity != "par":
            raise InputError(where, "mixed", "mix (a launch order that differs across ranks) is a launch order of "
                             "independent pairs: par schedules only (e.g. par-sm-mix)")
        if self.mixed and self.gemm_first:
            raise InputError(where, "mixed", "gf and mix are two launch orders: give one (gf: every rank's GEMM "
                             "first; mix: the odd ranks' only)")

    def gemm_goes_first(self, gpu: int) -> bool:
        """Whether ``gpu``'s GEMM reaches it before the collective (``par``): everywhere with
        ``gf``, on the odd GPUs with ``mix``."""
        return self.gemm_first or (self.mixed and gpu % 2 == 1)

    @property
    def overlapped(self) -> bool:
        return self.granularity != "none"

    @property
    def name(self) -> str:
        parts = [self.granularity]
        if self.pattern:
            parts.append(self.pattern)
        if self.overlapped or self.engine != "sm":
            parts.append(self.engine)
        if self.priority == "high":
            parts.append("hi")
        if self.smem:
            parts.append(f"smem{self.smem // 1024}k" if self.smem % 1024 == 0 else f"smem{self.smem}b")
        if self.group > 1:
            parts.append(f"g{self.group}")
        if self.dim != "M":
            parts.append(f"dim{self.dim}")
        if self.channels is not None:
            parts.append(f"c{self.channels}")
        if self.margin:
            parts.append(f"m{self.margin}")
        if self.gemm_first:
            parts.append("gf")
        if self.mixed:
            parts.append("mix")
        return "-".join(parts)

    def __str__(self) -> str:
        return self.name


_MOD = re.compile(r"^(hi|gf|mix|smem(\d+)(k|b)|g(\d+)|dim([MKN])|c(\d+)|m(\d+))$")


def parse_schedule(name: str | Schedule) -> Schedule:
    """A :class:`Schedule` from its short name (see module docstring)."""
    if isinstance(name, Schedule):
        return name
    tokens = [t for t in str(name).strip().split("-") if t]
    if not tokens or tokens[0] not in GRANULARITIES:
        raise InputError("--schedule", None, f"{name!r}: must start with one of {', '.join(GRANULARITIES)} "
                         "(e.g. none, shard-p2p-sm, ficco-a2a-dma-hi)")
    kw: dict = {"granularity": tokens[0]}
    rest = tokens[1:]
    if rest and rest[0] in PATTERNS:
        kw["pattern"] = rest.pop(0)
    if rest and rest[0] in ENGINES:
        kw["engine"] = rest.pop(0)
    seen: dict[str, str] = {}
    for tok in rest:
        m = _MOD.match(tok)
        if not m:
            raise InputError("--schedule", None, f"{name!r}: unknown part {tok!r} "
                             "(modifiers: hi, smem<N>k, g<N>, dimK, c<N>, m<N>, gf, mix)")
        what = tok if tok in ("hi", "gf", "mix") else next(i for i in (2, 4, 5, 6, 7) if m.group(i))
        if what in seen:
            raise InputError("--schedule", None, f"{name!r}: {tok!r} repeats {seen[what]!r} (each modifier once)")
        seen[what] = tok
        if tok == "hi":
            kw["priority"] = "high"
        elif tok == "gf":
            kw["gemm_first"] = True
        elif tok == "mix":
            kw["mixed"] = True
        elif m.group(2):
            kw["smem"] = int(m.group(2)) * (1024 if m.group(3) == "k" else 1)
        elif m.group(4):
            kw["group"] = int(m.group(4))
        elif m.group(5):
            kw["dim"] = m.group(5)
        elif m.group(6):
            kw["channels"] = int(m.group(6))
        elif m.group(7):
            kw["margin"] = int(m.group(7))
    return Schedule(**kw)


def basic_schedules(scenario=None) -> list[Schedule]:
    """The basic set ``--schedule all`` runs: no overlap, shard-level p2p and FiCCO a2a,
    each on SMs (normal and high priority) and on DMA engines (priority does not apply
    to copy engines). For a ``scenario`` of an independent kind (GEMM beside a collective):
    no overlap, and side by side on SMs (normal and high priority) and on DMA engines."""
    if scenario is not None and scenario.spec.independent:
        return [Schedule("none"), Schedule("par", engine="sm"), Schedule("par", engine="sm", priority="high"),
                Schedule("par", engine="dma")]
    out = [Schedule("none")]
    for gran in ("shard", "ficco"):
        out += [Schedule(gran, engine="sm"), Schedule(gran, engine="sm", priority="high"),
                Schedule(gran, engine="dma")]
    return out
