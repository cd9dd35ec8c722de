"""Chakra ``.et`` import on real files (from ASTRA-sim's examples, see traces/README.md),
and the protobuf corners they exercise: proto3 defaults, dangling and contradicting
dependencies, attribute encodings, broken files.

The expected numbers below were read from the files with protobuf and chakra's own
schema (``schema/protobuf/et_def.proto`` of mlcommons/chakra at 21585d8), not with the
reader under test.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

from ficco_sim.cli import main
from ficco_sim.errors import InputError
from ficco_sim.traces import load_trace, replay
from ficco_sim.traces.chakra import (COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE, METADATA_NODE,
                                     load_chakra)
from ficco_sim.traces.chakra_wire import _enc_field, _enc_varint, decode_chakra, encode_chakra

CHAKRA = Path(__file__).resolve().parents[1] / "traces" / "chakra"
MICRO = CHAKRA / "microbenchmarks_4npus_1MB"
RING = sorted((CHAKRA / "custom_ring_allreduce_8npus_1MB").glob("custom_allreduce.*.et"))
MiB = 1 << 20


def micro(name: str) -> list[Path]:
    return [MICRO / f"{name}.{r}.et" for r in range(4)]


# -- ASTRA-sim collective microbenchmarks: one COMM_COLL_NODE per rank ----------------

@pytest.mark.parametrize("name, kind", [("all_gather", "all-gather"), ("all_reduce", "all-reduce"),
                                        ("all_to_all", "all-to-all"), ("reduce_scatter", "reduce-scatter")])
def test_microbenchmark_imports_with_kind_and_size(name, kind):
    t = load_trace(micro(name))
    assert (t.fmt, t.num_ranks, len(t.ops)) == ("chakra", 4, 4)
    # node r of rank r: rank 0's node has id 0, which proto3 leaves off the wire
    assert [(o.id, o.rank, o.category, o.collective, o.nbytes, o.group) for o in t.ops] == \
        [(f"r{r}.n{r}", r, "comm", kind, float(MiB), (0, 1, 2, 3)) for r in range(4)]
    assert any("4 of 4 communication op(s) have no duration" in n for n in t.notes)
    r = replay(t, "h100")
    assert r.trace_makespan == 0.0 and math.isfinite(r.sim_makespan)   # a workload: nothing measured to hold


def test_microbenchmarks_model_their_bytes():
    # With communication modelled from comm_size, the kinds move different volumes:
    # all-gather (the whole input to every peer) > all-reduce > reduce-scatter.
    t = {k: replay(load_trace(micro(k)), "h100", comm="model").sim_makespan
         for k in ("all_gather", "all_reduce", "reduce_scatter")}
    assert all(math.isfinite(v) for v in t.values())
    assert t["all_gather"] > t["all_reduce"] > t["reduce_scatter"] > 0


def test_zero_id_is_not_missing():
    blob = (MICRO / "all_gather.0.et").read_bytes()
    _, nodes = decode_chakra(blob, "all_gather.0.et")
    assert [(n["id"], n["name"], n["type"]) for n in nodes] == [(0, "all_gather_4npus_1MB", COMM_COLL_NODE)]
    assert nodes[0]["attr"] == {"is_cpu_op": False, "comm_type": 2, "comm_size": MiB}


# -- ASTRA-sim custom collective: an MSCCL ring all-reduce as sends, recvs, reductions --

def test_ring_allreduce_imports():
    t = load_chakra(RING)
    assert t.num_ranks == 8 and len(t.ops) == 8 * 35
    for r in range(8):
        ops = [o for o in t.ops if o.rank == r]
        sends = [o for o in ops if o.category == "comm" and o.name.startswith("COMM_SEND")]
        recvs = [o for o in ops if o.category == "comm" and o.name.startswith("COMM_RECV")]
        comp = [o for o in ops if o.category == "compute"]
        assert (len(sends), len(recvs), len(comp)) == (14, 14, 7)
        # comm_type on these nodes holds the node type (5, 6): not a collective
        assert {o.collective for o in sends + recvs} == {"send-recv"}
        assert {o.nbytes for o in sends + recvs} == {131072.0}
        assert {o.group for o in sends} == {tuple(sorted((r, (r + 1) % 8)))}     # comm_dst
        assert {o.group for o in recvs} == {tuple(sorted((r, (r - 1) % 8)))}     # comm_src
        assert {o.dur for o in comp} == {7e-6}
        # node k waits for node k-1 (data_deps), node 0 for nothing
        assert [o.deps for o in ops] == [[]] + [[f"r{r}.n{k}"] for k in range(34)]
    # no start times: as soon as possible, so the span is the chain of 7 reductions of 7 us
    assert t.makespan == pytest.approx(49e-6)


def test_ring_allreduce_replays():
    r = replay(load_chakra(RING), "h100")
    assert math.isfinite(r.sim_makespan)
    assert r.sim_makespan == pytest.approx(49e-6, rel=1e-3)


def test_cli_on_real_files(capsys):
    assert main(["trace", "import", *map(str, RING)]) == 0
    out = capsys.readouterr().out
    assert "8 rank(s)" in out and "ops: 280" in out
    assert main(["trace", "replay", "--gpu", "h100", *map(str, micro("all_reduce"))]) == 0


# -- broken files --------------------------------------------------------------------------

@pytest.mark.parametrize("src, cut", [(RING[0], 3), (MICRO / "all_gather.1.et", 1), (RING[0], 29000)])
def test_truncated_real_file(tmp_path, src, cut):
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes()[:-cut])
    with pytest.raises(InputError, match="truncated") as err:
        load_chakra([p])
    assert err.value.where == str(p) and err.value.field


def test_truncated_file_cli_one_line(tmp_path, capsys):
    files = [tmp_path / f.name for f in RING]
    for f, src in zip(files, RING):
        f.write_bytes(src.read_bytes())
    files[5].write_bytes(RING[5].read_bytes()[:-10])
    assert main(["trace", "import", *map(str, files)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "custom_allreduce.5.et" in err and "node[34]" in err and "Traceback" not in err


def _msg(body: bytes) -> bytes:
    return _enc_varint(len(body)) + body


@pytest.mark.parametrize("node, field", [
    (_enc_field(1, "seven"), "node[0].id"),                                   # id as a string
    (_enc_field(3, b"\x04"), "node[0].type"),
    (_enc_field(10, _enc_field(1, "comm_size") + _enc_field(29, "big")) + _enc_field(3, COMM_COLL_NODE),
     "node[0].attr[comm_size]"),
    (_enc_field(10, _enc_field(1, "comm_type") + _enc_varint(9 << 3 | 2) + b"\x01\x00"), "node[0].attr[comm_type]"),
])
def test_malformed_field_named(tmp_path, node, field):
    p = tmp_path / "bad.0.et"
    p.write_bytes(_msg(_enc_field(1, "0.0.4")) + _msg(node))
    with pytest.raises(InputError) as err:
        load_chakra([p])
    assert (err.value.where, err.value.field) == (str(p), field)


def test_not_a_trace(tmp_path):
    for name, blob in [("empty.et", b""), ("meta.et", _msg(_enc_field(1, "0.0.4"))), ("dup.et", encode_chakra(
            [{"id": 0, "name": "a"}, {"name": "b"}]))]:
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(InputError, match=name):
            load_chakra([tmp_path / name])


# -- what converted PyTorch traces do (shapes seen in chakra's tests/data/chakra.0.et) -----

def _load(tmp_path, nodes):
    p = tmp_path / "t.0.et"
    p.write_bytes(encode_chakra(nodes))
    return load_chakra([p])


def test_dangling_dependencies_dropped_and_counted(tmp_path):
    # ctrl_deps on the root node (not written) and on an op that was filtered out
    t = _load(tmp_path, [{"id": 216, "name": "a", "ctrl_deps": [3], "duration_micros": 5},
                         {"id": 217, "name": "b", "ctrl_deps": [3], "data_deps": [216, 999], "duration_micros": 5}])
    assert [o.deps for o in t.ops] == [[], ["r0.n216"]]
    assert t.notes[0].startswith("dropped 3 dependencies on node ids not in their file (1 data_deps, 2 ctrl_deps")
    assert t.makespan == pytest.approx(10e-6)


def test_ctrl_deps_that_contradict_data_deps(tmp_path):
    # A caller is its callees' ctrl parent, and may wait for them by data: the ctrl edge
    # goes; so does a node that names itself.
    t = _load(tmp_path, [{"id": 1, "name": "callee", "ctrl_deps": [2], "duration_micros": 1},
                         {"id": 2, "name": "caller", "ctrl_deps": [2], "data_deps": [1], "duration_micros": 1}])
    assert [o.deps for o in t.ops] == [[], ["r0.n1"]]
    assert any("dropped 2 ctrl_deps that contradict data_deps" in n for n in t.notes)


def test_gpu_nodes_keep_their_stream_and_skip_cpu_launchers(tmp_path):
    t = _load(tmp_path, [
        {"id": 1, "name": "c10d::broadcast_", "type": COMM_COLL_NODE, "duration_micros": 80,
         "attr": {"is_cpu_op": True}},
        {"id": 2, "name": "ncclKernel_Broadcast_RING_LL_Sum_int8_t", "type": COMM_COLL_NODE, "ctrl_deps": [1],
         "duration_micros": 28, "attr": {"is_cpu_op": False, "tid": 14, "comm_type": 5, "comm_size": 212480,
                                         "involved_dim": [True]}},
        {"id": 3, "name": "meta", "type": METADATA_NODE, "data_deps": [2]},
        {"id": 4, "name": "sm80_xmma_gemm", "data_deps": [3], "duration_micros": 9, "attr": {"is_cpu_op": False,
                                                                                              "tid": 7}}])
    assert [(o.id, o.stream, o.collective, o.kind, o.deps) for o in t.ops] == [
        ("r0.n2", "s14", "broadcast", "comm", []), ("r0.n4", "s7", "", "gemm", ["r0.n2"])]


@pytest.mark.parametrize("comm_type, kind", [(0, "all-reduce"), (2, "all-gather"), (5, "broadcast"),
                                             (6, "all-to-all"), (7, "reduce-scatter"), (8, "reduce-scatter")])
def test_collective_kind_from_comm_type(tmp_path, comm_type, kind):
    t = _load(tmp_path, [{"id": 0, "name": "x", "type": COMM_COLL_NODE, "attr": {"comm_type": comm_type}}])
    assert t.ops[0].collective == kind


def test_send_recv_peers(tmp_path):
    files = []
    for r, (t, peer) in enumerate([(COMM_SEND_NODE, ("comm_dst", 1)), (COMM_RECV_NODE, ("comm_src", 0))]):
        files.append(tmp_path / f"p2p.{r}.et")
        files[-1].write_bytes(encode_chakra([{"id": 0, "name": "x", "type": t,
                                              "attr": {"comm_type": t, "comm_size": 64, peer[0]: peer[1]}}]))
    t = load_chakra(files)
    assert [(o.collective, o.group, o.nbytes) for o in t.ops] == [("send-recv", (0, 1), 64.0)] * 2


def _attr_node(value_field: bytes) -> bytes:
    node = _enc_field(1, 5) + _enc_field(3, COMP_NODE) + _enc_field(10, _enc_field(1, "v") + value_field)
    return _msg(b"") + _msg(node)


@pytest.mark.parametrize("value_field, expected", [
    (_enc_field(7, -3), -3),                                                  # int32, sign-extended
    (_enc_field(17, 5), -3),                                                  # sint64, zigzag
    (_enc_varint(19 << 3 | 5) + struct.pack("<I", 7), 7),                     # fixed32
    (_enc_varint(5 << 3 | 5) + struct.pack("<f", 0.5), 0.5),                  # float
    (_enc_field(10, _enc_field(1, _enc_varint(3) + _enc_varint(300))), [3, 300]),   # packed Int64List
    (_enc_field(10, _enc_field(1, 3) + _enc_field(1, 300)), [3, 300]),        # unpacked
    (_enc_field(4, _enc_field(1, struct.pack("<2d", 1.5, 2.0))), [1.5, 2.0]),       # packed DoubleList
    (_enc_field(30, _enc_field(1, "a") + _enc_field(1, "b")), ["a", "b"]),    # StringList
])
def test_attribute_encodings(value_field, expected):
    meta, nodes = decode_chakra(_attr_node(value_field), "x.et")
    assert (meta["version"], nodes[0]["id"], nodes[0]["attr"]["v"]) == ("", 5, expected)


def test_workload_listing_a_node_before_its_dependency(tmp_path):
    # No start times: streams take ops in a dependency order, not file order (no false cycle).
    t = _load(tmp_path, [{"id": 1, "name": "b", "data_deps": [2], "duration_micros": 3},
                         {"id": 2, "name": "a", "duration_micros": 5}])
    assert [(o.id, o.start) for o in sorted(t.ops, key=lambda o: o.order)] == \
        [("r0.n2", 0.0), ("r0.n1", pytest.approx(5e-6))]
    assert replay(t, "h100").sim_makespan == pytest.approx(8e-6)


def test_a_workload_of_the_2023_eg_schema_is_refused_naming_the_field(capsys):
    """ASTRA-sim's ``transformer_2stack.0.eg`` (2023): chakra's eg_def schema, whose node types
    and fields 6-20 meant other things; read with today's schema it was 6,528 memory stores and
    2,560 peerless send-recvs over 18,018 s and a 'dependency cycle'."""
    eg = CHAKRA / "transformer_2stack_eg_2023" / "transformer_2stack.0.eg"
    with pytest.raises(InputError, match="eg_def schema") as err:
        load_chakra([eg])
    assert err.value.where == str(eg) and "field 12" in err.value.field
    assert main(["trace", "import", str(eg)]) == 2
    assert "\n" not in capsys.readouterr().err.strip()
