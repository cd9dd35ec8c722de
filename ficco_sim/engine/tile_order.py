"""The block order of a GEMM whose tiles matter to others (tile signals, epilogue stores):
the discrete-event engine dispatches its blocks in index order, row band by row band
(:func:`ficco_sim.gemm_model.tile_prefix_blocks`), and tracks which prefix is done."""

from __future__ import annotations

from ..hardware import DTYPE_BYTES


class TileOrder:
    """The blocks of a GEMM whose order matters: which are placed (in index order) and done
    (the done prefix), the tile signals waiting on it, and its epilogue stores."""

    def __init__(self, tile, shape, grid: int, stores=()):
        self.tile, self.shape, self.grid = tile, shape, grid
        # the epilogue stores as row ranges: (first row, row past the range, dst), in order
        self.stores, lo = [], 0.0
        for share, dst in stores:
            self.stores.append((lo * shape.m, share * shape.m, dst))
            lo = share
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

    def stores_of(self, first: int, n: int) -> list[tuple[int, int, float]]:
        """(dst, blocks, bytes) of the blocks ``[first, first + n)`` per peer they store to:
        each block's output rows go to the owner of those rows (a row band whose rows two
        owners share sends each its rows), its columns as wide as its tile (the last column's
        narrower where N is not a multiple), a split-K block its share of its tile."""
        sh, t = self.shape, self.tile
        sk = t.split_k
        cols = -(-sh.n // t.n)                 # tiles across a row band
        band = cols * sk                       # blocks of a row band
        narrow = sh.n - (cols - 1) * t.n       # the last column's width
        per_col = DTYPE_BYTES[sh.dtype] / sk   # bytes per output element of a block
        out: dict[int, list] = {}
        b, end = first, first + n
        while b < end:
            r = b // band
            i0, i1 = b - r * band, min(end, (r + 1) * band) - r * band
            last = max(0, min(i1, band) - max(i0, band - sk))     # blocks of the last column
            width = (i1 - i0 - last) * t.n + last * narrow
            r0, r1 = r * t.m, min(sh.m, (r + 1) * t.m)
            for lo, hi, dst in self.stores:
                rows = min(r1, hi) - max(r0, lo)
                if rows > 0:
                    got = out.setdefault(dst, [0, 0.0])
                    got[0] += i1 - i0
                    got[1] += rows * width * per_col
            b = r * band + i1
        return [(dst, blocks, nbytes) for dst, (blocks, nbytes) in out.items()]
