"""The block order of a GEMM whose tiles matter to others (tile signals, epilogue stores):
the discrete-event engine dispatches its blocks in index order, row band by row band
(:func:`ficco_sim.gemm_model.tile_prefix_blocks`), and tracks which prefix is done."""

from __future__ import annotations

from ..gemm_model import tile_bytes, tile_prefix_blocks


class TileOrder:
    """The blocks of a GEMM whose order matters: which are placed (in index order) and done
    (the done prefix), the tile signals waiting on it, and its epilogue stores."""

    def __init__(self, tile, shape, grid: int, stores=()):
        self.tile, self.shape, self.grid = tile, shape, grid
        self.block_bytes = tile_bytes(tile, shape.dtype)
        # the epilogue stores as block ranges: (first block past the range, dst), in order
        self.stores = [(min(grid, int(tile_prefix_blocks(tile, shape.m, shape.n, share))), dst)
                       for share, dst in stores]
        self.placed = 0
        self.prefix = 0
        self.done: dict[int, int] = {}       # first block -> count, of cohorts done past the prefix
        self.waits: list[tuple[int, float, object]] = []   # (blocks needed, flag latency, event), by need

    def place(self, n: int) -> int:
        first, self.placed = self.placed, self.placed + n
        return first

    def retire(self, first: int, n: int) -> list[tuple[float, object]]:
        """Blocks ``[first, first + n)`` are done: the signals whose prefix is now complete."""
        self.done[first] = n
        while self.prefix in self.done:
            self.prefix += self.done.pop(self.prefix)
        fired = [w for w in self.waits if w[0] <= self.prefix]
        if fired:
            self.waits = self.waits[len(fired):]
        return [(latency, ev) for _, latency, ev in fired]

    def stores_of(self, first: int, n: int) -> list[tuple[int, int]]:
        """(dst, blocks) of the blocks ``[first, first + n)``, per store range they fall in."""
        out, lo = [], 0
        for hi, dst in self.stores:
            got = min(hi, first + n) - max(lo, first)
            if got > 0:
                out.append((dst, got))
            lo = hi
        return out
