"""Input data, the unscheduled reference result, and the correctness check of a replay.

Every buffer of ``graph.buffers`` exists once per rank. *Input* buffers are filled with
small integers in [-2, 2] drawn from a generator seeded by (seed, rank, buffer name), so
any process can rebuild any rank's inputs without communicating; all other buffers start
at zero (accumulating GEMMs and staging buffers rely on it). With float32 and integers
this small every product and sum is exact, so a replay on CPU must match bit for bit;
float16/bfloat16 on a GPU are checked with a tolerance.

The reference ignores the schedule: it is the plain math of the scenario, read from
``graph.meta["reference"]``::

    {"kind": "ag-gemm", "A": "A", "B": "B", "C": "C", "shard_rows": S}
        # rank g: C rows [0, m) = cat(A shard of every rank) @ B_g
    {"kind": "gemm-rs", "A": "A", "B": "B", "out": "P", "shard_rows": S}
        # rank g: P rows [gS, (g+1)S) of sum over ranks r of A_r @ B_r
    {"kind": "a2a-gemm", "X": "X", "W": "W", "Z": "Z", "counts": [[...], ...]}
        # rank q: Z = (its own rows for q, then rows from every other source p in rank
        # order; X_p's rows are grouped by destination) @ W_q
    {"kind": "ag-par-gemm" | "a2a-par-gemm" | "ar-par-gemm", "A": "A", "B": "B", "C": "C",
     "X": "X", ["Y": "Y",] "inputs": ["A", "B", "X"], "shard_rows": S}
        # rank g: C = A_g @ B_g, and X gathered (ag), X's rows for g from every other rank
        # in Y (a2a) or X summed over ranks (ar)

(the operand roles are the keys ``A``/``X``, ``B``/``W``, ``C``/``out``/``Z``; ``inputs``
lists the input buffers, default the first two). Without a ``reference`` entry the graph is
replayed sequentially on the CPU instead (:func:`oracle`) — that checks the executor
against the graph, not the graph against the math, and the report says so.

>>> import torch
>>> from ficco_sim.taskgraph import Buffer, TaskGraph
>>> g = TaskGraph.build(2, [], [], buffers={"A": Buffer(4, 3, "float32")})
>>> a0 = make_inputs(g, 0, ["A"], torch.float32, "cpu")["A"]
>>> bool((a0 == make_inputs(g, 0, ["A"], torch.float32, "cpu")["A"]).all()), a0.abs().max().item() <= 2
(True, True)
"""

from __future__ import annotations

import zlib
from typing import Any, Mapping

import torch

from ..errors import InputError
from ..taskgraph import Slice, TaskGraph
from ..workload import KINDS

TORCH_DTYPES = {"float32": torch.float32, "tfloat32": torch.float32, "float16": torch.float16,
                "bfloat16": torch.bfloat16}
# (rtol, atol) per dtype: float32 with small integers is exact.
TOLERANCE = {torch.float32: (0.0, 0.0), torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 1e-1)}


def ref_spec(graph: TaskGraph) -> dict[str, Any] | None:
    """The normalised ``meta["reference"]`` (see module docstring), or None if absent."""
    raw = graph.meta.get("reference")
    if not raw:
        return None
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, Mapping) or raw.get("kind") not in KINDS:
        raise InputError("task graph", "meta.reference", f"unknown reference {raw!r}")
    raw = dict(raw)
    pick = lambda *keys, default: next((raw[k] for k in keys if raw.get(k)), default)  # noqa: E731
    spec = dict(raw, a=pick("A", "X", "a", default="A"), b=pick("B", "W", "b", default="B"),
                c=pick("C", "out", "Z", "c", default="C"))
    spec.setdefault("inputs", [spec["a"], spec["b"]])
    for name in (spec["a"], spec["b"], spec["c"], *spec["inputs"]):
        if name not in graph.buffers:
            raise InputError("task graph", "meta.reference", f"names buffer {name!r}, which the graph lacks")
    return spec


def input_buffers(graph: TaskGraph) -> list[str]:
    spec = ref_spec(graph)
    if spec is not None:
        return list(spec["inputs"])
    names = graph.meta.get("inputs")
    if names:
        return list(names)
    raise InputError("task graph", "meta", "neither meta.reference nor meta.inputs says which buffers hold inputs")


def exec_dtype(graph: TaskGraph, device: str) -> torch.dtype:
    """float32 on CPU (exact); the graph's dtype on a GPU (float8 runs as float16; tfloat32 as
    float32 with TF32 matmuls allowed, ``torch.backends.cuda.matmul.allow_tf32``, which every
    other graph's replay sets back off, PyTorch's default)."""
    if device == "cpu":
        return torch.float32
    dtypes = {b.dtype for b in graph.buffers.values()}
    name = dtypes.pop() if len(dtypes) == 1 else "float16"
    torch.backends.cuda.matmul.allow_tf32 = name == "tfloat32"
    return TORCH_DTYPES.get(name, torch.float16)


def _seed(seed: int, rank: int, name: str) -> int:
    return zlib.crc32(f"{seed}/{rank}/{name}".encode())


def make_inputs(graph: TaskGraph, rank: int, inputs: list[str], dtype: torch.dtype, device: str | torch.device,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """Every buffer of ``rank``: inputs with deterministic small integers, others zero."""
    out = {}
    for name, b in graph.buffers.items():
        if name in inputs:
            gen = torch.Generator().manual_seed(_seed(seed, rank, name))
            t = torch.randint(-2, 3, (b.rows, b.cols), generator=gen).to(dtype)
            out[name] = t.to(device)
        else:
            out[name] = torch.zeros((b.rows, b.cols), dtype=dtype, device=device)
    return out


def reset(bufs: dict[str, torch.Tensor], graph: TaskGraph, rank: int, inputs: list[str], seed: int = 0) -> None:
    """Restore ``bufs`` (one rank's) to their initial values in place, between repeats."""
    fresh = make_inputs(graph, rank, inputs, bufs[next(iter(bufs))].dtype, "cpu", seed)
    for name, t in bufs.items():
        t.copy_(fresh[name])


def reference_inputs(graph: TaskGraph, seed: int = 0, device: str | torch.device = "cpu") -> list | None:
    """Every rank's inputs in float64 on ``device`` (the replay's GPU computes the reference
    in milliseconds where a CPU takes seconds per rank at 4096^3), or None without meta.reference."""
    spec = ref_spec(graph)
    if spec is None:
        return None
    return [make_inputs(graph, r, spec["inputs"], torch.float64, device, seed) for r in range(graph.num_gpus)]


def expected(graph: TaskGraph, rank: int, seed: int = 0,
             ins: list | None = None) -> list[tuple[Slice, torch.Tensor]] | None:
    """Every (where a result lives on ``rank``, its float64 reference values), from meta: one
    result for a dependent pair, two (the GEMM's and the collective's) for an independent one.
    ``ins``: :func:`reference_inputs`, made once for all ranks (default: on the CPU, here)."""
    spec = ref_spec(graph)
    if spec is None:
        return None
    ins = ins if ins is not None else reference_inputs(graph, seed)
    got = REFERENCES[spec["kind"]](graph, spec, ins, rank)
    return got if isinstance(got, list) else [got]


def _ag_gemm(graph: TaskGraph, spec: dict, ins: list, rank: int) -> tuple[Slice, torch.Tensor]:
    p, a, b, c = graph.num_gpus, spec["a"], spec["b"], spec["c"]
    m = int(spec.get("m", graph.buffers[c].rows))
    s = int(spec.get("shard_rows", m // p))
    full = torch.cat([ins[q][a][q * s:(q + 1) * s] for q in range(p)])
    return Slice(c, 0, m), full @ ins[rank][b]


def _gemm_rs(graph: TaskGraph, spec: dict, ins: list, rank: int) -> tuple[Slice, torch.Tensor]:
    p, a, b, c = graph.num_gpus, spec["a"], spec["b"], spec["c"]
    m = int(spec.get("m", graph.buffers[c].rows))
    s = int(spec.get("shard_rows", m // p))
    total = sum(ins[q][a] @ ins[q][b] for q in range(p))
    return Slice(c, rank * s, (rank + 1) * s), total[rank * s:(rank + 1) * s]


def _a2a_gemm(graph: TaskGraph, spec: dict, ins: list, rank: int) -> tuple[Slice, torch.Tensor]:
    p, a, b, c = graph.num_gpus, spec["a"], spec["b"], spec["c"]
    counts = spec.get("counts")
    if counts is None:
        share = graph.buffers[a].rows // p
        counts = [[share] * p for _ in range(p)]
    rows = []
    for q in [rank] + [q for q in range(p) if q != rank]:
        off = sum(counts[q][:rank])
        rows.append(ins[q][a][off:off + counts[q][rank]])
    got = torch.cat(rows)
    return Slice(c, 0, got.shape[0]), got @ ins[rank][b]


def _par(graph: TaskGraph, spec: dict, ins: list, rank: int) -> list[tuple[Slice, torch.Tensor]]:
    """GEMM beside an independent collective on X: C = A @ B, and the collective's result."""
    p, a, b, c, x = graph.num_gpus, spec["a"], spec["b"], spec["c"], spec["X"]
    m = graph.buffers[x].rows
    s = int(spec.get("shard_rows", m // p))
    out = [(Slice(c, 0, graph.buffers[c].rows), ins[rank][a] @ ins[rank][b])]
    kind = spec["kind"]
    if kind == "ag-par-gemm":
        out.append((Slice(x, 0, m), torch.cat([ins[q][x][q * s:(q + 1) * s] for q in range(p)])))
    elif kind == "a2a-par-gemm":    # rows for this rank from every other rank, in rank order
        got = torch.cat([ins[q][x][rank * s:(rank + 1) * s] for q in range(p) if q != rank])
        out.append((Slice(spec["Y"], 0, got.shape[0]), got))
    else:
        out.append((Slice(x, 0, m), sum(ins[q][x] for q in range(p))))
    return out


# The executor's reference result of every scenario kind of the registry (checked on import).
REFERENCES = {"ag-gemm": _ag_gemm, "gemm-rs": _gemm_rs, "a2a-gemm": _a2a_gemm,
              "ag-par-gemm": _par, "a2a-par-gemm": _par, "ar-par-gemm": _par}
assert set(REFERENCES) == set(KINDS), f"references {sorted(REFERENCES)} != scenario kinds {sorted(KINDS)}"


def check(result: torch.Tensor, want: torch.Tensor) -> tuple[bool, float]:
    """(close enough, max abs error) of a replay's result against the reference."""
    rtol, atol = TOLERANCE.get(result.dtype, (1e-2, 1e-2))
    got = result.detach().to(want.device, torch.float64)
    err = (got - want).abs().max().item() if got.numel() else 0.0
    ok = got.shape == want.shape and bool(torch.allclose(got, want, rtol=rtol, atol=atol))
    return ok, err
