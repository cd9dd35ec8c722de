"""Scenario library: the communication + GEMM pairs of real model layers.

Model shapes come from the models' public configurations:

* Llama-3.1-405B: hidden 16384, intermediate 53248, 128 heads, 8 KV heads (head dim 128);
  ``config.json`` of https://huggingface.co/meta-llama/Llama-3.1-405B
* Llama-2-70B and Llama-3-70B: hidden 8192, intermediate 28672, 64 heads, 8 KV heads;
  https://huggingface.co/meta-llama/Llama-2-70b-hf and https://huggingface.co/meta-llama/Meta-Llama-3-70B
  (same layer shapes; only vocabulary and context differ, so they share one entry)
* Mixtral-8x7B: hidden 4096, intermediate 14336, 32 heads, 8 KV heads, 8 experts, top-2;
  https://huggingface.co/mistralai/Mixtral-8x7B-v0.1
* Mixtral-8x22B: hidden 6144, intermediate 16384, 48 heads, 8 KV heads, 8 experts, top-2;
  https://huggingface.co/mistralai/Mixtral-8x22B-v0.1
* GPT-3 175B: d_model 12288, 96 heads of 128, FFN 4 x d_model, no gating, no GQA;
  Brown et al., "Language Models are Few-Shot Learners", 2020, Table 2.1 (arXiv 2005.14165)

Layers under tensor + sequence parallelism on ``T`` GPUs with ``S`` tokens (sequence x batch):

* forward QKV and up-projection: all-gather of the token-sharded activations along M, then
  ``[S, hidden] @ [hidden, n / T]`` (``ag-gemm``, shard along M);
* forward out-projection and down-projection: ``[S, k / T] @ [k / T, hidden]`` then
  reduce-scatter along the tokens (``gemm-rs``);
* backward weight gradients of QKV and up-projection: ``dW = X^T dY`` where the tokens are the
  reduction dimension K: all-gather X along K (``ag-gemm`` with ``shard_dim: K``);
* expert parallelism (MoE models): ``a2a-gemm`` dispatching ``S x top_k`` token rows per GPU to
  the GPUs holding their experts, uneven per peer and even per expert GPU
  (:func:`~ficco_sim.workload.skewed_routing`),
  then the expert up-projection (experts on one GPU run as one grouped GEMM).

User scenarios come from YAML (see :func:`load_scenarios`).

>>> lib = builtin_library()
>>> len(lib) > 100
True
>>> s = next(s for s in lib if s.meta["model"] == "llama3-70b" and s.meta["layer"] == "qkv")
>>> (s.kind, s.n) == ("ag-gemm", (64 + 2 * 8) * 128 // s.gpus)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..workload import KINDS, Scenario, skewed_routing

TOKENS = (2048, 8192, 32768)
GPUS = (4, 8, 16)
EP_SKEW = 1.0


@dataclass(frozen=True)
class Model:
    """Transformer layer shapes (elements): hidden size, FFN size, heads, KV heads, experts."""

    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    gated: bool = True
    experts: int = 0
    top_k: int = 0
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


MODELS = {m.name: m for m in (
    Model("llama3-405b", 16384, 53248, 128, 8, source="https://huggingface.co/meta-llama/Llama-3.1-405B"),
    Model("llama-70b", 8192, 28672, 64, 8, source="https://huggingface.co/meta-llama/Meta-Llama-3-70B "
          "(= Llama-2-70b-hf layer shapes)"),
    Model("mixtral-8x7b", 4096, 14336, 32, 8, experts=8, top_k=2,
          source="https://huggingface.co/mistralai/Mixtral-8x7B-v0.1"),
    Model("mixtral-8x22b", 6144, 16384, 48, 8, experts=8, top_k=2,
          source="https://huggingface.co/mistralai/Mixtral-8x22B-v0.1"),
    Model("gpt3-175b", 12288, 4 * 12288, 96, 96, gated=False, source="arXiv 2005.14165 Table 2.1"),
)}
# Llama-3-70B is the same layer as Llama-2-70B; keep the name users look for.
MODELS["llama3-70b"] = MODELS["llama-70b"]


LAYER_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def layer_gemms(tps=(1, 2, 4, 8), models=None) -> list[tuple[str, str, int, int, int]]:
    """(model, op, tp, n, k) of every dense layer GEMM ``[m, k] @ [k, n]`` of ``models`` (default
    all of :data:`MODELS`) under tensor parallelism ``tp``, with Vidur's op names: QKV
    (``attn_pre_proj``: n = (heads + 2 KV heads) x head dim / tp, k = hidden), out-projection
    (``attn_post_proj``: n = hidden, k = heads x head dim / tp), up (``mlp_up_proj``: n = FFN,
    twice if gated, / tp, k = hidden) and down (``mlp_down_proj``: n = hidden, k = FFN / tp).
    What a GEMM sweep of real layers times (``calibrate --device``, ``benchmarks/gpu_gemm_table.py``).

    >>> rows = layer_gemms()
    >>> ("llama-70b", "attn_pre_proj", 8, 1280, 8192) in rows, ("llama-70b", "mlp_up_proj", 1, 57344, 8192) in rows
    (True, True)
    """
    out = []
    for name, m in MODELS.items():
        if models is not None and name not in models:
            continue
        d, ffn_out = m.head_dim, m.ffn * (2 if m.gated else 1)
        for t in tps:
            shapes = {"attn_pre_proj": ((m.heads + 2 * m.kv_heads) * d // t, m.hidden),
                      "attn_post_proj": (m.hidden, m.heads * d // t),
                      "mlp_up_proj": (ffn_out // t, m.hidden),
                      "mlp_down_proj": (m.hidden, m.ffn // t)}
            out += [(name, op, t, *shapes[op]) for op in LAYER_OPS]
    return out


def model_layers(model: Model, tokens: int, gpus: int, dtype: str = "bfloat16") -> list[Scenario]:
    """The TP+SP (and EP for MoE) scenarios of one layer of ``model`` on ``gpus`` GPUs."""
    name = "llama3-70b" if model.name == "llama-70b" else model.name
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
    up = (2 if model.gated else 1) * model.ffn
    attn = model.heads * model.head_dim
    out = []

    def add(kind: str, layer: str, phase: str, m: int, n: int, k: int, **extra: Any) -> None:
        label = f"{name} {layer} {phase} s{tokens} x{gpus}"
        meta = {"model": name, "layer": layer, "phase": phase, "tokens": tokens, "parallel": extra.pop("par", "tp")}
        out.append(Scenario(kind, gpus, m, n, k, dtype, name=label, meta=meta, **extra))

    ok = lambda *dims: all(d % gpus == 0 for d in dims)  # noqa: E731
    if ok(tokens, qkv, up, attn, model.ffn):
        add("ag-gemm", "qkv", "fwd", tokens, qkv // gpus, model.hidden)
        add("gemm-rs", "out", "fwd", tokens, model.hidden, attn // gpus)
        if not model.experts:
            add("ag-gemm", "up", "fwd", tokens, up // gpus, model.hidden)
            add("gemm-rs", "down", "fwd", tokens, model.hidden, model.ffn // gpus)
            add("ag-gemm", "up", "wgrad", model.hidden, up // gpus, tokens, shard_dim="K")
        add("ag-gemm", "qkv", "wgrad", model.hidden, qkv // gpus, tokens, shard_dim="K")
    if model.experts and model.experts % gpus == 0:
        rows = tokens * model.top_k // gpus   # token rows each GPU dispatches
        add("a2a-gemm", "expert-up", "fwd", rows, up, model.hidden, par="ep",
            routing=skewed_routing(gpus, rows, EP_SKEW))
    return out


def builtin_library(tokens=TOKENS, gpus=GPUS, models=None) -> list[Scenario]:
    """Every built-in model layer at every token count and GPU count (deterministic order)."""
    names = models or [n for n in MODELS if n != "llama3-70b"]
    return [s for n in names for t in tokens for g in gpus for s in model_layers(MODELS[n], t, g)]


# ----------------------------------------------------------------------------------------
# YAML

YAML_HELP = """\
A scenario file is YAML with a list ``scenarios`` (explicit pairs) and/or ``models``
(layer shapes expanded like the built-in library):

  scenarios:
    - name: my-ag            # optional label
      kind: ag-gemm          # ag-gemm | gemm-rs | a2a-gemm | ag-par-gemm | a2a-par-gemm | ar-par-gemm
      gpus: 8
      m: 16384               # rows (tokens; for wgrad: the weight's rows)
      n: 8192
      k: 8192
      dtype: bfloat16        # optional (float16, bfloat16, float32, float8)
      shard_dim: K           # optional, ag-gemm: M (default) or K (tokens are K: weight gradient)
      skew: 1.0              # optional, a2a-gemm: each GPU sends 1 + skew shares to its next peer
      hot_expert: true       # optional, with skew: every GPU's larger share to GPU 0 (skewed_routing)
      routing: [[...], ...]  # optional, a2a-gemm: explicit gpus x gpus token rows
  models:
    - name: my-model
      hidden: 8192
      ffn: 28672
      heads: 64
      kv_heads: 8
      gated: true            # optional (gate+up fused up-projection)
      experts: 0             # optional; with top_k, adds the EP all-to-all
      top_k: 0
      tokens: [4096, 16384]
      gpus: [4, 8]
"""


def _int(v: Any, where: str, field: str, *, minimum: int = 1) -> int:
    from ..workload import MAX_DIM, MAX_GPUS
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise InputError(where, field, f"must be an integer >= {minimum}, got {v!r}")
    limit = MAX_GPUS if field.rsplit(".", 1)[-1].split("[")[0] == "gpus" else MAX_DIM
    if v > limit:
        raise InputError(where, field, f"{v} is beyond what one simulation answers (at most {limit})")
    return v


def _int_list(v: Any, where: str, field: str) -> list[int]:
    vals = v if isinstance(v, list) else [v]
    return [_int(x, where, f"{field}[{i}]") for i, x in enumerate(vals)]


def _scenario(item: Any, where: str, f: str) -> Scenario:
    if not isinstance(item, dict):
        raise InputError(where, f, "must be a mapping with kind, gpus, m, n, k")
    known = {"name", "kind", "gpus", "m", "n", "k", "dtype", "shard_dim", "skew", "hot_expert", "routing"}
    extra = set(item) - known
    if extra:
        raise InputError(where, f"{f}.{sorted(extra)[0]}", f"unknown field; known: {', '.join(sorted(known))}")
    kind = item.get("kind")
    spec = KINDS.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise InputError(where, f"{f}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    vals = {k: _int(item.get(k), where, f"{f}.{k}", minimum=2 if k == "gpus" else 1) for k in ("gpus", "m", "n", "k")}
    shard_dim = item.get("shard_dim", "M")
    if shard_dim not in spec.shard_dims:
        raise InputError(where, f"{f}.shard_dim", f"must be {' or '.join(spec.shard_dims)} for {kind}, "
                         f"got {shard_dim!r}")
    routing = item.get("routing")
    if "skew" in item:
        skew = item["skew"]
        if not spec.routed or isinstance(skew, bool) or not isinstance(skew, (int, float)) or \
                not 0 <= skew <= 100:
            raise InputError(where, f"{f}.skew", f"a number from 0 to 100, for a routed kind only, got {skew!r}")
        hot = item.get("hot_expert", False)
        if not isinstance(hot, bool):
            raise InputError(where, f"{f}.hot_expert", f"true or false, got {hot!r}")
        routing = skewed_routing(vals["gpus"], vals["m"], float(skew), hot_expert=hot)
    elif routing is not None:
        if not isinstance(routing, list) or not all(isinstance(r, list) for r in routing):
            raise InputError(where, f"{f}.routing", "must be a list of lists of token rows")
        routing = tuple(tuple(r) for r in routing)
    name = item.get("name", "")
    if not isinstance(name, str):
        raise InputError(where, f"{f}.name", f"must be a string, got {name!r}")
    try:
        return Scenario(kind, vals["gpus"], vals["m"], vals["n"], vals["k"], item.get("dtype", "float16"),
                        routing=routing, name=str(name), shard_dim=shard_dim,
                        meta={"model": "user", "layer": str(name or kind), "phase": "user"})
    except InputError as e:
        raise InputError(where, f"{f}.{e.field}" if e.field else f, e.message) from None


def _model(item: Any, where: str, f: str) -> list[Scenario]:
    if not isinstance(item, dict):
        raise InputError(where, f, "must be a mapping with name, hidden, ffn, heads, kv_heads, tokens, gpus")
    known = {"name", "hidden", "ffn", "heads", "kv_heads", "experts", "top_k", "gated", "tokens", "gpus"}
    extra = set(item) - known
    if extra:
        raise InputError(where, f"{f}.{sorted(extra)[0]}", f"unknown field; known: {', '.join(sorted(known))}")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(where, f"{f}.name", "must be a non-empty string")
    dims = {k: _int(item.get(k), where, f"{f}.{k}") for k in ("hidden", "ffn", "heads", "kv_heads")}
    experts = _int(item.get("experts", 0), where, f"{f}.experts", minimum=0)
    top_k = _int(item.get("top_k", 2 if experts else 0), where, f"{f}.top_k", minimum=0)
    if experts and not 1 <= top_k <= experts:
        raise InputError(where, f"{f}.top_k", f"each token goes to 1 to {experts} experts, got {top_k}")
    gated = item.get("gated", True)
    if not isinstance(gated, bool):
        raise InputError(where, f"{f}.gated", f"must be true or false, got {gated!r}")
    if dims["hidden"] % dims["heads"]:
        raise InputError(where, f"{f}.heads", "must divide hidden")
    model = Model(name, gated=gated, experts=experts, top_k=top_k, **dims)
    out = []
    for t in _int_list(item.get("tokens"), where, f"{f}.tokens"):
        for g in _int_list(item.get("gpus"), where, f"{f}.gpus"):
            out += model_layers(model, t, g)
    if not out:
        raise InputError(where, f, "no layer divides evenly over the given GPU counts")
    return out


def load_scenarios(source: str | Path) -> list[Scenario]:
    """``builtin`` (:func:`builtin_library`), or a YAML file (format: ``YAML_HELP``)."""
    if str(source) == "builtin":
        return builtin_library()
    from ..hardware import read_yaml
    path = Path(source)
    where = str(path)
    if not path.exists():
        raise InputError(where, None, "no such scenario file (or use 'builtin')")
    data = read_yaml(path)
    if not isinstance(data, dict) or not (set(data) & {"scenarios", "models"}):
        raise InputError(where, None, "a scenario file is a mapping with 'scenarios' and/or 'models' lists")
    out: list[Scenario] = []
    names: dict[str, str] = {}     # name (or identity, unnamed) -> the item that gave it
    for key, fn in (("scenarios", _scenario), ("models", _model)):
        items = data.get(key) or []
        if not isinstance(items, list):
            raise InputError(where, key, "must be a list")
        for i, item in enumerate(items):
            f = f"{key}[{i}]"
            got = fn(item, where, f)
            for sc in got if isinstance(got, list) else [got]:
                label = sc.name or sc.key()
                if label in names:
                    what = f"name {sc.name!r}" if sc.name else "scenario (same kind, sizes, dtype and routing)"
                    raise InputError(where, f"{f}.name" if key == "models" or sc.name else f,
                                     f"duplicate {what}: also {names[label]}; names label results, so each "
                                     "must be unique")
                names[label] = f
                out.append(sc)
    if not out:
        raise InputError(where, None, "its 'scenarios' and 'models' lists are empty: nothing to run")
    return out

