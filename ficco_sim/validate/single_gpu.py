"""Single-GPU (and single-process) replay: one process holds every rank's buffers.

Remote peers are replaced by local copies of the same bytes: a DMA transfer is a
contiguous ``copy_``, an SM transfer a copy kernel on the communication kernel's stream.
On one GPU a ``copy_`` is SM-scheduled work, not a copy engine: measured on an H200 its share
beside a GEMM follows stream priority as a copy kernel's does (validation/README.md, the
second H200 lease), so a "DMA" schedule's replay is not a copy-engine measurement; the
prediction still gives it one. Streams keep their priorities, so one GPU
validates the GPU-internal part of the model — contention between GEMM and copies,
priority, decomposition into pieces — without a second GPU or NCCL. On CPU the same
program runs sequentially in issue order (a correctness check; its time is the serial
sum and means little). With ``profile_dir`` one profiled replay per job is written to
``<profile_dir>/<job>.json.gz`` (one process, so one trace for all ranks).

``mode="single-process"`` places rank g on ``cuda:g`` instead (needs as many GPUs as
ranks): copies between GPUs then run on copy engines over NVLink/PCIe.

>>> from ficco_sim.validate.executor import Job, ReplayOptions, replay
>>> from ficco_sim.validate.testing import tiny_ag_gemm
>>> r = replay([Job("ag", tiny_ag_gemm())], ReplayOptions(device="cpu", mode="single-gpu", repeats=1))[0]
>>> r.correct, len(r.times)
(True, 1)
"""

from __future__ import annotations

import time

import torch

from ..taskgraph import TaskGraph
from . import reference
from .executor import (Job, ReplayOptions, ReplayResult, audit, compute_fn, device_name, op_range, oracle,
                       profiled, trace_path, verify, view)
from .plan import plan_local


def run_local_cpu(graph: TaskGraph, bufs: list[dict[str, torch.Tensor]], notes: list[str] | None = None,
                  fns: dict | None = None, label: bool = False) -> None:
    """Run the local program sequentially on CPU tensors (``bufs[r]`` = rank r's);
    ``label``: a ``ficco:<kind>:<op id>`` profiler range around every op."""
    notes = [] if notes is None else notes
    program = plan_local(graph)
    if fns is None:
        fns = {op.id: compute_fn(op, bufs[op.rank], graph, notes) for op in program.ops
               if op.kind in ("gemm", "reduce")}
    for op in program.ops:
        if op.kind == "copy":
            (sr, ss), (dr, ds) = op.io["src"], op.io["dst"]
            dst, src = view(bufs[dr], ds), view(bufs[sr], ss)
            with op_range(label, "copy", op.id):
                dst.add_(src) if op.reduce else dst.copy_(src)
        elif op.id in fns:
            with op_range(label, op.kind, op.id):
                fns[op.id]()


def _restorer(bufs: dict[int, dict[str, torch.Tensor]], graph: TaskGraph, inputs: list[str], opts: ReplayOptions):
    """A function that puts every rank's buffers back to their initial values between
    runs. On CPU: :func:`reference.reset`. On a GPU: a device copy from a snapshot taken
    once (the inputs are regenerated on the host only once per job: at 8192^2, drawing
    them again before every repeat costs seconds of CPU time per rank)."""
    if opts.device == "cpu":
        def reset() -> None:
            for r in bufs:
                reference.reset(bufs[r], graph, r, inputs, opts.seed)
        return reset
    snapshot = {r: {name: t.clone() for name, t in b.items() if name in inputs} for r, b in bufs.items()}

    def restore() -> None:
        for r, b in bufs.items():
            for name, t in b.items():
                if name in snapshot[r]:
                    t.copy_(snapshot[r][name])
                else:
                    t.zero_()
    return restore


def _devices(graph: TaskGraph, opts: ReplayOptions) -> dict[int, torch.device]:
    if opts.device == "cpu":
        return {g: torch.device("cpu") for g in range(graph.num_gpus)}
    if opts.mode == "single-process":
        n = torch.cuda.device_count()
        if n < graph.num_gpus:
            from ..errors import InputError
            raise InputError("--mode single-process", None, f"graph has {graph.num_gpus} ranks but only {n} GPUs "
                             "are visible; use --single-gpu")
        return {g: torch.device("cuda", g) for g in range(graph.num_gpus)}
    return {g: torch.device("cuda", 0) for g in range(graph.num_gpus)}


def run_single(jobs: list[Job], opts: ReplayOptions) -> list[ReplayResult]:
    """Replay each job in this process (see module docstring)."""
    feats = {}
    if opts.device == "cuda":
        from .cuda import features
        feats = features()
    results = []
    made: tuple = ()    # (key, bufs, restore, reference inputs) of the last job: one scenario's schedules share them
    for job in jobs:
        graph = job.graph
        notes: list[str] = []
        not_honoured = audit(graph, opts, feats)
        devices = _devices(graph, opts)
        dtype = reference.exec_dtype(graph, opts.device)
        inputs = reference.input_buffers(graph)
        key = (sorted((n, b.rows, b.cols) for n, b in graph.buffers.items()), inputs, dtype, sorted(devices.items()))
        if not made or made[0] != key:
            # Drawing every rank's inputs on the host takes seconds at 4096^2 and 8 ranks: once per scenario.
            bufs = {r: reference.make_inputs(graph, r, inputs, dtype, devices[r], opts.seed)
                    for r in range(graph.num_gpus)}
            made = (key, bufs, _restorer(bufs, graph, inputs, opts),
                    reference.reference_inputs(graph, opts.seed, devices[0]))   # the reference on the replay's device
        _, bufs, restore, ins = made
        times = []
        if opts.device == "cpu":
            program = plan_local(graph)
            fns = {op.id: compute_fn(op, bufs[op.rank], graph, notes) for op in program.ops
                   if op.kind in ("gemm", "reduce")}

            def once(label: bool = False) -> float:
                t0 = time.perf_counter()
                run_local_cpu(graph, [bufs[r] for r in range(graph.num_gpus)], notes, fns, label)
                return time.perf_counter() - t0
        else:
            from .cuda import CudaRunner
            runner = CudaRunner(graph, plan_local(graph), bufs, devices, notes)
            used = sorted(set(devices.values()), key=str)

            def once(label: bool = False) -> float:
                for d in used:   # the restore copies ran on each device's current stream
                    torch.cuda.synchronize(d)
                return runner.run(label)
        for i in range(opts.warmup + opts.repeats):
            restore()
            t = once()
            if i >= opts.warmup:
                times.append(t)
        if opts.device != "cpu" and (note := runner.gate_note(opts.warmup)):
            notes.append(note)
        ref_bufs = None if reference.ref_spec(graph) else oracle(graph, opts.seed)
        ok, err = True, 0.0
        for r in range(graph.num_gpus):
            o, e = verify(graph, r, bufs[r], opts.seed, ref_bufs[r] if ref_bufs else None, ins)
            ok, err = ok and o, max(err, e)
        if ref_bufs is not None:
            notes.append("no meta.reference: checked against a sequential CPU replay of the same graph")
        if opts.profile_dir:   # after the timed repeats and the check
            restore()
            meta = {"job": job.name, "ranks": graph.num_gpus, "device": opts.device, "mode": opts.mode,
                    "schedule": graph.meta.get("schedule"), "scenario": graph.meta.get("scenario")}
            with profiled(trace_path(opts.profile_dir, job.name), opts.device, meta) as m:
                m["makespan_s"] = once(label=True)
        results.append(ReplayResult(job.name, times, ok, err, not_honoured, sorted(set(notes)),
                                    device_name(opts.device)))
    return results
