"""The CUDA code paths' logic, on CPU tensors with a fake ``torch.cuda``.

Nothing here measures anything: the fake streams run every op at once, in issue order,
and the fake events hand out made-up timestamps. What is checked is the plumbing a real
GPU run depends on: which stream each op, wait and event goes to, the priority mapping
(ficco: larger = more urgent; CUDA: more negative = more urgent), the sleep gate, the
SM-copy path, and that the CUDA runner's issue order computes the right numbers.
"""

from __future__ import annotations

import contextlib
import math
import types

import pytest
import torch

import ficco_sim.validate.cuda as cuda_mod
from ficco_sim.calibrate import bench
from ficco_sim.validate import reference
from ficco_sim.validate.executor import verify
from ficco_sim.validate.plan import plan_local
from ficco_sim.validate.testing import tiny


class FakeCuda:
    """Just enough of ``torch.cuda`` for the runner and the benchmarks; logs every call."""

    def __init__(self, rng=(0, -3)):
        self.log: list[tuple] = []
        self.rng = rng
        self.clock = 0.0          # fake ms, advanced by every event record
        self.gate_open = False    # what start.query() answers
        cuda = self

        class Stream:
            def __init__(self, device=None, priority=0):
                lo, hi = cuda.rng
                self.priority = max(hi, min(lo, priority))   # torch clamps into the range
                self.device = device

            @staticmethod
            def priority_range():
                return cuda.rng

            def wait_event(self, ev):
                cuda.log.append(("wait", self, ev))

            def wait_stream(self, other):
                ev = Event()
                ev.record(other)
                self.wait_event(ev)

            def __repr__(self):
                return f"Stream(prio={self.priority})"

        class Event:
            def __init__(self, enable_timing=False, **kw):
                self.timing, self.stream, self.t = enable_timing, None, None

            def record(self, stream=None):
                self.stream = stream if stream is not None else cuda.current
                cuda.clock += 1.0
                self.t = cuda.clock
                cuda.log.append(("record", self, self.stream))

            def query(self):
                return cuda.gate_open

            def synchronize(self):
                cuda.log.append(("event_sync", self))

            def elapsed_time(self, other):
                assert self.timing and other.timing, "elapsed_time needs enable_timing on both events"
                return other.t - self.t

        self.Stream, self.Event = Stream, Event
        self.default = Stream()
        self.current = self.default

    def stream(self, s):
        cuda = self

        class Ctx:
            def __enter__(self):
                self.prev, cuda.current = cuda.current, s

            def __exit__(self, *exc):
                cuda.current = self.prev
        return Ctx()

    def current_stream(self, device=None):
        return self.current

    def _sleep(self, cycles):
        self.log.append(("sleep", self.current, cycles))

    def synchronize(self, device=None):
        self.log.append(("sync", device))

    def is_available(self):
        return True


class FakeTorch(types.SimpleNamespace):
    """The real torch, except ``cuda``; records ``_foreach_copy_`` calls."""

    def __init__(self, cuda):
        super().__init__(cuda=cuda, foreach_calls=[])

    def __getattr__(self, name):
        return getattr(torch, name)

    def _foreach_copy_(self, dsts, srcs):
        self.foreach_calls.append(len(dsts))
        torch._foreach_copy_(dsts, srcs)


@pytest.fixture
def fake(monkeypatch):
    cuda = FakeCuda()
    ft = FakeTorch(cuda)
    monkeypatch.setattr(cuda_mod, "torch", ft)
    monkeypatch.setattr(cuda_mod, "_POOLS", {})
    return ft


def _runner(graph, notes=None, dev=None):
    bufs = {r: reference.make_inputs(graph, r, reference.input_buffers(graph), torch.float32, "cpu")
            for r in range(graph.num_gpus)}
    dev = dev or {g: torch.device("cpu") for g in range(graph.num_gpus)}
    return cuda_mod.CudaRunner(graph, plan_local(graph), bufs, dev, [] if notes is None else notes), bufs


@pytest.mark.parametrize("kind", ["ag-gemm", "gemm-rs", "a2a-gemm"])
@pytest.mark.parametrize("schedule", ["shard-p2p-sm", "shard-p2p-dma", "ficco-a2a-sm-hi", "ficco-a2a-dma"])
def test_issue_order_computes_the_reference(fake, kind, schedule):
    graph = tiny(kind, schedule, gpus=3, m=12, n=5, k=3)
    runner, bufs = _runner(graph)
    span = runner.run()
    assert span == pytest.approx((runner.end.t - runner.start.t) / 1e3)   # ms -> s
    for r in range(graph.num_gpus):
        ok, err = verify(graph, r, bufs[r], 0)
        assert ok and err == 0.0, (kind, schedule, r)


@pytest.mark.parametrize("schedule", ["shard-p2p-dma", "ficco-a2a-dma", "shard-p2p-sm"])
def test_single_process_copies_between_gpus_use_a_stream_on_the_other_gpu(fake, schedule):
    """--mode single-process: rank g on its own device; a copy between two GPUs also runs on a
    stream of the other GPU (one per op stream, made with the job's own), and the result is right."""
    graph = tiny("ag-gemm", schedule, gpus=2)
    dev = {0: torch.device("cpu"), 1: torch.device("cpu", 0)}     # two distinct "devices" of the fake
    runner, bufs = _runner(graph, dev=dev)
    runner.run()
    assert runner.mirrors and all(d in dev.values() for d, _ in runner.mirrors)
    for r in range(graph.num_gpus):
        assert verify(graph, r, bufs[r], 0)[0]


def test_events_and_waits_go_to_the_op_streams(fake):
    graph = tiny("ag-gemm", "ficco-a2a-sm-hi", gpus=2)
    runner, _ = _runner(graph)
    runner.run()
    log = fake.cuda.log
    recorded = {id(e[1]): (i, e[2]) for i, e in enumerate(log) if e[0] == "record"}
    waits = [(i, e[1], e[2]) for i, e in enumerate(log) if e[0] == "wait"]
    ops = {op.id: op for op in runner.program.ops}
    for op in runner.program.ops:
        i_rec, stream = recorded[id(runner.events[op.id])]
        assert stream is runner.streams[op.stream], op.id
        for d in op.deps:
            dep_stream = runner.streams[ops[d].stream]
            if dep_stream is stream:
                continue
            # the op's stream waited for the dependency's event before the op was recorded
            assert any(s is stream and ev is runner.events[d] and i < i_rec for i, s, ev in waits), (op.id, d)


def test_sleep_gate_and_makespan_events(fake):
    graph = tiny("gemm-rs", "shard-p2p-dma", gpus=2)
    runner, _ = _runner(graph)
    runner.run()
    log = fake.cuda.log
    i_sleep = next(i for i, e in enumerate(log) if e[0] == "sleep")
    i_start = next(i for i, e in enumerate(log) if e[0] == "record" and e[1] is runner.start)
    i_end = next(i for i, e in enumerate(log) if e[0] == "record" and e[1] is runner.end)
    assert log[i_sleep][1] is runner.gate and log[i_start][2] is runner.gate and log[i_end][2] is runner.gate
    assert i_sleep < i_start < i_end
    assert runner.start.timing and runner.end.timing
    for s in runner.streams.values():   # every stream starts after the gate...
        assert any(e[0] == "wait" and e[1] is s and e[2] is runner.start for e in log[i_start:])
    for key, s in runner.streams.items():   # ...and the end waits for every stream
        ev = runner.stream_end[key]
        i_rec = next(i for i, e in enumerate(log) if e[0] == "record" and e[1] is ev)
        assert log[i_rec][2] is s
        assert any(e[0] == "wait" and e[1] is runner.gate and e[2] is ev for e in log[i_rec:i_end])
    assert any(e[0] == "event_sync" and e[1] is runner.end for e in log[i_end:])


def test_short_gate_doubles_the_sleep_and_says_so(fake):
    notes: list[str] = []
    runner, _ = _runner(tiny("ag-gemm", "shard-p2p-sm", gpus=2), notes)
    first = runner.sleep_cycles
    runner.run()
    assert runner.sleep_cycles == first and not runner.gate_short
    fake.cuda.gate_open = True      # the gate had opened before issue ended
    runner.run()
    runner.run()
    assert runner.gate_short == 2 and runner.sleep_cycles == 4 * first
    assert runner.gate_note(warmup=1) == ("sleep gate opened before the host finished issuing in 2 of 2 timed runs "
                                          "(host launch time in those makespans); its sleep was doubled after each")
    fake.cuda.gate_open = False
    runner.run()
    assert "in 2 of 3 timed runs" in runner.gate_note(warmup=1)
    assert runner.gate_note(warmup=3) is None       # early gates in warm-up runs only: no note


def test_priorities_follow_ficco_order_and_ranks_get_their_own_streams(fake):
    graph = tiny("ag-gemm", "ficco-a2a-sm-hi", gpus=2)
    prios = {(s.gpu, s.name): s.priority for s in graph.streams}
    assert len(set(prios.values())) > 1
    runner, _ = _runner(graph)
    for key, s in runner.streams.items():
        for other, t in runner.streams.items():
            if prios[key] > prios[other]:          # more urgent in ficco...
                assert s.priority < t.priority      # ...is a more negative CUDA priority
    assert min(s.priority for s in runner.streams.values()) >= fake.cuda.rng[1]
    assert max(s.priority for s in runner.streams.values()) == fake.cuda.rng[0]
    # two emulated ranks on one device never share a CUDA stream
    assert len({id(s) for s in runner.streams.values()}) == len(runner.streams)
    assert runner.gate.priority == fake.cuda.rng[0]


def test_sm_transfers_are_copy_kernels_dma_transfers_are_not(fake):
    _runner(tiny("ag-gemm", "shard-p2p-sm", gpus=2))[0].run()
    assert fake.foreach_calls
    fake.foreach_calls.clear()
    _runner(tiny("ag-gemm", "shard-p2p-dma", gpus=2))[0].run()
    assert not fake.foreach_calls


def test_foreach_copy_only_where_it_fuses():
    a, b = torch.zeros(4, 3), torch.ones(4, 3)
    assert cuda_mod.foreach_is_kernel([a[:2], a[2:]], [b[:2], b[2:]])
    assert not cuda_mod.foreach_is_kernel([a.t()], [torch.ones(3, 4)])          # strides differ
    assert not cuda_mod.foreach_is_kernel([a], [b.half()])                        # dtype differs
    assert not cuda_mod.foreach_is_kernel([a[:, :2]], [torch.ones(4, 2)])        # not contiguous


def test_a_jobs_streams_are_its_own_up_to_the_pool_and_beyond_it_raw(fake):
    """The i-th stream of a priority is the same object in every job (so streams made by
    earlier jobs never push a later job's past torch's pool of 32), and past 32 a stream of the
    lowest priority is a raw one; only where none can be made does the result say streams share."""
    dev, pool = torch.device("cpu"), cuda_mod.STREAM_POOL
    first = [cuda_mod.pooled(dev, 0, i, 0) for i in range(3)]
    assert [cuda_mod.pooled(dev, 0, i, 0) for i in range(3)] == first and all(own for _, own in first)
    # this fake torch has no cudart binding: past the pool the stream shares a queue
    assert cuda_mod.pooled(dev, 0, pool, 0)[1] is False
    assert cuda_mod.aliased_pools({(0, 0): pool + 1}, {(0, 0): 1}) == [
        f"cuda:0 priority 0: {pool + 1} streams, 1 sharing a queue"]
    assert cuda_mod.aliased_pools({(0, 0): 3}, {(0, 0): 0}) == []
    # with one, past the pool a lowest-priority stream is a raw stream of its own; others still share
    made = []

    class Cudart:
        def cudaStreamCreate(self, ptr):
            import ctypes
            ctypes.c_void_p.from_address(ptr).value = 0x1000 + len(made)
            made.append(ptr)
            return 0
    fake.cuda.cudart = lambda: Cudart()
    fake.cuda.device = lambda d: contextlib.nullcontext()
    fake.cuda.ExternalStream = lambda ptr, device=None: ("raw", ptr)
    stream, own = cuda_mod.pooled(dev, 0, pool + 1, 0)
    assert own and stream == ("raw", 0x1000)
    assert cuda_mod.pooled(dev, -3, pool, 0)[1] is False


# -- calibration benchmarks ----------------------------------------------------------------

class Rows:
    def __init__(self):
        self.rows = []

    def add(self, **row):
        self.rows.append(row)


def test_priority_bench_puts_the_small_gemm_on_the_urgent_stream(monkeypatch):
    cuda = FakeCuda(rng=(0, -3))
    made = []
    orig = cuda.Stream

    class Stream(orig):
        def __init__(self, device=None, priority=0):
            super().__init__(device, priority)
            made.append(self)
    Stream.priority_range = staticmethod(lambda: cuda.rng)
    cuda.Stream = Stream
    rows = Rows()
    cfg = dict(base=(64, 64, 64), repeats=2)
    bench._priority(FakeTorch(cuda), torch.device("cpu"), rows, cfg, torch.float32, "float32")
    assert [r["priority"] for r in rows.rows] == ["normal", "high"]
    bg, normal, high = made
    assert (bg.priority, normal.priority, high.priority) == (0, 0, -3)
    # the small GEMM's events are on its own stream, after it waited for the big queue
    for st in (normal, high):
        recs = [e for e in cuda.log if e[0] == "record" and e[2] is st]
        assert len(recs) == 2 * cfg["repeats"] and all(e[1].timing for e in recs)
        assert any(e[0] == "wait" and e[1] is st for e in cuda.log)


def test_contention_bench_times_the_gemm_while_copies_run(monkeypatch):
    cuda = FakeCuda()
    ft = FakeTorch(cuda)
    dev = types.SimpleNamespace(type="cuda")
    # tensors live on the CPU: drop the fake device argument
    for name in ("randn", "empty"):
        real = getattr(torch, name)
        setattr(ft, name, lambda *a, _real=real, device=None, **kw: _real(*a, **kw))
    timer = lambda fn: (fn(), (4e-3, 0, 0))[1]   # noqa: E731 - "alone" and "copy" times, made up
    rows = Rows()
    bench._contention(ft, dev, timer, rows, dict(contention=(8, 1024), repeats=3), torch.float32, "float32")
    (row,) = rows.rows
    copies = max(4, math.ceil(3 * 4e-3 / 4e-3))
    copy_stream = next(e[2] for e in cuda.log if e[0] == "record")
    recs = [e for e in cuda.log if e[0] == "record"]
    assert sum(e[2] is copy_stream for e in recs) == 3 * (1 + copies)
    assert sum(e[2] is not copy_stream for e in recs) == 3 * 2          # g0, g1 on the GEMM's stream
    # the GEMM's stream waits for the first copy to finish, so copies are running meanwhile
    waits = [e for e in cuda.log if e[0] == "wait"]
    assert len(waits) == 3 and all(w[1] is not copy_stream and w[2].stream is copy_stream for w in waits)
    # fake clock: c0=1, copies end 2..5, g0=6, g1=7: no copy bytes inside the GEMM window
    assert row["time_s"] == pytest.approx(1e-3) and row["copy_gbps"] == 0.0


def test_bytes_between_splits_copies_linearly():
    assert bench.bytes_between([2.0, 4.0], 10, 0.0, 4.0) == 20.0
    assert bench.bytes_between([2.0, 4.0], 10, 1.0, 3.0) == pytest.approx(10.0)
    assert bench.bytes_between([2.0, 4.0], 10, 5.0, 6.0) == 0.0
