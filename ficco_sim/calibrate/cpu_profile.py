"""A 'GPU' profile that describes the local CPU, for CPU validation runs.

The simulator's vocabulary maps onto a CPU as: SM -> core (one GEMM tile at a time), peak ->
the best GEMM throughput measured here, HBM -> DRAM at the measured copy rate, DMA engine ->
a core doing memcpy, links -> shared memory between processes on this host. Only the
numbers a benchmark measured or a fit produced are ``measured``/``fitted``; the mapping
choices are ``assumption`` and say so.
"""

from __future__ import annotations

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


def render_cpu_profile(m: dict[str, Any], raw_csv: str, date: str) -> str:
    """Profile YAML text from measured/fitted values ``m`` (SI units) and the raw CSV's path.

    ``m`` keys: device_name, host, peak_flops, copy_bytes_per_s (best large copy),
    dma_bandwidth, dma_overhead, launch_overhead, efficiency, k_overhead, gemm_source,
    contention (or None), contention_source.
    """
    f = cpu_facts()
    meas = f"measured by ficco-sim calibrate --device cpu on {m['host']} {date}, raw rows {raw_csv}"
    L = lambda v, kind, src: leaf_text(v, kind, src)  # noqa: E731
    cont = m.get("contention")
    lines = [
        f"# CPU profile: {m['device_name']} ({f['cores']} cores) on host {m['host']}.",
        "# It exists for CPU validation runs (the gloo executor, CI): it lets the simulator and the",
        "# executor agree on a device that every machine has. It is NOT a GPU and says nothing about one.",
        "# Mapping: SM -> core, peak -> best measured GEMM rate, HBM -> DRAM at the measured copy rate,",
        "# DMA engine -> a core doing memcpy, link -> shared memory between processes on this host.",
        "# Regenerate: ficco-sim calibrate --device cpu --out hw_profiles/cpu.yaml --force",
        "name: cpu",
        f"description: {m['device_name']} ({f['cores']} cores), CPU stand-in for validation runs",
        "vendor: cpu",
        "",
        f"num_sms: {L(f['cores'], 'measured', 'os.cpu_count() ' + meas)}",
        f"clock_mhz: {L(round(f['clock_mhz'], 1), f['clock_kind'], '/proc/cpuinfo cpu MHz')}",
        "",
        "sm:",
        f"  max_blocks: {L(1, 'assumption', 'a core runs one GEMM tile (block) at a time')}",
        f"  max_threads: {L(1, 'assumption', 'one thread per core (torch intra-op threads = cores)')}",
        f"  registers: {L(1, 'assumption', 'not meaningful on a CPU; 1 so that a 1-thread block fits')}",
        f"  smem_kib: {L(f['l2_kib'], f['l2_kind'], 'L2 per core (sysfs cache index), standing in for shared memory')}",
        f"  max_smem_per_block_kib: {L(f['l2_kib'], f['l2_kind'], 'as smem_kib')}",
        f"  reserved_smem_per_block_kib: {L(0, 'assumption', 'no driver reservation on a CPU')}",
        f"  warp_size: {L(1, 'assumption', 'scalar view of a core; SIMD width is inside peak')}",
        "",
        "peak_tflops:",
        f"  float32: {L(m['peak_flops'] / 1e12, 'measured', 'best torch.mm float32 rate in the sweep, ' + meas)}",
        "",
        "hbm:",
        f"  bandwidth_gbps: {L(2 * m['copy_bytes_per_s'] / 1e9, 'measured', 'best large copy_, read + write bytes, ' + meas)}",
        f"  efficiency: {L(1.0, 'derived', 'bandwidth_gbps is itself the measured copy rate')}",
        "",
        "dma:",
        f"  engines: {L(1, 'assumption', 'one core doing memcpy')}",
        f"  bandwidth_gbps: {L(m['dma_bandwidth'] / 1e9, 'fitted', 'alpha-beta fit of contiguous copy_ rows, ' + m['copy_source'])}",
        f"  command_overhead_us: {L(m['dma_overhead'] * 1e6, 'fitted', 'alpha-beta fit of contiguous copy_ rows, ' + m['copy_source'])}",
        "",
        f"launch_overhead_us: {L(m['launch_overhead'] * 1e6, 'fitted', 'per-op dispatch cost from the GEMM fit, ' + m['gemm_source'])}",
        f"priority_levels: {L(1, 'assumption', 'CPU threads have no stream priorities')}",
        "",
        "link:",
        f"  ports: {L(1, 'assumption', 'processes on one host share memory')}",
        f"  port_bandwidth_gbps: {L(m['dma_bandwidth'] / 1e9, 'assumption', 'gloo over loopback/shared memory assumed at copy speed; not measured')}",
        f"  latency_us: {L(max(m['dma_overhead'] * 1e6, 1.0), 'assumption', 'at least the copy overhead; gloo message latency not measured')}",
        f"  efficiency: {L(1.0, 'assumption', 'port_bandwidth is already a realized rate')}",
        "",
        "comm_kernel:",
        f"  threads: {L(1, 'assumption', 'a communication thread')}",
        f"  registers: {L(1, 'assumption', 'not meaningful on a CPU')}",
        f"  smem_kib: {L(0, 'assumption', 'not meaningful on a CPU')}",
        f"  channels: {L(1, 'assumption', 'one communication thread')}",
        f"  channel_bandwidth_gbps: {L(m['dma_bandwidth'] / 1e9, 'assumption', 'copy speed')}",
        "",
        "gemm:",
        "  tiles:",
        f"    - m: {L(64, 'assumption', 'oneDNN/MKL-style 64x64 output blocking per core')}",
        f"      n: {L(64, 'assumption', 'as m')}",
        f"      threads: {L(1, 'assumption', 'one core')}",
        f"      registers: {L(1, 'assumption', 'not meaningful on a CPU')}",
        f"      smem_kib: {L(32, 'assumption', 'an L1-sized working set per tile')}",
        "  efficiency:",
        f"    float32: {L(m['efficiency'], 'fitted', m['gemm_source'])}",
        f"  k_overhead: {L(m['k_overhead'], 'fitted', m['gemm_source'])}",
        "",
        "contention:",
        f"  compute_per_hbm_util: {L(cont, 'fitted', m['contention_source']) if cont is not None else L(0.0, 'assumption', 'no contention rows measured')}",
        f"  comm_per_hbm_util: {L(0.0, 'assumption', 'copy slowdown under a GEMM not measured on CPU')}",
    ]
    return "\n".join(lines) + "\n"
