"""Reading Kineto (PyTorch profiler) JSON: the file, and what is dropped while parsing.

Shared by the Kineto importer (:mod:`.kineto`), its CPU-trace half (:mod:`.kineto_cpu`)
and the Chakra JSON reader.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from ..errors import InputError
from .host import COMM_OPS
from .ops import CPU_GEMM_OPS

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_CATS = {"cpu_op", "user_annotation"}
# Kineto as PyTorch 1.8 wrote it (2021: e.g. pytorch/kineto's own tb_plugin samples) named its event
# categories so, and its GPU events' launching-op key "external id"; read as today's
LEGACY_CATS = {"Operator": "cpu_op", "Kernel": "kernel", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy",
               "Memset": "gpu_memset"}
US = 1e-6


def read_json(path: str | Path, hook_for=None) -> Any:
    """Parse a JSON file, gzipped or not; errors become :class:`InputError` naming the file.
    ``hook_for``: text -> json's ``object_hook`` (the Kineto reader drops what it never
    reads while parsing, so big traces need less memory)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), None, f"cannot read: {exc.strerror}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError):
        raise InputError(str(p), None, "truncated or corrupt gzip data") from None
    text = raw.decode("utf-8", errors="replace")
    del raw          # the bytes are not needed while the text is parsed
    hook = hook_for(text) if hook_for is not None else None
    try:
        return json.loads(text, object_hook=hook)
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(text.rstrip()) - 1 else "malformed JSON"
        raise InputError(str(p), None, f"{what} at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


# Read while parsing: events ficco-sim never uses (launch flow arrows, Python call stacks,
# runtime queries) become None, and argument keys it never reads are dropped.
_UNUSED_CALLS = {"cudaEventQuery", "cudaPeekAtLastError", "cudaStreamIsCapturing", "cudaGetDevice",
                 "cudaDeviceGetAttribute", "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                 "cudaFuncGetAttributes", "cudaPointerGetAttributes", "cudaStreamGetCaptureInfo",
                 "cudaStreamGetCaptureInfo_v2", "cudaDriverGetVersion", "cudaGetLastError", "cudaFuncSetAttribute",
                 "cudaStreamGetPriority", "cudaDeviceGetStreamPriorityRange", "cudaSetDevice",
                 "hipGetDevicePropertiesR0600", "hipGetDevice", "hipPeekAtLastError", "hipEventQuery"}
_UNUSED_ARGS = {"Ev Idx", "Fwd thread id", "Sequence number", "cbid", "cid", "queued", "blocks per SM",
                "warps per SM", "est. achieved occupancy %", "memory bandwidth (GB/s)", "context", "Input Strides",
                "Concrete Inputs", "Record function id", "Python id", "Python parent id", "Python module id"}


def _kineto_hook(o: dict) -> Any:
    cat = o.get("cat")
    if cat is None:             # an args mapping (or the top level)
        for k in _UNUSED_ARGS.intersection(o):
            del o[k]
        if "external id" in o and "External id" not in o:
            o["External id"] = o.pop("external id")
        return o
    if isinstance(cat, str) and cat in LEGACY_CATS:     # (anything else is checked, and refused, later)
        o["cat"] = cat = LEGACY_CATS[cat]
    if cat == "ac2g" or cat == "python_function" or \
            (cat == "cuda_runtime" and isinstance(o.get("name"), str) and o["name"] in _UNUSED_CALLS):
        return None
    return o


def _kineto_gpu_hook(o: dict) -> Any:
    """:func:`_kineto_hook` for GPU traces, which read only the CPU operators that launch
    collectives or GEMMs and the profiler steps (a CPU-only trace reads all of them)."""
    if o.get("cat") in ("cpu_op", "Operator"):
        name = o.get("name")
        if not isinstance(name, str) or not (name.startswith(COMM_OPS) or name in CPU_GEMM_OPS
                                             or name.startswith("ProfilerStep#")):
            return None
    return _kineto_hook(o)


def kineto_hook_for(text: str):
    """The parse hook for a Kineto file's text: GPU traces read fewer CPU operators."""
    gpu = any(f'"cat":{sep}"{c}"' in text for c in ("kernel", "Kernel") for sep in ("", " "))
    return _kineto_gpu_hook if gpu else _kineto_hook


KEEP_PH = {"X", "M", "s", "f", "i"}


def compact_trace(raw_path: str | Path, out_path: str | Path, meta: dict | None = None) -> Path:
    """Shrink a raw ``export_chrome_trace`` file for shipping: keep only what ficco-sim
    reads (``ph`` X/M/s/f/i events), round ``ts``/``dur`` to 0.001 us (1 ns), add ``meta``
    under the top-level key ``ficco``, gzip to ``out_path`` (written to a temporary name
    and renamed, so a failure leaves no half file) and delete ``raw_path``."""
    raw_path, out_path = Path(raw_path), Path(out_path)
    data = json.loads(raw_path.read_text())
    events = [e for e in data.get("traceEvents", []) if e.get("ph") in KEEP_PH]
    for e in events:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), float):
                e[key] = round(e[key], 3)
    data["traceEvents"] = events
    if meta:
        data["ficco"] = meta
    tmp = out_path.with_name(f".{out_path.name}.partial")
    try:
        with gzip.open(tmp, "wt") as f:
            json.dump(data, f, separators=(",", ":"))
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)
    raw_path.unlink()
    return out_path


def _events(data: Any, where: str) -> tuple[list[dict], list[int]]:
    """The events of a trace that are mappings, checked, and each one's index in the file's
    ``traceEvents`` (what an error names)."""
    if isinstance(data, list):
        events = data
    elif isinstance(data, dict) and "traceEvents" in data:
        events = data["traceEvents"]
    else:
        raise InputError(where, "traceEvents", "missing: not a Chrome/Kineto trace")
    if not isinstance(events, list):
        raise InputError(where, "traceEvents", "must be a list of events")
    pos = [j for j, e in enumerate(events) if isinstance(e, dict)]     # (the parse hook left None where it dropped)
    out = [events[j] for j in pos]
    for i, e in zip(pos, out):
        for key in ("ph", "cat", "name"):
            v = e.get(key)
            if v is not None and not isinstance(v, str):
                raise InputError(where, f"traceEvents[{i}].{key}", f"must be a string, got {str(v)[:40]!r}")
        for key in ("pid", "tid", "id"):      # (id: a flow arrow's, which pairs its two ends)
            v = e.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
                raise InputError(where, f"traceEvents[{i}].{key}", f"must be an integer or a name, got {str(v)[:40]!r}")
        args = e.get("args")
        if args is None:
            continue
        if not isinstance(args, dict):
            raise InputError(where, f"traceEvents[{i}].args", f"must be a mapping, got {str(args)[:40]!r}")
        for key in ("External id", "correlation", "device", "stream"):
            v = args.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
                raise InputError(where, f"traceEvents[{i}].args.{key}", f"must be an integer or a name, got "
                                 f"{str(v)[:40]!r}")
        for key in ("grid", "block"):
            v = args.get(key)
            if v is not None and not (isinstance(v, list) and v and all(
                    isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2 ** 31 for x in v)):
                raise InputError(where, f"traceEvents[{i}].args.{key}", f"must be a list of non-negative integers "
                                 f"(0: not recorded, as rocprofiler-sdk writes it), got {str(v)[:40]!r}")
    return out, pos


def _num(e: dict, key: str, where: str, index: int) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        name = e.get("name", "?")
        raise InputError(where, f"traceEvents[{index}].{key}",
                         f"missing or not a number in event {str(name)[:60]!r}" if v is None else
                         f"must be a number, got {v!r} in event {str(name)[:60]!r}")
    if key == "dur" and v < 0:
        raise InputError(where, f"traceEvents[{index}].dur", f"negative duration {v!r}")
    return float(v)


MAX_COUNT = 2 ** 31   # a launch-config count past this (or non-finite, negative) is no count


def count(v: Any) -> int:
    """A launch-config count from a trace (threads, registers, shared memory, grid size):
    the number, or 0 (unknown, as if missing) when it is not a finite one in [0, 2^31]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_COUNT:
        return 0
    return int(v)


def _prod(v: Any) -> int:
    """The product of a count or a list of counts (a grid or block shape); 0 if any is not one."""
    if isinstance(v, (list, tuple)) and v:
        out = 1
        for x in v:
            out *= count(x)
        return out if out <= MAX_COUNT else 0
    return count(v)
