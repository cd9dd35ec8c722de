#!/usr/bin/env bash
# The one command a GPU session runs for issue 7 (calibrate and validate the H100/H200
# profile on a real device). From the repository root, on the device machine:
#
#     bash benchmarks/gpu_session.sh             # the real run (needs $OUT; ~5-8 minutes)
#     bash benchmarks/gpu_session.sh --dry-run   # print the steps only (works on a CPU machine)
#     bash benchmarks/gpu_session.sh --quick     # tiny sizes: a ~1 minute plumbing check
#
# Steps, each under `timeout` and all inside one time budget (BUDGET s, default 540, so
# that the whole command ends inside the device tool's 10-minute limit with time to pack):
#   1. environment: nvidia-smi -q excerpt, torch / CUDA / NCCL versions, device properties
#   2. ficco-sim calibrate --device cuda --base <h100|h200> (microbenchmarks + fit)
#   3. ficco-sim validate --device cuda --single-gpu, 2 ranks, 4096^3, every basic schedule,
#      with --profile (one Kineto trace per schedule), predicted with the measured profile
#   4. benchmarks/gpu_gemm_table.py: cuBLAS times of the library models' layers at m = 128..8192
#      (Vidur's table format; decomposition loss is read off it)
#   5. benchmarks/gpu_dil.py: whole GEMMs against their row pieces run back to back (direct DIL)
#   6. benchmarks/gpu_contention.py: a GEMM chain beside copies (copy engine and SM kernel) by
#      copy size, start order and stream priority, and the copies' own rate meanwhile (CUDA only),
#      then benchmarks/gpu_launch.py: the gap at a kernel boundary, idle, queued, across streams
#   7. validate the independent pairs (ag/a2a/ar-par-gemm: a GEMM beside a collective), 4 ranks
#   8. the dependent pairs with 4, then 8 ranks, as far as the budget allows
# It never changes GPU settings (no clocks, power limits, resets): it only reads them.
#
# What comes back in $OUT (the device tool returns at most 8 files, 2 folders deep,
# 16 MiB each): log, env.txt, summary.txt, <gpu>-measured.yaml, <gpu>-bench.csv (the raw
# benchmark rows), <gpu>-gemm_times.csv, results.tar.gz (calibration report + validation CSV/MD/PNG) and
# traces.tar.gz (Kineto traces). See validation/README.md for where to commit them.
#
# Needs python3 with torch (CUDA) and the project's dependencies; simpy is not in the
# device image, so carry a wheel: `python3 -m pip download --no-deps --only-binary=:all:
# -d .whl simpy` here, then name `.whl` in the run's carry list.
# Environment overrides: BASE (h100|h200|profile.yaml), BUDGET (s), PYTHON, SIZE (validate m=n=k),
# SKIP (step names to leave out, space-separated, e.g. SKIP="calibrate gemm-table" for a rerun),
# DEVICE (default cuda; DEVICE=cpu runs the same plumbing on a CPU, for testing this script).

set -uo pipefail

DRY=0
QUICK=0
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY=1 ;;
        --quick) QUICK=1 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg (use --dry-run, --quick)" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-540}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-4096}
if [ "$QUICK" = 1 ]; then SIZE=${SIZE_QUICK:-512}; fi
if [ -z "${OUT:-}" ]; then
    OUT=$ROOT/out/gpu-session          # /out/ is git-ignored
    [ "$DRY" = 1 ] || echo "OUT is not set; writing to $OUT"
fi
LOG=$OUT/log
WORK=${WORK:-/tmp/ficco-gpu-session}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
FICCO=("$PY" -m ficco_sim.cli)

# -- which GPU -------------------------------------------------------------------------
gpu_name() {
    local name=""
    if command -v nvidia-smi >/dev/null 2>&1; then
        name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    fi
    if [ -z "$name" ]; then
        name=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' \
               2>/dev/null)
    fi
    echo "$name"
}

if [ "$DRY" = 1 ]; then
    NAME="(detected at run time)"
else
    NAME=$(gpu_name)
fi
if [ -z "${BASE:-}" ]; then
    case "$NAME" in
        *H200*|*h200*) BASE=h200 ;;
        *H100*|*h100*) BASE=h100 ;;
        *) BASE=h100
           [ "$DRY" = 1 ] || echo "warning: GPU '$NAME' is neither an H100 nor an H200; using --base h100" ;;
    esac
fi
GPU=$(basename "$BASE" .yaml)
PROFILE=$WORK/$GPU-measured.yaml

# -- steps -------------------------------------------------------------------------------
declare -a SUMMARY=()

# run_step NAME LIMIT_S CMD...: run under timeout (cut to the budget left), log, never abort.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - SECONDS - 30))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$DRY" = 1 ]; then
        printf '[%s] (timeout %s s) %s\n' "$name" "$limit" "$*"
        return 0
    fi
    case " ${SKIP:-} " in
        *" $name "*) echo "== $name: skipped (SKIP)" | tee -a "$LOG"; SUMMARY+=("$name: skipped (SKIP)"); return 0 ;;
    esac
    if [ "$limit" -lt 20 ]; then
        echo "== $name: skipped, only $((BUDGET - SECONDS)) s of the ${BUDGET} s budget left" | tee -a "$LOG"
        SUMMARY+=("$name: skipped (budget)")
        return 0
    fi
    echo "== $name (timeout ${limit}s): $*" | tee -a "$LOG"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    local what="rc=$rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && what="TIMED OUT after ${limit}s"
    echo "== $name: $what in $((SECONDS - t0)) s" | tee -a "$LOG"
    SUMMARY+=("$name: $what, $((SECONDS - t0)) s")
    return 0
}

environment() {
    {
        echo "# ficco-sim GPU session $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "git: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
        echo "host: $(hostname)  kernel: $(uname -r)  cpus: $(nproc)"
        echo "base profile: $BASE"
        echo
        echo "## nvidia-smi"
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,persistence_mode,mig.mode.current,compute_mode --format=csv 2>&1
        nvidia-smi -q 2>&1 | grep -E -i -A0 \
            'Product Name|Driver Version|CUDA Version|VBIOS|Persistence Mode|MIG Mode|Current *:|Compute Mode|Bus Id|Link Width|Max *:|Graphics|^ *SM *:|^ *Memory *:|Power Draw|Power Limit|GPU Current Temp|Clocks Event Reasons|Active|Retired|Pending' \
            | head -n 80
        nvidia-smi topo -m 2>&1 | head -n 20
        echo
        echo "## python / torch"
        "$PY" - <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], sys.executable)
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", getattr(torch.version, "hip", None))
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
try:
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e:  # noqa: BLE001
    print("nccl unavailable:", e)
print("cudnn", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    for f in ("name", "major", "minor", "multi_processor_count", "total_memory", "L2_cache_size",
              "shared_memory_per_block", "shared_memory_per_multiprocessor", "max_threads_per_multi_processor",
              "regs_per_multiprocessor", "warp_size"):
        print(f"props.{f}", getattr(p, f, "n/a"))
    print("stream priority_range", torch.cuda.Stream.priority_range())
    print("has _sleep", hasattr(torch.cuda, "_sleep"), "has _foreach_copy_", hasattr(torch, "_foreach_copy_"))
    free, total = torch.cuda.mem_get_info()
    print(f"memory free {free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB")
for mod in ("numpy", "pandas", "scipy", "matplotlib", "networkx", "yaml", "rich", "simpy", "triton", "cupy"):
    try:
        m = importlib.import_module(mod)
        print(mod, getattr(m, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        print(mod, "MISSING", type(e).__name__)
EOF
        echo
        echo "## env"
        env | grep -E '^(CUDA|NCCL|TORCH|PYTORCH|OMP)_' | sort
    } > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
}

ensure_simpy() {
    if "$PY" -c 'import simpy' 2>/dev/null; then
        return 0
    fi
    local whl
    whl=$(ls "$ROOT"/.whl/simpy-*.whl 2>/dev/null | head -n 1)
    if [ -z "$whl" ]; then
        echo "simpy is missing and no .whl/simpy-*.whl was carried: run here" \
             "'python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy' and carry .whl" | tee -a "$LOG"
        return 1
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$whl" \
        2>&1 | tee -a "$LOG"
    export PYTHONPATH=$PYTHONPATH:/tmp/site
    "$PY" -c 'import simpy' || return 1
}

pack() {
    # One archive for the reports, one for the traces; each must stay under 16 MiB.
    local limit=$((16 * 1024 * 1024 - 4096))
    tar -czf "$OUT/results.tar.gz" -C "$WORK" $(cd "$WORK" && ls -d calib validation gemm 2>/dev/null) 2>>"$LOG"
    [ -d "$WORK/traces" ] && tar -czf "$OUT/traces.tar.gz" -C "$WORK" traces 2>>"$LOG"
    for f in "$OUT/results.tar.gz" "$OUT/traces.tar.gz"; do
        if [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt "$limit" ]; then
            echo "$(basename "$f") is over 16 MiB and would not come back: removed" | tee -a "$LOG"
            rm -f "$f"
        fi
    done
    [ -f "$PROFILE" ] && cp "$PROFILE" "$OUT/"
    local bench=$WORK/calib/$GPU-measured_bench.csv
    [ -f "$bench" ] && cp "$bench" "$OUT/$GPU-bench.csv"
    [ -f "$WORK/gemm/$GPU-gemm_times.csv" ] && cp "$WORK/gemm/$GPU-gemm_times.csv" "$OUT/"
    ls -la "$OUT" | tee -a "$LOG"
}

# -- the session ---------------------------------------------------------------------------
QUICKARG=()
REPEATS=5
[ "$QUICK" = 1 ] && QUICKARG=(--quick) && REPEATS=2
SCEN=(ag-gemm:m=$SIZE,n=$SIZE,k=$SIZE gemm-rs:m=$SIZE,n=$SIZE,k=$SIZE a2a-gemm:m=$SIZE,n=$SIZE,k=$SIZE)
VALIDATE=("${FICCO[@]}" validate --device "$DEVICE" --single-gpu --scenarios "${SCEN[@]}"
          --repeats "$REPEATS" --warmup 1)

if [ "$DRY" = 1 ]; then
    echo "dry run: GPU $NAME, base $BASE, OUT=$OUT, WORK=$WORK, budget ${BUDGET}s, validate size $SIZE"
    echo "[setup] import simpy, else pip install --no-index --target /tmp/site .whl/simpy-*.whl"
    echo "[environment] nvidia-smi queries (read only) + torch/CUDA/NCCL versions -> $OUT/env.txt"
else
    mkdir -p "$OUT" || exit 2
    rm -rf "$WORK" && mkdir -p "$WORK" || exit 2
    : > "$LOG"
    ensure_simpy || SUMMARY+=("setup: simpy missing, ficco-sim steps will fail")
    export -f environment
    export OUT PY ROOT BASE
    run_step environment 60 bash -c environment
fi
run_step calibrate 120 "${FICCO[@]}" calibrate --device "$DEVICE" --base "$BASE" --out "$PROFILE" \
    --report "$WORK/calib" --force "${QUICKARG[@]}"
if [ "$DRY" = 1 ] || [ -f "$PROFILE" ]; then USE=$PROFILE; else USE=$BASE; fi
GEMMARGS=()
[ "$QUICK" = 1 ] && GEMMARGS=(--quick)
[ "$DEVICE" = cpu ] && GEMMARGS+=(--device cpu)
run_step gemm-table 90 "$PY" "$ROOT/benchmarks/gpu_gemm_table.py" --out "$WORK/gemm/$GPU-gemm_times.csv" \
    "${GEMMARGS[@]}"
run_step dil 120 "$PY" "$ROOT/benchmarks/gpu_dil.py" --out "$WORK/gemm/$GPU-dil.csv" "${GEMMARGS[@]}"
[ "$DEVICE" = cuda ] && run_step contention 90 "$PY" "$ROOT/benchmarks/gpu_contention.py" \
    --out "$WORK/gemm/$GPU-contention.csv"
[ "$DEVICE" = cuda ] && run_step launch 60 "$PY" "$ROOT/benchmarks/gpu_launch.py" --out "$WORK/gemm/$GPU-launch.csv"
run_step validate-2ranks 150 "${VALIDATE[@]}" --world-size 2 --gpu "$USE" --out "$WORK/validation/ranks2" \
    --profile "$WORK/traces/ranks2"
PAR=(ag-par-gemm:m=$SIZE,n=$SIZE,k=$SIZE a2a-par-gemm:m=$SIZE,n=$SIZE,k=$SIZE ar-par-gemm:m=$SIZE,n=$SIZE,k=$SIZE)
run_step validate-par-4ranks 100 "${FICCO[@]}" validate --device "$DEVICE" --single-gpu --scenarios "${PAR[@]}" \
    --repeats "$REPEATS" --warmup 1 --world-size 4 --gpu "$USE" --out "$WORK/validation/par4" --profile "$WORK/traces/par4"
run_step validate-4ranks 120 "${VALIDATE[@]}" --world-size 4 --gpu "$USE" --out "$WORK/validation/ranks4"
run_step validate-8ranks 90 "${VALIDATE[@]}" --world-size 8 --gpu "$USE" --out "$WORK/validation/ranks8"

if [ "$DRY" = 1 ]; then
    echo "[pack] $OUT/{log,env.txt,summary.txt,$GPU-measured.yaml,$GPU-bench.csv,$GPU-gemm_times.csv,results.tar.gz,traces.tar.gz}"
    exit 0
fi
pack
{
    echo "ficco-sim GPU session: $NAME (base $BASE), $SECONDS s of a ${BUDGET} s budget"
    for line in "${SUMMARY[@]}"; do echo "  $line"; done
    for md in "$WORK"/validation/*/*/*.md; do
        [ -f "$md" ] || continue
        echo "--- $md"
        grep -E '^- ' "$md" | head -n 6
    done
} | tee "$OUT/summary.txt"
