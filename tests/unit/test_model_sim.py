"""The scenario runner: reports, plots, pcap, benchmark table."""

from __future__ import annotations

import json

import pytest

from sim.bench import model as model_bench
from sim.mrcsim import list_scenarios, load_scenario, main, run_scenario

SMALL = {
    "name": "small_blackhole",
    "description": "test scenario",
    "seed": 5,
    "transports": ["mrc", "gbn"],
    "fabric": {"planes": 2, "paths_per_plane": 4, "port_gbps": 50, "core_gbps": 50,
               "link_delay_ns": 300, "queue_bytes": 131072, "ecn_bytes": 20000},
    "qp": {"mtu": 1024, "rto_exp": 5, "linear_cnt": 2, "exp_cnt": 2, "ev_min_active": 2},
    "evs": {"mode": "generated", "init": 0, "min": 49152, "max": 65535, "count": 8},
    "flows": [{"src": "a", "dst": "b", "messages": 12, "size": 65536, "depth": 2}],
    "faults": [{"type": "down", "target": {"kind": "core", "plane": 0, "path": "first_ev"},
                "at_frac": 0.3},
               {"type": "loss", "target": {"kind": "core", "to": "b"}, "rate": 0.002}],
    "bin_ns": 2000,
    "pcap_packets": 60,
}


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    path = d / "small.json"
    path.write_text(json.dumps(SMALL))
    return run_scenario(str(path), str(d / "out"), progress=False), d


def test_report_files_and_contents(small_report):
    rep, d = small_report
    out = d / "out" / "small_blackhole"
    for name in ("report.md", "report.json", "goodput_total.png", "goodput_paths_mrc.png",
                 "cwnd_retransmissions.png", "recovery.png", "sample.pcap"):
        assert (out / name).stat().st_size > 0, name
    js = json.loads((out / "report.json").read_text())
    mrc = js["results"]["mrc"]
    assert mrc["finished"] and mrc["payload_bytes_completed"] == 12 * 65536
    assert mrc["data_on_assumed_bad_ev"] == 0
    assert any(e["new"] == "ASSUMED_BAD" for e in mrc["ev_events"])
    # RoCE is pinned on the dead path: retries run out, error completions
    assert not js["results"]["gbn"]["finished"]
    assert js["results"]["gbn"]["qp_errors"] > 0
    assert "| MRC | yes |" in (out / "report.md").read_text()
    assert 0 < mrc["goodput_fraction"] <= 1.0


def test_pcap_frames_are_valid_mrc(small_report):
    from scapy.all import rdpcap

    from host_driver import layers as L

    rep, d = small_report
    frames = rdpcap(str(d / "out" / "small_blackhole" / "sample.pcap"))
    assert len(frames) == rep["pcap_packets"] > 0
    opcodes = set()
    for f in frames:
        raw = bytes(f)
        ip_ok, icrc_ok = L.check_frame(raw)
        assert ip_ok and icrc_ok
        opcodes.add(raw[42])
        assert raw[36:38] == (4791).to_bytes(2, "big")
    assert L.OP_ACKNOWLEDGE in opcodes and L.OP_PROBE_REQ in opcodes
    assert opcodes & set(L.WRITE_OPCODES)


def test_shipped_scenarios_load():
    names = list_scenarios()
    for needed in ("lossless", "loss_1", "blackhole", "flap", "incast", "ack_loss"):
        assert needed in names
    for n in names:
        scn = load_scenario(n)
        assert scn["flows"] and scn["name"] == n


def test_cli_quick(tmp_path, capsys):
    assert main(["reorder", "--out", str(tmp_path), "--quick", "--transports", "mrc",
                 "--no-progress"]) == 0
    assert "MRC" in capsys.readouterr().out
    assert (tmp_path / "reorder" / "report.json").exists()


def test_bench_render_flags_targets(small_report):
    rep, _ = small_report
    fake = {"lossless": rep, "loss_1": rep, "blackhole": rep}
    text = model_bench.render(fake, quick=True, wall=1.0)
    assert "| target | measured | verdict |" in text
    assert "blackhole: transfer completes" in text
    assert "PASS" in text or "MISS" in text


@pytest.mark.long
def test_full_benchmark_quick(tmp_path):
    text = model_bench.run(quick=True, outdir=str(tmp_path))
    assert "lossless goodput >= 0.97 of achievable | " in text
    assert "| 1 of 8 paths blackholed mid-transfer | MRC | yes |" in text


def test_scoreboard_run_is_plain_and_deterministic(tmp_path):
    from sim.mrcsim import scoreboard_run

    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    a = scoreboard_run(str(path), "mrc")
    assert json.loads(json.dumps(a)) == a  # plain data
    assert a == scoreboard_run(str(path), "mrc")
    (qp,) = a["qps"]
    assert [c["wr_id"] for c in qp["send_cq"]] == list(range(12))
    assert all(c["status"] == "SUCCESS" and c["byte_len"] == 65536 for c in qp["send_cq"])
    assert [c["imm"] for c in qp["recv_cq"]] == list(range(12))
    assert qp["retransmitted"] and {r[3] for r in qp["retransmitted"]} <= {"sack", "trim",
                                                                          "timeout"}
    assert any(e["new"] == "ASSUMED_BAD" for e in a["ev_events"])
