"""Write calibrated numbers into profile YAML, keeping everything else (comments too).

A profile's leaves are one-line flow mappings (``key: {value: ..., kind: ..., source: "..."}``).
:func:`set_leaves` replaces the leaves named by dotted paths in the text, line by line, so the
file's other numbers, comments and layout stay as they were; a path the text lacks is added
under its parent mapping. :func:`write_profile` validates the result with the profile loader,
refuses to replace an existing file unless ``force``, and writes atomically (a temporary
file in the same folder, then ``os.replace``).

>>> text = "gemm:\\n  k_overhead: {value: 64, kind: assumption, source: \\"guess\\"}  # hi\\n"
>>> print(set_leaves(text, {"gemm.k_overhead": (12.5, "fitted", "fit")}), end="")
gemm:
  k_overhead: {value: 12.5, kind: fitted, source: "fit"}  # hi
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from ..files import write_text_atomic
from ..hardware import parse_profile

_KEY = re.compile(r"^(?P<indent>\s*)(?:- )?(?P<key>[A-Za-z0-9_.\-]+):(?P<rest>.*)$")
_LEAF = re.compile(r"^\s*\{.*\}\s*(?P<comment>#.*)?$")


def fmt_value(v: Any) -> str:
    if isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", v):
        return v                      # a choice (e.g. gemm.kernel: persistent)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"profile numbers must be numbers, got {v!r}")
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.4e}"


def leaf_text(value: Any, kind: str, source: str) -> str:
    # json.dumps gives a double-quoted string that YAML reads back unchanged.
    return f"{{value: {fmt_value(value)}, kind: {kind}, source: {json.dumps(source)}}}"


def set_leaves(text: str, updates: dict[str, tuple[Any, str, str]]) -> str:
    """Replace (or add) the ``{value, kind, source}`` leaves at the dotted ``updates`` paths."""
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    done: set[str] = set()
    last_under: dict[str, int] = {}  # mapping path -> index of the last line inside it
    for i, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY.match(line)
        if not m:
            continue
        indent = len(m.group("indent")) + (2 if line.lstrip().startswith("- ") else 0)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [m.group("key")])
        for depth in range(1, len(stack) + 1):
            last_under[".".join(k for _, k in stack[:depth])] = i
        if line.lstrip().startswith("- "):
            continue  # list items (tiles) are never updated here
        leaf = _LEAF.match(m.group("rest"))
        if path in updates and leaf:
            comment = leaf.group("comment")
            lines[i] = f"{m.group('indent')}{m.group('key')}: {leaf_text(*updates[path])}" + \
                       (f"  {comment}" if comment else "")
            done.add(path)
        elif not m.group("rest").strip():
            stack.append((indent, m.group("key")))
    # Add the missing leaves below their parent's last line (deepest last lines first).
    inserts = []
    for path in updates:
        if path in done:
            continue
        parent, _, key = path.rpartition(".")
        if parent and parent not in last_under:
            raise InputError("profile", path, f"cannot add: the profile has no mapping {parent!r}")
        at = last_under[parent] + 1 if parent else len(lines)
        indent = "  " * path.count(".")
        inserts.append((at, f"{indent}{key}: {leaf_text(*updates[path])}"))
    for at, line in sorted(inserts, key=lambda x: -x[0]):
        lines.insert(at, line)
    return "\n".join(lines) + "\n"


def check_profile_text(text: str, where: str) -> None:
    """Raise :class:`InputError` unless ``text`` is a loadable profile."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise InputError(where, None, "internal: produced malformed YAML") from None
    parse_profile(data, where)


def write_profile(path: str | Path, text: str, *, force: bool = False) -> Path:
    """Validate the profile text, then write it atomically (see :func:`write_text_atomic`)."""
    check_profile_text(text, str(path))
    return write_text_atomic(path, text, force=force)


def update_profile(base: str | Path, out: str | Path, updates: dict[str, tuple[Any, str, str]], *,
                   force: bool = False) -> Path:
    """Read profile ``base``, set ``updates``, write ``out`` (may be ``base`` itself, with force)."""
    from ..hardware import resolve_profile_path
    src = resolve_profile_path(base)
    return write_profile(out, set_leaves(src.read_text(), updates), force=force)
