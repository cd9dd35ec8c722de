"""Shared fixtures: profiles with the overheads switched off, so closed forms are exact."""

from __future__ import annotations

import dataclasses

import pytest

from ficco_sim.hardware import load_gpu


def ideal(gpu="h100", **changes):
    """``gpu`` with no launch overhead, no DMA command cost and no interference."""
    g = load_gpu(gpu)
    base = dict(launch_overhead=0.0,
                dma=dataclasses.replace(g.dma, command_overhead=0.0),
                contention=dataclasses.replace(g.contention, compute_per_hbm_util=0.0, comm_per_hbm_util=0.0))
    base.update(changes)
    return dataclasses.replace(g, **base)


@pytest.fixture
def h100_ideal():
    return ideal("h100")
