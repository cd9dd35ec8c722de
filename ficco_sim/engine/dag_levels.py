"""Levels of a compiled template's DAG: every node's longest-path depth from the inputs, and
per level its nodes with their inputs padded to a rectangle, so that the closed form
evaluates a level with whole-array operations."""

from __future__ import annotations

import itertools

import numpy as np


def csr(inputs: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Every node's input count and all inputs end to end (the form the functions below take)."""
    lens = np.fromiter(map(len, inputs), dtype=np.int64, count=len(inputs))
    return lens, np.fromiter(itertools.chain.from_iterable(inputs), dtype=np.int64, count=int(lens.sum()))


def padded_levels(lens: np.ndarray, flat: np.ndarray, level: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level (1, 2, ...): its node ids and their inputs (``lens``, ``flat``: :func:`csr`)
    padded with ``n`` (the zero source), built with whole-array operations."""
    n = len(lens)
    if not n:
        return []
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


def longest_path_levels(lens: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Longest-path depth of every node (inputs first: depth 1), by Kahn's algorithm run one
    frontier at a time with whole-array operations: the nodes whose inputs all lie in
    earlier frontiers form the next one, so a node's frontier is its depth (templates are a
    few dozen to a few thousand levels deep and thousands of nodes wide; ``lens``, ``src``:
    the inputs, :func:`csr`)."""
    n = len(lens)
    if not n:
        return np.zeros(0, dtype=np.int64)
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
    if (level == 0).any():
        raise ValueError("the compiled graph has a cycle")
    return level
