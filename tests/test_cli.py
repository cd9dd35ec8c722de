"""The command line: happy paths, and bad input -> one line, exit code 2, no traceback."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ficco_sim.cli import main
from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_simulate_table_lists_every_basic_schedule(capsys):
    code, out, _ = run(capsys, "simulate", "--gpu", "h100", "--topology", "switch:4", "--m", "4096", "--n", "2048",
                       "--k", "2048", "--format", "csv")
    assert code == 0
    from io import StringIO
    df = pd.read_csv(StringIO(out))
    assert list(df["schedule"])[:2] == ["none", "shard-p2p-sm"]
    # the ideal is relative to the SM collective; copy engines skip its call floor and protocol
    # latencies, so only schedules communicating on SMs are bound by it
    sm = df[df["schedule"].str.contains("-sm")]
    assert len(sm) >= 2 and (sm["speedup"] <= sm["ideal_speedup"] + 1e-9).all()
    assert df.loc[df.schedule == "none", "speedup"].item() == pytest.approx(1.0)


def test_simulate_json_one_schedule_and_atomic_output(capsys, tmp_path):
    out = tmp_path / "r.json"
    code, _, _ = run(capsys, "simulate", "--topology", "fc:4", "--gpu", "mi300x", "--scenario", "gemm-rs",
                     "--m", "4096", "--n", "1024", "--k", "1024", "--schedule", "ficco-a2a-dma", "--format", "json",
                     "-o", str(out))
    assert code == 0
    rows = json.loads(out.read_text())
    assert [r["schedule"] for r in rows] == ["ficco-a2a-dma"]
    assert rows[0]["makespan"] > 0
    assert not list(tmp_path.glob(".*tmp"))


def test_predict_gemm_and_collective(capsys):
    code, out, _ = run(capsys, "predict", "gemm", "--gpu", "a100", "--m", "4096", "--n", "4096", "--k", "4096",
                       "--format", "json")
    assert code == 0 and json.loads(out)[0]["waves"] >= 1
    # a 128-row piece of an 8192 x 8192 layer: HBM-bound, its time the roofline of the two parts
    code, out, _ = run(capsys, "predict", "gemm", "--gpu", "h100", "--m", "128", "--n", "8192", "--k", "8192",
                       "--format", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["bound"] == "HBM" and row["hbm_s"] > row["math_s"]
    assert max(row["math_s"], row["hbm_s"]) < row["time_s"] < row["math_s"] + row["hbm_s"] + 5e-6
    code, out, _ = run(capsys, "predict", "collective", "--topology", "ring:4", "--kind", "all-gather",
                       "--bytes", "16MiB", "--format", "json")
    assert code == 0 and json.loads(out)[0]["bytes"] == 16 << 20


def test_predict_collective_says_which_protocol_and_channels_nccl_would_pick(capsys):
    """What NCCL's tuner picks, as the engines time it: a 4 KiB all-reduce on LL and one
    channel, 64 MiB on every channel; an NCCL of before 2.22 (``--tuner rank``) keeps an
    8 MiB reduce-scatter of 8 A100s on LL; copy engines run no protocol."""
    def row(*argv):
        code, out, _ = run(capsys, "predict", "collective", *argv, "--format", "json")
        assert code == 0
        return json.loads(out)[0]
    small, big = (row("--topology", "switch:4", "--kind", "all-reduce", "--bytes", b) for b in ("4KiB", "64MiB"))
    assert (small["protocol"], small["channels"]) == ("LL", 1)
    assert big["protocol"] != "LL" and big["channels"] == load_gpu("h100").comm_kernel.channels
    old = row("--gpu", "a100", "--kind", "reduce-scatter", "--bytes", "8MiB", "--tuner", "rank")
    assert (old["protocol"], old["channels"]) == ("LL", 16)
    dma = row("--kind", "all-gather", "--bytes", "1MiB", "--comm-engine", "dma")
    assert (dma["protocol"], dma["channels"]) == ("-", 0)


def test_list(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0 and "h100" in out and "ficco-a2a-dma" in out


BAD = [
    (["simulate", "--gpu", "nosuchgpu"], "unknown GPU"),
    (["simulate", "--gpu", "{tmp}/missing.yaml"], "no such profile file"),
    (["simulate", "--gpu", "{tmp}/broken.yaml"], "malformed YAML"),
    (["simulate", "--gpu", "{tmp}/latin1.yaml"], "not UTF-8 text (byte 0xb5 on line 2)"),
    (["predict", "collective", "--topology", "{tmp}/latin1.yaml", "--kind", "all-gather", "--bytes", "1MiB"],
     "not UTF-8"),
    (["explore", "--scenarios", "{tmp}/latin1.yaml", "--out", "{tmp}/study"], "not UTF-8"),
    (["simulate", "--gpu", "{tmp}/nosource.yaml"], "source"),
    (["simulate", "--topology", "ring:x"], "integer"),
    (["simulate", "--topology", "ring:1"], "at least 2"),
    (["simulate", "--topology", "{tmp}/disconnected.yaml"], "disconnected"),
    (["simulate", "--topology", "mesh:4"], "unknown topology"),
    (["simulate", "--m", "-4"], "--m"),
    (["simulate", "--m", "1001", "--topology", "switch:8"], "divide evenly"),
    (["simulate", "--dtype", "int3"], "dtype"),
    (["simulate", "--schedule", "shard-p2p-warp"], "unknown part"),
    (["simulate", "--schedule", "ficco-a2a-dma-hi"], "priority"),
    (["simulate", "--gpus", "4", "--topology", "switch:8"], "--gpus"),
    (["simulate", "--scenario", "a2a-gemm", "--skew", "-1"], "--skew"),
    (["predict", "collective", "--kind", "all-gather", "--bytes", "-5"], "--bytes"),
    (["predict", "gemm", "--m", "0", "--n", "1", "--k", "1"], "--m"),
    (["predict", "gemm", "--gpu", "a100", "--m", "200000", "--n", "200000", "--k", "200000"],
     "223.5 GiB, more than a100's 80 GiB"),
    (["predict", "collective", "--gpu", "a100", "--kind", "all-gather", "--bytes", "12GiB"], "96.0 GiB"),
    (["predict", "gemm", "--m", "16384", "--n", "8", "--k", "64", "--dtype", "fp7"], "unknown dtype 'fp7'"),
    (["simulate", "--schedule", "none", "-o", "{tmp}/nodir/out.csv"], "folder does not exist"),
    (["simulate", "--schedule", "none", "-o", "{tmp}"], "is a folder"),
    (["simulate", "--schedule", "none", "--gantt", "{tmp}/g.txt"], "a figure is saved as"),
    (["simulate", "--schedule", "none", "-o", "/proc/x.csv"], "/proc/x.csv: cannot be written"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys, tmp_path):
    (tmp_path / "broken.yaml").write_text("name: x\nnum_sms: [1, 2\n")
    (tmp_path / "latin1.yaml").write_bytes(b"name: x\n# launch 3.5 \xb5s, hand-edited\n")
    (tmp_path / "nosource.yaml").write_text("name: x\nnum_sms: {value: 1, kind: datasheet}\n")
    (tmp_path / "disconnected.yaml").write_text(
        "gpus: 4\nlinks:\n  - {from: gpu0, to: gpu1, bandwidth_gbps: 10}\n  - {from: gpu2, to: gpu3, bandwidth_gbps: 10}\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_output_is_not_half_written_on_error(capsys, tmp_path):
    out = tmp_path / "keep.csv"
    out.write_text("precious\n")
    code, _, _ = run(capsys, "simulate", "--gpu", "nosuchgpu", "-o", str(out))
    assert code == 2 and out.read_text() == "precious\n"


def test_a_bad_figure_name_is_refused_before_anything_is_written(capsys, tmp_path):
    """``trace export --out e.json --gantt e.txt``: refused at once, ``e.json`` not written."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    traces = sorted(str(p) for p in (root / "traces").glob("cpu_ag_mm.rank*.json.gz"))
    code, _, err = run(capsys, "trace", "export", *traces, "--out", str(tmp_path / "e.json"),
                       "--gantt", str(tmp_path / "e.txt"))
    assert code == 2 and "--gantt" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_help_teaches(capsys):
    assert main(["simulate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ag-gemm" in out and "--schedule" in out


def test_small_things_a_user_meets_at_once(capsys, tmp_path):
    """Issue 15's papercuts, each pinned: a missing output folder is said before simulating;
    recommend takes its GPU count from the topology; a task graph prints as a summary."""
    code, _, err = run(capsys, "simulate", "--gpu", "h100", "--topology", "switch:4", "--m", "4096", "--n", "2048",
                       "--k", "2048", "--gantt", str(tmp_path / "nodir" / "x.png"))
    assert code == 2 and "--gantt" in err and "folder does not exist" in err
    code, out, _ = run(capsys, "recommend", "--gpu", "h100", "--topology", "switch:4", "--scenario", "ag-gemm",
                       "--m", "4096", "--n", "2048", "--k", "2048")
    assert code == 0 and "x4" in out
    code, _, err = run(capsys, "recommend", "--topology", "switch:4", "--gpus", "8", "--scenario", "ag-gemm",
                       "--m", "4096", "--n", "2048", "--k", "2048")
    assert code == 2 and "--gpus" in err
    from ficco_sim import Scenario, lower
    g = lower(Scenario("ag-gemm", 8, 16384, 8192, 8192), "ficco-a2a-sm", "h100", "switch:8")
    assert len(repr(g)) < 400 and "kernels" in repr(g)


def _options(parser, path=()):
    import argparse
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _options(sub, path + (name,))
        elif not isinstance(a, argparse._HelpAction):
            yield path, a


def test_every_option_teaches_and_shows_its_default():
    """One vocabulary: every option of every command has help text, and help states the default
    of every optional one that has a default."""
    import argparse
    from ficco_sim.cli import build_parser
    missing, hidden = [], []
    for path, a in _options(build_parser()):
        name = " ".join(path) + " " + "/".join(a.option_strings or [a.dest])
        if not a.help or a.help == argparse.SUPPRESS:
            missing.append(name)
        elif a.default not in (None, False, [], argparse.SUPPRESS) and not a.required and \
                "default" not in a.help.lower():
            hidden.append(name)
    assert not missing and not hidden, (missing, hidden)


def test_one_output_flag_convention():
    """Every command that writes a file or folder takes it as --out, with -o for short."""
    from ficco_sim.cli import build_parser
    outs = {path: a.option_strings for path, a in _options(build_parser())
            if "--out" in a.option_strings or "--output" in a.option_strings}
    assert {p[0] for p in outs} >= {"simulate", "predict", "explore", "calibrate", "validate", "trace"}
    assert all("--out" in flags and "-o" in flags for flags in outs.values()), outs


def test_formats_page_shows_working_examples(tmp_path, capsys):
    from ficco_sim.topology import YAML_HELP, load_topology
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    assert "# GPU profile" in out and "# Topology" in out and "# Scenarios" in out
    assert "num_sms: {value: 132" in out and "ring | fc | switch | custom" in out
    block = [line[2:] for line in YAML_HELP.split("\n\n")[1].splitlines()]
    f = tmp_path / "node.yaml"
    f.write_text("\n".join(block))
    t = load_topology(f)
    assert t.num_gpus == 4 and t.path_bandwidth(2, 3) == pytest.approx(150e9)


def test_simulate_table_explains_negative_values(capsys):
    assert main(["simulate", "--gpu", "h100", "--topology", "switch:8", "--m", "1024", "--n", "1024", "--k", "1024",
                 "--schedule", "shard-p2p-sm"]) == 0
    out = capsys.readouterr().out
    assert "of ideal" in out and "A negative 'of ideal' is a schedule slower than no overlap" in out


def test_simulate_table_says_when_priority_changed_nothing(capsys):
    """On H100 the next GEMM piece, queued on its stream, takes the SMs before the collective its
    event wakes (measured on the H200), so `-hi` times as its twin; the table says why."""
    argv = ["simulate", "--gpu", "h100", "--topology", "switch:8", "--scenario", "gemm-rs", "--m", "8192", "--n",
            "8192", "--k", "1024", "--schedule", "ficco-a2a-sm,ficco-a2a-sm-hi"]
    assert main(argv) == 0
    assert "A '-hi' schedule as fast as its twin" in capsys.readouterr().out
    assert main(argv[:-1] + ["ficco-a2a-sm,ficco-a2a-dma"]) == 0
    assert "'-hi'" not in capsys.readouterr().out


def test_a_collective_smaller_than_one_element_per_piece_is_refused(capsys):
    """Fuzz (seed 5): 7 bytes of all-to-all over 8 GPUs is 0 elements per peer, which took
    0 s and divided by it (6 here: an odd size is refused before, as no whole number of
    float16 elements)."""
    argv = ["predict", "collective", "--gpu", "mi300x", "--topology", "switch:8", "--kind", "all-to-all",
            "--bytes", "6", "--comm-engine", "dma"]
    assert main(argv) == 2
    assert "16 B per rank" in capsys.readouterr().err
    assert main(argv[:-3] + ["16", "--comm-engine", "dma"]) == 0


def test_a_misspelt_key_in_a_profile_or_topology_is_refused_not_ignored(capsys, tmp_path):
    """``dispach: strict`` used to load as the default dispatcher; a link's ``bandwith_gbps``
    was dropped for the file's default. Every key nothing reads is refused, the nearest known
    one named."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    text = (root / "hw_profiles" / "h100.yaml").read_text()
    cases = {
        "dispatch.yaml": (text + "\ndispach: {value: strict, kind: assumption, source: a typo}\n", "did you mean dispatch?"),
        "nested.yaml": (text.replace("  latency_us: {value: 0.337", "  latncy_us: {value: 0.337", 1), "link.latency_us"),
        "extra.yaml": (text + "\nbogus_field: 1\n", "bogus_field: unknown field"),
        "section.yaml": (text.replace("\n  nvls:", "\n  nvsl:", 1), "comm_kernel.nvsl: unknown field: ficco-sim reads "
                         "no such entry (did you mean nvls?)"),
    }
    for name, (body, needle) in cases.items():
        (tmp_path / name).write_text(body)
        code, _, err = run(capsys, "predict", "gemm", "--gpu", str(tmp_path / name), "--m", "64", "--n", "64", "--k", "64")
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (name, err)
    # an empty entry (nothing to read) and a key older profiles carry that ficco-sim now derives load as before
    (tmp_path / "empty.yaml").write_text(text.replace("\ngemm:\n", "\ngemm:\n  measured: []\n", 1)
                                         .replace("\n  p2p:\n", "\n  p2p:\n    min_part_kib: {value: 64, kind: "
                                                  "derived, source: an older calibrate}\n", 1))
    assert "measured: []" in (tmp_path / "empty.yaml").read_text() and "min_part_kib" in (tmp_path / "empty.yaml").read_text()
    code, _, err = run(capsys, "predict", "gemm", "--gpu", str(tmp_path / "empty.yaml"), "--m", "64", "--n", "64", "--k",
                       "64")
    assert code == 0, err
    (tmp_path / "t.yaml").write_text("gpus: 2\nlinks:\n  - {from: gpu0, to: gpu1, bandwith_gbps: 10}\n")
    code, _, err = run(capsys, "predict", "collective", "--topology", str(tmp_path / "t.yaml"), "--kind", "all-reduce",
                       "--bytes", "1MiB")
    assert code == 2 and "links.0.bandwith_gbps: unknown field (did you mean bandwidth_gbps?)" in err


def test_an_empty_trace_and_a_negative_time_are_said_plainly(capsys, tmp_path):
    (tmp_path / "x.json").write_text("")
    code, _, err = run(capsys, "trace", "import", str(tmp_path / "x.json"))
    assert code == 2 and "x.json: empty file" in err
    (tmp_path / "t.csv").write_text("kind,m,n,k,dtype,time_s\ngemm,1024,1024,1024,bfloat16,-0.001\n")
    code, _, err = run(capsys, "calibrate", "--from", str(tmp_path / "t.csv"), "--gpu", "h100", "--out",
                       str(tmp_path / "o.yaml"))
    assert code == 2 and "got -0.001" in err and "np." not in err


def test_output_to_a_device_is_written_through_not_replaced(capsys):
    """``-o /dev/null``: the atomic writer used to swap a regular file in for the device (as
    root: /dev/null itself replaced)."""
    import os
    import stat
    code, _, _ = run(capsys, "simulate", "--schedule", "none", "-o", "/dev/null")
    assert code == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_gantt_chart_name_matplotlib_saves_is_taken(capsys, tmp_path):
    for name in ("g.gif", "g"):                     # any writer matplotlib has; no suffix: PNG
        code, _, err = run(capsys, "simulate", "--schedule", "none", "--gantt", str(tmp_path / name))
        assert code == 0 and (tmp_path / name).stat().st_size > 0, err


def test_a_hot_expert_is_one_gpu_receiving_more(capsys, tmp_path):
    """--skew sends each GPU's larger share to its next peer (every GPU receives as many rows);
    --hot-expert sends every GPU's to GPU 0, whose expert GEMM grows and bounds the rest. The
    scenario YAML says the same with hot_expert; alone, --hot-expert means nothing."""
    def comp(*extra):
        code, out, _ = run(capsys, "simulate", "--scenario", "a2a-gemm", "--gpus", "8", "--m", "16384", "--n", "4096",
                           "--k", "4096", "--schedule", "none", "--format", "json", *extra)
        assert code == 0
        return json.loads(out)[0]["t_comp_iso"]
    even, skewed, hot = comp(), comp("--skew", "3"), comp("--skew", "3", "--hot-expert")
    assert skewed == pytest.approx(even, rel=0.01) and hot > 2.5 * even
    code, _, err = run(capsys, "simulate", "--scenario", "a2a-gemm", "--hot-expert")
    assert code == 2 and "--hot-expert" in err
    from ficco_sim.explore.library import load_scenarios
    f = tmp_path / "s.yaml"
    f.write_text("scenarios:\n  - {name: moe, kind: a2a-gemm, gpus: 4, m: 4096, n: 1024, k: 1024, skew: 3,"
                 " hot_expert: true}\n")
    (sc,) = load_scenarios(f)
    assert sc.routing[1][0] > sc.routing[1][2] and sc.routing[2][0] > sc.routing[2][3]
    f.write_text("scenarios:\n  - {name: moe, kind: a2a-gemm, gpus: 4, m: 4096, n: 1024, k: 1024, skew: 3,"
                 " hot_expert: 1}\n")
    with pytest.raises(InputError, match="hot_expert"):
        load_scenarios(f)
