"""NCCL's own tuning table, as ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`` prints it into an
nccl-tests log: the ring graph's bus bandwidth and the LL cap its tuner picks protocols with
(``comm_kernel.nccl_ring`` of a GPU profile; :meth:`~ficco_sim.hardware.CommKernelSpec.nccl_protocol`).

Two layouts are read. NCCL 2.19 and later print an ``Algorithm`` line naming the algorithm
of each group of three columns, then ``Protocol | LL | LL128 | Simple | ...``; earlier ones
one header ``Latency/AlgBw | Tree/ LL | ... | Ring/ LL | Ring/ LL128 | Ring/Simple |``. Each
row is ``<collective> | latency/algbw | ...`` (us, GB/s). NCCL scales a ring's bus bandwidth
by ``ranks / steps`` into the algorithm bandwidth it prints (an all-gather ``n - 1`` steps),
so the bus bandwidth is the Ring/Simple all-gather cell times ``(n - 1) / n``; LL's is half
of it unless the GPU's cap is lower (then that cap is LL's cell the same way).

>>> log = '''x NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0
... x NCCL INFO   Algorithm   |   Tree  |  |  |   Ring  |  |  |
... x NCCL INFO   Protocol    |   LL |  LL128 |  Simple |  LL |  LL128 |  Simple |
... x NCCL INFO     AllGather |  0.0/ 0.0 | 0.0/ 0.0 | 0.0/ 0.0 | 8.4/ 188.0 | 19.7/ 441.6 | 18.6/ 480.0 |'''
>>> t = ring_tuning(log, "x.log")
>>> t["ranks"], t["bus_bw_gbps"], t["ll_max_bw_gbps"]
(4, 360.0, 141.0)
"""

from __future__ import annotations

import re

from ..errors import InputError

_RANKS = re.compile(r"\bnRanks (\d+)\b.*\bnNodes (\d+)\b")
_CELL = re.compile(r"^\s*([0-9.]+)\s*/\s*([0-9.]+)\s*$")


def _cells(line: str) -> list[str]:
    """The ``|``-separated cells after NCCL's ``INFO`` prefix."""
    body = line.split("INFO", 1)[1] if "INFO" in line else line
    return [c.strip() for c in body.split("|")]


def _ring_columns(lines: list[str]) -> tuple[int, dict[str, int], int] | None:
    """(line index of the header, protocol -> column of the Ring group, width) of the first
    tuning table, else None."""
    for i, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == "Latency/AlgBw":                     # NCCL before 2.19
            cols = {c.split("/")[1].strip(): k for k, c in enumerate(cells)
                    if c.replace(" ", "").startswith("Ring/")}
            if cols:
                return i, cols, len(cells)
        if cells and cells[0] == "Algorithm" and i + 1 < len(lines) and _cells(lines[i + 1])[:1] == ["Protocol"]:
            groups = cells[1:]
            protos = _cells(lines[i + 1])
            names = [g for g in groups if g]      # one wide cell per algorithm, or a name and two empty ones
            if "Ring" in names:
                k = 1 + 3 * names.index("Ring")
                cols = {protos[k + d]: k + d for d in range(3) if k + d < len(protos)}
                return i + 1, cols, len(protos)
    return None


def ring_tuning(text: str, where: str) -> dict | None:
    """The ring's bus bandwidth (and LL cap where the table shows one) of the first tuning
    table in ``text``; None when there is none. Refuses a table of several nodes (the bus
    bandwidth there is the network's) or a row that is not NCCL's ``latency/bandwidth``."""
    lines = text.splitlines()
    found = _ring_columns(lines)
    if found is None:
        return None
    head, cols, _ = found
    ranks = nodes = None
    for line in lines:
        m = _RANKS.search(line)
        if m:
            ranks, nodes = int(m.group(1)), int(m.group(2))
            break
    if ranks is None or ranks < 2:
        raise InputError(where, "nRanks", "a tuning table without NCCL's 'nRanks N nNodes M' line: the ranks its "
                         "bandwidths are scaled by cannot be told")
    if nodes != 1:
        raise InputError(where, "nNodes", f"the tuning table is of {nodes} nodes: its ring bandwidth is the "
                         "network's; calibrate on a single-node run")
    row = next((_cells(line) for line in lines[head + 1:head + 12] if _cells(line)[:1] == ["AllGather"]), None)
    if row is None or "Simple" not in cols:
        raise InputError(where, "AllGather", "the tuning table has no Ring/Simple all-gather cell")

    def bandwidth(proto: str) -> float:
        m = _CELL.match(row[cols[proto]]) if cols[proto] < len(row) else None
        if not m:
            raise InputError(where, f"AllGather.Ring/{proto}", f"not NCCL's 'latency/bandwidth': "
                             f"{row[cols[proto]] if cols[proto] < len(row) else ''!r}")
        return float(m.group(2)) * (ranks - 1) / ranks

    bus = bandwidth("Simple")
    if bus <= 0:
        raise InputError(where, "AllGather.Ring/Simple", "zero bandwidth: NCCL disabled the ring here")
    ll = bandwidth("LL") if "LL" in cols else None
    return {"ranks": ranks, "bus_bw_gbps": round(bus, 3),
            "ll_max_bw_gbps": round(ll, 3) if ll is not None and ll < 0.5 * bus * (1 - 1e-3) else None}
