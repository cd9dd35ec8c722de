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
_LEAF = re.compile(r"^\s*(?:\{.*\}|null|Null|NULL|~)?\s*(?P<comment>#.*)?$")   # a leaf, or one a variant unset


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
        unset = leaf is not None and not m.group("rest").lstrip().startswith("{")     # null, ~ or nothing
        if unset and any(u.startswith(f"{path}.") for u in updates):
            comment = leaf.group("comment")         # a section a variant unset gets entries again
            lines[i] = f"{m.group('indent')}{m.group('key')}:" + (f"  {comment}" if comment else "")
            stack.append((indent, m.group("key")))
            last_under[path] = i
            continue
        if path in updates and leaf:
            comment = leaf.group("comment")
            lines[i] = f"{m.group('indent')}{m.group('key')}: {leaf_text(*updates[path])}" + \
                       (f"  {comment}" if comment else "")
            done.add(path)
        elif not m.group("rest").strip():
            stack.append((indent, m.group("key")))
            last_under[path] = i
    # A mapping the text lacks (a profile that extends another gives only what differs): add
    # the outermost one missing, empty, below its parent, and read the text again.
    for path in updates:
        parts = path.split(".")[:-1]
        gap = next((d for d in range(1, len(parts) + 1) if ".".join(parts[:d]) not in last_under), None)
        if path not in done and gap is not None:
            outer = ".".join(parts[:gap - 1])
            at = last_under[outer] + 1 if outer else len(lines)
            lines.insert(at, f"{'  ' * (gap - 1)}{parts[gap - 1]}:")
            return set_leaves("\n".join(lines) + "\n", updates)
    # Add the missing leaves below their parent's last line (deepest last lines first).
    inserts = []
    for path in updates:
        if path in done:
            continue
        parent, _, key = path.rpartition(".")
        at = last_under[parent] + 1 if parent else len(lines)
        indent = "  " * path.count(".")
        inserts.append((at, f"{indent}{key}: {leaf_text(*updates[path])}"))
    for at, line in sorted(inserts, key=lambda x: -x[0]):
        lines.insert(at, line)
    return "\n".join(lines) + "\n"


def set_measured(text: str, entries: list[tuple[int, int, int, str, float, str]]) -> str:
    """``gemm.measured`` of the profile text replaced by ``entries`` (m, n, k, dtype, seconds,
    source): the old list dropped, the new one last in the ``gemm`` section, one flow line each.

    >>> text = "gemm:\\n  k_overhead: {value: 1, kind: fitted, source: s}\\nlink:\\n  x: 1\\n"
    >>> print(set_measured(text, [(8, 16, 32, "float16", 2.5e-6, "timed")]), end="")
    gemm:
      k_overhead: {value: 1, kind: fitted, source: s}
      measured:
        - {m: 8, n: 16, k: 32, dtype: float16, time_us: {value: 2.5, kind: measured, source: "timed"}}
    link:
      x: 1
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"^gemm:\s*(#.*)?$", line)), None)
    if start is None:
        raise InputError("profile", "gemm", "the profile has no gemm section to keep measured GEMMs in")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith((" ", "#"))),
               len(lines))
    old = next((i for i in range(start + 1, end) if re.match(r"^  measured:", lines[i])), None)
    if old is not None:
        stop = old + 1
        while stop < end and lines[stop].startswith(("   ", "  -")):
            stop += 1
        del lines[old:stop]
        end -= stop - old
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    block = ["  measured:"] + [f"    - {{m: {m}, n: {n}, k: {k}, dtype: {d}, time_us: "
                                f"{leaf_text(round(t * 1e6, 3), 'measured', src)}}}" for m, n, k, d, t, src in entries]
    lines[end:end] = block if entries else []
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


def _extends_from(text: str, path: Path) -> str:
    """The profile text with an ``extends:`` file path made absolute (relative, it is read
    from the extending file's folder, which the copy written elsewhere is not in)."""
    def absolute(m: re.Match) -> str:
        ref = m.group("ref").strip().strip("'\"")
        if Path(ref).suffix not in (".yaml", ".yml") or Path(ref).is_absolute():
            return m.group(0)
        return f"extends: {json.dumps(str((path.parent / ref).resolve()))}{m.group('tail') or ''}"
    return re.sub(r"^extends:(?P<ref>[^#\n]*)(?P<tail>#.*)?$", absolute, text, flags=re.M)


def update_profile(base: str | Path, out: str | Path, updates: dict[str, tuple[Any, str, str]], *,
                   force: bool = False, measured: list | None = None) -> Path:
    """Read profile ``base``, set ``updates`` (and ``gemm.measured``, :func:`set_measured`, when
    ``measured`` is given), write ``out`` (may be ``base`` itself, with force)."""
    from ..hardware import resolve_profile_path
    path = resolve_profile_path(base)
    text = set_leaves(_extends_from(path.read_text(), path), updates)
    return write_profile(out, set_measured(text, measured) if measured is not None else text, force=force)
