"""NCCL's tuner in both engines, against closed forms: a small call runs on fewer channels
(NCCL's channel rule), the size the tuner sees (the whole call, or one rank's share before
NCCL 2.22) picks the protocol and the channels, an NVLS call pays its setup once, and a host
thread driving several GPUs issues their kernels one after another. Switching any of these
off in an engine turns a test here red; so does NCCL's p2p rule (a grouped send's channels
and protocol, from its own bytes and the communicator's ranks)."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import ideal
from ficco_sim import collective_time
from ficco_sim.hardware import P2pRule, Protocol
from ficco_sim.topology import ring

KIB = 1 << 10
LL = Protocol("LL", 1e-6, 0.5, 4096, True)            # NCCL's: 512 threads x 8 B per channel per rank
SIMPLE = Protocol("Simple", 30e-6, 1.0, 32768)


P2P = P2pRule(32, 32, 512 * KIB, 16 * KIB)     # NCCL 2.29 on an NVSwitch node


def tuned_gpu(tuner: str = "call"):
    """Two protocols picked by their isolated times (no NCCL tuning table: ring_bus_bw 0)."""
    base = ideal()
    return dataclasses.replace(base, comm_kernel=dataclasses.replace(
        base.comm_kernel, protocols=(LL, SIMPLE), tuner=tuner, issue=5e-6, p2p=P2P, ring_bus_bw=0.0))


@pytest.mark.parametrize("sim", ["des", "analytical"])
@pytest.mark.parametrize("kind, nbytes, picked", [
    ("all-reduce", 4 << 20, "LL128"), ("all-reduce", 2 << 20, "LL"), ("all-reduce", 16 << 20, "Simple"),
    ("all-gather", 1 << 20, "Simple"), ("all-gather", 512 << 10, "LL")])
def test_nccls_own_table_picks_a_ring_calls_protocol(sim, kind, nbytes, picked):
    """On 4 x H100 NCCL 2.29.2's tuning table (validation/nccl-tests/h100x4_ring_debug_all_reduce.log:
    Ring AllReduce LL 10.2 us / 94 GB/s, LL128 25.4 / 220.8, Simple 28.8 / 240; AllGather 8.4 / 188,
    19.7 / 441.6, 18.6 / 480) runs a 4 MiB all-reduce on LL128 but a 4 MiB all-gather (1 MiB
    shards) on Simple, where the protocols' own isolated times would pick otherwise. Each call
    takes as long as with that protocol alone."""
    from ficco_sim.hardware import load_gpu
    from ficco_sim.simulate import collective_tuning
    gpu = load_gpu("h100")
    assert collective_tuning(gpu, "switch:4", kind, nbytes, algorithm="ring")[0] == picked
    only = dataclasses.replace(gpu, comm_kernel=dataclasses.replace(
        gpu.comm_kernel, protocols=tuple(p for p in gpu.comm_kernel.protocols if p.name == picked)))
    t = collective_time(gpu, "switch:4", kind, nbytes, algorithm="ring", sim=sim)
    assert t == pytest.approx(collective_time(only, "switch:4", kind, nbytes, algorithm="ring", sim=sim), rel=1e-9)


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


def step(gpu, protocol: Protocol, nbytes: float, channels: int, alpha: float, fill: bool = True) -> float:
    """One grouped send: its latencies, its bytes on ``channels`` channels and (``fill``) each
    channel's last chunk copied out after the rest, min(part, 512 KiB) at one channel's rate."""
    cb, wire = gpu.comm_kernel.channel_bandwidth, nbytes / protocol.efficiency
    last = min(wire / channels, 512 * KIB) / cb if fill else 0.0
    return alpha + protocol.latency + last + wire / (channels * cb)


@pytest.mark.parametrize("sim", ["des", "analytical"])
@pytest.mark.parametrize("n, nbytes, channels, protocol", [
    (8, 32 << 20, 4, SIMPLE),       # 32 / 8 ranks: starts on 4, parts of 8 MiB need no more
    (8, 128 << 20, 8, SIMPLE),      # parts of 32 MiB > 16: doubled once
    (4, 32 << 20, 8, SIMPLE),       # 32 / 4 ranks: 8
    (8, 48 * KIB, 1, SIMPLE),       # one 64 KiB part; 48 KiB > 16 KiB on one channel
    (8, 16 * KIB, 1, LL),           # at most 16 KiB per channel: LL
])
def test_a_send_runs_on_the_channels_and_protocol_of_nccls_p2p_rule(sim, n, nbytes, channels, protocol):
    """nccl-tests' sendrecv: one send of ``nbytes`` in a communicator of ``n`` ranks, links far
    faster than the channels: the time of one step on the rule's channels and protocol."""
    gpu, alpha = tuned_gpu(), 1e-6
    t = collective_time(gpu, ring(n, 10e12, alpha), "send-recv", nbytes, sim=sim)
    assert t == pytest.approx(step(gpu, protocol, nbytes, channels, alpha), rel=1e-6)


@pytest.mark.parametrize("sim", ["des", "analytical"])
def test_each_peer_of_an_all_to_all_has_its_own_channels(sim):
    """All-to-all on 4 GPUs, 64 KiB to each peer: each send runs on one channel of its own (a
    cap, not a share of the kernel: the three sends of a rank together use 3 of its 16), so
    the call takes one channel's time for 64 KiB, not three."""
    gpu = tuned_gpu()
    fast = dataclasses.replace(gpu, link=dataclasses.replace(gpu.link, port_bandwidth=1e15, latency=0.0))
    t = collective_time(fast, "switch:4", "all-to-all", 4 * 64 * KIB, sim=sim)
    assert t == pytest.approx(step(fast, SIMPLE, 64 * KIB, 1, 0.0), rel=1e-6)
