"""Interconnect topologies: GPUs, switches and directed links as a networkx graph.

Nodes are ``"gpu0" .. "gpu{N-1}"`` and ``"sw0" ...``; every directed edge carries
``bandwidth`` (B/s, per direction) and ``latency`` (s). Routing is a pure function of
the graph (fewest hops, then lowest latency, then a tie rule that turns with the GPUs'
numbering: :meth:`Topology.route`). Built-ins come as parametric names whose
link parameters follow a GPU profile's link spec:

* ``ring:N``: each GPU links to its two neighbours; per direction it gets half its
  ports.
* ``fc:N`` (fully connected): a direct link to every peer with ``1/(N-1)`` of the ports
  (one xGMI link per peer on 8 x MI300X).
* ``switch:N``: every GPU has all its ports into one non-blocking switch; the GPU-to-GPU
  latency is split over the two hops.

Any other graph comes from YAML (see ``topologies/``).

>>> t = ring(4, bandwidth=100e9, latency=1e-6)
>>> t.route(0, 2)
['gpu0', 'gpu1', 'gpu2']
>>> t.path_bandwidth(0, 1) / 1e9
100.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
import heapq
import math
from pathlib import Path
from typing import Any

import networkx as nx

from .errors import InputError
from .workload import MAX_GPUS   # one simulated system: a scenario's limit and a topology's

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"
KINDS = ("ring", "fc", "switch", "custom")


def gpu_node(i: int) -> str:
    return f"gpu{i}"


def gpu_index(node: str) -> int | None:
    """The GPU a node name stands for (``"gpu3"`` -> 3), None for a switch."""
    return int(node[3:]) if node.startswith("gpu") else None


@dataclass(frozen=True, eq=False)
class Topology:
    """A directed graph of GPUs and switches. Build with the functions below or :func:`load_topology`."""

    name: str
    kind: str
    num_gpus: int
    graph: nx.DiGraph
    _routes: dict = field(default_factory=dict, repr=False, compare=False)
    _preds: dict = field(default_factory=dict, repr=False, compare=False)   # source GPU -> its fewest-hop predecessors
    _adj: dict = field(default_factory=dict, repr=False, compare=False)       # node -> [(successor, routing weight)]
    _links: dict = field(default_factory=dict, repr=False, compare=False)     # (src, dst) -> (path links, path latency)

    def route(self, src: int, dst: int) -> list[str]:
        """Node path from GPU ``src`` to GPU ``dst``: fewest hops, then least latency, then
        (paths still tied) the one whose nodes come first, node by node, ranking GPU ``j`` by
        ``(j - src) mod N`` (forward from the source: clockwise on a ring, as ASTRA-sim's
        ring routes) and switches after GPUs by name. That rule turns with every renumbering
        ``i -> i + c`` of the GPUs that maps the links onto links alike and keeps the
        switches, so a rotation-symmetric topology routes rotation-symmetrically."""
        key = (src, dst)
        hit = self._routes.get(key)
        if hit is None:
            a, b = gpu_node(src), gpu_node(dst)
            if src == dst or self.graph.has_edge(a, b):       # the only fewest-hop path
                hit = self._routes[key] = [a] if src == dst else [a, b]
                return hit
            preds = self._preds.get(src)
            if preds is None:       # one search from src answers every route from it
                if not self._adj:
                    self._adj.update({u: [(v, _weight(d["latency"])) for v, d in nbrs.items()]
                                      for u, nbrs in self.graph.succ.items()})
                preds = self._preds[src] = _fewest_hop_preds(self._adj, a)
            if b not in preds:
                raise InputError("topology", None, f"no path from {a} to {b}")
            hit = self._routes[key] = _pick(preds, self.graph.succ, a, b, src, self.num_gpus)
        return hit

    def path_links(self, src: int, dst: int) -> list[tuple[str, str]]:
        """The links of :meth:`route` (one list per GPU pair, shared by every caller: not to be changed)."""
        hit = self._links.get((src, dst))
        if hit is None:
            nodes = self.route(src, dst)
            links = list(zip(nodes, nodes[1:]))
            hit = self._links[(src, dst)] = (links, sum(self.graph.edges[e]["latency"] for e in links))
        return hit[0]

    def path_latency(self, src: int, dst: int) -> float:
        self.path_links(src, dst)
        return self._links[(src, dst)][1]

    def path_bandwidth(self, src: int, dst: int) -> float:
        return min(self.graph.edges[e]["bandwidth"] for e in self.path_links(src, dst))

    def injection_bandwidth(self, gpu: int) -> float:
        """Sum of a GPU's outgoing link bandwidths (B/s)."""
        return sum(d["bandwidth"] for _, _, d in self.graph.out_edges(gpu_node(gpu), data=True))

    @property
    def links(self) -> list[tuple[str, str]]:
        return list(self.graph.edges)

    def describe(self) -> str:
        bws = sorted({d["bandwidth"] for _, _, d in self.graph.edges(data=True)})
        return f"{self.name}: {self.num_gpus} GPUs, {self.graph.number_of_edges()} links, " \
               f"{'/'.join(f'{b / 1e9:g}' for b in bws)} GB/s per link"


_HOP = 1 << 64     # a hop outweighs any latency sum (femtoseconds): fewest hops, then least latency


def _weight(latency: float) -> int:
    """A link's routing weight: one hop plus its latency in whole femtoseconds (integer
    sums are exact, so equal paths tie wherever they are summed)."""
    return _HOP + round(latency * 1e15)


def _fewest_hop_preds(adj: dict[str, list[tuple[str, int]]], a: str) -> dict[str, list[str]]:
    """Every node reached from ``a`` -> its predecessors on fewest-hop, least-latency paths
    (Dijkstra keeping all tied predecessors; ``a`` has none)."""
    dist, preds = {a: 0}, {a: []}
    heap, done = [(0, a)], set()
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for v, w in adj[u]:
            nd = d + w
            old = dist.get(v)
            if old is None or nd < old:
                dist[v], preds[v] = nd, [u]
                heapq.heappush(heap, (nd, v))
            elif nd == old:
                preds[v].append(u)
    return preds


def _pick(preds: dict[str, list[str]], succ, a: str, b: str, src: int, n: int) -> list[str]:
    """The route from ``a`` to ``b`` among the paths ``preds`` holds (see :meth:`Topology.route`)."""
    path = [b]
    while len(preds[path[-1]]) == 1:
        path.append(preds[path[-1]][0])
    if path[-1] == a:           # one path
        return path[::-1]
    on, todo = {b}, [b]         # nodes on some fewest-hop path to b; then the first of them, step by step
    while todo:
        for p in preds[todo.pop()]:
            if p not in on:
                on.add(p)
                todo.append(p)

    def rank(v: str) -> tuple:
        i = gpu_index(v)
        return (1, 0, v) if i is None else (0, (i - src) % n, "")

    out = [a]
    while out[-1] != b:
        u = out[-1]
        out.append(min((v for v in succ[u] if v in on and u in preds[v]), key=rank))
    return out


def _checked(name: str, kind: str, n: int, graph: nx.DiGraph, where: str) -> Topology:
    gpus = [v for v in graph.nodes if str(v).startswith("gpu")]
    expected = {gpu_node(i) for i in range(n)}
    if set(gpus) != expected:
        raise InputError(where, "gpus", f"GPUs must be named gpu0..gpu{n - 1}; got {sorted(gpus)}")
    for u, v, d in graph.edges(data=True):
        if not d.get("bandwidth", 0) > 0:
            raise InputError(where, f"links.{u}->{v}.bandwidth", f"must be positive, got {d.get('bandwidth')!r}")
        if d.get("latency", -1) < 0:
            raise InputError(where, f"links.{u}->{v}.latency", f"must not be negative, got {d.get('latency')!r}")
    comp = {v: c for c, nodes in enumerate(nx.strongly_connected_components(graph)) for v in nodes}
    if len({comp[gpu_node(i)] for i in range(n)}) == 1:     # every GPU reaches every other
        return Topology(name, kind, n, graph)
    for i in range(n):
        for j in range(n):
            if i != j and not nx.has_path(graph, gpu_node(i), gpu_node(j)):
                raise InputError(where, "links", f"disconnected: no path from gpu{i} to gpu{j}")
    return Topology(name, kind, n, graph)


def _check_n(n: Any, where: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InputError(where, "gpus", f"need an integer number of GPUs >= 2, got {n!r}")
    if n > MAX_GPUS:
        raise InputError(where, "gpus", f"{n} GPUs: ficco-sim simulates up to {MAX_GPUS} GPUs in one system")
    return n


def ring(n: int, bandwidth: float, latency: float) -> Topology:
    """Bidirectional ring: ``bandwidth`` per direction per neighbour link."""
    n = _check_n(n, "ring")
    g = nx.DiGraph()
    g.add_nodes_from(gpu_node(i) for i in range(n))
    for i in range(n):
        j = (i + 1) % n
        g.add_edge(gpu_node(i), gpu_node(j), bandwidth=bandwidth, latency=latency)
        g.add_edge(gpu_node(j), gpu_node(i), bandwidth=bandwidth, latency=latency)
    return _checked(f"ring:{n}", "ring", n, g, "ring")


def fully_connected(n: int, bandwidth: float, latency: float) -> Topology:
    """A dedicated link (``bandwidth`` per direction) between every pair of GPUs."""
    n = _check_n(n, "fc")
    g = nx.DiGraph()
    for i in range(n):
        for j in range(n):
            if i != j:
                g.add_edge(gpu_node(i), gpu_node(j), bandwidth=bandwidth, latency=latency)
    return _checked(f"fc:{n}", "fc", n, g, "fc")


def switch(n: int, bandwidth: float, latency: float) -> Topology:
    """Every GPU on one non-blocking switch: up- and down-link of ``bandwidth``; ``latency``
    is GPU-to-GPU (half per hop)."""
    n = _check_n(n, "switch")
    g = nx.DiGraph()
    for i in range(n):
        g.add_edge(gpu_node(i), "sw0", bandwidth=bandwidth, latency=latency / 2)
        g.add_edge("sw0", gpu_node(i), bandwidth=bandwidth, latency=latency / 2)
    return _checked(f"switch:{n}", "switch", n, g, "switch")


BUILDERS = {"ring": ring, "fc": fully_connected, "switch": switch}


def builtin_link(kind: str, n: int, link: Any) -> tuple[float, float]:
    """(bandwidth per link, latency) for a parametric topology from a GPU's link spec. A GPU
    wired point to point (``link.peers`` set: MI300X, one xGMI link to each of 7 peers) gives
    every pair its real ``ports / peers`` links whatever N, and cannot reach more than
    ``peers`` GPUs directly; otherwise the ports are spread over the topology's neighbours."""
    per_port = link.port_bandwidth * link.efficiency
    if link.peers:
        if kind in ("fc", "ring") and (n - 1 if kind == "fc" else min(2, n - 1)) > link.peers:
            raise InputError("--topology", None, f"{kind}:{n}: each GPU links directly to at most {link.peers} "
                             "peers (profile link.peers)")
        if kind in ("fc", "ring"):
            return link.ports / link.peers * per_port, link.latency
    if kind == "ring":      # two neighbours, or one (ring:2: both sides are the same GPU, all ports to it)
        return max(1.0, link.ports / min(2, n - 1)) * per_port, link.latency
    if kind == "fc":
        return link.ports / (n - 1) * per_port, link.latency
    return link.ports * per_port, link.latency


def available_topologies() -> list[str]:
    return ["ring:N", "fc:N", "switch:N"] + sorted(p.stem for p in TOPOLOGY_DIR.glob("*.yaml"))


def load_topology(spec: str | Path | Topology, gpu: Any = None) -> Topology:
    """A topology from a parametric name (``"switch:8"``, link parameters from ``gpu``'s
    profile, default h100), a built-in YAML name, or a YAML path.

    >>> load_topology("fc:8", "mi300x").path_bandwidth(0, 5) / 1e9
    48.0
    """
    if isinstance(spec, Topology):
        return spec
    text = str(spec)
    if ":" in text and text.split(":", 1)[0] in BUILDERS:
        kind, _, count = text.partition(":")
        try:
            n = int(count)
        except ValueError:
            raise InputError("--topology", None, f"{text!r}: expected {kind}:N with an integer N") from None
        if n < 2:
            raise InputError("--topology", None, f"{text!r}: need at least 2 GPUs")
        if n > MAX_GPUS:
            raise InputError("--topology", None, f"{text!r}: ficco-sim simulates up to {MAX_GPUS} GPUs in one system")
        from .hardware import load_gpu
        profile = load_gpu(gpu if gpu is not None else "h100")
        bw, lat = builtin_link(kind, n, profile.link)
        return BUILDERS[kind](n, bw, lat)
    path = Path(text)
    if not path.suffix and not path.exists():
        path = TOPOLOGY_DIR / f"{text}.yaml"
        if not path.exists():
            raise InputError("--topology", None, f"unknown topology {text!r}; try one of: "
                             f"{', '.join(available_topologies())}")
    return _load_yaml_topology(path)


YAML_HELP = """\
A topology file is YAML: GPUs gpu0..gpu{N-1}, any switches sw0, sw1, ..., and links between
them (bidirectional unless said; bandwidth is per direction, as realized by transfers):

  name: my-node              # optional (default: the file name)
  kind: switch               # optional: ring | fc | switch | custom (default custom)
  gpus: 4
  defaults: {bandwidth_gbps: 300, latency_us: 1.0}   # optional, for links that omit them
  links:
    - {from: gpu0, to: sw0}
    - {from: gpu1, to: sw0}
    - {from: gpu2, to: sw0, bandwidth_gbps: 150}      # a slower port
    - {from: gpu3, to: sw0}
    - {from: gpu0, to: gpu1, bandwidth_gbps: 50, latency_us: 0.5, bidirectional: false}

Routing takes the fewest hops, then the lowest latency. Every GPU must reach every other.
Built-in files: topologies/*.yaml; parametric names ring:N, fc:N, switch:N take their links
from the GPU profile.
"""


TOP_KEYS = ("name", "kind", "gpus", "defaults", "links", "description")
DEFAULT_KEYS = ("bandwidth_gbps", "latency_us")
LINK_KEYS = ("from", "to", "bandwidth_gbps", "latency_us", "bidirectional")


def _known_keys(d: dict, known: tuple[str, ...], where: str, prefix: str) -> None:
    """Refuse a key a topology file does not have (a misspelt one would be ignored and its
    default used), naming the nearest known one."""
    import difflib
    for key in d:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"
            raise InputError(where, f"{prefix}{key}", f"unknown field ({hint})")


def _load_yaml_topology(path: Path) -> Topology:
    from .hardware import read_yaml
    where = str(path)
    if not path.exists():
        raise InputError(where, None, "no such topology file")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(where, None, "a topology must be a YAML mapping")
    _known_keys(data, TOP_KEYS, where, "")
    n = _check_n(data.get("gpus"), where)
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise InputError(where, "defaults", "must be a mapping (bandwidth_gbps, latency_us)")
    _known_keys(defaults, DEFAULT_KEYS, where, "defaults.")
    links = data.get("links")
    if not isinstance(links, list) or not links:
        raise InputError(where, "links", "must be a non-empty list")
    g = nx.DiGraph()
    g.add_nodes_from(gpu_node(i) for i in range(n))
    for i, item in enumerate(links):
        f = f"links.{i}"
        if not isinstance(item, dict):
            raise InputError(where, f, "must be a mapping with from, to, bandwidth_gbps, latency_us")
        _known_keys(item, LINK_KEYS, where, f"{f}.")
        a, b = item.get("from"), item.get("to")
        for key, node in (("from", a), ("to", b)):
            if not isinstance(node, str) or not (node.startswith("gpu") or node.startswith("sw")):
                raise InputError(where, f"{f}.{key}", f"must name a node gpuI or swJ, got {node!r}")
        bw = item.get("bandwidth_gbps", defaults.get("bandwidth_gbps"))
        lat = item.get("latency_us", defaults.get("latency_us", 0.0))
        for key, v in (("bandwidth_gbps", bw), ("latency_us", lat)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(where, f"{f}.{key}", f"must be a finite number, got {v!r}")
            if abs(v) > 1e9 or (key == "bandwidth_gbps" and 0 < v < 1e-6):
                raise InputError(where, f"{f}.{key}", f"{v!r} is beyond any real link")
        if a == b:
            raise InputError(where, f, f"a link from {a} to itself")
        both = item.get("bidirectional", True)
        if not isinstance(both, bool):
            raise InputError(where, f"{f}.bidirectional", f"must be true or false, got {both!r}")
        if not bw > 0:
            raise InputError(where, f"{f}.bandwidth_gbps", f"must be positive, got {bw!r}")
        if lat < 0:
            raise InputError(where, f"{f}.latency_us", f"must not be negative, got {lat!r}")
        pairs = [(a, b)] + ([(b, a)] if both else [])
        for u, v in pairs:
            if g.has_edge(u, v):
                raise InputError(where, f, f"a second link {u}->{v}; give one link with the total bandwidth")
            g.add_edge(u, v, bandwidth=float(bw) * 1e9, latency=float(lat) * 1e-6)
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise InputError(where, "name", f"must be a non-empty string, got {name!r}")
    kind = data.get("kind", "custom")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InputError(where, "kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return _checked(name, kind, n, g, where)
