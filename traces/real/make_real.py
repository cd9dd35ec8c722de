"""Copy the small real traces shipped in ``traces/real/`` out of their public repositories.

Run from the repository root with the four repositories checked out (any clone; the
commits below are the ones the shipped files came from):

    python traces/real/make_real.py --hta PATH/TO/HolisticTraceAnalysis --param PATH/TO/param \
        --tracelens PATH/TO/TraceLens --kineto PATH/TO/kineto

Each file is read from git at the pinned commit, its events are kept as recorded except
``python_function`` events (Python call stacks, unused by ficco-sim and most of the bytes),
and it is written gzipped with a top-level ``ficco_source`` entry naming where it came
from. Nothing else is changed: timestamps, durations and arguments are the measured ones.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HTA_COMMIT = "f4d0062c382f42bd8a74838bcdad1916c7d5d2da"
PARAM_COMMIT = "37f542b3424716e67aedae3627364ba1ffe71372^"   # the last commit with the DLRM traces at this path
TRACELENS_COMMIT = "72fdba4e826d44a00e96ce3febe0e34b898a437a"
KINETO_COMMIT = "be239c044d2f4b62982e1ff64144097acd69f59a"    # tb_plugin's samples (removed from it in 2026)
HTA = "https://github.com/facebookresearch/HolisticTraceAnalysis"
TRACELENS = "https://github.com/AMD-AGI/TraceLens"
PARAM = "https://github.com/facebookresearch/param"
KINETO = "https://github.com/pytorch/kineto"

# shipped name -> (repository, path in it)
HTA_FILES = {
    "hta_a100_nccl217_rank0.json.gz": "tests/data/nccl_parser_config/nccl_data.json.gz",
    "hta_a100_16ranks_rank0.json.gz": "tests/data/negative_queue_length_values_check/rank0.json.gz",
    "hta_128ranks_sampled_rank0.json.gz": "tests/data/trace_filter/sampled_rank-0.json.gz",
    # rank 1 of the same run: a file whose distributedInfo rank is not 0 (its steps were once looked up under it)
    "hta_128ranks_sampled_rank1.json.gz": "tests/data/trace_filter/sampled_rank-1.json.gz",
    "hta_a100_event_sync.json.gz": "tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta_a100_event_sync_multi_stream.json.gz":
        "tests/data/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "hta_mi250_rocm62.json.gz": "tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
}
PARAM_TAR = "et_replay/tests/inputs/dlrm_kineto.tar.gz"
TRACELENS_FILES = {"tracelens_mi300x_resnet_ddp_rank0.json.gz": "tests/traces/mi300/resnet_act_checkpoint.json.gz",
                   # MIOpen kernels launched by hipExtModuleLaunchKernel: grids in work-items on the kernel too
                   "tracelens_mi300x_resnet18_ddp_miopen.json.gz":
                   ("86d615a3", "tests/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"),
                   # rocprofiler-sdk: grid and block [0, 0, 0] (not recorded)
                   "tracelens_mi300x_sdpa_rocprofiler_sdk.json.gz":
                   ("30a7e81f", "evals/unit_tests/attention/sdpa_01_long_seq_low_eff_analysis_output/"
                                "sdpa_01_long_seq_low_eff.json"),
                   # vLLM on ROCm: deviceProperties with an empty name
                   "tracelens_mi300x_vllm_decode_graph.json.gz":
                   ("000157b6", "tests/traces/inference/vllm_decode_full/graph_execution.json.gz")}
# PyTorch 1.8's Kineto (2021): categories Operator / Kernel / Runtime / Memcpy, the GPU events' "external id"
KINETO_FILES = {"kineto_v100_resnet50_torch18.json.gz":
                "tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"}


def git_show(repo: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def write(data: dict, name: str, source: str) -> None:
    data["traceEvents"] = [e for e in data.get("traceEvents", []) if e.get("cat") != "python_function"]
    data["ficco_source"] = source
    out = HERE / name
    out.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0))
    print(f"{out.relative_to(HERE.parent.parent)}: {out.stat().st_size / 1e3:.0f} kB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta", type=Path, required=True, help="a git clone of facebookresearch/HolisticTraceAnalysis")
    ap.add_argument("--param", type=Path, required=True, help="a git clone of facebookresearch/param")
    ap.add_argument("--tracelens", type=Path, required=True, help="a git clone of AMD-AGI/TraceLens")
    ap.add_argument("--kineto", type=Path, required=True, help="a git clone of pytorch/kineto")
    args = ap.parse_args()
    for name, path in KINETO_FILES.items():
        raw = git_show(args.kineto, KINETO_COMMIT, path)
        write(json.loads(gzip.decompress(raw)), name, f"{KINETO}/blob/{KINETO_COMMIT}/{path} (BSD License)")
    for name, where in TRACELENS_FILES.items():
        commit, path = where if isinstance(where, tuple) else (TRACELENS_COMMIT, where)
        commit = subprocess.run(["git", "-C", str(args.tracelens), "rev-parse", commit], check=True,
                                capture_output=True, text=True).stdout.strip()
        raw = git_show(args.tracelens, commit, path)
        raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        write(json.loads(raw), name, f"{TRACELENS}/blob/{commit}/{path} (MIT License)")
    for name, path in HTA_FILES.items():
        raw = git_show(args.hta, HTA_COMMIT, path)
        write(json.loads(gzip.decompress(raw)), name, f"{HTA}/blob/{HTA_COMMIT}/{path} (MIT License)")
    commit = subprocess.run(["git", "-C", str(args.param), "rev-parse", PARAM_COMMIT], check=True,
                            capture_output=True, text=True).stdout.strip()
    with tarfile.open(fileobj=io.BytesIO(git_show(args.param, commit, PARAM_TAR))) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith(".json"):
                continue
            worker = Path(member.name).name.split("_")[0]          # worker3_step_12....json -> worker3
            data = json.loads(tar.extractfile(member).read())
            write(data, f"param_dlrm_v100_8ranks_{worker}.json.gz",
                  f"{PARAM}/blob/{commit}/{PARAM_TAR} :: {member.name} (MIT License)")


if __name__ == "__main__":
    main()
