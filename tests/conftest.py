"""Shared fixtures: profiles with the overheads switched off, so closed forms are exact."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from ficco_sim.engine import des
from ficco_sim.hardware import SIMPLE, load_gpu


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark(name: str):
    """The script ``benchmarks/<name>.py`` as a module (its sibling scripts importable too)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ideal(gpu="h100", **changes):
    """``gpu`` with no launch overhead, no DMA command cost, no collective call floor, NVLS
    setup, per-GPU issue time or protocol costs (payload only, no latency, every channel,
    a grouped send's too) and no interference."""
    g = load_gpu(gpu)
    base = dict(launch_overhead=0.0,
                dma=dataclasses.replace(g.dma, command_overhead=0.0),
                comm_kernel=dataclasses.replace(g.comm_kernel, launch=None, protocols=(SIMPLE,), nvls_latency=0.0,
                                                issue=0.0, p2p=None),
                contention=dataclasses.replace(g.contention, compute_per_hbm_util=0.0, comm_per_hbm_util=0.0))
    base.update(changes)
    return dataclasses.replace(g, **base)


@pytest.fixture
def h100_ideal():
    return ideal("h100")


def check_timeline(graph, tl, gpu, topo) -> None:
    """Invariants every simulation must keep: every task ran once, dependencies and stream
    order respected, all bytes delivered, no SM, copy-engine or link capacity exceeded."""
    recs = tl.by_id()
    assert set(recs) == {t.id for t in graph.tasks}
    for t in graph.tasks:
        r = recs[t.id]
        assert all(math.isfinite(x) for x in (r.ready, r.start, r.end)), t.id
        assert 0 <= r.ready <= r.start + 1e-15 and r.start <= r.end + 1e-15, t.id
        for d in t.deps:
            assert r.ready >= recs[d].end - 1e-15, (t.id, d)
    last: dict = {}
    for t in graph.tasks:
        key = graph.stream_of(t)
        if key:
            if key in last:
                assert recs[t.id].ready >= recs[last[key]].end - 1e-15, (t.id, last[key])
            last[key] = t.id
    moved = sum(r.nbytes for r in tl.records if r.kind == "transfer")
    assert moved == pytest.approx(graph.total_bytes())
    limit = gpu.num_sms * gpu.sm.max_blocks
    for name, series in tl.counters.items():
        top = max(v for _, v in series)
        if ".blocks." in name:
            if gpu.host is not None and name.endswith(".blocks.comm"):
                continue     # a host's communication kernels hold no compute slot (HostSpec)
            assert top <= limit, name
        elif name.endswith("dma_busy"):
            assert top <= gpu.dma.engines, name
        elif name.startswith("link:"):
            u, v = name[5:].split("->")
            assert top <= topo.graph.edges[u, v]["bandwidth"] * (1 + 1e-9), name


@pytest.fixture(autouse=True)
def every_simulation_keeps_its_invariants(monkeypatch):
    """Wrap the engine so that every DES run anywhere in the suite is checked."""
    run = des.Simulation.run

    def checked(self):
        tl = run(self)
        check_timeline(self.g, tl, self.gpu, self.topo)
        return tl

    monkeypatch.setattr(des.Simulation, "run", checked)
