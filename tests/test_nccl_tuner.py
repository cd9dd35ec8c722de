"""NCCL's tuner in both engines, against closed forms: a small call runs on fewer channels
(NCCL's channel rule), the size the tuner sees (the whole call, or one rank's share before
NCCL 2.22) picks the protocol and the channels, an NVLS call pays its setup once, and a host
thread driving several GPUs issues their kernels one after another. Switching any of these
off in an engine turns a test here red."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import ideal
from ficco_sim import collective_time
from ficco_sim.hardware import Protocol
from ficco_sim.topology import ring

KIB = 1 << 10
LL = Protocol("LL", 1e-6, 0.5, 4096, True)            # NCCL's: 512 threads x 8 B per channel per rank
SIMPLE = Protocol("Simple", 30e-6, 1.0, 32768)


def tuned_gpu(tuner: str = "call"):
    base = ideal()
    return dataclasses.replace(base, comm_kernel=dataclasses.replace(
        base.comm_kernel, protocols=(LL, SIMPLE), tuner=tuner, issue=5e-6))


def ll_step(gpu, nbytes: float, channels: int, alpha: float) -> float:
    """One ring step of ``nbytes`` on LL over ``channels`` channels (the links are faster)."""
    return alpha + LL.latency + nbytes / LL.efficiency / (channels * gpu.comm_kernel.channel_bandwidth)


@pytest.mark.parametrize("sim", ["des", "analytical"])
@pytest.mark.parametrize("shard", [8 * KIB, 16 * KIB, 48 * KIB, 256 * KIB])
def test_a_small_ring_call_runs_on_as_many_channels_as_nccls_rule_gives(sim, shard):
    """All-gather of ``shard`` per rank on 4 GPUs: the call is 4 x shard, LL's rule asks 4096 B
    per channel per rank, so it runs on shard / 4096 channels (at most the kernel's 16)."""
    gpu = tuned_gpu()
    n, alpha = 4, 1e-6
    topo = ring(n, 10e12, alpha)         # links far faster than the channels
    channels = min(16, shard // 4096)
    t = collective_time(gpu, topo, "all-gather", shard, algorithm="ring", sim=sim)
    assert t == pytest.approx((n - 1) * ll_step(gpu, shard, channels, alpha), rel=1e-6)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_before_nccl_2_22_the_tuner_sees_one_ranks_share_of_a_gather(sim):
    """The same all-gather with the tuner seeing one rank's share (NCCL 2.21 and earlier):
    16 KiB / (4096 x 4) = 1 channel instead of 4; an all-reduce of the same buffer is sized by
    its whole buffer either way."""
    n, alpha, shard = 4, 1e-6, 16 * KIB
    topo = ring(n, 10e12, alpha)
    old = tuned_gpu("rank")
    t = collective_time(old, topo, "all-gather", shard, algorithm="ring", sim=sim)
    assert t == pytest.approx((n - 1) * ll_step(old, shard, 1, alpha), rel=1e-6)
    new = collective_time(tuned_gpu(), topo, "all-gather", shard, algorithm="ring", sim=sim)
    assert new == pytest.approx((n - 1) * ll_step(old, shard, 4, alpha), rel=1e-6)
    for g in (old, tuned_gpu()):
        ar = collective_time(g, topo, "all-reduce", shard * n, algorithm="ring", sim=sim)
        assert ar == pytest.approx(2 * (n - 1) * ll_step(g, shard, 4, alpha), rel=1e-6)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_the_tuner_picks_the_protocol_on_the_calls_size(sim):
    """A 16 MiB shard: Simple on the whole call's bytes (LL's half rate costs more than
    Simple's 30 us), LL when the tuner sees one rank's share (/ 4): NCCL before 2.22 runs such
    gathers on LL."""
    n, alpha, shard = 4, 1e-6, 16 << 20
    topo = ring(n, 10e12, alpha)
    new, old = tuned_gpu(), tuned_gpu("rank")
    cb = new.comm_kernel.channel_bandwidth
    assert new.comm_kernel.tuned(shard, n, n, 16)[0] == 1 and old.comm_kernel.tuned(shard, 1, n, 16)[0] == 0
    t_new = collective_time(new, topo, "all-gather", shard, algorithm="ring", sim=sim)
    assert t_new == pytest.approx((n - 1) * (alpha + SIMPLE.latency + shard / (16 * cb)), rel=1e-6)
    t_old = collective_time(old, topo, "all-gather", shard, algorithm="ring", sim=sim)
    assert t_old == pytest.approx((n - 1) * ll_step(old, shard, 16, alpha), rel=1e-6)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_an_nvls_call_pays_its_setup_once(sim):
    base = ideal()
    off = dataclasses.replace(base, comm_kernel=dataclasses.replace(base.comm_kernel, nvls_latency=0.0))
    on = dataclasses.replace(base, comm_kernel=dataclasses.replace(base.comm_kernel, nvls_latency=25e-6))
    a, b = (collective_time(g, "switch:8", "all-reduce", 64 << 20, algorithm="nvls", sim=sim) for g in (off, on))
    assert b - a == pytest.approx(25e-6, rel=1e-6)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_a_thread_driving_several_gpus_issues_their_kernels_one_after_another(sim):
    gpu = tuned_gpu()
    one = collective_time(gpu, "switch:8", "all-reduce", 1 << 20, sim=sim)
    eight = collective_time(gpu, "switch:8", "all-reduce", 1 << 20, sim=sim, gpus_per_thread=8)
    assert eight - one == pytest.approx(7 * 5e-6, rel=1e-9)
