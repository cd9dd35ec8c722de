"""Levels of a compiled template's DAG (:mod:`ficco_sim.engine.dag_levels`): both ways of
counting them (node by node for small graphs, frontier by frontier for large ones) give
every node's longest-path depth, checked against networkx, and both refuse a cycle."""

import networkx as nx
import numpy as np
import pytest

from ficco_sim.engine import dag_levels
from ficco_sim.engine.dag_levels import csr, longest_path_levels


def _random_dag(seed: int, n: int) -> list[tuple[int, ...]]:
    """Inputs of ``n`` nodes in a shuffled order (a node's inputs are earlier in a hidden order)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    inputs: list[tuple[int, ...]] = [()] * n
    for rank in range(n):
        k = int(rng.integers(0, 4)) if rank else 0
        inputs[perm[rank]] = tuple(int(perm[r]) for r in rng.integers(max(0, rank - 30), rank, k)) if rank else ()
    return inputs


def _oracle(inputs: list[tuple[int, ...]]) -> list[int]:
    g = nx.DiGraph()
    g.add_nodes_from(range(len(inputs)))
    g.add_edges_from((u, v) for v, ins in enumerate(inputs) for u in ins)
    depth = [1] * len(inputs)
    for v in nx.topological_sort(g):
        for u in g.predecessors(v):
            depth[v] = max(depth[v], depth[u] + 1)
    return depth


@pytest.mark.parametrize("small", [dag_levels.SMALL, 0])      # node by node, then frontier by frontier
@pytest.mark.parametrize("seed", range(4))
def test_levels_are_longest_path_depths(monkeypatch, small, seed):
    monkeypatch.setattr(dag_levels, "SMALL", small)
    inputs = _random_dag(seed, 600)
    assert longest_path_levels(*csr(inputs)).tolist() == _oracle(inputs)


@pytest.mark.parametrize("small", [dag_levels.SMALL, 0])
def test_a_cycle_is_refused(monkeypatch, small):
    monkeypatch.setattr(dag_levels, "SMALL", small)
    inputs = [(), (0, 3), (1,), (2,), (3,)]        # 1 -> 2 -> 3 -> 1, and 4 after the cycle
    with pytest.raises(ValueError, match="cycle"):
        longest_path_levels(*csr(inputs))


@pytest.mark.parametrize("seed", range(3))
def test_padded_levels_row_by_row_and_whole_array_agree(monkeypatch, seed):
    """Each level's node ids ascending and their inputs in order, padded with the zero source,
    whichever way they are built; every input lies at a shallower level."""
    inputs = _random_dag(seed, 500)
    lens, flat = csr(inputs)
    level = longest_path_levels(lens, flat)
    small = dag_levels.padded_levels(lens, flat, level)
    monkeypatch.setattr(dag_levels, "SMALL", 0)
    large = dag_levels.padded_levels(lens, flat, level)
    assert len(small) == len(large) == int(level.max())
    for (ids_a, pad_a), (ids_b, pad_b) in zip(small, large):
        assert ids_a.tolist() == ids_b.tolist() == sorted(ids_a.tolist())
        assert pad_a.tolist() == pad_b.tolist()
    for lv, (ids, pad) in enumerate(small, start=1):
        for v, row in zip(ids.tolist(), pad.tolist()):
            assert [x for x in row if x != len(inputs)] == list(inputs[v])
            assert all(level[x] < lv for x in inputs[v])
