"""Fuzz every input surface of the CLI: flags, profile YAML, topology YAML, scenario YAML,
calibration CSVs and traces. Each generated case runs ``ficco-sim`` in-process under a 10 s
alarm and ends as one of:

* ``ok``: exit 0 with no non-finite number in its output;
* ``error``: exit 2 with exactly one line on stderr and no traceback (a refused input);
* ``crash``: an exception escaped, or an error of more than one line;
* ``hang``: still running after 10 s;
* ``nonsense``: exit 0 but a ``nan`` / ``inf`` in the output, or a negative time.

    python benchmarks/fuzz.py --cases 5000 [--seed 1] [--surface profile] [--show 5]

prints the counts per surface and the first failing cases (argv and the reason) to reproduce.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import random
import re
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAD_NUMBERS = [0, -1, -1e9, 1e308, float("nan"), float("inf"), "abc", None, [], {}, True, 1e-300, 2 ** 63, "1e3"]
INTS = [0, 1, 2, 3, 7, 8, 13, 64, 512, 4096, 16384, -1, -4096, 10 ** 9, 10 ** 15, "x", "1e4", "nan", "4096.5"]
KINDS = ["ag-gemm", "gemm-rs", "a2a-gemm", "ag-par-gemm", "a2a-par-gemm", "ar-par-gemm", "gemm-par-x"]
NONFINITE = re.compile(r"(?<![a-z_])(nan|inf|-inf)(?![a-z_])", re.I)


class Hang(Exception):
    pass


def _alarm(_sig, _frame):
    raise Hang()


def run(argv: list[str], seconds: int = 10) -> tuple[str, str]:
    """(outcome, detail) of ``ficco-sim argv``."""
    from ficco_sim.cli import main
    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except Hang:
        return "hang", "over 10 s"
    except BaseException as exc:  # noqa: BLE001 -- that is what a crash is
        return "crash", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        signal.alarm(0)
    text, msg = out.getvalue(), err.getvalue().strip()
    if rc == 0:
        if NONFINITE.search(text):
            return "nonsense", "non-finite number in the output: " + NONFINITE.search(text).group(0)
        return "ok", ""
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    if rc == 2 and len(lines) == 1 and "Traceback" not in msg:
        return "error", lines[0][:160]
    return "crash", f"exit {rc}: {msg[:200]}"


# ---------------------------------------------------------------------------------------
# generators: each returns argv (files written under tmp)

def g_flags(r: random.Random, tmp: Path) -> list[str]:
    topo = r.choice(["switch:8", "fc:8", "ring:4", "fc:2", "switch:3", "ring:1", "ring:0", "fc:-2", "ring:100000",
                     "switch:", "mesh:8", "dgx-h100", "nope", "switch:8.5", "fc:9"])
    gpu = r.choice(["h100", "a100", "mi300x", "v100", "b200", "cpu", "H100", "tpu", "", "../etc/passwd"])
    which = r.randrange(4)
    if which == 0:
        argv = ["simulate", "--gpu", gpu, "--topology", topo, "--scenario", r.choice(KINDS),
                "--m", str(r.choice(INTS)), "--n", str(r.choice(INTS)), "--k", str(r.choice(INTS)),
                "--engine", "analytical", "--format", r.choice(["table", "csv", "json"])]
        if r.random() < 0.5:
            argv += ["--schedule", r.choice(["none", "all", "ficco-a2a-dma", "shard-p2p-sm-hi", "ficco-a2a-sm-g3-c4",
                                             "ficco-x", "ficco-a2a-dma-smem9999k", "shard-p2p-sm-dimK", ",,",
                                             "par-sm", "par-dma-hi", "par-sm-m16", "par-sm-m0", "par-sm-m99999",
                                             "par-p2p-sm", "ficco-a2a-sm-m20", "par-sm-hi-smem64k-c4-m8",
                                             "par-sm-mix", "par-dma-c1-mix", "par-sm-gf-mix", "par-dma-c0",
                                             "ficco-a2a-dma-c3", "shard-p2p-dma-c2", "none-dma-c1", "nccl:ce=1"])]
        if r.random() < 0.3:
            argv += ["--dtype", r.choice(["float16", "bfloat16", "float32", "float8", "int4", ""])]
        return argv
    if which == 1:
        return ["predict", "gemm", "--gpu", gpu, "--m", str(r.choice(INTS)), "--n", str(r.choice(INTS)),
                "--k", str(r.choice(INTS)), "--dtype", r.choice(["float16", "float32", "bfloat16", "fp7"])]
    if which == 2:
        return ["predict", "collective", "--gpu", gpu, "--topology", topo,
                "--kind", r.choice(["all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send-recv", "x"]),
                "--bytes", r.choice(["1MiB", "64MiB", "0", "-5", "1e30", "abc", "7", "1.5GiB", "1TiB", "8EiB"]),
                "--engine", r.choice(["des", "analytical"]), "--comm-engine", r.choice(["sm", "dma"]),
                "--algorithm", r.choice(["auto", "ring", "direct"])]
    return ["recommend", "--gpu", gpu, "--topology", topo, "--scenario", r.choice(KINDS),
            "--m", str(r.choice(INTS)), "--n", str(r.choice(INTS)), "--k", str(r.choice(INTS))]


def _mutate_tree(r: random.Random, data):
    """Replace, delete or retype one random leaf (or mapping) of a YAML tree."""
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append(path + [k])
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append(path + [i])
                walk(v, path + [i])
    walk(data, [])
    path = r.choice(paths)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if r.random() < 0.2 and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = r.choice(BAD_NUMBERS)
    return data


def _yaml_file(r: random.Random, tmp: Path, data, name: str) -> Path:
    import yaml
    text = yaml.safe_dump(data, sort_keys=False)
    if r.random() < 0.1:
        text = text[:r.randrange(len(text))]             # truncated
    elif r.random() < 0.05:
        text = text.replace(":", "::", 1)                # malformed
    p = tmp / name
    p.write_text(text)
    return p


def g_profile(r: random.Random, tmp: Path) -> list[str]:
    import yaml
    data = yaml.safe_load((ROOT / "hw_profiles" / r.choice(["h100.yaml", "mi300x.yaml", "a100.yaml"])).read_text())
    if r.random() < 0.3:      # GEMMs the owner timed (gemm.measured), for the mutation to hit
        data["gemm"]["measured"] = [{"m": 4096, "n": 4096, "k": 4096, "dtype": "float16",
                                     "time_us": {"value": r.choice([150.0, 400.0, 2000.0]), "kind": "measured",
                                                 "source": "fuzz"}}]
    p = _yaml_file(r, tmp, _mutate_tree(r, data), "gpu.yaml")
    if r.random() < 0.5:
        return ["predict", "gemm", "--gpu", str(p), "--m", "4096", "--n", "4096", "--k", "4096"]
    return ["simulate", "--gpu", str(p), "--topology", "switch:4", "--scenario", "ag-gemm", "--m", "4096",
            "--n", "2048", "--k", "2048", "--schedule", "none,ficco-a2a-dma", "--engine", r.choice(["des", "analytical"])]


def g_topology(r: random.Random, tmp: Path) -> list[str]:
    import yaml
    data = yaml.safe_load((ROOT / "topologies" / r.choice(["dgx-h100.yaml", "mi300x-8.yaml", "a40-nvlink-pairs.yaml"]))
                          .read_text())
    p = _yaml_file(r, tmp, _mutate_tree(r, data), "topo.yaml")
    return ["predict", "collective", "--topology", str(p), "--kind", r.choice(["all-gather", "all-reduce"]),
            "--bytes", "1MiB", "--engine", r.choice(["des", "analytical"])]


def g_scenarios(r: random.Random, tmp: Path) -> list[str]:
    data = {"scenarios": [{"name": "a", "kind": "ag-gemm", "gpus": 4, "m": 4096, "n": 2048, "k": 2048},
                          {"name": "c", "kind": "ar-par-gemm", "gpus": 4, "m": 4096, "n": 2048, "k": 2048},
                          {"name": "b", "kind": "a2a-gemm", "gpus": 4, "m": 4096, "n": 2048, "k": 2048, "skew": 1.5}],
            "models": [{"name": "m", "hidden": 1024, "ffn": 4096, "heads": 8, "kv_heads": 8, "tokens": [2048],
                        "gpus": [4]}]}
    p = _yaml_file(r, tmp, _mutate_tree(r, data), "sc.yaml")
    return ["explore", "--scenarios", str(p), "--topology", "switch:4", "--engine", "analytical", "--space", "basic",
            "--jobs", "1", "--quiet"]


NCCL_RAW = ("h100x4_quiet_all_gather.txt", "a100x8_superbench_alltoall.txt", "h100x4_ring_debug_all_reduce.log",
            "a100x4_abci_all_reduce.txt")     # (fits of a few seconds: a fully connected one takes ~11 s, past the alarm)


def g_nccl_tests(r: random.Random, tmp: Path) -> list[str]:
    """Raw nccl-tests output (a shipped real run) with tokens swapped, launcher prefixes, a second
    run on another host, or cut short."""
    name = r.choice(NCCL_RAW)
    lines = (ROOT / "validation" / "nccl-tests" / name).read_text().splitlines()
    for _ in range(r.randrange(0, 4)):
        i = r.randrange(len(lines))
        words = lines[i].split(" ")
        if words:
            words[r.randrange(len(words))] = str(r.choice(BAD_NUMBERS + ["#wrong", "# nThread", "[1,0]<stdout>:",
                                                                          "N/A", "0:", "Rank"]))
        lines[i] = " ".join(words)
    if name.endswith(".log") and r.random() < 0.5:      # NCCL's tuning table (NCCL_DEBUG_SUBSYS=TUNING) broken
        old = r.choice(["480.0", "188.0", "nRanks 4", "nNodes 1", "Ring", "AllGather", "Protocol", "|"])
        hits = [i for i, x in enumerate(lines) if old in x]
        if hits:
            i = r.choice(hits)
            lines[i] = lines[i].replace(old, str(r.choice(BAD_NUMBERS + ["nNodes 2", "", "Tree", "x/y"])), 1)
    if r.random() < 0.2:
        lines = [f"{r.choice(['[1,0]<stdout>:', '0: '])}{x}" for x in lines]
    if r.random() < 0.2:
        lines += [x.replace(" on ", " on other") for x in lines]
    text = "\n".join(lines) + "\n"
    if r.random() < 0.1:
        text = text[:r.randrange(len(text))]
    p = tmp / name
    p.write_text(text)
    return ["calibrate", "--from", str(p), "--gpu", r.choice(["h100", "a100"]), "--out",
            str(tmp / "fit.yaml"), "--force", "--topology", r.choice(["switch", "switch", "bus"])]


def g_calibration(r: random.Random, tmp: Path) -> list[str]:
    if r.random() < 0.3:
        return g_nccl_tests(r, tmp)
    header = "gpu,model,op,tp,m,n,k,dtype,time_ms_median"
    rows = [f"a100,x,o,1,{m},{n},{k},float16,{t}" for m, n, k, t in
            ((1024, 1024, 1024, 0.02), (4096, 4096, 4096, 0.5), (8192, 4096, 4096, 0.95), (2048, 8192, 1024, 0.2))]
    cells = [row.split(",") for row in rows]
    for _ in range(r.randrange(1, 3)):
        row = r.choice(cells)
        row[r.randrange(len(row))] = str(r.choice(BAD_NUMBERS))
    p = tmp / "gemm.csv"
    text = "\n".join([header] + [",".join(c) for c in cells]) + "\n"
    if r.random() < 0.1:
        text = text[:r.randrange(len(text))]
    p.write_text(text)
    if r.random() < 0.3:      # a user's own timings: GEMM rows of a benchmark file
        p.write_text(text.replace(header, "kind,model,op,tp,m,n,k,dtype,time_s").replace("a100,x,", "gemm,x,"))
    return ["calibrate", "--from", str(p), "--gpu", "a100", "--out", str(tmp / "fit.yaml"), "--force"] + \
        (["--keep-times"] if r.random() < 0.4 else [])


def g_et_plus(r: random.Random) -> dict:
    """PARAM's linked execution trace (ET+) with nodes' times, streams, parents, tensors broken."""
    data = json.loads(gzip.decompress((ROOT / "traces" / "real" / "param_resnet_v100_et_plus.json.gz").read_bytes()))
    nodes = data["nodes"]
    for _ in range(r.randrange(1, 4)):
        n = r.choice(nodes)
        key = r.choice(["ts", "dur", "cat", "stream", "parent", "inputs", "outputs", "tid", "name", "args", "attrs",
                        "ctrl_deps", "id", "scope", "pid"])
        if key == "stream" and isinstance(n.get("args"), dict):
            n["args"]["stream"] = r.choice(BAD_NUMBERS + [None, 7, 8])
        else:
            n[key] = r.choice(BAD_NUMBERS + ["kernel", "gpu_memcpy", None, [], [[1, 2, 0, -5, 4, "cuda:0"]]])
    if r.random() < 0.2:
        data["nodes"] = [n for n in nodes if n.get("cat") is None]        # the host operators alone
    return data


def g_trace(r: random.Random, tmp: Path) -> list[str]:
    if r.random() < 0.3:
        p = tmp / "et_plus.json"
        p.write_text(json.dumps(g_et_plus(r)))
        cmd = r.choice(["import", "replay"])
        return ["trace", cmd, str(p)] + (["--source-gpu", "v100"] if cmd == "replay" else [])
    src = ROOT / "traces" / "real" / r.choice(["hta_a100_event_sync_multi_stream.json.gz", "hta_mi250_rocm62.json.gz",
                                               "hta_a100_event_sync.json.gz"])
    data = json.loads(gzip.decompress(src.read_bytes()))
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    for _ in range(r.randrange(1, 4)):
        e = r.choice(events)
        key = r.choice([k for k in e] + (list(e.get("args") or {}) if isinstance(e.get("args"), dict) else []))
        target = e if key in e else e["args"]
        target[key] = r.choice(BAD_NUMBERS + ["kernel", "gpu_memcpy", "X", "cuda_runtime"])
    p = tmp / "t.json"
    text = json.dumps(data)
    if r.random() < 0.1:
        text = text[:r.randrange(len(text))]
    p.write_text(text)
    cmd = r.choice(["import", "replay", "whatif"])
    argv = ["trace", cmd, str(p)]
    if cmd != "import":
        argv += ["--source-gpu", "a100"]
    if cmd == "whatif":
        argv += ["--gpu", "h100", "--no-pairs"]
    return argv


SURFACES = {"flags": g_flags, "profile": g_profile, "topology": g_topology, "scenarios": g_scenarios,
            "calibration": g_calibration, "trace": g_trace}


def fuzz(cases: int, seed: int, surfaces=tuple(SURFACES), keep: Path | None = None) -> tuple[Counter, list[tuple]]:
    """Run ``cases`` generated cases; ``keep``: copy each failing case's files there (case<i>/)."""
    import shutil
    r = random.Random(seed)
    counts: Counter = Counter()
    bad: list[tuple] = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(cases):
            tmp = Path(d) / f"case{i}"
            tmp.mkdir()
            surface = surfaces[i % len(surfaces)]
            argv = SURFACES[surface](r, tmp)
            outcome, detail = run(argv)
            counts[(surface, outcome)] += 1
            if outcome in ("crash", "hang", "nonsense"):
                if keep is not None:
                    shutil.copytree(tmp, keep / tmp.name, dirs_exist_ok=True)
                    argv = [a.replace(str(tmp), str(keep / tmp.name)) for a in argv]
                bad.append((surface, outcome, argv, detail))
            shutil.rmtree(tmp, ignore_errors=True)
    return counts, bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--surface", action="append", choices=list(SURFACES))
    ap.add_argument("--show", type=int, default=10, help="failing cases to print")
    ap.add_argument("--keep", type=Path, help="copy every failing case's input files into this folder")
    args = ap.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    counts, bad = fuzz(args.cases, args.seed, tuple(args.surface or SURFACES), args.keep)
    outcomes = ("ok", "error", "crash", "hang", "nonsense")
    print(f"{'surface':12s} " + " ".join(f"{o:>8s}" for o in outcomes))
    for s in args.surface or SURFACES:
        print(f"{s:12s} " + " ".join(f"{counts[(s, o)]:8d}" for o in outcomes))
    print(f"{'total':12s} " + " ".join(f"{sum(v for (s, o), v in counts.items() if o == oo):8d}" for oo in outcomes))
    for surface, outcome, argv, detail in bad[:args.show]:
        print(f"\n[{surface}] {outcome}: {detail}\n  ficco-sim {' '.join(argv)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
