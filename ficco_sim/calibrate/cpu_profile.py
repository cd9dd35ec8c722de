"""A 'GPU' profile that describes the local CPU, for CPU validation runs.

The simulator's vocabulary maps onto a CPU as: SM -> core (one GEMM tile at a time), peak ->
the best GEMM throughput measured here, HBM -> DRAM at the measured copy rate, DMA engine ->
a core doing memcpy, links -> shared memory between processes on this host. Only the
numbers a benchmark measured or a fit produced are ``measured``/``fitted``; the mapping
choices are ``assumption`` and say so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .writer import leaf_text


def cpu_facts() -> dict[str, Any]:
    """Cores, clock (MHz) and L2 per core (KiB) of this host, from /proc/cpuinfo and sysfs."""
    facts = {"cores": os.cpu_count() or 1, "clock_mhz": 2000.0, "clock_kind": "assumption", "l2_kib": 1024,
             "l2_kind": "assumption"}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                facts["clock_mhz"], facts["clock_kind"] = float(line.split(":")[1]), "measured"
                break
    except OSError:
        pass
    try:
        for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
            if (idx / "level").read_text().strip() == "2":
                size = (idx / "size").read_text().strip()
                facts["l2_kib"] = int(size.rstrip("K")) if size.endswith("K") else int(size.rstrip("M")) * 1024
                facts["l2_kind"] = "measured"
    except (OSError, ValueError):
        pass
    return facts


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_instance(path: Path = BOOT_ID) -> str:
    """This machine since it last started: the kernel's boot id (Linux), first 8 hex digits;
    '' where there is none. Two hosts of one name and CPU model (fresh virtual machines of one
    image all are "vm | AMD EPYC | 2 cores") differ in it, and a host that restarted may have
    moved, clocks and placement with it: its profile is measured again (about 10 s).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix="boot_id") as f:
    ...     _ = f.write("5c53427a-419d-4acb-b2ca-3f94bbf03d60"); f.flush()
    ...     boot_instance(Path(f.name)), boot_instance(Path(f.name + ".none"))
    ('5c53427a', '')
    """
    try:
        return path.read_text().strip().replace("-", "")[:8]
    except OSError:
        return ""


def machine_id(host: str, device_name: str, cores: int, boot: str | None = None) -> str:
    """What says "this host" in a CPU profile: a profile measured elsewhere, or on this host
    before it last started, is another's (``boot``: :func:`boot_instance`, this machine's when
    None).

    >>> machine_id("vm", "AMD EPYC", 2, boot="5c53427a"), machine_id("vm", "AMD EPYC", 2, boot="")
    ('vm | AMD EPYC | 2 cores | boot 5c53427a', 'vm | AMD EPYC | 2 cores')
    """
    boot = boot_instance() if boot is None else boot
    return f"{host} | {device_name} | {cores} cores" + (f" | boot {boot}" if boot else "")


def render_cpu_profile(m: dict[str, Any], raw_csv: str, date: str) -> str:
    """Profile YAML text of one replay rank on this host from measured/fitted values ``m``
    (SI units; see :func:`.host_ranks.fit_host`) and the raw CSV's path.

    ``m`` keys: device_name, host, cores, ranks, peak_flops, copy_bytes_per_s, op_s, latency,
    stream_bandwidth, core_s_per_byte, skew, efficiency, k_overhead, gemm_source, host_source;
    optionally post_s, post_s_per_byte and post_source ((kind, source) of both).
    """
    f = cpu_facts()
    meas = f"measured by ficco-sim calibrate --device cpu --world-size {m['ranks']} on {m['host']} {date}, " \
           f"raw rows {raw_csv}"
    hs = m["host_source"]
    post = m.get("post_source") or ("assumption", "no post rows measured: posting costs launch_overhead_us only")
    L = lambda v, kind, src: leaf_text(v, kind, src)  # noqa: E731
    lines = [
        f"# CPU profile: one replay rank on {m['device_name']} ({m['cores']} cores), host {m['host']}.",
        "# It describes what ficco-sim validate --device cpu runs: one process per rank (gloo), each with",
        "# one compute thread; the ranks' compute and gloo's threads share the host's cores.",
        "# It is NOT a GPU and says nothing about one. Mapping: SM -> the rank's compute thread, peak ->",
        "# its best measured GEMM rate while every rank computes, HBM -> its copy rate, link -> gloo over",
        "# loopback TCP, host -> the cores every rank's work shares.",
        f"# Regenerate: ficco-sim calibrate --device cpu --world-size {m['ranks']} --out PATH --force",
        "name: cpu",
        f"description: one gloo replay rank on {m['device_name']} ({m['cores']} cores), for CPU validation",
        "vendor: cpu",
        "",
        f"num_sms: {L(1, 'assumption', 'the replay gives each rank one compute thread (torch.set_num_threads(1))')}",
        f"clock_mhz: {L(round(f['clock_mhz'], 1), f['clock_kind'], '/proc/cpuinfo cpu MHz')}",
        "",
        "host:",
        f"  machine: {json.dumps(machine_id(m['host'], m['device_name'], m['cores']))}",
        f"  cores: {L(m['cores'], 'measured', 'os.cpu_count() ' + meas)}",
        f"  transfer_core_ns_per_byte: {L(round(m['core_s_per_byte'] * 1e9, 4), 'fitted', hs)}",
        f"  start_skew_us: {L(round(m['skew'] * 1e6, 1), 'measured', 'median spread of the ranks leaving a barrier, ' + meas)}",
        f"  post_us: {L(round(m.get('post_s', 0.0) * 1e6, 2), *post)}",
        f"  post_ns_per_byte: {L(round(m.get('post_s_per_byte', 0.0) * 1e9, 5), *post)}",
        "",
        "sm:",
        f"  max_blocks: {L(1, 'assumption', 'a thread runs one GEMM tile at a time')}",
        f"  max_threads: {L(1, 'assumption', 'one compute thread')}",
        f"  registers: {L(1, 'assumption', 'not meaningful on a CPU; 1 so that a 1-thread block fits')}",
        f"  smem_kib: {L(f['l2_kib'], f['l2_kind'], 'L2 per core (sysfs cache index), standing in for shared memory')}",
        f"  max_smem_per_block_kib: {L(f['l2_kib'], f['l2_kind'], 'as smem_kib')}",
        f"  reserved_smem_per_block_kib: {L(0, 'assumption', 'no driver reservation on a CPU')}",
        f"  warp_size: {L(1, 'assumption', 'scalar view of a core; SIMD width is inside peak')}",
        "",
        "peak_tflops:",
        f"  float32: {L(round(m['peak_flops'] / 1e12, 5), 'measured', 'best one-thread torch.mm float32 rate, every rank at once, ' + meas)}",
        "",
        "hbm:",
        f"  bandwidth_gbps: {L(round(m['copy_bytes_per_s'] / 1e9, 3), 'measured', 'one-thread copy_ on every rank at once, read + write bytes, ' + meas)}",
        f"  efficiency: {L(1.0, 'derived', 'bandwidth_gbps is itself the measured copy rate')}",
        "",
        "dma:",
        f"  engines: {L(64, 'assumption', 'the replay posts every message at once and gloo moves them on its own threads')}",
        f"  bandwidth_gbps: {L(round(m['stream_bandwidth'] / 1e9, 3), 'fitted', hs)}",
        f"  command_overhead_us: {L(0, 'assumption', 'posting is inside the fitted gloo latency (link.latency_us)')}",
        "",
        f"launch_overhead_us: {L(round(m['op_s'] * 1e6, 3), 'measured', 'one tiny op in a Python loop (the replay issues every op so), ' + meas)}",
        f"priority_levels: {L(1, 'assumption', 'CPU threads have no stream priorities')}",
        "",
        "link:",
        f"  ports: {L(1, 'assumption', 'one loopback TCP pair per peer')}",
        f"  port_bandwidth_gbps: {L(round(m['stream_bandwidth'] / 1e9, 3), 'fitted', hs)}",
        f"  latency_us: {L(round(m['latency'] * 1e6, 2), 'fitted', hs)}",
        f"  efficiency: {L(1.0, 'assumption', 'port_bandwidth is already a realized rate')}",
        "",
        "comm_kernel:",
        f"  threads: {L(1, 'assumption', 'a gloo thread (holds no compute slot: host.cores are shared instead)')}",
        f"  registers: {L(1, 'assumption', 'not meaningful on a CPU')}",
        f"  smem_kib: {L(0, 'assumption', 'not meaningful on a CPU')}",
        f"  channels: {L(1, 'assumption', 'one gloo stream per peer')}",
        f"  channel_bandwidth_gbps: {L(round(m['stream_bandwidth'] / 1e9, 3), 'fitted', hs)}",
        "",
        "gemm:",
        "  tiles:",
        f"    - m: {L(64, 'assumption', 'oneDNN/MKL-style 64x64 output blocking')}",
        f"      n: {L(64, 'assumption', 'as m')}",
        f"      threads: {L(1, 'assumption', 'one thread')}",
        f"      registers: {L(1, 'assumption', 'not meaningful on a CPU')}",
        f"      smem_kib: {L(32, 'assumption', 'an L1-sized working set per tile')}",
        "  efficiency:",
        f"    float32: {L(m['efficiency'], 'fitted', m['gemm_source'])}",
        f"  k_overhead: {L(m['k_overhead'], 'fitted', m['gemm_source'])}",
        "",
        "contention:",
        f"  compute_per_hbm_util: {L(0.0, 'assumption', 'compute and transfers meet in host.cores, not in memory traffic')}",
        f"  comm_per_hbm_util: {L(0.0, 'assumption', 'as compute_per_hbm_util')}",
    ]
    return "\n".join(lines) + "\n"
