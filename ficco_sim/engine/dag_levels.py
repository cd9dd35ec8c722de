"""Levels of a compiled template's DAG: every node's longest-path depth from the inputs, and
per level its nodes with their inputs padded to a rectangle, so that the closed form
evaluates a level with whole-array operations."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Callable

import numpy as np

Level = tuple[np.ndarray, np.ndarray]
SMALL = 4096        # up to this many nodes, plain loops beat whole-array passes (numpy's per-call cost)


class LazyLevels(Sequence):
    """A template's levels (:func:`padded_levels`) made on first use: a sweep evaluates the
    symmetry quotient of merged templates, whose levels come from GPU 0's share of each
    (:mod:`.closed_form_turned`), never from the whole templates'."""

    def __init__(self, make: Callable[[], list[Level]]):
        self._make, self._levels = make, None

    def _made(self) -> list[Level]:
        if self._levels is None:
            self._levels, self._make = self._make(), None
        return self._levels

    def __len__(self) -> int:
        return len(self._made())

    def __getitem__(self, i):
        return self._made()[i]

    def __iter__(self):
        return iter(self._made())


def csr(inputs: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Every node's input count and all inputs end to end (the form the functions below take)."""
    lens = np.fromiter(map(len, inputs), dtype=np.int64, count=len(inputs))
    return lens, np.fromiter(itertools.chain.from_iterable(inputs), dtype=np.int64, count=int(lens.sum()))


def padded_levels(lens: np.ndarray, flat: np.ndarray, level: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level (1, 2, ...): its node ids (ascending) and their inputs (``lens``, ``flat``:
    :func:`csr`) padded with ``n`` (the zero source); built row by row for small graphs (at
    most :data:`SMALL` nodes), with whole-array operations for large ones."""
    n = len(lens)
    if not n:
        return []
    if n <= SMALL:
        return _padded_row_by_row(lens, flat, level)
    owner = np.repeat(np.arange(n), lens)
    pos = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    order = np.argsort(level, kind="stable")                 # nodes by level, ids ascending within
    top = int(level.max())
    bounds = np.searchsorted(level[order], np.arange(1, top + 2))
    row = np.empty(n, dtype=np.int64)
    row[order] = np.arange(n) - bounds[level[order] - 1]     # a node's row within its level
    by_level = np.argsort(level[owner], kind="stable")
    fb = np.searchsorted(level[owner][by_level], np.arange(1, top + 2))
    out = []
    for lv in range(1, top + 1):
        ids = order[bounds[lv - 1]:bounds[lv]]
        pad = np.full((len(ids), max(1, int(lens[ids].max(initial=0)))), n, dtype=np.int64)
        e = by_level[fb[lv - 1]:fb[lv]]
        pad[row[owner[e]], pos[e]] = flat[e]
        out.append((ids, pad))
    return out


def _padded_row_by_row(lens: np.ndarray, flat: np.ndarray, level: np.ndarray) -> list[Level]:
    n, counts, inputs = len(lens), lens.tolist(), flat.tolist()
    starts = [0] * (n + 1)
    for v, c in enumerate(counts):
        starts[v + 1] = starts[v] + c
    by_level: list[list[int]] = [[] for _ in range(int(level.max()))]
    for v, lv in enumerate(level.tolist()):
        by_level[lv - 1].append(v)
    out = []
    for ids in by_level:
        width = max(1, max(counts[v] for v in ids))
        rows = [inputs[starts[v]:starts[v + 1]] + [n] * (width - counts[v]) for v in ids]
        out.append((np.array(ids, dtype=np.int64), np.array(rows, dtype=np.int64).reshape(len(ids), width)))
    return out


def levels_of(levels: Sequence[Level], num_nodes: int, nodes: np.ndarray) -> dict[int, np.ndarray]:
    """Level index (in ``levels``, :func:`padded_levels` of a DAG of ``num_nodes`` nodes) ->
    positions in ``nodes`` of the nodes at that level."""
    where = np.full(num_nodes + 1, -1, dtype=np.int64)
    for lv, (ids, _) in enumerate(levels):
        where[ids] = lv
    lv_of = where[nodes]
    return {int(lv): np.flatnonzero(lv_of == lv) for lv in np.unique(lv_of) if lv >= 0}


def longest_path_levels(lens: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Longest-path depth of every node (inputs first: depth 1), by Kahn's algorithm: a node's
    depth is one more than its deepest input's, known once its last input is taken (``lens``,
    ``src``: the inputs, :func:`csr`). Templates are a few dozen to a few thousand levels deep;
    small ones (at most :data:`SMALL` nodes) take their nodes one at a time, large ones one
    frontier at a time with whole-array operations (the nodes whose inputs all lie in earlier
    frontiers form the next one, so a node's frontier is its depth)."""
    n = len(lens)
    if not n:
        return np.zeros(0, dtype=np.int64)
    level = _levels_one_by_one(lens, src) if n <= SMALL else _levels_by_frontier(lens, src)
    if (level == 0).any():
        raise ValueError("the compiled graph has a cycle")
    return level


def _levels_one_by_one(lens: np.ndarray, src: np.ndarray) -> np.ndarray:
    n, counts, inputs = len(lens), lens.tolist(), src.tolist()
    succ: list[list[int]] = [[] for _ in range(n)]
    pos = 0
    for v, c in enumerate(counts):
        for u in inputs[pos:pos + c]:
            succ[u].append(v)
        pos += c
    level = [0] * n
    todo = [v for v in range(n) if not counts[v]]
    for v in todo:
        level[v] = 1
    while todo:
        u = todo.pop()
        deeper = level[u] + 1
        for v in succ[u]:
            if level[v] < deeper:
                level[v] = deeper
            counts[v] -= 1
            if not counts[v]:
                todo.append(v)
    # a node on a cycle never loses its last input: its level stays 0 where it had inputs
    return np.array([lv if not c else 0 for lv, c in zip(level, counts)], dtype=np.int64)


def _levels_by_frontier(lens: np.ndarray, src: np.ndarray) -> np.ndarray:
    n = len(lens)
    dst = np.repeat(np.arange(n), lens)
    order = np.argsort(src, kind="stable")                 # edges grouped by their input node
    src, dst = src[order], dst[order]
    starts = np.searchsorted(src, np.arange(n + 1))
    indeg = lens.copy()
    level = np.zeros(n, dtype=np.int64)
    front = np.flatnonzero(indeg == 0)
    seen = np.empty(n, dtype=np.int64)
    depth = 0
    while len(front):
        depth += 1
        level[front] = depth
        a, b = starts[front], starts[front + 1]
        cnt = b - a
        if not cnt.sum():
            break
        idx = np.repeat(a - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))   # edges out of the frontier
        out = dst[idx]
        np.subtract.at(indeg, out, 1)
        front = out[indeg[out] == 0]
        if len(front) > 1:             # a node reached by several frontier edges: keep one
            seen[front] = np.arange(len(front))
            front = front[seen[front] == np.arange(len(front))]
    return level
