"""Reading a GPU profile's YAML: ``{value, kind, source}`` leaves with their provenance, every
entry the file holds read or refused (:meth:`Reader.check_unknown`), block shapes checked
against the SM they must fit (:func:`check_block_fits`). :mod:`ficco_sim.hardware` builds the
profile from what it reads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError
from .hardware_specs import BlockShape, Provenance, SmLimits

KINDS = ("datasheet", "measured", "fitted", "derived", "assumption")
KIB = 1024
# entries profiles of earlier versions carry (calibrate wrote them) that ficco-sim now derives: read past
RETIRED = {"comm_kernel.p2p.min_part_kib", "comm_kernel.p2p.max_part_kib"}


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), None, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise InputError(str(path), None, f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}): "
                         "save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(str(path), None, f"malformed YAML{where}") from None


def overlay(base: Any, own: Any, path: str = "") -> Any:
    """``own`` laid over ``base`` (a profile that ``extends`` another): mappings merged key by
    key, anything else (a ``{value, kind, source}`` leaf, a list such as ``gemm.tiles``, a
    choice) replaced whole, and an entry ``own`` gives as ``null`` removed (a variant unsets an
    optional entry of its base so). A section of ``base`` given as anything but a mapping or
    ``null`` is refused (``ValueError`` naming its path): it would drop every entry of the
    section.

    >>> overlay({"link": {"ports": {"value": 18}, "latency_us": {"value": 0.3}}, "name": "h100"},
    ...         {"link": {"ports": {"value": 8}}, "name": "h800"})
    {'link': {'ports': {'value': 8}, 'latency_us': {'value': 0.3}}, 'name': 'h800'}
    >>> overlay({"gemm": {"peer_gbps_per_block": {"value": 40}, "launch_us": {"value": 3}}},
    ...         {"gemm": {"peer_gbps_per_block": None}})
    {'gemm': {'launch_us': {'value': 3}}}
    """
    def leaf(node: Any) -> bool:
        return not isinstance(node, dict) or "value" in node
    if isinstance(base, dict) and not leaf(base) and leaf(own):
        raise ValueError(path)
    if leaf(base) or leaf(own):
        return own
    out = dict(base)
    for key, value in own.items():
        if value is None:
            out.pop(key, None)
            continue
        out[key] = overlay(base[key], value, f"{path}.{key}" if path else str(key)) if key in base else value
    return out


class Reader:
    """Reads ``{value, kind, source}`` leaves from a parsed profile, remembering provenance."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise InputError(where, None, "a profile must be a YAML mapping")
        self.data = data
        self.where = where
        self.sources: dict[str, Provenance] = {}
        self.used: set[str] = set()     # paths read: whatever else the file holds is unknown
        self.asked: set[str] = set()    # paths looked for, present or not (the names a typo is near)

    def use(self, *paths: str) -> None:
        """Mark entries read by hand (not through :meth:`leaf`) as known."""
        self.used.update(paths)

    def check_unknown(self) -> None:
        """Refuse the first entry nothing read (a misspelt key would otherwise be ignored and
        its default silently used), named at its highest unknown level (``comm_kernel.nvsl``,
        not a leaf below it) with the nearest known key beside it. Empty entries and the keys
        of :data:`RETIRED` (numbers older profiles carry that ficco-sim now derives) pass."""
        names = self.used | self.asked

        def known_below(path: str) -> bool:
            return any(u == path or u.startswith(f"{path}.") for u in names)

        def walk(node: Any, path: str) -> None:
            if path in self.used or path in RETIRED or (isinstance(node, (dict, list)) and not node):
                return
            if path and not known_below(path):
                self._unknown(path)
            if isinstance(node, dict) and not (path and "value" in node):
                for k, v in node.items():
                    walk(v, f"{path}.{k}" if path else str(k))
            elif isinstance(node, list) and all(isinstance(v, (dict, list)) for v in node):
                for i, v in enumerate(node):
                    walk(v, f"{path}.{i}")
            elif path:
                self._unknown(path)
        walk(self.data, "")

    def _unknown(self, path: str) -> None:
        import difflib
        parent, _, key = path.rpartition(".")
        names = self.used | self.asked
        known = sorted({u[len(parent) + 1:].split(".")[0] for u in names if u.startswith(f"{parent}.")}
                       if parent else {u.split(".")[0] for u in names})
        known = [k for k in known if k != key and not k.isdigit()]
        near = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else f" (known here: {', '.join(known)})" if known else ""
        raise InputError(self.where, path, f"unknown field: ficco-sim reads no such entry{hint}")

    def node(self, path: str) -> Any:
        cur: Any = self.data
        for part in path.split("."):
            if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
                cur = cur[int(part)]
            elif isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                raise InputError(self.where, path, "missing")
        return cur

    def has(self, path: str) -> bool:
        self.asked.add(path)
        try:
            self.node(path)
        except InputError:
            return False
        return True

    def leaf(self, path: str) -> Any:
        node = self.node(path)
        self.used.add(path)
        if not isinstance(node, dict) or "value" not in node:
            raise InputError(self.where, path, "must be a mapping with value, kind and source")
        kind, source = node.get("kind"), node.get("source")
        if kind not in KINDS:
            raise InputError(self.where, f"{path}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
        if not isinstance(source, str) or not source.strip():
            raise InputError(self.where, f"{path}.source", "every number must name its source")
        self.sources[path] = Provenance(kind, source.strip())
        return node["value"]

    def number(self, path: str, *, scale: float = 1.0, positive: bool = True, integer: bool = False,
               at_most: float | None = None) -> float:
        value = self.leaf(path)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(self.where, path, f"must be a finite number, got {value!r}")
        if integer and int(value) != value:
            raise InputError(self.where, path, f"must be an integer, got {value!r}")
        if positive and not value > 0:
            raise InputError(self.where, path, f"must be positive, got {value!r}")
        if not positive and value < 0:
            raise InputError(self.where, path, f"must not be negative, got {value!r}")
        if at_most is not None and value > at_most:
            raise InputError(self.where, path, f"must be at most {at_most}, got {value!r}")
        # Absurd magnitudes (in the file's own units: GB/s, TFLOP/s, us, KiB, counts) are typos:
        # an answer computed from them would be meaningless, or never come.
        limit = 1e6 if integer else 1e9
        if abs(value) > limit:
            raise InputError(self.where, path, f"{value!r} is beyond any real device (at most {limit:g})")
        if positive and not integer and value < 1e-9:
            raise InputError(self.where, path, f"{value!r} is too small to be real (at least 1e-9)")
        return int(value) if integer else float(value) * scale

    def choice(self, path: str, options: tuple[str, ...]) -> str:
        value = self.leaf(path)
        if value not in options:
            raise InputError(self.where, path, f"must be one of {', '.join(options)}, got {value!r}")
        return str(value)

    def block(self, path: str, limits: SmLimits | None = None) -> BlockShape:
        b = BlockShape(
            threads=self.number(f"{path}.threads", integer=True),
            registers=self.number(f"{path}.registers", integer=True),
            smem=int(self.number(f"{path}.smem_kib", scale=KIB, positive=False)),
        )
        if limits is not None:
            check_block_fits(b, limits, self.where, path)
        return b


def check_block_fits(b: BlockShape, limits: SmLimits, where: str, path: str) -> None:
    """A block that cannot fit on an empty SM would hang the dispatcher: reject it."""
    if b.threads > limits.max_threads:
        raise InputError(where, f"{path}.threads", f"{b.threads} exceeds the SM's {limits.max_threads} threads")
    if b.threads * b.registers > limits.registers:
        raise InputError(where, f"{path}.registers", "threads x registers exceed the SM's register file")
    if b.smem > limits.max_smem_per_block or b.smem + limits.reserved_smem_per_block > limits.smem:
        raise InputError(where, f"{path}.smem_kib",
                         f"{b.smem / KIB:g} KiB exceeds the {limits.max_smem_per_block / KIB:g} KiB per-block limit")
