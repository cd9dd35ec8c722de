"""Collectives against published nccl-tests / rccl-tests runs (../shared/measurements/nccl-tests/):
fit the NCCL software mechanisms (collective-call floor, host issue time per GPU a thread
drives, link latency, per-step latency of the LL / LL128 / Simple protocols, the share of
NVLink SM-driven traffic reaches) across sources, and report the error of every row, per
(GPU, collective, size band).

    python benchmarks/collective_error.py                  # error table with the shipped profiles
    python benchmarks/collective_error.py --fit            # refit: NVIDIA sources held out one at a time
    python benchmarks/collective_error.py --older          # the runs of an older NCCL (OLDER_NCCL), on their own

NCCL's source fixes the rest (protocol payload shares, the channel rule, which size its tuner
sees: the version of NCCL a run used decides it, the protocol its tuner picks from its own
table, the NVLS latency of its tuner). A fit on one NVIDIA source is scored on the other
(held out). The shipped numbers: the host's share of a call (its floor, the issue time per
GPU a thread drives) fitted on every NVIDIA row, each GPU's wire (link latency, protocol
step latencies, SM share, NVLS channels) on its own rows; scored on the runs never fitted
on. The rows they were fitted on are marked
``used_for_fit`` in ``validation/public/nccl_tests.csv``. The raw runs of :data:`HELD_OUT`
(``validation/nccl-tests/``, e.g. NVIDIA's own 8x H100 all-reduce sample) are never fitted
on: every fit is scored on them.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
from pathlib import Path

import pandas as pd

from ficco_sim import load_gpu
from ficco_sim.calibrate.fit_nccl import FIT_FROM, fit, predict, summary, tidy, with_fitted
from ficco_sim.calibrate.nccl_tests import KIND
from ficco_sim.calibrate.nccl_tests import read as read_nccl_tests

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "measurements" / "nccl-tests" / "nccl_tests.csv"
RAW = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests"
# raw nccl-tests output from sources no fit ever sees (validation/nccl-tests/README.md): NVIDIA's 8 x H100
# all-reduce sample, microsoft/superbenchmark's 8 x A100 runs of four collectives, xxrjun/nccl-tests-cluster's
# 8 and 4 x H100 runs of five, odissei-benchmarks/nccl-tests' 4 x H100 without a switch, three;
# (source URL, GPU as the shared table names it, topology kind, NCCL tuner: the file's own when None)
HOST = ("launch_us", "issue_us")      # the host's share of a call: fitted on every row of a vendor, not per GPU
HELD_OUT = {"h100x8_exemplar_all_reduce.txt": (
    "https://github.com/NVIDIA/exemplar-performance/blob/e249aa3c788284d1575379ccf73568c383d4c91e/"
    "microbenchmarks/nccl/README.md", "H100-SXM-80GB", "switch", None),
    # logs of 2021 (unchanged since 2021-12-30): an NCCL of 2.11 or earlier, whose tuner sized an
    # all-gather or reduce-scatter by one rank's share
    **{f"a100x8_superbench_{c}.txt": (
        f"https://github.com/microsoft/superbenchmark/blob/700d6501f110ed17a7016f1b9f2e453926f7b7a1/tests/data/"
        f"nccl_{c.replace('_', '')}.log", "A100-SXM4-40GB", "switch", "rank")
       for c in ("all_gather", "reduce_scatter", "all_reduce", "alltoall")},
    # 8 and 4 H100 on one host, NCCL 2.29.2, five collectives each, 32 MiB - 16 GiB (Apache-2.0)
    **{f"h100x{n}_xxrjun_cnode3-002.txt": (
        f"https://github.com/xxrjun/nccl-tests-cluster/blob/455de4f8dee2fa94cd4044a7109fd8c576f9e6c1/benchmarks/"
        f"example-cluster01/nccl-benchmark-results/single-node/runs/20260128-145017/without-debug/logs/"
        f"nccl_N1_G{n}_cnode3-002.log", "H100-SXM-80GB", "switch", None) for n in (8, 4)},
    # 4 H100 wired to each other by NVLink, no NVSwitch (SURF's Snellius; "NVLS multicast
    # support is not available", 16 p2p channels per peer: 6 NVLinks each way), one thread for the
    # four, NCCL 2.22.3, 4 B - 128 MiB (BSD-3-Clause)
    **{f"h100x4fc_odissei_{c}.txt": (
        f"https://github.com/odissei-benchmarks/nccl-tests/blob/6df4cb51b780659db72884d2174ae69244d45da0/runs/"
        f"1node/{c + ('' if c == 'all_reduce' else '_perf')}.log", "H100-NVLink-mesh", "fc", None)
       for c in ("all_gather", "reduce_scatter", "all_reduce")},
    # 8 A100-SXM4-40GB on one host (a cloud job's worker), one thread for the eight (nGpus 8), all-reduce 1 MiB -
    # 1 GiB, NCCL version not printed: a test fixture of a training system's profiler, as nccl-tests printed it
    # (Apache-2.0)
    "a100x8_galvatron_all_reduce.txt": (
        "https://github.com/AFDWang/Hetu-Galvatron/blob/6f77a6cb29a6fc165db86b434010e306f76285ad/tests/profiler/"
        "test_hardware_profile.py", "A100-SXM4-40GB", "switch", None)}
# raw runs of an NCCL older than the one the model describes, scored on their own (--older), never pooled with
# the above: before NCCL 2.9 one process driving several GPUs launched all their kernels together (launch mode
# GROUP, src/init.cc of 2.7-2.8: one cooperative multi-device launch where the GPUs allow it, src/enqueue.cc),
# where the model's host issues them one by one (comm_kernel.issue, NCCL 2.9+'s PARALLEL default); its p2p path
# (all-to-all) is older too.
# 2-8 of the 8 A100-SXM4-80GB of one CoreWeave HGX node (NVSwitch), 2023-06: all-gather and all-reduce one thread
# for every GPU (-g N), all-to-all one thread per GPU (-t N); rows tagged "[STAT]:" by the fork; NCCL 2.7.3 (the
# same folder's debug run on the same host prints it), a tuner sizing by one rank's share (BSD-3-Clause)
OLDER_NCCL = {**{f"a100x{n}_coreweave_{c}.txt": (
    f"https://github.com/abhivijay96/nccl-tests/blob/5eae14c1efc6a5a36f9d9669b67f29d1d8a9d8a5/exps/cw/{c}_{n}.txt",
    "A100-SXM4-80GB", "switch", "rank") for c in ("all_gather", "all_reduce", "alltoall") for n in range(2, 9)},
    # 4 and 8 of the 8 A100-SXM4-40GB of one ABCI 2.0 compute node (A), one process per GPU (mpirun, nGpus 1),
    # all-reduce 4 B - 32 MiB, 2021-06; NCCL 2.8.4-1 (the repository's allreduce/README.md), nccl-tests of
    # commit 0b30de5 (no Group, no root, an "error" column for #wrong) (MIT)
    **{f"a100x{n}_abci_all_reduce.txt": (
        f"https://github.com/aistabci/abci2.0benchmark/blob/f0aa27f2fbbbc09b71d1765c83693f0beef8b43f/allreduce/"
        f"intra_anode/{job}.nccl", "A100-SXM4-40GB", "switch", "rank")
       for n, job in ((4, "job04.sh.7280520"), (8, "job08.sh.7280517"))}}
SYSTEMS = {"H100-SXM-80GB": ("h100", "switch"), "H100-NVLink-mesh": ("h100", "fc"), "A100-SXM4-40GB": ("a100", "switch"),
           "A100-SXM4-80GB": ("a100", "switch"), "MI300X": ("mi300x", "fc")}
VENDOR = {"h100": "nccl", "a100": "nccl", "mi300x": "rccl"}


def gpus_per_thread(env_notes: str, gpus: int) -> int:
    """GPUs one host thread drove in a run of the shared table, from its ``env_notes``: the
    ``-g N`` of nccl-tests, 1 under ``mpirun`` without it, else one process for all (the
    single-process scripts of waynehacking8/nccl-collectives-bench).

    >>> gpus_per_thread("default env, single process -g 4, iters 50", 4), gpus_per_thread("mpirun -n 8", 8)
    (4, 1)
    """
    m = re.search(r"-g\s*(\d+)", env_notes)
    if m:
        return int(m.group(1))
    return 1 if "mpirun" in env_notes else gpus


def load(path: Path = DATA) -> pd.DataFrame:
    """The measured rows: NCCL's default algorithm, or the one a run pinned (Ring, NVLS); the
    GPUs a thread drove and the NCCL version, as each source says."""
    d = pd.read_csv(path)
    d = d[d["data_quality"] == "measured_oop"]
    d = d[d["collective"].isin(list(KIND))].copy()
    d["gpus_per_thread"] = [gpus_per_thread(str(e), int(n)) for e, n in zip(d["env_notes"], d["gpus"])]
    d["nccl_version"] = d["nccl_version"].astype(str).str.extract(r"(\d+\.\d+\.\d+)", expand=False).fillna("")
    return pd.concat([tidy(part, *SYSTEMS[g]) for g, part in d.groupby("gpu", sort=False)], ignore_index=True)


def held_out(sources: dict = HELD_OUT) -> pd.DataFrame:
    """The raw runs of ``sources`` (:data:`HELD_OUT`; or :data:`OLDER_NCCL`), read as
    ``calibrate --from`` reads them: rows for scoring only (never fitted on)."""
    parts = []
    for name, (url, gpu, kind, tuner) in sources.items():
        raw = read_nccl_tests(RAW / name).assign(source_url=url, gpu=gpu, algo="auto")
        rows = tidy(raw, SYSTEMS[gpu][0], kind)
        if tuner is not None:
            rows["tuner"] = tuner
        parts.append(rows)
    return pd.concat(parts, ignore_index=True)


def nvls_holdout(rows: pd.DataFrame) -> None:
    """Every mechanism fitted on the H100 runs at 2 and 4 GPUs (the NVLS channels on the
    NVLS ones), scored on the 6-GPU runs: Ring and NVLS pinned, and NCCL's default (NVLS)."""
    h = rows[rows["gpu_profile"] == "h100"]
    train, test = h[h["gpus"] < 6], h[h["gpus"] == 6].copy()
    p, e = fit(train)
    test["predicted_s"] = predict(test, with_fitted({"h100": load_gpu("h100")}, p))
    test["err"] = test["predicted_s"] / test["measured_s"] - 1
    print(f"H100 fitted on 2 and 4 GPUs ({len(train)} rows): {p} (mean |log err| {e:.3f}); held out, 6 GPUs, "
          f"median |err| by algorithm:")
    print(test.groupby("algorithm")["err"].agg(median_abs=lambda x: x.abs().median(), rows="size").to_string())


def scored(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the DES's prediction (shipped profiles) and its relative ``error``; rows the
    simulator refuses (fewer bytes than one element per piece) are left out, and said."""
    rows = rows.assign(predicted_s=predict(rows, {g: load_gpu(g) for g in rows["gpu_profile"].unique()}, sim="des"))
    refused = rows["predicted_s"].isna()
    if refused.any():
        print(f"{int(refused.sum())} rows left out: fewer bytes than one element per piece (the simulator refuses them)")
    rows = rows[~refused].copy()
    rows["error"] = rows["predicted_s"] / rows["measured_s"] - 1
    return rows


def older(out: Path) -> None:
    """:data:`OLDER_NCCL` scored with the shipped profiles, per source and collective (not
    pooled with the held-out sources of the NCCL the model describes)."""
    rows = scored(held_out(OLDER_NCCL))
    for repo, part in rows.groupby(rows["source_url"].map(lambda u: "/".join(u.split("/")[3:5])), sort=False):
        print(f"an NCCL older than the model's, never fitted on, scored on its own: {repo}")
        print(summary(part).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    from ficco_sim.files import atomic_path
    cols = ["source_url", "gpu", "gpus", "collective", "size_bytes", "gpus_per_thread", "measured_s", "predicted_s",
            "error"]
    with atomic_path(out) as tmp:
        tmp.write_text(f"# benchmarks/collective_error.py --older; {datetime.datetime.now().isoformat(timespec='seconds')}; "
                       f"host {platform.node()}; predictions by the DES with the shipped profiles; not in the error "
                       "table (an NCCL older than the model's)\n" + rows[cols].to_csv(index=False))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit the mechanisms and print the held-out errors")
    ap.add_argument("--out", default="validation/public/nccl_tests.csv")
    ap.add_argument("--older", action="store_true", help="score the runs of an NCCL older than the model's "
                    "(OLDER_NCCL) on their own, into validation/public/nccl_tests_older.csv")
    args = ap.parse_args()
    if args.older:
        older(RAW.parent.parent / "validation" / "public" / "nccl_tests_older.csv")
        return
    rows = load()
    if args.fit:
        big = rows[rows["size_bytes"] >= FIT_FROM]
        nv = big[big["gpu_profile"].map(VENDOR) == "nccl"]
        extra = held_out()      # never fitted on: scored by every fit of its vendor
        extra = extra[extra["gpu_profile"].map(VENDOR) == "nccl"]
        for held in nv["source_url"].map(lambda u: u.split("/")[3]).unique():
            train = nv[~nv["source_url"].str.contains(held)]
            test = pd.concat([rows[rows["source_url"].str.contains(held)], extra], ignore_index=True)
            p, e = fit(train)
            test["predicted_s"] = predict(test, with_fitted({g: load_gpu(g) for g in test["gpu_profile"].unique()}, p))
            print(f"NCCL fitted without {held}: {p} (train mean |log err| {e:.3f}); held out:")
            print(summary(test).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        nvls_holdout(big)
        rows = big
        for vendor, part in rows.groupby(rows["gpu_profile"].map(VENDOR)):
            joint, e = fit(part)
            print(f"{vendor} fitted on all its rows: {joint} (mean |log err| {e:.3f})")
            for g, own in part.groupby("gpu_profile"):
                # the GPU's wire on its own rows; the host's share (call floor, issue time per GPU
                # a thread drives: the host and NCCL's software) as every row of the vendor says
                p = joint
                if part["gpu_profile"].nunique() > 1:
                    p, e = fit(own, fixed={k: joint[k] for k in HOST if k in joint})
                    print(f"{g} fitted on its {len(own)} rows, the host terms the vendor's: {p} "
                          f"(mean |log err| {e:.3f})")
                test = held_out()
                test = test[test["gpu_profile"] == g].copy()
                if len(test):
                    test["predicted_s"] = predict(test, with_fitted({g: load_gpu(g)}, p))
                    print("  held out (never fitted on):")
                    print(summary(test).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        return
    rows = scored(pd.concat([rows, held_out()], ignore_index=True))
    gpus = {g: load_gpu(g) for g in rows["gpu_profile"].unique()}
    rows["command"] = [f"ficco-sim predict collective --gpu {r.gpu_profile} --topology {r.topology} --kind {r.kind} "
                       f"--bytes {int(r.nbytes)}" + (f" --algorithm {r.algorithm}" if r.algorithm != "auto" else "")
                       + (f" --gpus-per-thread {r.gpus_per_thread}" if r.gpus_per_thread > 1 else "")
                       + (f" --tuner {r.tuner}" if r.tuner != gpus[r.gpu_profile].comm_kernel.tuner else "")
                       for r in rows.itertuples()]
    used = {g: str(load_gpu(g).provenance("comm_kernel.launch_us").source) if load_gpu(g).comm_kernel.launch
            is not None else "" for g in gpus}
    never = {v[0] for v in HELD_OUT.values()}
    rows["used_for_fit"] = [bool(used[g]) and "nccl-tests" in used[g] and s >= FIT_FROM and u not in never
                            for g, s, u in zip(rows["gpu_profile"], rows["size_bytes"], rows["source_url"])]
    cols = ["source_url", "gpu", "gpus", "collective", "algo", "size_bytes", "measured_s", "predicted_s", "error",
            "used_for_fit", "command"]
    table = rows[cols + ["gpu_profile"]]
    print(summary(table).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    held = table[table["source_url"].isin(never)]
    for repo, part in held.groupby(held["source_url"].map(lambda u: "/".join(u.split("/")[3:5])), sort=False):
        # each never-fitted source on its own (the table above pools a GPU's sources)
        print(f"never fitted on: {repo}")
        print(summary(part).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    from ficco_sim.files import atomic_path
    with atomic_path(args.out) as tmp:
        tmp.write_text(f"# benchmarks/collective_error.py; {datetime.datetime.now().isoformat(timespec='seconds')}; "
                       f"host {platform.node()}; predictions by the DES with the shipped profiles\n"
                       + table[cols].to_csv(index=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
