"""Topologies: built-in builders (closed-form routes, bandwidths, latencies), routing over YAML
graphs, the shipped real-node graphs, and InputError (file + field) for bad YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu
from ficco_sim.topology import (TOPOLOGY_DIR, available_topologies, fully_connected, load_topology, ring,
                                switch)

GB = 1e9
US = 1e-6
SHIPPED = sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def _write(tmp_path: Path, text: str, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------
# Built-in builders

@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring_routes_take_the_short_way_round(n):
    t = ring(n, bandwidth=100 * GB, latency=1 * US)
    for src in range(n):
        for dst in range(n):
            hops = min((dst - src) % n, (src - dst) % n)
            assert len(t.route(src, dst)) == hops + 1
            if src != dst:
                assert t.path_latency(src, dst) == pytest.approx(hops * US)
                assert t.path_bandwidth(src, dst) == 100 * GB
    assert t.route(0, 0) == ["gpu0"]
    assert t.injection_bandwidth(0) == (100 if n == 2 else 200) * GB


def test_ring_route_names_nodes_in_order():
    t = ring(8, bandwidth=50 * GB, latency=2 * US)
    assert t.route(0, 3) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert t.route(0, 6) == ["gpu0", "gpu7", "gpu6"]
    assert t.path_links(0, 2) == [("gpu0", "gpu1"), ("gpu1", "gpu2")]
    assert len(t.route(0, 4)) == 5          # opposite side: 4 hops either way


def test_fully_connected_is_one_hop_everywhere():
    t = fully_connected(8, bandwidth=48 * GB, latency=2 * US)
    assert t.graph.number_of_edges() == 8 * 7
    for src in range(8):
        for dst in range(8):
            if src != dst:
                assert t.route(src, dst) == [f"gpu{src}", f"gpu{dst}"]
                assert t.path_latency(src, dst) == pytest.approx(2 * US)
    assert t.injection_bandwidth(3) == pytest.approx(7 * 48 * GB)


def test_switch_routes_through_sw0_with_split_latency():
    t = switch(8, bandwidth=396 * GB, latency=2 * US)
    assert t.route(1, 6) == ["gpu1", "sw0", "gpu6"]
    assert t.path_latency(1, 6) == pytest.approx(2 * US)
    assert t.path_bandwidth(1, 6) == 396 * GB
    assert t.injection_bandwidth(1) == 396 * GB
    assert t.graph.number_of_edges() == 16


def test_parametric_names_take_links_from_the_gpu_profile():
    h100 = load_gpu("h100").link
    per_port = h100.port_bandwidth * h100.efficiency
    assert load_topology("switch:8", "h100").path_bandwidth(0, 7) == pytest.approx(18 * per_port)
    assert load_topology("ring:4", "h100").path_bandwidth(0, 1) == pytest.approx(9 * per_port)
    assert load_topology("fc:8", "mi300x").path_bandwidth(0, 5) == pytest.approx(48 * GB)
    # MI300X is wired point to point, one xGMI link per peer: any pair of them has one link
    # (the bug: fc:2 gave a pair all 7 links, 335 GB/s)
    for spec in ("fc:2", "fc:4", "ring:8"):
        assert load_topology(spec, "mi300x").path_bandwidth(0, 1) == pytest.approx(48 * GB), spec
    with pytest.raises(InputError, match="at most 7 peers"):
        load_topology("fc:16", "mi300x")
    assert load_topology("switch:8").path_latency(0, 1) == pytest.approx(h100.latency)  # default h100
    assert load_topology("ring:8", "a100").kind == "ring"


@pytest.mark.parametrize("spec", ["ring:x", "fc:1", "switch:0", "ring:"])
def test_bad_parametric_spec(spec):
    with pytest.raises(InputError) as info:
        load_topology(spec)
    assert info.value.where == "--topology"


@pytest.mark.parametrize("builder", [ring, fully_connected, switch])
@pytest.mark.parametrize("n", [1, 0, 2.5, True])
def test_builders_reject_bad_gpu_counts(builder, n):
    with pytest.raises(InputError):
        builder(n, bandwidth=GB, latency=US)


def test_unknown_topology_name():
    with pytest.raises(InputError) as info:
        load_topology("torus-9000")
    assert info.value.where == "--topology"
    assert "mi300x-8" in info.value.message          # lists what exists


# ---------------------------------------------------------------------------------------------
# Shipped YAML graphs

def test_shipped_graphs_are_listed():
    assert {"mi250x-8gcd", "a40-nvlink-pairs", "dgx-h100", "mi300x-8"} <= set(SHIPPED)
    assert set(SHIPPED) <= set(available_topologies())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_graph_loads_and_routes_every_pair(name):
    t = load_topology(name)
    assert t.num_gpus >= 2
    assert (TOPOLOGY_DIR / f"{name}.yaml").read_text().startswith("#"), "cite sources in a header comment"
    for src in range(t.num_gpus):
        for dst in range(t.num_gpus):
            if src != dst:
                route = t.route(src, dst)
                assert route[0] == f"gpu{src}" and route[-1] == f"gpu{dst}"
                assert t.path_bandwidth(src, dst) > 0 and t.path_latency(src, dst) >= 0
                # links are symmetric in these nodes
                assert t.path_bandwidth(src, dst) == t.path_bandwidth(dst, src)


def test_mi250x_frontier_graph_reproduces_gcd0_measurements():
    """Link counts from GCD0 [AMD-GPUMPI]: 0-1 four links, 0-2 one, 0-6 two; 0-3/4/5/7 not direct."""
    t = load_topology("mi250x-8gcd")
    assert t.route(0, 1) == ["gpu0", "gpu1"] and t.path_bandwidth(0, 1) == 200 * GB
    assert t.route(0, 2) == ["gpu0", "gpu2"] and t.path_bandwidth(0, 2) == 50 * GB
    assert t.route(0, 6) == ["gpu0", "gpu6"] and t.path_bandwidth(0, 6) == 100 * GB
    for dst in (3, 4, 7):
        assert len(t.route(0, dst)) == 3
    assert len(t.route(0, 5)) == 4
    assert t.path_bandwidth(0, 7) == 100 * GB        # blit 68.8 GB/s: a 100 GB/s bottleneck
    for dst in (3, 4, 5):
        assert t.path_bandwidth(0, dst) == 50 * GB   # blit 35-37 GB/s
    for gcd in range(8):                             # 4 in-package + 1 + 2 links per GCD
        assert t.injection_bandwidth(gcd) == 350 * GB


def test_a40_pairs_use_nvlink_inside_and_pcie_across():
    t = load_topology("a40-nvlink-pairs")
    assert t.route(0, 1) == ["gpu0", "gpu1"] and t.path_bandwidth(0, 1) == 56.25 * GB
    assert t.route(2, 3) == ["gpu2", "gpu3"]
    assert t.route(1, 2) == ["gpu1", "sw0", "gpu2"] and t.path_bandwidth(1, 2) == 25 * GB
    assert t.path_latency(0, 3) == pytest.approx(3 * US)


@pytest.mark.parametrize("name, spec, gpu", [("dgx-h100", "switch:8", "h100"),
                                             ("mi300x-8", "fc:8", "mi300x"),
                                             ("dgx-a100", "switch:8", "a100")])
def test_shipped_graph_matches_parametric_builtin(name, spec, gpu):
    if name not in SHIPPED:
        pytest.skip(f"{name} not shipped")
    shipped, builtin = load_topology(name), load_topology(spec, gpu)
    assert shipped.kind == builtin.kind
    for dst in range(1, 8):
        assert shipped.route(0, dst) == builtin.route(0, dst)
        assert shipped.path_bandwidth(0, dst) == pytest.approx(builtin.path_bandwidth(0, dst), rel=0.01)
        assert shipped.path_latency(0, dst) == pytest.approx(builtin.path_latency(0, dst))


# ---------------------------------------------------------------------------------------------
# Routing over YAML graphs

def test_routing_prefers_fewest_hops_then_least_latency(tmp_path):
    path = _write(tmp_path, """
name: tiebreak
gpus: 4
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 10, latency_us: 5}
  - {from: gpu1, to: gpu3, bandwidth_gbps: 10, latency_us: 5}
  - {from: gpu0, to: gpu2, bandwidth_gbps: 10, latency_us: 1}
  - {from: gpu2, to: gpu3, bandwidth_gbps: 10, latency_us: 1}
  - {from: gpu0, to: sw0, bandwidth_gbps: 99, latency_us: 0}
  - {from: sw0, to: sw1, bandwidth_gbps: 99, latency_us: 0}
  - {from: sw1, to: gpu3, bandwidth_gbps: 99, latency_us: 0}
  - {from: gpu0, to: gpu3, bandwidth_gbps: 1, latency_us: 100}
""")
    t = load_topology(path)
    assert t.name == "tiebreak" and t.kind == "custom"
    assert t.route(0, 3) == ["gpu0", "gpu3"]           # one slow hop beats any two fast ones
    assert t.path_latency(0, 3) == pytest.approx(100 * US)
    assert t.route(0, 1) == ["gpu0", "gpu1"]


def test_routing_breaks_equal_hop_ties_by_latency(tmp_path):
    path = _write(tmp_path, """
gpus: 3
links:
  - {from: gpu0, to: sw0, bandwidth_gbps: 10, latency_us: 4}
  - {from: sw0, to: gpu2, bandwidth_gbps: 10, latency_us: 4}
  - {from: gpu0, to: gpu1, bandwidth_gbps: 10, latency_us: 1}
  - {from: gpu1, to: gpu2, bandwidth_gbps: 10, latency_us: 1}
""")
    t = load_topology(path)
    assert t.name == "topo"                           # defaults to the file stem
    assert t.route(0, 2) == ["gpu0", "gpu1", "gpu2"]
    assert t.path_latency(0, 2) == pytest.approx(2 * US)


def _all_routes_ranked(t, src: int, dst: int) -> list[list[str]]:
    """Every fewest-hop, least-latency path, brute force, first by the documented tie rule."""
    import networkx as nx
    w = lambda u, v, d: (1 << 64) + round(d["latency"] * 1e15)  # noqa: E731
    paths = list(nx.all_shortest_paths(t.graph, f"gpu{src}", f"gpu{dst}", weight=w))
    key = lambda p: [(0, (int(v[3:]) - src) % t.num_gpus, "") if v.startswith("gpu") else (1, 0, v) for v in p]  # noqa: E731
    return sorted(paths, key=key)


@pytest.mark.parametrize("spec", ["ring:8", "ring:9", "ring:16", "switch:16", "fc:6"] + SHIPPED)
def test_routes_are_fewest_hops_then_least_latency_then_first_counting_forward(spec):
    """route() (one search per source) against brute force: every fewest-hop, least-latency
    path enumerated, ties broken by the documented rule (GPUs ranked forward from the source)."""
    t = load_topology(spec if ":" in spec else TOPOLOGY_DIR / f"{spec}.yaml", load_gpu("h100"))
    n = t.num_gpus
    for i in range(n):
        for j in range(n):
            if i != j:
                assert t.route(i, j) == _all_routes_ranked(t, i, j)[0], (i, j)


@pytest.mark.parametrize("n", [4, 8, 9, 64])
def test_ring_routes_take_the_short_way_and_ties_go_clockwise_for_every_source(n):
    """ASTRA-sim's ring convention: the shorter way round, clockwise (i -> i + 1) when both
    are as short; so routes turn with the GPUs and a ring's all-to-all is rotation symmetric."""
    t = load_topology(f"ring:{n}", load_gpu("h100"))
    for i in range(n):
        for d in range(1, n):
            step = 1 if d <= n - d else -1
            assert t.route(i, (i + d) % n) == [f"gpu{(i + step * h) % n}" for h in range(min(d, n - d) + 1)]
    ties = [r for i in range(n) if n % 2 == 0 for r in [_all_routes_ranked(t, i, (i + n // 2) % n)]]
    assert all(len(r) == 2 for r in ties)      # the far side really is a tie


def test_path_bandwidth_is_the_bottleneck_and_defaults_apply(tmp_path):
    path = _write(tmp_path, """
gpus: 3
defaults: {bandwidth_gbps: 100, latency_us: 0.5}
links:
  - {from: gpu0, to: gpu1}
  - {from: gpu1, to: gpu2, bandwidth_gbps: 30}
""")
    t = load_topology(path)
    assert t.path_bandwidth(0, 2) == 30 * GB
    assert t.path_latency(0, 2) == pytest.approx(1 * US)
    assert t.injection_bandwidth(1) == 130 * GB


def test_one_way_links(tmp_path):
    path = _write(tmp_path, """
gpus: 3
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 10, bidirectional: false}
  - {from: gpu1, to: gpu2, bandwidth_gbps: 10, bidirectional: false}
  - {from: gpu2, to: gpu0, bandwidth_gbps: 10, bidirectional: false}
""")
    t = load_topology(path)
    assert t.graph.number_of_edges() == 3
    assert t.route(0, 2) == ["gpu0", "gpu1", "gpu2"]   # one-way ring: the long way round
    assert t.route(2, 1) == ["gpu2", "gpu0", "gpu1"]


# ---------------------------------------------------------------------------------------------
# Bad YAML: InputError with the file and the field

BAD_TOPOLOGIES = {
    "disconnected": ("""
gpus: 4
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 10}
  - {from: gpu2, to: gpu3, bandwidth_gbps: 10}
""", "links", "disconnected"),
    "one_way_dead_end": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 10, bidirectional: false}
""", "links", "no path from gpu1 to gpu0"),
    "negative_bandwidth": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: -5}
""", "links.0.bandwidth_gbps", "positive"),
    "zero_bandwidth": ("""
gpus: 2
defaults: {bandwidth_gbps: 0}
links:
  - {from: gpu0, to: gpu1}
""", "links.0.bandwidth_gbps", "positive"),
    "missing_bandwidth": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1}
""", "links.0.bandwidth_gbps", "number"),
    "text_bandwidth": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: fast}
""", "links.0.bandwidth_gbps", "number"),
    "negative_latency": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5, latency_us: -1}
""", "links.0.latency_us", "negative"),
    "bad_node_name": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5}
  - {from: cpu0, to: gpu1, bandwidth_gbps: 5}
""", "links.1.from", "gpuI or swJ"),
    "numeric_node_name": ("""
gpus: 2
links:
  - {from: gpu0, to: 1, bandwidth_gbps: 5}
""", "links.0.to", "gpuI or swJ"),
    "gpu_out_of_range": ("""
gpus: 2
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5}
  - {from: gpu1, to: gpu2, bandwidth_gbps: 5}
""", "gpus", "gpu0..gpu1"),
    "gpus_missing": ("""
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5}
""", "gpus", ">= 2"),
    "gpus_not_integer": ("""
gpus: two
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5}
""", "gpus", ">= 2"),
    "no_links": ("gpus: 2\nlinks: []\n", "links", "non-empty"),
    "link_not_mapping": ("gpus: 2\nlinks:\n  - gpu0 -> gpu1\n", "links.0", "mapping"),
    "unknown_kind": ("""
gpus: 2
kind: torus
links:
  - {from: gpu0, to: gpu1, bandwidth_gbps: 5}
""", "kind", "must be one of"),
    "not_a_mapping": ("- gpu0\n- gpu1\n", None, "mapping"),
    "empty_file": ("", None, "mapping"),
    "malformed_yaml": ("gpus: 2\nlinks: [{from: gpu0, to: gpu1\n", None, "malformed YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOPOLOGIES))
def test_bad_topology_names_file_and_field(tmp_path, case):
    text, field, words = BAD_TOPOLOGIES[case]
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_topology(path)
    assert info.value.where == str(path)
    assert info.value.field == field
    assert words in info.value.message


def test_missing_topology_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(InputError) as info:
        load_topology(path)
    assert info.value.where == str(path)
