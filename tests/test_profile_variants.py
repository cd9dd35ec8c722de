"""Profiles that extend another (``extends:``): a variant gives only what differs, takes the
rest with its sources, and is refused in one line when it names nothing, loops or has no name.
The built-in H800 and A800 are the H100 and A100 with 8 NVLinks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from ficco_sim import Scenario, simulate
from ficco_sim.calibrate.writer import update_profile
from ficco_sim.cli import main
from ficco_sim.errors import InputError
from ficco_sim.hardware import load_gpu, profile_for_device

MIB = 1 << 20


def _variant(tmp_path: Path, body: dict, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


@pytest.mark.parametrize("variant, base, links", [("h800", "h100", 8), ("a800", "a100", 8)])
def test_a_built_in_variant_is_its_base_with_fewer_links(variant, base, links):
    v, b = load_gpu(variant), load_gpu(base)
    assert (v.name, v.link.ports, b.link.ports > links) == (variant, links, True)
    # everything the variant does not give is the base's, number and source alike
    for field in ("num_sms", "sm", "peak_flops", "hbm_bandwidth", "gemm", "contention", "launch_overhead"):
        assert getattr(v, field) == getattr(b, field), field
    assert v.provenance("gemm.efficiency.float16") == b.provenance("gemm.efficiency.float16")
    assert v.provenance("link.ports").kind == "datasheet"
    # the link-derived numbers scale with the links, not copied
    share = links / b.link.ports
    assert v.comm_kernel.channel_bandwidth == pytest.approx(b.comm_kernel.channel_bandwidth * share, rel=0.01)
    assert v.dma.bandwidth == pytest.approx(b.dma.bandwidth * share, rel=0.02)


def test_a_large_all_gather_on_h800_takes_the_link_ratio_longer_and_a_gemm_the_same():
    sc = Scenario("ag-gemm", 8, 4096, 6144, 12288, "float16")
    t = {g: simulate(sc, "none", g, "switch:8").metrics for g in ("h100", "h800")}
    ratio = float(t["h800"]["t_comm_iso"] / t["h100"]["t_comm_iso"])
    assert ratio == pytest.approx(18 / 8, rel=0.1)              # bandwidth-bound: 450 against 200 GB/s
    assert float(t["h800"]["t_comp_iso"]) == pytest.approx(float(t["h100"]["t_comp_iso"]), rel=1e-9)


def test_trace_device_names_find_the_variants():
    assert profile_for_device("NVIDIA H800") == "h800"
    assert profile_for_device("NVIDIA A800-SXM4-80GB") == "a800"
    assert profile_for_device("NVIDIA H100 80GB HBM3") == "h100"


def test_a_users_variant_overrides_leaves_and_replaces_lists_whole(tmp_path):
    base = load_gpu("h100")
    tile = {"m": {"value": 128, "kind": "assumption", "source": "s"}, "n": {"value": 128, "kind": "assumption",
            "source": "s"}, "threads": {"value": 256, "kind": "assumption", "source": "s"},
            "registers": {"value": 168, "kind": "assumption", "source": "s"},
            "smem_kib": {"value": 130, "kind": "assumption", "source": "s"}}
    path = _variant(tmp_path, {"extends": "h100", "name": "h100-pcie-ish",
                               "hbm": {"bandwidth_gbps": {"value": 2000, "kind": "datasheet", "source": "mine"}},
                               "gemm": {"tiles": [tile]}})
    g = load_gpu(str(path))
    assert g.name == "h100-pcie-ish" and g.hbm_bandwidth == pytest.approx(2e12)
    assert g.hbm_efficiency == base.hbm_efficiency                      # the sibling leaf kept
    assert len(g.gemm.tiles) == 1 and len(base.gemm.tiles) == 3         # the list replaced whole
    assert g.provenance("hbm.bandwidth_gbps").source == "mine"


def test_a_variant_of_a_variant_by_relative_path_read_from_its_own_folder(tmp_path, monkeypatch):
    (tmp_path / "lab").mkdir()
    _variant(tmp_path / "lab", {"extends": "h800", "name": "h800-slow",
                                "launch_overhead_us": {"value": 9.0, "kind": "measured", "source": "mine"}},
             "h800-slow.yaml")
    leaf = _variant(tmp_path / "lab", {"extends": "h800-slow.yaml", "name": "h800-slower"}, "h800-slower.yaml")
    monkeypatch.chdir(tmp_path)                                         # not the files' folder
    g = load_gpu(str(leaf))
    assert (g.name, g.link.ports, g.launch_overhead) == ("h800-slower", 8, pytest.approx(9e-6))


@pytest.mark.parametrize("body, field, words", [
    ({"extends": "h900", "name": "x"}, "extends", "no built-in profile 'h900'"),
    ({"extends": "nowhere.yaml", "name": "x"}, "extends", "no such profile file"),
    ({"extends": ["h100"], "name": "x"}, "extends", "must name a built-in profile"),
    ({"extends": "h100"}, "name", "needs a name of its own"),
    ({"extends": "h100", "name": "x", "link": {"portz": {"value": 8, "kind": "datasheet", "source": "s"}}},
     "link.portz", "did you mean ports"),
    ({"extends": "h100", "name": "x", "link": 8}, "link", "must be a mapping"),       # would drop the section
    ({"extends": "h100", "name": "x", "link": {"ports": 8}}, "link.ports", "value, kind and source"),
    ({"extends": ".", "name": "x"}, "extends", "no built-in profile '.'"),
])
def test_a_bad_variant_is_one_line_naming_its_file_and_field(tmp_path, body, field, words):
    path = _variant(tmp_path, body)
    with pytest.raises(InputError) as err:
        load_gpu(str(path))
    assert (err.value.where, err.value.field) == (str(path), field) and words in err.value.message


def test_a_built_in_name_is_never_a_file_of_the_working_folder(tmp_path, monkeypatch):
    """h800.yaml extends h100: a folder or file named h100 where the user works is not it."""
    (tmp_path / "h100").mkdir()
    (tmp_path / "a100").write_text("- not a profile\n")
    monkeypatch.chdir(tmp_path)
    assert load_gpu("h800").link.ports == 8 and load_gpu("a800").link.ports == 8


def test_a_bad_entry_a_variant_inherits_is_said_to_be_inherited_and_an_edited_base_is_reread(tmp_path):
    base = yaml.safe_load((Path(load_gpu("h100").path)).read_text())
    base["name"] = "mybase"
    base["num_sms"] = {"value": -5, "kind": "datasheet", "source": "typo"}
    _variant(tmp_path, base, "mybase.yaml")
    v = _variant(tmp_path, {"extends": "mybase.yaml", "name": "v"}, "v.yaml")
    with pytest.raises(InputError) as err:
        load_gpu(str(v))
    assert (err.value.where, err.value.field) == (str(v), "num_sms") and "inherited through extends" in err.value.line()
    base["num_sms"] = {"value": 100, "kind": "datasheet", "source": "fixed"}
    _variant(tmp_path, base, "mybase.yaml")
    assert load_gpu(str(v)).num_sms == 100
    base["num_sms"] = {"value": 66, "kind": "datasheet", "source": "again"}
    import os
    _variant(tmp_path, base, "mybase.yaml")
    os.utime(tmp_path / "mybase.yaml", (1e9, 1e9))               # a different time, whatever the clock
    assert load_gpu(str(v)).num_sms == 66                         # the variant itself did not change


def test_profiles_extending_one_another_in_a_loop_are_refused(tmp_path):
    _variant(tmp_path, {"extends": "b.yaml", "name": "a"}, "a.yaml")
    _variant(tmp_path, {"extends": "a.yaml", "name": "b"}, "b.yaml")
    with pytest.raises(InputError, match="loop.*a.yaml -> b.yaml -> a.yaml"):
        load_gpu(str(tmp_path / "a.yaml"))


def test_the_cli_runs_a_variant_and_refuses_a_bad_one_with_exit_2(tmp_path, capsys):
    assert main(["predict", "collective", "--gpu", "h800", "--topology", "switch:8", "--kind", "all-gather",
                 "--bytes", str(64 * MIB), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("h800,switch:8,all-gather,")
    bad = _variant(tmp_path, {"extends": "h100"})
    assert main(["predict", "gemm", "--gpu", str(bad), "--m", "1024", "--n", "1024", "--k", "1024"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{bad}: name:" in err


def test_calibrate_writes_into_a_variant_adding_the_mappings_it_lacks(tmp_path):
    (tmp_path / "lab").mkdir()
    mine = _variant(tmp_path / "lab", {"extends": "../h800-base.yaml", "name": "h800-mine"}, "mine.yaml")
    _variant(tmp_path, {"extends": "h800", "name": "h800-base"}, "h800-base.yaml")
    out = tmp_path / "elsewhere" / "fitted.yaml"
    out.parent.mkdir()
    update_profile(mine, out, {"comm_kernel.protocols.LL.latency_us": (0.9, "fitted", "my fit"),
                               "link.latency_us": (0.5, "fitted", "my fit")})
    g, h800 = load_gpu(str(out)), load_gpu("h800")
    ll = {p.name: p for p in g.comm_kernel.protocols}["LL"]
    assert ll.latency == pytest.approx(0.9e-6) and g.link.latency == pytest.approx(0.5e-6)
    # the rest is still the chain's: H800 links, the H100's other protocols
    assert g.link.ports == 8 and g.name == "h800-mine"
    assert [dataclasses.replace(p, latency=0) for p in g.comm_kernel.protocols] == \
        [dataclasses.replace(p, latency=0) for p in h800.comm_kernel.protocols]


def test_a_variant_unsets_an_optional_entry_with_null_and_calibrate_fills_it_again(tmp_path):
    """``key: null`` drops an entry of the base: an H100 without Flux's per-block store rate
    posts its stores as an Ampere does; a required entry unset is refused as the variant's."""
    posted = _variant(tmp_path, {"extends": "h100", "name": "h100-posted", "gemm": {"peer_gbps_per_block": None}})
    assert load_gpu("h100").gemm.peer_rate < float("inf") and load_gpu(str(posted)).gemm.peer_rate == float("inf")
    sc = Scenario("gemm-rs", 8, 4096, 8192, 8192, "float16")
    assert float(simulate(sc, "fused-st", str(posted), "switch:8").metrics["makespan"]) != \
        pytest.approx(float(simulate(sc, "fused-st", "h100", "switch:8").metrics["makespan"]), rel=1e-6)
    no_links = _variant(tmp_path, {"extends": "h100", "name": "x", "link": None}, "x.yaml")
    with pytest.raises(InputError) as err:
        load_gpu(str(no_links))
    assert err.value.field.startswith("link.") and "unset by this file's `link: null`" in err.value.line()
    out = tmp_path / "fitted.yaml"
    update_profile(posted, out, {"gemm.peer_gbps_per_block": (30.0, "fitted", "my fit")})
    assert load_gpu(str(out)).gemm.peer_rate == pytest.approx(30e9)
    assert out.read_text().count("peer_gbps_per_block") == 1


def test_every_yaml_spelling_of_null_unsets_and_calibrate_writes_the_key_once(tmp_path):
    from ficco_sim.calibrate.writer import set_leaves
    for spelling in ("", " null", " Null", " NULL", " ~"):
        text = f"extends: h100\nname: v\ngemm:\n  peer_gbps_per_block:{spelling}  # posted\n"
        out = set_leaves(text, {"gemm.peer_gbps_per_block": (30.0, "fitted", "f")})
        assert out.count("peer_gbps_per_block") == 1 and "# posted" in out and "value: 30" in out, spelling
    leaf = tmp_path / "leaf.yaml"
    leaf.write_text("extends: h100\nname: v\nlink:\n  ports: null\n")
    with pytest.raises(InputError) as err:
        load_gpu(str(leaf))
    assert err.value.field == "link.ports" and "unset by this file's `link.ports: null`" in err.value.line()
