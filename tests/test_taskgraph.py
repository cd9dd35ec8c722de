"""Task descriptions (ficco_sim.taskgraph): kernels and transfers are frozen dataclasses whose
constructor is the quick one (lowerings build hundreds of thousands); it must take exactly the
fields, with their defaults, and leave the instances frozen, comparable and hashable."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from ficco_sim.hardware import BlockShape
from ficco_sim.taskgraph import Kernel, Transfer


@pytest.mark.parametrize("cls", [Kernel, Transfer])
def test_the_quick_constructor_takes_every_field_with_its_default(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields):
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default, f.name
        elif f.default_factory is dataclasses.MISSING:
            assert p.default is inspect.Parameter.empty, f.name


def test_tasks_stay_frozen_comparable_and_hashable():
    t = Transfer("x", 0, 1, 8.0, "sm", 0, drivers=("k0", "k1"))
    assert t == Transfer("x", 0, 1, 8.0, "sm", 0, drivers=("k0", "k1")) and hash(t) == hash(dataclasses.replace(t))
    assert t.io == {} and t.io is not Transfer("y", 0, 1, 8.0, "sm", 0).io       # a fresh dict each
    assert dataclasses.replace(t, dst=2).dst == 2 and t.dst == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.dst = 3          # type: ignore[misc]
    k = Kernel("g", 0, "compute", "gemm", 4, BlockShape(128, 64, 0), block_time=1e-6)
    assert (k.deps, k.role, k.sms) == ((), "compute", None) and k != dataclasses.replace(k, grid=5)
