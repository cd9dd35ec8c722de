"""Linked execution traces (ET+): PARAM's linker output on PARAM's own ResNet run (shipped,
MIT), checked against the Kineto trace it was linked from; the shapes Chakra's linker
writes; CPU-only timed traces; broken numbers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from ficco_sim.errors import InputError
from ficco_sim.traces import load_trace, replay

REAL = Path(__file__).resolve().parents[1] / "traces" / "real"
ET_PLUS = REAL / "param_resnet_v100_et_plus.json.gz"
KINETO_GPU = REAL / "param_resnet_v100_et_plus_kineto_gpu.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@pytest.fixture(scope="module")
def linked():
    return load_trace([ET_PLUS]), load_trace([KINETO_GPU])


def test_the_linked_gpu_nodes_are_the_ops_and_no_host_operator_is(linked):
    et, kineto = linked
    raw = json.load(gzip.open(ET_PLUS))
    gpu_nodes = [n for n in raw["nodes"] if n.get("cat") in GPU_CATS]
    assert et.fmt == "et" and et.on_gpu and len(et.ops) == len(gpu_nodes) == len(kineto.ops)
    assert all(o.stream == "s7" for o in et.ops)          # the run's one stream, no host thread
    assert sorted(o.dur for o in et.ops) == sorted(o.dur for o in kineto.ops)
    assert sum(o.kind == "gemm" for o in et.ops) == sum(o.kind == "gemm" for o in kineto.ops) > 0
    assert any("host operators left out" in n for n in et.notes)


def test_gpu_ops_start_where_the_kineto_trace_saw_them_run(linked):
    """The linker writes each GPU node's launch as its ts (22.5 ms of launches for 159 ms of GPU
    work); started at the later of launch and the op before on the stream, the ops sit where
    the GPU ran them. Read as starts, the span would be 7x short."""
    et, kineto = linked
    span_et, span_k = et.span[1] - et.span[0], kineto.span[1] - kineto.span[0]
    assert abs(span_et / span_k - 1) < 0.01
    a = sorted(et.ops, key=lambda o: o.launch)
    b = sorted(kineto.ops, key=lambda o: o.order)
    assert [o.name for o in a] == [o.name for o in b]
    first = next(i for i, o in enumerate(a) if o.category != "copy")
    off = np.array([(x.start - a[first].start) - (y.start - b[first].start) for x, y in zip(a, b)])
    assert np.median(np.abs(off)) < 0.005 * span_k
    assert all(x.launch <= x.start + 1e-12 for x in a if "Pageable" not in x.name)


def test_the_linked_trace_replays_as_measured(linked):
    r = replay(linked[0], "v100", footprints=False)
    assert abs(r.sim_makespan / r.trace_makespan - 1) < 1e-3


def _write(tmp_path, name, nodes, schema="1.1.1-chakra.0.0.4"):
    p = tmp_path / name
    p.write_text(json.dumps({"schema": schema, "nodes": nodes}))
    return p


def test_chakra_linker_shape(tmp_path):
    """chakra_trace_link: operators get ts / inclusive_dur / exclusive_dur; each GPU node has
    cat, ts (its launch), inclusive_dur, stream and its operator in ctrl_deps."""
    x = {"values": [[1, 10, 0, 1 << 20, 2, "cuda:0"]]}
    y = {"values": [[2, 20, 0, 1 << 20, 2, "cuda:0"]]}
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ts": 0, "inclusive_dur": 500,
              "exclusive_dur": 1},
             {"id": 2, "name": "aten::mm", "ts": 10, "inclusive_dur": 20, "exclusive_dur": 20, "inputs": x,
              "outputs": y, "attrs": [{"name": "tid", "value": 1}]},
             {"id": 3, "name": "sm80_xmma_gemm_f16f16_f16f32", "cat": "kernel", "ph": "X", "ts": 25,
              "inclusive_dur": 100, "exclusive_dur": 100, "stream": 7, "ctrl_deps": 2, "inputs": x, "outputs": y},
             {"id": 4, "name": "record_param_comms", "ts": 40, "inclusive_dur": 10, "exclusive_dur": 10,
              "inputs": y, "outputs": y},
             {"id": 5, "name": "ncclDevKernel_AllReduce_Sum_f16_RING_LL", "cat": "kernel", "ph": "X", "ts": 45,
              "inclusive_dur": 30, "exclusive_dur": 30, "stream": 13, "ctrl_deps": 4, "inputs": y, "outputs": y}]
    t = load_trace([_write(tmp_path, "linked.0.json", nodes)])
    gemm, ar = t.ops
    assert (gemm.kind, ar.kind, ar.collective, ar.nbytes) == ("gemm", "comm", "all-reduce", float(2 << 20))
    assert ar.deps == [gemm.id]                    # it reads what the GEMM wrote, on another stream
    assert (gemm.start, ar.launch, ar.start) == (0.0, pytest.approx(20e-6), pytest.approx(100e-6))


def test_cpu_only_timed_trace_keeps_each_threads_outermost_operators(tmp_path):
    a, b = [[1, 10, 0, 64, 4, "cpu"]], [[2, 20, 0, 64, 4, "cpu"]]
    nodes = [{"id": 1, "name": "[pytorch|profiler|execution_graph|thread]", "ts": 0, "dur": 1000, "tid": 1},
             {"id": 2, "name": "ProfilerStep#3", "ts": 0, "dur": 900, "tid": 1},
             {"id": 3, "name": "aten::linear", "ts": 10, "dur": 100, "tid": 1, "inputs": a, "outputs": b,
              "input_shapes": [[8, 8], [8, 8]], "input_types": ["Tensor(float)", "Tensor(float)"]},
             {"id": 4, "name": "aten::addmm", "ts": 20, "dur": 80, "tid": 1, "inputs": a, "outputs": b},
             {"id": 5, "name": "aten::relu", "ts": 200, "dur": 50, "tid": 2, "inputs": b, "outputs": a}]
    t = load_trace([_write(tmp_path, "cpu.json", nodes, schema="1.0.1")])
    assert not t.on_gpu and [o.name for o in t.ops] == ["aten::linear", "aten::relu"]
    assert t.ops[0].kind == "gemm" and t.ops[1].deps == [t.ops[0].id]    # list-form tensors, across threads


@pytest.mark.parametrize("field, value, match", [
    ("dur", "12", "nodes\\[1\\].dur.*must be a number"), ("dur", -3, "nodes\\[1\\].dur.*negative"),
    ("ts", float("nan"), "nodes\\[1\\].ts"), ("cat", ["kernel"], "nodes\\[1\\].cat"),
    ("attrs", 5, None)])
def test_bad_numbers_name_the_node(tmp_path, field, value, match):
    nodes = [{"id": 1, "name": "aten::mm", "ts": 0, "dur": 5, "tid": 1},
             {"id": 2, "name": "aten::add", "ts": 10, "dur": 5, "tid": 1}]
    nodes[1][field] = value
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"schema": "1.0.1", "nodes": nodes}))
    if match is None:            # nothing wrong that matters: read as if absent
        assert len(load_trace([p]).ops) == 2
        return
    with pytest.raises(InputError, match=match):
        load_trace([p])


def test_gpu_nodes_without_args_keep_their_streams_and_wait_across_them(tmp_path):
    """PARAM-style GPU nodes whose stream is only their tid (no args), list-form tensors: two
    streams, and the kernel reading what the other wrote waits for it."""
    x, y = [1, 10, 0, 256, 2, "cuda:0"], [2, 20, 0, 256, 2, "cuda:0"]
    nodes = [{"id": 1, "name": "aten::mm", "ts": 0, "dur": 5, "tid": 1, "inputs": [x], "outputs": [y]},
             {"id": 2, "name": "sm80_xmma_gemm", "cat": "kernel", "ph": "X", "ts": 5, "dur": 100, "tid": 7,
              "pid": 0, "parent": 1, "inputs": [x], "outputs": [y]},
             {"id": 3, "name": "aten::relu", "ts": 10, "dur": 5, "tid": 1, "inputs": [y], "outputs": [x]},
             {"id": 4, "name": "vectorized_elementwise_kernel", "cat": "kernel", "ph": "X", "ts": 15, "dur": 10,
              "tid": 13, "pid": 0, "parent": 3, "inputs": [y], "outputs": [x]}]
    t = load_trace([_write(tmp_path, "et_plus.json", nodes, schema="1.0.1")])
    mm, relu = sorted(t.ops, key=lambda o: o.launch)
    assert (mm.stream, relu.stream) == ("s7", "s13") and relu.deps == [mm.id]
    assert relu.start == pytest.approx(mm.end)


def test_an_execution_trace_given_with_its_kineto_trace_says_what_to_give(tmp_path):
    with pytest.raises(InputError, match="Kineto trace alone"):
        load_trace([ET_PLUS.parent / "hta_a100_event_sync.json.gz", _write(tmp_path, "host.json",
                                                                         [{"id": 1, "name": "aten::mm"}])])


def test_a_chakra_json_dump_is_refused_naming_what_to_give(tmp_path):
    p = tmp_path / "chakra.0.json"      # chakra_jsonizer's shape (mlcommons/chakra tests/data/json_trace)
    p.write_text(json.dumps({"workload_graph": [{"id": 1, "name": "COMP_NODE"}]}))
    with pytest.raises(InputError, match="workload_graph.*the .et files"):
        load_trace([p])
