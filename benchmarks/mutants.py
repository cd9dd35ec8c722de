"""Switch engine mechanisms off one at a time and check the test suite notices.

Each mutant is a one-line change to a copy of the package (never to this checkout); the suite
runs against the copy and the table says which test went red first. A mutant no test kills is a
mechanism the suite cannot see.

    python benchmarks/mutants.py [--only NAME ...] [--tests tests/ | FILE ...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (file, text, replacement, what it switches off)
MUTANTS = {
    "smem-shaping": ("ficco_sim/schedules/builder.py",
                     "plan = plan_gemm(self.gpu, m, n, k, dtype, extra_smem=self.extra_smem, accumulate=accumulate,",
                     "plan = plan_gemm(self.gpu, m, n, k, dtype, extra_smem=0, accumulate=accumulate,",
                     "shared-memory shaping of GEMM blocks"),
    "comm-contention": ("ficco_sim/contention.py",
                        "    return 1.0 + weights.hbm * cover * gpu.contention.comm_per_hbm_util",
                        "    return 1.0 + 0.0 * cover * gpu.contention.comm_per_hbm_util",
                        "the slowdown of transfers by a concurrent GEMM's HBM traffic"),
    "gemm-roofline": ("ficco_sim/gemm_model.py",
                      "    p = gpu.gemm.roofline_exponent if gemm else math.inf",
                      "    p = math.inf",
                      "GEMM waves paying the HBM time their math does not hide (gemm.roofline_exponent)"),
    "des-roofline": ("ficco_sim/engine/des.py",
                     "        if math.isinf(p):\n            return None",
                     "        if True:\n            return None",
                     "the DES's GEMM cohorts slowed by the traffic their math does not hide"),
    "fc-nccl-rings": ("ficco_sim/schedules/collectives.py",
                      'topology_kind == "fc" and spec is not None and spec.fully_connected == "ring")))',
                      'topology_kind == "fc" and spec is not None and False)))',
                      "NCCL's rings on a fully connected topology (comm_kernel.fully_connected)"),
    "fc-every-ring": ("ficco_sim/schedules/rings.py",
                      "EVERY_RING_GPUS = 4 ", "EVERY_RING_GPUS = 3 ",
                      "every ring order on 4 fully connected GPUs (no link-disjoint set covers them)"),
    "ring-split-structure": ("ficco_sim/explore/estimate.py",
                             '    return (*structure, "rings", scenario.m, scenario.n, scenario.k)',
                             "    return structure",
                             "closed-form templates at their own sizes where rows split over several rings"),
    "launch-issue-order": ("ficco_sim/engine/launch.py",
                           "            delay = max(delay, latest.get(t.gpu, 0.0))",
                           "            delay = delay",
                           "kernels issued with nothing to wait for reaching the GPU in issue order"),
    "persistent-gemm-sms": ("ficco_sim/engine/dispatcher.py",
                            "                    if w is not None and w.unplaced > 0:",
                            "                    if False:",
                            "a persistent GEMM's SMs passing to its own next tiles, whatever the priorities (DES)"),
    "persistent-gemm-handoff": ("ficco_sim/engine/closed_form_overlap.py",
                                '    kept = np.append(ck.gemm_persistent, False)[run["j"]]',
                                '    kept = np.append(ck.gemm_persistent, False)[run["j"]] & False',
                                "a persistent GEMM's SMs passing to its own next tiles (closed form)"),
    "persistent-gemm-tie": ("ficco_sim/engine/closed_form_overlap.py",
                            "    first = np.where(kept, ahead, first)",
                            "    first = np.where(kept, True, first)",
                            "a collective released with a persistent GEMM ordered as the dispatcher orders them"),
    "queued-first": ("ficco_sim/engine/des.py",
                     "queued = i > 0 and all(e.triggered for e in events)",
                     "queued = False",
                     "a kernel queued on its stream reaching the SMs before one another stream's event wakes (DES)"),
    "queued-first-tie": ("ficco_sim/engine/closed_form_overlap.py",
                         "    first = np.where(gemm_queued != ck.queued[None, :], gemm_queued, first)",
                         "    first = first",
                         "the same arrival order in the closed form's tie rule"),
    "fp32-waves": ("ficco_sim/hardware_specs.py",
                   'return self.persistent and dtype != "float32"',
                   "return self.persistent",
                   "plain fp32 GEMMs as waves of blocks where the tensor-core ones are persistent"),
    "profile-dispatch": ("ficco_sim/engine/des.py", "policy or gpu.dispatch", 'policy or "backfill"',
                         "the profile's block-scheduler policy (head of line on H100/H200, measured)"),
    "persistent-pending": ("ficco_sim/engine/dispatcher.py",
                           "return min(self.unplaced, self.grid - self.launched) if self.persistent else self.unplaced",
                           "return self.unplaced",
                           "a persistent kernel holding back others only with blocks not yet launched (head of line)"),
    "gemm-sustained": ("ficco_sim/hardware.py", "efficiency={d: e * base.gemm.sustained", "efficiency={d: e * 1.0",
                       "a <gpu>:sustained profile's GEMMs at the steady-stream rate (gemm.sustained)"),
    "gemm-measured": ("ficco_sim/gemm_model.py", "    if measured and gpu.gemm.measured:\n        block_time = block_time *",
                      "    if False:\n        block_time = block_time *",
                      "a GEMM the profile timed (gemm.measured) costing its measured time"),
    "trace-gemm-alone": ("ficco_sim/traces/gemm_times.py", "if end <= start or union_length(other) >= ALONE * (end - start):",
                         "if end <= start:", "a trace's GEMM timed only where it ran alone (calibrate --keep-times)"),
    "gemm-under-occupied": ("ficco_sim/gemm_model.py", "    return (b / o) * latency_hiding(gpu, o) / latency_hiding(gpu, b)",
                            "    return 1.0 + 0.0 * b", "a GEMM of a grid under one wave running its blocks fewer per SM "
                            "than its occupancy, faster, in both engines"),
    "des-under-occupied": ("ficco_sim/engine/des_wiring.py", "        return float(under_occupied(self.gpu,",
                           "        return 1.0 + 0 * float(under_occupied(self.gpu,",
                           "the DES's GEMM cohorts with fewer of their kernel's blocks per SM running faster"),
    "trace-free-sms": ("ficco_sim/traces/graph.py", "        self.free = free_sms(trace.ops, gpu) if footprints else {}",
                       "        self.free = {}", "a measured kernel's block time read against the SMs the kernels "
                       "already running beside it left"),
    "trace-legacy-kineto": ("ficco_sim/traces/kineto_io.py", "    if isinstance(cat, str) and cat in LEGACY_CATS:",
                            "    if False:", "PyTorch 1.8's Kineto category names read as today's"),
    "trace-work-items": ("ficco_sim/traces/kineto.py", '    work_items = call.name == "ExtModuleLaunchKernel"',
                         "    work_items = False", "hipExtModuleLaunchKernel's grids read as work-items"),
    "trace-rooted-coupled": ("ficco_sim/traces/graph.py",
                             'COUPLED = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"}',
                             'COUPLED = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "broadcast"}',
                             "a rooted collective's members keep their own times (not held to end together)"),
    "trace-steps-file-rank": ("ficco_sim/traces/kineto_set.py", "    if len(files) == 1:     # one file: its ops'",
                              "    if False:     # one file: its ops'", "a single file's steps found whatever rank "
                              "it says it is"),
    "nccl-ring-tuner": ("ficco_sim/hardware_specs.py", "        if self.ring_bus_bw > 0:\n            ring = tuned",
                        "        if False:\n            ring = tuned",
                        "a ring call's protocol picked from NCCL's own tuning table, not by the protocols' own costs"),
    "et-plus-launch-times": ("ficco_sim/traces/et_json.py", "        moved = _gpu_starts(trace)",
                             "        moved = 0", "a linked execution trace's GPU nodes read as timed at their launch"),
    "cil-comm-union": ("ficco_sim/metrics.py",
                       "        num = num + union_lengths(xfer_ready[:, xi], xfer_end[:, xi])\n"
                       "        den = den + union_lengths(xfer_ready_alone[:, xi], xfer_end_alone[:, xi])",
                       "        num = num + (xfer_end[:, xi] - xfer_ready[:, xi]).sum(1)\n"
                       "        den = den + (xfer_end_alone[:, xi] - xfer_ready_alone[:, xi]).sum(1)",
                       "cil_comm as the time some transfer is under way (a union), not a sum of spans"),
    "sustained-to-burst": ("ficco_sim/calibrate/workflow.py", "        to_burst(cal, base)", "        pass",
                           "a steady-clock calibration written at the burst rate"),
    "profile-unknown-keys": ("ficco_sim/hardware.py", "    r.check_unknown()", "    pass",
                             "a profile key nothing reads refused"),
    "handoff-persistent": ("ficco_sim/gemm_model.py",
                           "    return room & ~np.asarray(persistent, dtype=bool)", "    return room",
                           "no hand-off beside a persistent GEMM (its blocks pass SMs from tile to tile)"),
    "par-shaping-candidates": ("ficco_sim/explore/space.py",
                               "            out += [Schedule(\"par\", engine=\"sm\", priority=prio, smem=z) for z in "
                               "smem_sizes(scenario, gpu)]",
                               "            out += []",
                               "recommend weighing shaping for a GEMM beside an independent collective"),
    "memory-capacity": ("ficco_sim/workload.py", "    if cap and need > cap:", "    if False:",
                        "sizes whose GEMM operands cannot fit the GPU's memory refused"),
    "link-max-min": ("ficco_sim/engine/closed_form_overlap.py", "LEFTOVER_ROUNDS = 2", "LEFTOVER_ROUNDS = 0",
                     "the closed form's max-min passes (what the others leave of a link)"),
    "posted-stores": ("ficco_sim/engine/des.py", "        held = math.isfinite(self.gpu.gemm.peer_rate)",
                      "        held = True", "posted epilogue stores leaving the SMs to the next wave (Ampere, Flux)"),
    "store-link-sharing": ("ficco_sim/engine/closed_form_tiles.py",
                           "    turned = ranks == list(range(n)) and k.gpu < n and (storing is None or set(ranks) <= storing)",
                           "    turned = False",
                           "the closed form's fused stores sharing links with every rank's"),
    "rows-wait": ("ficco_sim/engine/des_wiring.py", "            if tid and not self.done[tid].triggered:",
                  "            if False:", "a fused all-gather GEMM's tiles waiting for their rows (the DES)"),
    "gate-tail": ("ficco_sim/engine/closed_form_tiles.py",
                  "                out[rows, c] = done.rest(blocks) - 1.0",
                  "                out[rows, c] = 0.0", "the closed form's GEMM running the rest once rows land"),
    "emptiest-sm": ("ficco_sim/engine/dispatcher.py",
                    "                room = room[np.argsort(-fit[room], kind=\"stable\")[:extra]]",
                    "                room = room[:extra]", "a kernel's leftover blocks going to the emptiest SMs"),
    "mixed-launch-order": ("ficco_sim/schedules/schedule.py",
                           "        return self.gemm_first or (self.mixed and gpu % 2 == 1)",
                           "        return self.gemm_first",
                           "a launch order that differs across ranks (par-*-mix: the odd GPUs' GEMM first)"),
    "mix-classes": ("ficco_sim/engine/symmetry.py", "                      _issued_before(tpl)], axis=1)",
                    "                      np.zeros(tpl.num_nodes, dtype=np.int64)], axis=1)",
                    "the sweeps' rank classes telling GPUs that issue in another order apart"),
    "host-pace": ("ficco_sim/traces/graph.py",
                  "            if op.host and op.launch is not None and op.launch > allowed:",
                  "            if False:", "a trace's host launches keeping their pace in a what-if"),
    "trace-tf32": ("ficco_sim/traces/replay.py", '    if dtype == "float32" and any(t in op.name.lower() for t in TF32_KERNEL):',
                   "    if False:", "a traced float32 GEMM on a tensor-core kernel read as tfloat32"),
    "late-channel-handshake": ("ficco_sim/engine/des.py",
                               "late = rec.start < self.env.now and self.gpu.handshake_of(k.kind) + k.setup",
                               "late = 0",
                               "a communication kernel's channels placed later paying their own handshake"),
    "copy-engines": ("ficco_sim/engine/des.py",
                     "self.engines = [[simpy.Resource(env, 1) for _ in range(gpu.dma.engines)]",
                     "self.engines = [[simpy.Resource(env, 10**6) for _ in range(gpu.dma.engines)]",
                     "one command at a time per copy engine"),
    "copy-engine-count": ("ficco_sim/schedules/builder.py",
                          "e = (offset if engine is None else engine) % self.copy_engines",
                          "e = (offset if engine is None else engine)",
                          "the number of copy engines commands are spread over"),
    "copy-engines-used": ("ficco_sim/schedules/builder.py",
                          "        self.copy_engines = copy_engines or gpu.dma.engines",
                          "        self.copy_engines = gpu.dma.engines",
                          "a copy-engine schedule's c<N>: its copies queued on N engines (par-dma-c1)"),
    "channel-residency": ("ficco_sim/engine/des.py",
                          "bw = self.resident[k.id] * self.gpu.comm_kernel.channel_bandwidth",
                          "bw = k.grid * self.gpu.comm_kernel.channel_bandwidth",
                          "SM transfers moving only as fast as their kernel's resident channels"),
    "even-spread": ("ficco_sim/engine/dispatcher.py",
                    "            counts = np.minimum(fit, lo)\n",
                    "            counts = np.zeros_like(fit); lo = 0\n",
                    "the dispatcher spreading blocks evenly over SMs (water-filling)"),
    "reduce-hbm": ("ficco_sim/engine/des_wiring.py",
                   '(3.0 if reduce else 1.0)', '(1.0 if reduce else 1.0)',
                   "the HBM traffic of reducing a received chunk into the destination"),
    "protocol-latency": ("ficco_sim/engine/sm_transfers.py",
                         "[self.pair] + np.array([q.latency for q in spec.protocols])[p]", "[self.pair]",
                         "the per-step latency of the SM collective's wire protocol"),
    "protocol-efficiency": ("ficco_sim/engine/sm_transfers.py",
                            "self.wire = self.nbytes / np.array([q.efficiency for q in spec.protocols])[p]",
                            "self.wire = self.nbytes",
                            "the protocol's flag bytes sent with the payload (LL: half the wire)"),
    "local-copy-rate": ("ficco_sim/hardware_specs.py",
                        "return self.bandwidth if src != dst else math.inf", "return self.bandwidth",
                        "a same-device copy limited by HBM, not by the engine's peer-link rate"),
    "call-floor": ("ficco_sim/hardware.py",
                   'if kind == "comm" and self.comm_kernel.launch is not None:',
                   'if False:',
                   "the collective call floor of communication kernels"),
    "gemm-waits": ("ficco_sim/engine/closed_form_overlap.py",
                   "wait = np.where((j < G) & shut,", "wait = np.where((j < G) & shut & False,",
                   "closed form: a GEMM waiting for the SMs a memory kernel of its GPU holds"),
    "uneven-wave": ("ficco_sim/engine/closed_form_overlap.py",
                    'used, count, full = run["used" + key], run["count" + key], run["full" + key]',
                    'used, count, full = run["used" + key], run["count" + key], run["used" + key]',
                    "closed form: a GEMM's blocks spread evenly, lighter SMs leaving room beside"),
    "retire-one-at-a-time": ("ficco_sim/engine/dispatcher.py",
                             "        if len(waiting) < 2 or not retired:", "        if True:",
                             "blocks that end at one instant retiring one per SM at a time, a dispatch after each"),
    "host-launch-order": ("ficco_sim/engine/dispatcher.py",
                          "            if w.issued or i == len(arrived) - 1:", "            if i == len(arrived) - 1:",
                          "kernels the host launched at one instant dispatched in launch order"),
    "latency-hiding": ("ficco_sim/gemm_model.py", "    if extra_smem and occ >= 1:", "    if False:",
                       "a GEMM shaped below its own occupancy losing SM throughput"),
    "handoff": ("ficco_sim/engine/closed_form_overlap.py", " & handoff\n", "\n",
                "closed form: a higher-priority kernel taking a retiring block's slot only if it fits there"),
    "early-transfers": ("ficco_sim/engine/closed_form_contention.py", "    early = a < end\n", "    early = a < np.inf\n",
                        "closed form: HBM contention only from transfers under way before the GEMM run ends"),
    "hbm-integrated": ("ficco_sim/contention.py", "        t = base * (1.0 + other) + excess(t)",
                       "        t = t", "closed form: the HBM factor integrated over the covered time of the slowed run"),
    "link-sweep": ("ficco_sim/engine/closed_form_overlap.py",
                   "count = np.cumsum(np.where(order < C, 1, -1), axis=1)",
                   "count = np.cumsum(np.where(order < C, 1, 0), axis=1)",
                   "closed form: a link's transfer count stepping down as transfers end"),
    "peer-rate": ("ficco_sim/engine/des.py", "cap = blocks * self.gpu.gemm.peer_rate",
                  "cap = math.inf", "a fused GEMM's storing blocks moving at most blocks x peer_rate"),
    "peer-rate-closed-form": ("ficco_sim/engine/closed_form_tiles.py", "    if np.isfinite(gpu.gemm.peer_rate):",
                              "    if False:", "closed form: the stores' per-block rate"),
    "channel-rule": ("ficco_sim/engine/sm_transfers.py",
                     "self.chan_use = np.where(sends, 1.0, grid / channels) if n else np.zeros(0)",
                     "self.chan_use = np.ones(n)", "a small collective call running on fewer channels (NCCL's rule)"),
    "channel-rule-closed-form": ("ficco_sim/engine/closed_form_tables.py",
                                 "floor = np.where(channels < grid, np.where(own, 1.0 / spec.channel_bandwidth, "
                                 "grid / chan) / channels, 0.0)",
                                 "floor = np.zeros_like(channels)", "closed form: NCCL's channel rule"),
    "fit-visible": ("ficco_sim/calibrate/fit_nccl.py",
                    "        if np.nanmax(np.abs(np.log(moved / ref)), initial=0.0) >= SEEN:", "        if True:",
                    "calibrate: a mechanism no row sees kept, not fitted"),
    "p2p-fill": ("ficco_sim/engine/sm_transfers.py",
                 "+ spec.p2p_fill(self.wire, tuned[:, 0], tuned[:, 1], channels))", ")",
                 "DES: a grouped send's last chunk copied out of the staging buffer after the rest"),
    "p2p-fill-closed-form": ("ficco_sim/engine/closed_form_tables.py",
                             " + spec.p2p_fill(payload / eff, call, ranks, channels)", "",
                             "closed form: a grouped send's last chunk"),
    "p2p-rule": ("ficco_sim/hardware_specs.py", "        if self.p2p is not None:", "        if False:",
                 "NCCL's p2p rule: a grouped send's channels and protocol"),
    "p2p-lowering": ("ficco_sim/schedules/collectives.py", "    return (0.0, float(b.num_gpus))", "    return ()",
                     "all-to-all and send-recv lowered as grouped sends"),
    "p2p-cap": ("ficco_sim/engine/sm_transfers.py",
                "self.cap = np.where(sends, channels * spec.channel_bandwidth, np.inf) if n else np.zeros(0)",
                "self.cap = np.full(n, np.inf)", "DES: a grouped send capped by its own channels"),
    "p2p-own-closed-form": ("ficco_sim/engine/closed_form_tables.py",
                            "np.where(own, 1.0 / spec.channel_bandwidth, grid / chan)", "(grid / chan)",
                            "closed form: a grouped send's own channels, not a share of its kernel's"),
    "tuner-size": ("ficco_sim/schedules/collectives.py",
                   'seen = rank_bytes if b.gpu.comm_kernel.tuner == "rank" else call_bytes', "seen = call_bytes",
                   "NCCL before 2.22 sizing an all-gather or reduce-scatter by one rank's share"),
    "call-protocol": ("ficco_sim/hardware_specs.py",
                      "p = np.asarray(self.protocol_index(np.where(tuned, size / np.maximum(ranks, 1), x)))",
                      "p = np.asarray(self.protocol_index(x))", "the protocol picked on the collective call's size"),
    "nvls-setup": ("ficco_sim/schedules/collectives.py", "setup=b.gpu.comm_kernel.nvls_latency", "setup=0.0",
                   "an NVLS call's setup before its bytes move"),
    "issue-per-gpu": ("ficco_sim/simulate.py", "issue = (gpus_per_thread - 1) * gpu.comm_kernel.issue", "issue = 0.0",
                      "one thread issuing the kernels of every GPU it drives, one after another"),
}


def run(name: str, tests: list[str]) -> dict:
    path, old, new, what = MUTANTS[name]
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__",
                                                                     ".hypothesis", ".pytest_cache"))
        f = copy / path
        text = f.read_text()
        if old not in text:
            return {"mutant": name, "switches off": what, "killed by": "(mutation site not found)", "seconds": 0}
        f.write_text(text.replace(old, new, 1))
        t0 = time.time()
        env = dict(os.environ, PYTHONPATH=str(copy))
        out = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                             cwd=copy, env=env, capture_output=True, text=True)
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out.stdout, flags=re.M)     # (a fixture that fails: ERROR)
        return {"mutant": name, "switches off": what, "killed by": failed[0] if failed else "NOT KILLED",
                "seconds": round(time.time() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=list(MUTANTS))
    ap.add_argument("--tests", nargs="+", default=["tests/"], help="test files or directories (default tests/)")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    rows = [run(n, args.tests) for n in (args.only or MUTANTS)]
    table = Table(title="engine mechanisms switched off, and the test that notices")
    for c in rows[0]:
        table.add_column(c)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console(width=200).print(table)
    if any(r["killed by"] == "NOT KILLED" for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
