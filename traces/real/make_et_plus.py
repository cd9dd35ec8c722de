"""Make the linked execution trace (ET+) shipped in ``traces/real/`` with PARAM's own linker,
and the slice of the Kineto trace it was linked from that says when its GPU ops really ran.

    python traces/real/make_et_plus.py --param PATH/TO/param      # any clone holding PARAM_COMMIT

At ``PARAM_COMMIT`` facebookresearch/param (MIT) holds a ResNet training iteration on a
V100 profiled twice over, as an execution trace (``resnet_et.json.gz``, schema 1.0.1) and a
Kineto trace (``resnet_kineto.json.gz``), and the linker that joins them
(``train/compute/python/tools/trace_link.py``). This runs that linker, unchanged, with
``--exact-match`` (its only import the environment lacks, ``pydot``, drawn graphs only and is
stubbed), and writes:

* ``param_resnet_v100_et_plus.json.gz``: the linker's output, gzipped, with a top-level
  ``ficco_source`` entry; nothing else changed.
* ``param_resnet_v100_et_plus_kineto_gpu.json.gz``: from the Kineto trace, the GPU events
  the ET+ holds (by correlation), the runtime calls that launched them and
  ``deviceProperties``; as recorded.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARAM_COMMIT = "16c64ea630bf7bc82426156ecebb6e002234257f"    # 2023-11-28: trace_link.py --exact-match
PARAM = "https://github.com/facebookresearch/param"
DATA = "train/compute/python/test/data"
GPU = {"kernel", "gpu_memcpy", "gpu_memset"}


def _show(repo: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{PARAM_COMMIT}:{path}"], check=True,
                          capture_output=True).stdout


def _write(path: Path, data: dict) -> None:
    with gzip.open(path, "wt") as fh:
        json.dump(data, fh, separators=(",", ":"))
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--param", type=Path, required=True, help="a clone of facebookresearch/param")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tree = subprocess.run(["git", "-C", str(args.param), "archive", PARAM_COMMIT, "train/compute/python/tools"],
                              check=True, capture_output=True).stdout
        root = tmp / "param_bench"
        tarfile.open(fileobj=io.BytesIO(tree)).extractall(root)
        for d in (root, root / "train", root / "train/compute", root / "train/compute/python",
                  root / "train/compute/python/tools"):
            (d / "__init__.py").touch()
        (tmp / "pydot.py").write_text("")          # draws graphs only; not installed here
        et, kineto = tmp / "resnet_et.json", tmp / "resnet_kineto.json"
        et.write_bytes(gzip.decompress(_show(args.param, f"{DATA}/resnet_et.json.gz")))
        kineto.write_bytes(gzip.decompress(_show(args.param, f"{DATA}/resnet_kineto.json.gz")))
        subprocess.run([sys.executable, "-m", "param_bench.train.compute.python.tools.trace_link", "--et-file",
                        str(et), "--kineto-file", str(kineto), "--exact-match", "--log-level", "WARNING"],
                       cwd=tmp, env={"PYTHONPATH": str(tmp), "PATH": "/usr/bin:/bin"}, check=True,
                       capture_output=True)
        plus = json.loads((tmp / "resnet_et_plus.json").read_text())
        source = {"repository": PARAM, "commit": PARAM_COMMIT,
                  "made_by": "traces/real/make_et_plus.py: PARAM's trace_link.py --exact-match on "
                             f"{DATA}/resnet_et.json.gz and resnet_kineto.json.gz", "license": "MIT"}
        _write(HERE / "param_resnet_v100_et_plus.json.gz", {"ficco_source": source, **plus})
        corrs = {n["args"]["correlation"] for n in plus["nodes"] if n.get("cat") in GPU}
        raw = json.loads(kineto.read_text())
        keep = [e for e in raw["traceEvents"] if (e.get("cat") in GPU or e.get("cat") == "cuda_runtime")
                and (e.get("args") or {}).get("correlation") in corrs]
        sliced = {"ficco_source": {**source, "made_by": "traces/real/make_et_plus.py: the GPU events of "
                                   "param_resnet_v100_et_plus.json.gz and their launches, from resnet_kineto.json.gz"},
                  "deviceProperties": raw.get("deviceProperties", []), "traceEvents": keep}
        _write(HERE / "param_resnet_v100_et_plus_kineto_gpu.json.gz", sliced)


if __name__ == "__main__":
    main()
