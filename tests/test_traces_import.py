"""Trace import: classification rules, the shipped traces, broken traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ficco_sim.errors import InputError
from ficco_sim.traces import load_trace
from ficco_sim.traces.chakra import COMM_COLL_NODE, COMP_NODE, METADATA_NODE, encode_chakra, load_chakra
from ficco_sim.traces.graph import ordered_ops, trace_to_graph
from ficco_sim.traces.kineto import load_kineto
from ficco_sim.traces.ops import classify_cpu_op, classify_kernel, collective_kind
from ficco_sim.hardware import load_gpu

TRACES = Path(__file__).resolve().parents[1] / "traces"
CPU_AG = [TRACES / "cpu_ag_mm.rank0.json.gz", TRACES / "cpu_ag_mm.rank1.json.gz"]
SYNTH = [TRACES / "synthetic_gpu_ag_gemm.rank0.json", TRACES / "synthetic_gpu_ag_gemm.rank1.json"]


@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "comm"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "comm"),
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymkDevWorkArgs4K)", "comm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", "gemm"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "gemm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", "opaque"),
    ("triton_poi_fused_add_0", "opaque"),
])
def test_kernel_classification(name, kind):
    assert classify_kernel(name)[0] == kind


def test_cpu_and_collective_rules():
    assert classify_cpu_op("gloo:all_gather") == ("comm", "comm")
    assert classify_cpu_op("aten::addmm")[0] == "gemm"
    assert classify_cpu_op("aten::relu")[0] == "opaque"
    assert collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16") == "reduce-scatter"
    assert collective_kind("_allgather_base") == "all-gather"
    assert collective_kind("alltoall_base") == "all-to-all"


def test_cpu_mm_chain():
    t = load_kineto([TRACES / "cpu_mm_chain.json.gz"])
    assert (t.num_ranks, t.on_gpu, len(t.ops)) == (1, False, 6)
    assert all(o.kind == "gemm" and o.shapes == [[384, 384], [384, 384]] for o in t.ops)
    assert len({o.stream for o in t.ops}) == 1


def test_cpu_ag_mm_dependencies():
    t = load_kineto(CPU_AG)
    assert t.num_ranks == 2 and not t.on_gpu
    by_id = t.by_id()
    gathers = [o for o in t.ops if o.collective == "all-gather"]
    assert len(gathers) == 2 and all(o.nbytes == 256 * 384 * 4 and o.group == (0, 1) for o in gathers)
    for ag in gathers:
        consumers = [o for o in t.ops if ag.id in o.deps]
        # The mm on the gathered 512 x 384 matrix waits for the gather, on the launching thread.
        assert any(c.name == "aten::mm" and [512, 384] in c.shapes for c in consumers)
        assert all(by_id[c.id].start >= ag.end for c in consumers)


def test_synthetic_gpu_fixture():
    t = load_kineto(SYNTH)
    assert t.on_gpu and t.num_ranks == 2 and "H100" in t.device
    ops = {(o.rank, o.name.split("(")[0][:24]): o for o in t.ops}
    ag = ops[(0, "ncclDevKernel_AllGather_")]
    assert ag.category == "comm" and ag.collective == "all-gather" and ag.nbytes == 8388608 * 2
    assert ag.group == (0, 1) and ag.grid == 16 and ag.block.threads == 512 and ag.block.smem == 82240
    gemm = next(o for o in t.ops if o.rank == 0 and o.kind == "gemm")
    assert gemm.grid == 1024 and gemm.block.registers == 168 and gemm.shapes == [[4096, 4096], [4096, 8192]]
    assert ag.id in gemm.deps            # cudaStreamWaitEvent(stream 7 waits on stream 13)
    p2p = next(o for o in t.ops if o.rank == 0 and o.direction == "PtoP")
    assert (p2p.src, p2p.dst, p2p.nbytes) == (0, 1, 8388608)
    h2d = next(o for o in t.ops if o.rank == 1 and o.direction == "HtoD")
    assert h2d.src == h2d.dst == 1
    assert any(o.name.startswith("ncclSymk") and o.category == "comm" for o in t.ops)
    assert any(o.kind == "memory" for o in t.ops)        # memset: kept, not dropped
    assert t.stream_priority[(0, "s13")] > t.stream_priority[(0, "s7")]
    g = trace_to_graph(t, load_gpu("h100"))
    assert {(s.gpu, s.name): s.priority for s in g.streams}[(0, "s13")] == 1
    k = g.kernel(gemm.id)
    # 1024 blocks of 200 KiB smem: one per SM, 132 per wave -> 8 waves.
    assert k.grid == 1024 and k.block_time == pytest.approx(gemm.dur / 8)


def test_nothing_dropped():
    t = load_kineto(SYNTH)
    raw = json.loads(SYNTH[0].read_text())["traceEvents"]
    gpu_events = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len([o for o in t.ops if o.rank == 0]) == len(gpu_events)


def test_format_detection(tmp_path):
    assert load_trace([TRACES / "cpu_mm_chain.json.gz"]).fmt == "kineto"
    et = tmp_path / "trace.0.et"
    et.write_bytes(encode_chakra([{"id": 1, "name": "mm", "type": COMP_NODE, "duration_micros": 5}]))
    assert load_trace([et]).fmt == "chakra"


# -- broken traces -------------------------------------------------------------------------

def _write(tmp_path, name, doc) -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _kernel(name="k", ts=0.0, dur=1.0, stream=7, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, **args}}


def test_truncated_json(tmp_path):
    text = SYNTH[0].read_text()
    p = _write(tmp_path, "cut.json", text[: len(text) // 2])
    with pytest.raises(InputError, match="cut.json.*truncated JSON"):
        load_kineto([p])


def test_truncated_gzip(tmp_path):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}' * 50)[:40])
    with pytest.raises(InputError, match="cut.json.gz"):
        load_kineto([p])


def test_missing_fields(tmp_path):
    ev = _kernel()
    del ev["dur"]
    p = _write(tmp_path, "nodur.json", {"traceEvents": [ev]})
    with pytest.raises(InputError) as err:
        load_kineto([p])
    assert err.value.where.endswith("nodur.json") and err.value.field == "traceEvents[0].dur"
    with pytest.raises(InputError, match="traceEvents"):
        load_kineto([_write(tmp_path, "empty.json", {"foo": 1})])
    bad = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
           "ts": 0, "dur": 1, "args": {"device": 0, "stream": 7, "bytes": "many"}}
    with pytest.raises(InputError, match=r"traceEvents\[0\]\.args\.bytes"):
        load_kineto([_write(tmp_path, "badbytes.json", {"traceEvents": [bad]})])
    # an error names the event's place in the file, counting the events the reader drops (flow arrows, Python)
    dropped = [{"ph": "s", "cat": "ac2g", "id": 1, "pid": 0, "tid": 1, "ts": 0},
               {"ph": "X", "cat": "python_function", "name": "f", "pid": 0, "tid": 1, "ts": 0, "dur": 1}]
    with pytest.raises(InputError) as err:
        load_kineto([_write(tmp_path, "late.json", {"traceEvents": dropped * 2 + [ev]})])
    assert err.value.field == "traceEvents[4].dur"


def test_a_copy_whose_size_is_recorded_nowhere_keeps_its_measured_time(tmp_path):
    """ROCm traces hold device copies with no size on the copy and no runtime call (184 of
    the MI300X trace under traces/real/): kept at their measured time, said in the notes."""
    memcpy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
              "ts": 0, "dur": 3, "args": {"device": 0, "stream": 7}}
    trace = load_kineto([_write(tmp_path, "nobytes.json", {"traceEvents": [memcpy, _kernel()]})])
    copy = next(o for o in trace.ops if o.category == "copy")
    assert copy.nbytes == -1 and any("size the trace records nowhere" in n for n in trace.notes)


def test_inconsistent_ranks(tmp_path):
    a = _write(tmp_path, "a.json", {"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [_kernel()]})
    b = _write(tmp_path, "b.json", {"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [_kernel()]})
    c = _write(tmp_path, "c.json", {"distributedInfo": {"rank": 1, "world_size": 4}, "traceEvents": [_kernel()]})
    d = _write(tmp_path, "d.json", {"distributedInfo": {"rank": 3, "world_size": 2}, "traceEvents": [_kernel()]})
    with pytest.raises(InputError, match="inconsistent ranks"):
        load_kineto([a, b])
    with pytest.raises(InputError, match="world_size"):
        load_kineto([a, c])
    with pytest.raises(InputError, match="not below world_size"):
        load_kineto([a, d])


def test_dependency_cycle(tmp_path):
    # Two kernels on two streams, flow arrows both ways: a cycle.
    evs = [_kernel("a", 0, 10, 7), _kernel("b", 0, 10, 8),
           {"ph": "s", "cat": "dep", "id": 1, "pid": 0, "tid": 7, "ts": 5},
           {"ph": "f", "bp": "e", "cat": "dep", "id": 1, "pid": 0, "tid": 8, "ts": 5},
           {"ph": "s", "cat": "dep", "id": 2, "pid": 0, "tid": 8, "ts": 5},
           {"ph": "f", "bp": "e", "cat": "dep", "id": 2, "pid": 0, "tid": 7, "ts": 5}]
    t = load_kineto([_write(tmp_path, "cyc.json", {"traceEvents": evs})])
    with pytest.raises(InputError, match="cycle"):
        ordered_ops(t)


def test_chakra_broken(tmp_path):
    blob = encode_chakra([{"id": 1, "name": "a", "type": COMP_NODE, "ctrl_deps": [2], "duration_micros": 1},
                          {"id": 2, "name": "b", "type": COMP_NODE, "ctrl_deps": [1], "duration_micros": 1}])
    p = tmp_path / "cyc.0.et"
    p.write_bytes(blob)
    with pytest.raises(InputError, match="cycle"):
        trace_to_graph(load_chakra([p]), load_gpu("h100"))
    p.write_bytes(blob[:-3])
    with pytest.raises(InputError, match="truncated"):
        load_chakra([p])


def test_chakra_import(tmp_path):
    files = []
    for r in range(2):
        nodes = [{"id": 1, "name": "gemm_a", "type": COMP_NODE, "start_time_micros": 0, "duration_micros": 100,
                  "attr": {"is_cpu_op": False, "stream": 7}},
                 {"id": 2, "name": "ncclDevKernel_AllGather", "type": COMM_COLL_NODE, "data_deps": [1],
                  "start_time_micros": 100, "duration_micros": 50,
                  "attr": {"is_cpu_op": False, "stream": 13, "comm_type": 2, "comm_size": 1 << 24}},
                 {"id": 3, "name": "meta", "type": METADATA_NODE, "ctrl_deps": [2]},
                 {"id": 4, "name": "aten::mm", "type": COMP_NODE, "ctrl_deps": [3], "start_time_micros": 150,
                  "duration_micros": 200, "attr": {"is_cpu_op": True}},
                 {"id": 5, "name": "gemm_b", "type": COMP_NODE, "ctrl_deps": [3], "start_time_micros": 150,
                  "duration_micros": 200, "attr": {"is_cpu_op": False, "stream": 7}}]
        files.append(tmp_path / f"trace.{r}.et")
        files[-1].write_bytes(encode_chakra(nodes))
    t = load_chakra(files)
    assert t.num_ranks == 2 and len(t.ops) == 6          # CPU op and metadata node left out
    ag = next(o for o in t.ops if o.rank == 1 and o.category == "comm")
    assert (ag.collective, ag.nbytes, ag.deps) == ("all-gather", float(1 << 24), ["r1.n1"])
    assert next(o for o in t.ops if o.id == "r1.n5").deps == ["r1.n2"]   # through the metadata node


def test_et_json(tmp_path):
    # A linked ET: ops with durations, tensors [id, storage, offset, numel, elem_bytes, device].
    a = [1, 10, 0, 64, 2, "cuda:0"]
    b = [2, 20, 0, 64, 2, "cuda:0"]
    nodes = [{"id": 5, "name": "ncclDevKernel_AllGather", "ts": 0, "dur": 10, "stream": 13,
              "inputs": {"values": [a]}, "outputs": {"values": [b]}},
             {"id": 6, "name": "sm90_gemm", "ts": 12, "dur": 30, "stream": 7,
              "inputs": {"values": [b]}, "outputs": {"values": [[3, 30, 0, 64, 2, "cuda:0"]]}}]
    p = _write(tmp_path, "linked.0.json", {"schema": "1.1.1-chakra.0.0.4", "nodes": nodes})
    t = load_trace([p])
    assert t.fmt == "et" and [o.kind for o in t.ops] == ["comm", "gemm"]
    assert t.ops[1].deps == [t.ops[0].id]
    host = _write(tmp_path, "host.json", {"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": 1, "name": "aten::mm"}]})
    with pytest.raises(InputError, match="no durations"):
        load_trace([host])
    with pytest.raises(InputError, match="no durations"):
        load_trace([TRACES / "cpu_ag_mm_et.rank0.json.gz"])
