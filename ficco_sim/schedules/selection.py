"""The schedules a ``--schedule`` option names: names and presets, repeated or comma-separated,
``all`` (the basic set this scenario can run, and whatever else is named beside it) or
``presets`` (every library preset that applies)."""

from __future__ import annotations

from dataclasses import replace

from ..hardware import GpuProfile
from ..topology import Topology
from ..workload import Scenario
from .presets import applicable, is_preset
from .schedule import Schedule, basic_schedules, parse_schedule
from .validity import invalid_reason


def schedule_names(parts: list[str]) -> list[str]:
    """Schedule and preset names from repeated / comma-separated options; a preset's knobs may
    follow it after commas too (``te-pipeline:num_splits=8,num_sm=8``).

    >>> schedule_names(["all,fused-dma", "te-pipeline:num_splits=8,num_sm=8"])
    ['all', 'fused-dma', 'te-pipeline:num_splits=8,num_sm=8']
    """
    names: list[str] = []
    for part in parts:
        for item in filter(None, (x.strip() for x in part.split(","))):
            if "=" in item and ":" not in item and names and ":" in names[-1]:
                names[-1] += "," + item
            else:
                names.append(item)
    return names


def select_schedules(names: list[str], scenario: Scenario, gpu: GpuProfile,
                     topo: Topology) -> tuple[list[Schedule | str], list[str]]:
    """(schedules to run, ``none`` first; what ``all`` left out, with why). ``all`` (or no
    name) is the basic set less what this scenario cannot run (a GPU's rows too few for FiCCO's
    pieces); ``presets`` every preset that applies; either with whatever else is named beside it."""
    left_out: list[str] = []
    schedules: list[Schedule | str] = ["none"]
    if not names or "all" in names:
        schedules = []
        for sch in basic_schedules(scenario):     # decomposed along the scenario's shard dimension
            sch = replace(sch, dim=scenario.shard_dim) if sch.pattern else sch
            why = invalid_reason(scenario, sch, gpu, topo)
            schedules += [sch] if why is None else []
            left_out += [f"{sch.name} ({why})"] if why else []
    if "presets" in names:
        schedules += [p for p, got in applicable(scenario, gpu, topo).items() if not isinstance(got, str)]
    seen = {s if isinstance(s, str) else s.name for s in schedules}
    for n in dict.fromkeys(names):
        if n in ("all", "none", "presets"):
            continue
        sch = n if is_preset(n) else parse_schedule(n)
        key = sch if isinstance(sch, str) else sch.name
        if key not in seen:
            seen.add(key)
            schedules.append(sch)
    return schedules, left_out
