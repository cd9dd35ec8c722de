"""Kineto files checked as a set (one run, its ranks, their world size) and cut to
profiler steps."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from ..errors import InputError
from .ops import TraceOp

if TYPE_CHECKING:
    from .kineto import _File


def _check_set(files: list[_File]) -> list[str]:
    """Files of one run: the same GPU model, NCCL version and a shared stretch of wall-clock
    time (ranks of one run are profiled together); the notes say which ranks are missing."""
    notes: list[str] = []
    if len(files) > 1:
        first = files[0]
        for f in files[1:]:
            if f.device_name and first.device_name and f.device_name != first.device_name:
                raise InputError(f.where, "deviceProperties.name", f"not the same run: {f.device_name!r} here, "
                                 f"{first.device_name!r} in {first.where}")
            if f.nccl_version and first.nccl_version and f.nccl_version != first.nccl_version:
                raise InputError(f.where, "distributedInfo.nccl_version", f"not the same run: NCCL "
                                 f"{f.nccl_version} here, {first.nccl_version} in {first.where}")
        spans = [f.span for f in files if math.isfinite(f.span[0])]
        if spans and max(a for a, _ in spans) > min(b for _, b in spans) + 60.0:
            late = max(files, key=lambda f: f.span[0])
            early = min(files, key=lambda f: f.span[1])
            raise InputError(late.where, "traceEvents.ts", f"not the same run: it starts "
                             f"{late.span[0] - early.span[1]:.0f} s after {early.where} ends (ranks of one run "
                             "are profiled together)")
    world = next((f.world for f in files if f.world), None)
    guessed = [f for f in files if f.world is None]
    if len(files) > 1 and guessed:
        notes.append(f"{len(guessed)} of {len(files)} file(s) name no rank or world (no distributedInfo, e.g. "
                     f"{guessed[0].where}): ranks taken in the order given, and the files taken as the whole run")
    if world and len(files) < world:
        have = sorted(f.rank for f in files)
        shown = ", ".join(map(str, have[:8])) + (" ..." if len(have) > 8 else "")
        notes.append(f"{len(files)} of {world} ranks present (ranks {shown}): collectives whose peers are missing "
                     "keep their measured times")
    return notes


def _select_steps(ops: list[TraceOp], files: list[_File], steps: Sequence[int]) -> list[TraceOp]:
    """The ops launched (or, without a launch time, started) inside the chosen profiler
    steps of their rank's file; dependencies on ops left out are dropped."""
    wanted = set(steps)
    windows: dict[int, list[tuple[float, float]]] = {}
    for f in files:
        if not f.steps:
            raise InputError(f.where, "traceEvents", "no ProfilerStep#N ranges: --steps needs a trace recorded with "
                             "torch.profiler's schedule (prof.step() each iteration)")
        missing = wanted - set(f.steps)
        if missing:
            raise InputError("--steps", None, f"step {min(missing)} is not in {f.where} (it has "
                             f"{min(f.steps)}-{max(f.steps)})")
        windows[f.rank] = [f.steps[n] for n in sorted(wanted)]
    if len(files) == 1:     # one file: its ops' ranks are its devices (0, 1, ...), whatever rank the file says it is
        windows = {o.rank: windows[files[0].rank] for o in ops}
    keep = []
    for o in ops:
        t = o.launch if o.launch is not None else o.start
        if any(a <= t <= b for a, b in windows.get(o.rank, [])):
            keep.append(o)
    if not keep:
        raise InputError("--steps", None, f"no ops in steps {sorted(wanted)}")
    ids = {o.id for o in keep}
    for o in keep:
        o.deps = [d for d in o.deps if d in ids]
    return keep


def _check_ranks(files: list[_File]) -> None:
    worlds = {f.world for f in files if f.world is not None}
    if len(worlds) > 1:
        bad = next(f for f in files if f.world != files[0].world)
        raise InputError(bad.where, "distributedInfo.world_size",
                         f"inconsistent ranks: {bad.world} here, {files[0].world} in {files[0].where}")
    seen: dict[int, str] = {}
    for f in files:
        if f.rank in seen:
            raise InputError(f.where, "distributedInfo.rank", f"inconsistent ranks: rank {f.rank} also in {seen[f.rank]}")
        if f.world is not None and f.rank >= f.world:
            raise InputError(f.where, "distributedInfo.rank", f"rank {f.rank} is not below world_size {f.world}")
        seen[f.rank] = f.where
