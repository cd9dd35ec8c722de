"""Levels of a compiled template's DAG: every node's longest-path depth from the inputs, and
per level its nodes with their inputs padded to a rectangle, so that the closed form
evaluates a level with whole-array operations."""

from __future__ import annotations

import itertools

import numpy as np


def padded_levels(inputs: list[tuple[int, ...]], level: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level (1, 2, ...): its node ids and their inputs padded with ``n`` (the zero
    source), built with whole-array operations."""
    n = len(inputs)
    if not n:
        return []
    lens = np.fromiter(map(len, inputs), dtype=np.int64, count=n)
    flat = np.fromiter(itertools.chain.from_iterable(inputs), dtype=np.int64, count=int(lens.sum()))
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


def longest_path_levels(inputs: list[tuple[int, ...]]) -> np.ndarray:
    """Longest-path depth of every node (inputs first), by Kahn's algorithm (plain lists:
    numpy scalar indexing would dominate template building)."""
    n = len(inputs)
    outs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, ins in enumerate(inputs):
        for j in ins:
            outs[j].append(i)
        indeg[i] = len(ins)
    level = [1] * n
    stack = [i for i in range(n) if indeg[i] == 0]
    while stack:
        i = stack.pop()
        li = level[i] + 1
        for j in outs[i]:
            if level[j] < li:
                level[j] = li
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return np.array(level, dtype=np.int64)
