"""Real public traces (``traces/real/``, see its README): PyTorch-profiler runs nobody here
made, on V100, A100 and MI250, one of them as PyTorch 1.8's Kineto wrote it (2021). What they must give: every op imported, every NCCL/RCCL
kernel a collective kind, dependencies as PyTorch ordered the work (and none the run
itself contradicts), an exact replay within 1% (2% per rank), collectives that end
together on all their ranks after a what-if, and no op moved before what it waited for."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from ficco_sim.errors import InputError
from ficco_sim.traces import load_trace
from ficco_sim.traces.replay import find_pairs, replay, whatif

REAL = Path(__file__).resolve().parents[1] / "traces" / "real"
DLRM = sorted(REAL.glob("param_dlrm_v100_8ranks_worker*.json.gz"))
NCCL217 = [REAL / "hta_a100_nccl217_rank0.json.gz"]
A100X16 = [REAL / "hta_a100_16ranks_rank0.json.gz"]
SAMPLED = [REAL / "hta_128ranks_sampled_rank0.json.gz"]
SAMPLED1 = [REAL / "hta_128ranks_sampled_rank1.json.gz"]
MI250 = [REAL / "hta_mi250_rocm62.json.gz"]
SYNC = [REAL / "hta_a100_event_sync.json.gz"]
SYNC_MS = [REAL / "hta_a100_event_sync_multi_stream.json.gz"]
TORCH18 = [REAL / "kineto_v100_resnet50_torch18.json.gz"]
MIOPEN = [REAL / "tracelens_mi300x_resnet18_ddp_miopen.json.gz"]
ROCPROF_SDK = [REAL / "tracelens_mi300x_sdpa_rocprofiler_sdk.json.gz"]
VLLM = [REAL / "tracelens_mi300x_vllm_decode_graph.json.gz"]
# file set, the GPU it ran on when the trace does not say a built-in one
SETS = {"dlrm": (DLRM, None), "nccl217": (NCCL217, None), "a100x16": (A100X16, None),
        "sampled": (SAMPLED, "a100"), "sampled1": (SAMPLED1, "a100"), "mi250": (MI250, "mi250x"), "sync": (SYNC, None),
        "sync_ms": (SYNC_MS, None),
        "torch18": (TORCH18, None), "miopen": (MIOPEN, None), "rocprof_sdk": (ROCPROF_SDK, None),
        "vllm": (VLLM, "mi300x")}
SLACK = 1.5e-6


@pytest.fixture(scope="module")
def traces():
    return {k: load_trace(files) for k, (files, _) in SETS.items()}


def _raw_gpu_ops(files) -> int:
    n = 0
    for f in files:
        events = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
        n += sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset",
                                                                               "Kernel", "Memcpy", "Memset"))
    return n


@pytest.mark.parametrize("name", SETS)
def test_every_gpu_op_imported_and_every_collective_named(traces, name):
    t = traces[name]
    assert len(t.ops) == _raw_gpu_ops(SETS[name][0])
    comm = [o for o in t.ops if o.category == "comm"]
    assert all(o.collective for o in comm)


def test_a_trace_of_pytorch_1_8_reads_as_todays(traces):
    """pytorch/kineto's own sample (ResNet-50 training on a V100, PyTorch 1.8, 2021) names its
    categories Operator / Kernel / Runtime / Memcpy / Memset and its GPU events' operator
    ``external id``: every kernel is imported (the parametrized tests), launched by its runtime
    call, and the fc layer's GEMMs carry their shapes and their operator's call, so their
    times are kept as a benchmark's would be (calibrate --keep-times)."""
    from ficco_sim.traces.gemm_times import gemm_timings
    t = traces["torch18"]
    assert sum(o.kind == "gemm" for o in t.ops) >= 200 and all(o.launch is not None for o in t.ops)
    shaped = [o for o in t.ops if o.kind == "gemm" and o.shapes]
    assert len(shaped) >= 30 and all(o.call for o in shaped)
    g = gemm_timings(t.ops)
    assert {(r.m, r.n, r.k, r.dtype) for r in g.itertuples()} == \
        {(32, 1000, 2048, "float32"), (32, 2048, 1000, "float32"), (1000, 2048, 32, "float32")}


def test_hip_ext_module_launch_grids_are_work_items(traces):
    """MIOpen's kernels launched by ``hipExtModuleLaunchKernel`` carry their grid in work-items
    on the kernel event too (TraceLens' MI300X ResNet-18 DDP trace): 102,760,448 "blocks" of
    256 threads are 401,408 blocks. Read as blocks, the trace asked for 12 billion of them and
    a replay took minutes."""
    bt = [o for o in traces["miopen"].ops if o.name.startswith("batched_transpose_32x32_half")]
    assert bt and {o.grid for o in bt} == {16384, 100352, 401408}
    assert max(o.grid for o in traces["miopen"].ops) < 1 << 21


def test_grids_rocprofiler_sdk_did_not_record_are_unknown(traces):
    """rocprofiler-sdk writes grid and block [0, 0, 0] where it recorded none: they are unknown
    (as a missing grid), not a malformed trace."""
    ops = traces["rocprof_sdk"].ops
    assert len(ops) == 10 and all(o.grid == 0 and o.name == "attn_fwd.kd" for o in ops)


def test_a_device_with_an_empty_name_is_said_so(traces):
    """vLLM's ROCm traces give deviceProperties with an empty name: the error says so, and which
    built-in profile has as many SMs, instead of "no deviceProperties"."""
    from ficco_sim.traces.replay import source_gpu
    with pytest.raises(InputError) as err:
        source_gpu(traces["vllm"])
    assert "empty name and 304 SMs" in err.value.message and "mi300x" in err.value.message


def test_collective_kinds_from_the_enqueuing_operators(traces):
    # NCCL 2.14-2.18 names every collective ncclKernel_SendRecv: the kind comes from the
    # nccl:* / c10d:: operator that launched it, bytes from its Input Dims.
    kinds = Counter(o.collective for o in traces["a100x16"].ops if o.category == "comm")
    assert kinds == {"all-to-all": 45, "reduce-scatter": 10, "all-reduce": 10, "all-gather": 10, "send-recv": 5}
    assert Counter(o.collective for o in traces["dlrm"].ops if o.category == "comm") == \
        {"all-to-all": 40, "all-reduce": 24}
    # metadata (Collective name / In msg nelems / dtype) where the trace has it
    ar = [o for o in traces["nccl217"].ops if o.collective == "all-reduce"]
    assert len(ar) == 15 and all(o.nbytes > 0 and o.group == (0, 1) and o.dtype == "Float" for o in ar)
    assert any(o.nbytes == 6637568 * 4 for o in ar)      # In msg nelems x 4 bytes
    dlrm_ar = [o for o in traces["dlrm"].ops if o.collective == "all-reduce" and o.rank == 0]
    assert all(o.nbytes > 0 and o.group == tuple(range(8)) for o in dlrm_ar)


@pytest.mark.parametrize("name", SETS)
def test_no_dependency_the_run_contradicts(traces, name):
    t = traces[name]
    by = t.by_id()
    assert all(by[d].end <= o.start + SLACK for o in t.ops for d in o.deps)


@pytest.mark.parametrize("name", ["dlrm", "nccl217", "a100x16", "sampled"])
def test_every_all_reduce_waits_for_compute(traces, name):
    """Without CUPTI sync events cudaStreamWaitEvent has no stream; the NCCL stream's wait
    for the gradient's stream is inferred from the enqueuing thread's launches (or, in a
    sampled trace without the waits, from the collective's entry)."""
    t = traces[name]
    by = t.by_id()
    ar = [o for o in t.ops if o.collective == "all-reduce"]
    assert ar and all(any(by[d].category == "compute" and by[d].stream != o.stream for d in o.deps) for o in ar)


def test_cupti_sync_events(traces):
    """With CUPTI sync events (``cuda_sync``) the streams are named: the host's event
    synchronisation on stream 20 (recorded after its GEMM) orders the next launches on
    streams 28 and 24 after that GEMM, and stream 24 also waits (event sync) for 28's."""
    t = traces["sync_ms"]
    by = t.by_id()
    deps = {(o.stream, by[d].stream, by[d].name[:13]) for o in t.ops for d in o.deps}
    assert deps == {("s28", "s20", "ampere_sgemm_"), ("s24", "s20", "ampere_sgemm_"), ("s24", "s28", "ampere_sgemm_")}


@pytest.mark.parametrize("name", SETS)
def test_exact_replay_within_1_percent_and_2_per_rank(traces, name):
    r = replay(traces[name], SETS[name][1], footprints=False)
    assert abs(r.error) <= 0.01, r.error
    assert all(abs(e) <= 0.02 for e in r.rank_errors.values()), r.rank_errors


def test_full_replay_stays_close(traces):
    # kernels re-share SMs and copies are modelled from bytes: still within a few percent
    for name in ("dlrm", "nccl217", "a100x16"):
        assert abs(replay(traces[name]).error) <= 0.02


def _early_starts(trace, result) -> int:
    """Ops that started, in a simulated timeline, before a dependency or their stream
    predecessor had ended."""
    recs = {r.id: r for r in result.timeline.records}
    early = 0
    last: dict = {}
    for o in sorted(trace.ops, key=lambda o: (o.start, o.order)):
        preds = list(o.deps) + ([last[(o.rank, o.stream)]] if (o.rank, o.stream) in last else [])
        last[(o.rank, o.stream)] = o.id
        early += sum(1 for p in preds if recs[o.id].start < recs[p].end - 1e-12)
    return early


def test_whatif_keeps_order_and_ends_collectives_together(traces):
    t = traces["dlrm"]
    w = whatif(t, gpu="a100")
    recs = {r.id: r for r in w.variant.timeline.records}
    assert _early_starts(t, w.variant) == 0
    # Each all-reduce / all-to-all instance ends at one time on all 8 ranks.
    from ficco_sim.traces.ops import match_collectives
    instances = {num: members for num, members in match_collectives(t.ops).values()}
    assert len(instances) == 64 // 8 and all(len(m) == 8 for m in instances.values())
    for members in instances.values():
        ends = {round(recs[m.id].end, 12) for m in members}
        assert len(ends) == 1
        assert max(recs[f"{m.id}.arrive"].end for m in members) <= min(recs[m.id].start for m in members) + 1e-12
    # The measured time splits into waiting and transfer; the what-if moved it (V100 -> A100).
    assert sum(o.wait for o in t.ops if o.wait is not None) > 0
    assert w.variant.sim_makespan < w.baseline.sim_makespan


def test_pairs_found_on_real_traces(traces):
    pairs = find_pairs(traces["dlrm"])
    assert pairs and all(p.kind == "a2a-gemm" for p in pairs)
    assert sum(1 for p in pairs if p.scenario is not None) >= 30   # GEMM shapes from the enclosing aten ops


def test_kernel_classes_on_real_names(traces):
    ops = traces["sampled"].ops + traces["dlrm"].ops
    fb = [o for o in ops if o.name.lstrip("void ").startswith("fbgemm_gpu::")]
    assert fb and all(o.cls == "embedding" and o.kind != "gemm" for o in fb)
    assert all(o.kind == "gemm" for o in ops if "sgemm" in o.name)


def test_rocm_trace(traces):
    t = traces["mi250"]
    copies = [o for o in t.ops if o.category == "copy"]
    assert [o.nbytes for o in copies] == [2560.0, 2560.0]          # from hipMemcpyWithStream's size
    gemms = sorted((o for o in t.ops if o.name.startswith("Cijk_")), key=lambda o: o.start)
    assert [o.grid for o in gemms] == [2, 16]      # hipExtModuleLaunchKernel: work-items / block
    assert all(o.cls == "gemm" for o in gemms)


def test_unknown_gpu_names_source_gpu(traces):
    with pytest.raises(InputError) as e:
        replay(traces["mi250"])                      # "AMD Radeon Graphics"
    assert e.value.where == "--source-gpu"
    with pytest.raises(InputError) as e:
        replay(traces["sampled"])                    # no deviceProperties at all
    assert e.value.where == "--source-gpu"


def _shifted_copy(src: Path, dst: Path, *, shift_us: float = 0.0, device: str | None = None) -> Path:
    data = json.loads(gzip.decompress(src.read_bytes()))
    for e in data["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += shift_us
    if device:
        data["deviceProperties"][0]["name"] = device
    dst.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst


def test_files_checked_as_a_set(tmp_path, traces):
    with pytest.raises(InputError, match="inconsistent ranks"):
        load_trace([DLRM[0], NCCL217[0]])                  # world size 8 vs 2
    later = _shifted_copy(DLRM[1], tmp_path / "w1.json.gz", shift_us=86400e6)
    with pytest.raises(InputError, match="not the same run"):
        load_trace([DLRM[0], later])                       # profiled a day apart
    other = _shifted_copy(DLRM[1], tmp_path / "w1b.json.gz", device="NVIDIA A100-SXM4-80GB")
    with pytest.raises(InputError, match="not the same run"):
        load_trace([DLRM[0], other])
    assert any("1 of 16 ranks present" in n for n in traces["a100x16"].notes)
    assert not any("ranks present" in n for n in traces["dlrm"].notes)
    d = tmp_path / "run"
    d.mkdir()
    for f in DLRM:
        (d / f.name).write_bytes(f.read_bytes())
    assert load_trace([d]).num_ranks == 8


def test_steps_window(traces):
    full = traces["a100x16"]
    one = load_trace(A100X16, steps=[551])
    assert 0 < len(one.ops) < len(full.ops)
    with pytest.raises(InputError, match="step 9"):
        load_trace(A100X16, steps=[9])


def test_a_timeline_of_days_is_refused(tmp_path):
    data = json.loads(gzip.decompress(SYNC[0].read_bytes()))
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    kernels[-1]["ts"] += 3 * 86400e6
    f = tmp_path / "days.json"
    f.write_text(json.dumps(data))
    with pytest.raises(InputError, match="span"):
        load_trace([f])


def test_gantt_legend_stays_in_tall_charts(tmp_path, traces):
    """A chart of many streams keeps its legend in the picture (it used to fall off the bottom)."""
    import matplotlib.image as mpimg
    import numpy as np
    from ficco_sim.traces.export import COLORS, write_gantt
    r = replay(traces["dlrm"], footprints=False)
    assert len({(x.gpu, x.stream) for x in r.timeline.records}) > 30           # a tall chart
    img = mpimg.imread(write_gantt(r.timeline, tmp_path / "g.png"))[..., :3]
    red = np.array([int(COLORS["transfer-sm"][i:i + 2], 16) / 255 for i in (1, 3, 5)])
    assert not any(x.kind == "transfer" and x.engine == "sm" for x in r.timeline.records)   # only the legend has it
    assert (np.abs(img - red).max(axis=2) < 0.02).sum() > 20


def test_whatif_scales_host_copies_by_the_host_link(traces):
    """HtoD / DtoH copies move over PCIe: a what-if from V100 (PCIe Gen3, 16 GB/s a way) to H100
    (Gen5, 64) takes a quarter of their measured time; compute kernels scale by their class."""
    t = traces["dlrm"]
    w = whatif(t, gpu="h100")
    host = [o for o in t.ops if o.category == "copy" and o.direction in ("HtoD", "DtoH")]
    assert host
    base, var = w.baseline.graph, w.variant.graph
    for o in host:
        assert var.kernel(o.id).block_time == pytest.approx(base.kernel(o.id).block_time * 16 / 64)


def test_mi300x_rccl_trace_with_copies_of_no_recorded_size():
    """AMD TraceLens' MI300X DDP trace (rank 0 of 8, RCCL 2.22.3 ``ncclDevKernel_Generic``):
    184 device copies carry their size nowhere (neither on the copy nor on a runtime call)
    and are kept at their measured times instead of refusing the trace; every RCCL kernel
    launched inside the recording gets its kind from the ``nccl:*`` operator (5 were launched
    before it began: no launch, no kind, kept as measured); an exact replay is within 1%."""
    t = load_trace([REAL / "tracelens_mi300x_resnet_ddp_rank0.json.gz"])
    unsized = [o for o in t.ops if o.category == "copy" and o.nbytes < 0]
    assert len(unsized) == 184 and any("184 device copies" in n for n in t.notes)
    comm = [o for o in t.ops if o.category == "comm"]
    assert len(comm) == 17 and all(o.name.startswith("ncclDevKernel_Generic") for o in comm)
    launched = [o for o in comm if o.launch is not None]
    assert len(launched) == 12 and all(o.collective in ("all-reduce", "broadcast") and o.nbytes > 0 for o in launched)
    r = replay(t, "mi300x", footprints=False)
    assert abs(r.error) <= 0.01


def test_a_one_rank_replay_names_no_stand_in_interconnect(capsys):
    """HTA's 128-rank sample holds rank 0 alone: the replay's default topology only stands in
    (its collectives keep their measured times), so the CLI does not call it ``switch:2``; a
    topology the user names is printed as given."""
    from ficco_sim.cli import main
    assert main(["trace", "replay", "--source-gpu", "a100", *map(str, SAMPLED)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "one rank (no interconnect" in line and "switch" not in line
    assert main(["trace", "replay", "--source-gpu", "a100", "--topology", "switch:8", *map(str, SAMPLED)]) == 0
    assert "a100, switch:8," in capsys.readouterr().out.splitlines()[0]


def test_a_file_of_rank_1_selects_its_steps():
    """HTA's sample of rank 1 (``distributedInfo.rank`` 1): its ops are the file's device 0, and
    ``--steps`` finds their window under that (it looked under rank 1 and found none); rank 0 and
    rank 1 together select each file's own window."""
    one = load_trace(SAMPLED1, steps=[551])
    full = load_trace(SAMPLED1)
    assert 0 < len(one.ops) < len(full.ops) and one.steps and 551 in one.steps[0]
    both = load_trace(SAMPLED + SAMPLED1, steps=[551])
    assert {o.rank for o in both.ops} == {0, 1}
    r = replay(both, "a100", footprints=False)
    assert abs(r.error) <= 0.01


def test_a_gpu_trace_without_gpu_activity_says_so(tmp_path):
    """A trace naming its GPU (``deviceProperties``) whose kernels were not recorded (HazyResearch/zoology's
    ``trace.json``: A100 launches, no kernel events) is replayed as a CPU trace, and says why."""
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA A100 80GB PCIe"}], "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 3}]}))
    t = load_trace([f])
    assert not t.on_gpu and any("records no kernel" in n and "A100" in n for n in t.notes)


def test_a_rank_file_cut_short_is_said_so(tmp_path):
    """PARAM's 8-rank DLRM set with worker 3's events cut to their first half (its all-to-alls
    gone): the import says the collectives do not pair up; the untouched set says nothing."""
    files = sorted(REAL.glob("param_dlrm_v100_8ranks_worker*.json.gz"))
    assert not any("pair up" in n for n in load_trace(files).notes)
    cut = []
    for f in files:
        d = json.loads(gzip.decompress(f.read_bytes()))
        if "worker3" in f.name:
            d["traceEvents"] = d["traceEvents"][:len(d["traceEvents"]) // 2]
        cut.append(tmp_path / f.name)
        cut[-1].write_bytes(gzip.compress(json.dumps(d).encode()))
    notes = [n for n in load_trace(cut).notes if "pair up" in n]
    assert len(notes) == 1 and "rank 3 holds 0 all-to-all" in notes[0]


def test_a_pipeline_s_sends_and_receives_are_not_unpaired():
    """A 3-stage pipeline: the middle rank receives and sends, the ends do one of the two; its
    point-to-point calls pair by peer, not by group, and no note says otherwise."""
    from ficco_sim.traces.ops import TraceOp, unpaired_note
    ops = [TraceOp(f"{r}.{i}", r, "s", "ncclKernel_SendRecv", "comm", "comm", float(i), 1.0, collective="send-recv",
                   group=(0, 1, 2)) for r, n in ((0, 4), (1, 8), (2, 4)) for i in range(n)]
    assert unpaired_note(ops) is None
    ops += [TraceOp(f"ar{r}", r, "s", "ncclKernel_AllReduce", "comm", "comm", 9.0, 1.0, collective="all-reduce",
                    group=(0, 1, 2)) for r in (0, 1)]
    assert "rank 2 holds 0 all-reduce" in unpaired_note(ops)
