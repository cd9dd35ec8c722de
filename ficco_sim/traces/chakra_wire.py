"""The protobuf wire format of Chakra ``.et`` files, read and written without a protobuf
dependency (schema ``et_def.proto`` of chakra 1.0, proto3; see :mod:`.chakra`).

A file is a stream of messages, each prefixed by its varint length: one
``GlobalMetadata`` then ``Node`` s. What proto3 writers leave out is read as its default
(a node without an ``id`` field is node 0, one without ``type`` is ``INVALID_NODE``, a
missing time is 0); attributes are read by their ``oneof`` field.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import InputError

# Node types (et_def.proto NodeType)
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 0, 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
# ------------------------------------------------------------------------------------
# Wire format

def _varint(buf: bytes, i: int, where: str, field: str | None) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf):
            raise InputError(where, field, "truncated protobuf (varint runs past the end)")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise InputError(where, field, "malformed protobuf varint (longer than 10 bytes)")


_FIXED = {1: 8, 5: 4}   # wire type -> width


def _fields(buf: bytes, where: str, field: str) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: an int for varints, the raw
    bytes otherwise (their meaning depends on the field's declared type)."""
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i, where, field)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise InputError(where, field, "malformed protobuf (field number 0)")
        if wt == 0:
            v, i = _varint(buf, i, where, field)
        elif wt in _FIXED:
            w = _FIXED[wt]
            if i + w > len(buf):
                raise InputError(where, field, f"truncated protobuf (fixed{8 * w} field {num})")
            v, i = buf[i:i + w], i + w
        elif wt == 2:
            n, i = _varint(buf, i, where, field)
            if i + n > len(buf):
                raise InputError(where, field, f"truncated protobuf (field {num} needs {n} bytes, "
                                 f"{len(buf) - i} left)")
            v, i = buf[i:i + n], i + n
        else:
            raise InputError(where, field, f"unsupported protobuf wire type {wt} (field {num})")
        out.append((num, wt, v))
    return out


# AttributeProto's oneof: scalar field number -> codec; its list twin is number + 1.
_CODECS = {3: "double", 5: "float", 7: "int", 9: "int", 11: "uint", 13: "uint", 15: "sint", 17: "sint",
           19: "fixed32", 21: "fixed64", 23: "sfixed32", 25: "sfixed64", 27: "bool", 29: "string", 31: "bytes"}
_WIRE = {"double": 1, "fixed64": 1, "sfixed64": 1, "float": 5, "fixed32": 5, "sfixed32": 5,
         "string": 2, "bytes": 2}   # others: varint (0)
_STRUCT = {"double": "<d", "float": "<f", "fixed32": "<I", "fixed64": "<Q", "sfixed32": "<i", "sfixed64": "<q"}


def _scalar(codec: str, raw: Any) -> Any:
    if codec in _STRUCT:
        return struct.unpack(_STRUCT[codec], raw)[0]
    if codec == "int":        # int32/int64: two's complement in 64 bits
        return raw - (1 << 64) if raw >> 63 else raw
    if codec == "sint":       # zigzag
        return (raw >> 1) ^ -(raw & 1)
    if codec == "bool":
        return bool(raw)
    if codec == "string":
        return raw.decode("utf-8", "replace")
    return raw                # uint, bytes


def _list(codec: str, items: list[tuple[int, Any]], where: str, field: str) -> list:
    """Values of a ``*List`` message's repeated field 1, packed or not."""
    wire, out = _WIRE.get(codec, 0), []
    for wt, raw in items:
        if wt == wire:
            out.append(_scalar(codec, raw))
        elif wt == 2 and wire == 0:
            i = 0
            while i < len(raw):
                v, i = _varint(raw, i, where, field)
                out.append(_scalar(codec, v))
        elif wt == 2 and wire in _FIXED and len(raw) % _FIXED[wire] == 0:
            w = _FIXED[wire]
            out += [_scalar(codec, raw[j:j + w]) for j in range(0, len(raw), w)]
        else:
            raise InputError(where, field, f"malformed {codec} list (wire type {wt})")
    return out


def _attr(buf: bytes, where: str, field: str) -> tuple[str, Any]:
    name, value = "", None
    fields = _fields(buf, where, field)
    for num, wt, v in fields:
        if num == 1 and wt == 2:
            name = v.decode("utf-8", "replace")
    field = f"{field}.attr[{name}]" if name else f"{field}.attr"
    for num, wt, v in fields:
        codec = _CODECS.get(num) or _CODECS.get(num - 1)
        if num <= 2 or codec is None:
            continue          # name, doc_string, or a value type newer than this reader
        if num in _CODECS:
            if wt != _WIRE.get(codec, 0):
                raise InputError(where, field, f"{codec} value with protobuf wire type {wt}")
            value = _scalar(codec, v)
        elif wt != 2:
            raise InputError(where, field, f"{codec} list with protobuf wire type {wt}")
        else:
            value = _list(codec, [(w, x) for n, w, x in _fields(v, where, field) if n == 1], where, field)
    return name, value


_NODE_INTS = {1: "id", 3: "type", 6: "start_time_micros", 7: "duration_micros"}


def _node(buf: bytes, where: str, k: int) -> dict:
    field = f"node[{k}]"
    n: dict = {"id": 0, "name": "", "type": INVALID_NODE, "ctrl_deps": [], "data_deps": [],
               "start_time_micros": 0, "duration_micros": 0, "attr": {}}
    for num, wt, v in _fields(buf, where, field):
        if num in _NODE_INTS:
            if wt != 0:
                raise InputError(where, f"{field}.{_NODE_INTS[num]}", f"not an integer (protobuf wire type {wt})")
            n[_NODE_INTS[num]] = v
        elif num == 2:
            if wt != 2:
                raise InputError(where, f"{field}.name", f"not a string (protobuf wire type {wt})")
            n["name"] = v.decode("utf-8", "replace")
        elif num in (4, 5):
            key = "ctrl_deps" if num == 4 else "data_deps"
            if wt == 0:
                n[key].append(v)
            elif wt == 2:
                n[key] += _list("uint", [(2, v)], where, f"{field}.{key}")
            else:
                raise InputError(where, f"{field}.{key}", f"not node ids (protobuf wire type {wt})")
        elif num == 10:
            if wt != 2:
                raise InputError(where, f"{field}.attr", f"not a message (protobuf wire type {wt})")
            name, value = _attr(v, where, field)
            n["attr"][name] = value
        elif num >= 12 and wt == 0:
            # the eg_def schema of early 2023 (ASTRA-sim's .eg workloads): a node's type numbers and fields 6-20
            # meant other things (3 a compute node, 6 a collective; 6 a tensor size, 12-20 comm fields)
            raise InputError(where, f"{field} field {num}", "a Chakra node of the eg_def schema (before 0.0.4, early "
                             "2023), whose node types and fields mean other things: convert the workload again "
                             "with chakra 0.0.4 or later")
        # 8, 9 (inputs, outputs), 11 (storage) and newer fields: not needed
    return n


def _is_node(fields: list[tuple[int, int, Any]]) -> bool:
    # GlobalMetadata has only string 1 (version) and messages 2 (attr); a Node has an
    # integer 1 (id) or fields past 2. Files of chakra < 0.0.4 start with a node.
    return any(num > 2 or wt != 2 for num, wt, _ in fields)


def decode_chakra(blob: bytes, where: str) -> tuple[dict, list[dict]]:
    """(metadata, nodes) of a Chakra ``.et`` byte string; metadata holds ``version`` and
    ``attr`` (name -> value), nodes are dicts with every field (proto3 defaults filled in)."""
    msgs, i = [], 0
    while i < len(blob):
        n, i = _varint(blob, i, where, f"message {len(msgs)}")
        if i + n > len(blob):
            raise InputError(where, "GlobalMetadata" if not msgs else f"node[{len(msgs) - 1}]",
                             f"truncated Chakra trace: message {len(msgs)} needs {n} bytes, {len(blob) - i} left")
        msgs.append(blob[i:i + n])
        i += n
    if not msgs:
        raise InputError(where, None, "empty Chakra trace")
    meta: dict = {"version": "", "attr": {}}
    head = _fields(msgs[0], where, "GlobalMetadata")
    if _is_node(head):
        meta["no_metadata"] = True
    else:
        msgs = msgs[1:]
        for num, _, v in head:
            if num == 1:
                meta["version"] = v.decode("utf-8", "replace")
            else:
                name, value = _attr(v, where, "GlobalMetadata")
                meta["attr"][name] = value
    if not msgs:
        raise InputError(where, "node", "no nodes after the global metadata")
    return meta, [_node(m, where, k) for k, m in enumerate(msgs)]


def _enc_varint(x: int) -> bytes:
    x &= (1 << 64) - 1          # negative int64: two's complement, as protobuf writes it
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _enc_field(num: int, value: Any) -> bytes:
    if isinstance(value, (bool, int)):
        return _enc_varint(num << 3) + _enc_varint(int(value))
    if isinstance(value, float):
        return _enc_varint(num << 3 | 1) + struct.pack("<d", value)
    data = value.encode() if isinstance(value, str) else value
    return _enc_varint(num << 3 | 2) + _enc_varint(len(data)) + data


def _enc_attr(name: str, v: Any) -> bytes:
    if not isinstance(v, (list, tuple)):
        num = 27 if isinstance(v, bool) else 9 if isinstance(v, int) else 3 if isinstance(v, float) else 29
        return _enc_field(1, name) + _enc_field(num, v)
    kinds = {type(x) for x in v}
    num = 28 if kinds <= {bool} else 30 if kinds <= {str} else 4 if float in kinds else 10
    body = b"".join(_enc_field(1, float(x) if num == 4 else x) for x in v)   # unpacked: legal too
    return _enc_field(1, name) + _enc_field(num, body)


def encode_chakra(nodes: list[dict], version: str = "0.0.4") -> bytes:
    """A Chakra ``.et`` byte string (for tests and tools) as protobuf writes it, defaults
    (id 0, empty name, zero times) left out: node dicts with ``id``, ``name``, ``type``,
    ``ctrl_deps``, ``data_deps``, ``start_time_micros``, ``duration_micros``, ``attr``
    (name -> int | bool | float | str | list)."""
    def msg(body: bytes) -> bytes:
        return _enc_varint(len(body)) + body
    out = msg(_enc_field(1, version) if version else b"")
    for n in nodes:
        body = b""
        for num, key in ((1, "id"), (2, "name"), (3, "type")):
            v = n.get(key, COMP_NODE if key == "type" else 0)
            body += _enc_field(num, v) if v else b""
        for num, key in ((4, "ctrl_deps"), (5, "data_deps")):
            deps = b"".join(_enc_varint(d) for d in n.get(key, []))
            body += _enc_field(num, deps) if deps else b""      # packed, as proto3 writes it
        for num, key in ((6, "start_time_micros"), (7, "duration_micros")):
            body += _enc_field(num, n[key]) if n.get(key) else b""
        for k, v in (n.get("attr") or {}).items():
            body += _enc_field(10, _enc_attr(k, v))
        out += msg(body)
    return out


