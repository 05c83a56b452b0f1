"""sim/system/demo.py's writers on a synthetic raw record (no simulator):
the pcap (timestamps = simulated time, every fate, RoCE layers decode it),
the fates CSV, the analysis (goodput from first deliveries, retransmissions,
recovery times from the fault schedule and the EV events), report.md/json
and the plots."""

import csv
import json
from dataclasses import asdict

import pytest
from scapy.layers.inet import IP
from scapy.utils import PcapReader

from host_driver import layers as L
from sim.system.demo import (
    DemoConfig,
    analyse,
    data_frame_info,
    plot,
    report_markdown,
    write_pcap,
    write_report,
)
from sim.system.fabric import mark_ce

CFG = DemoConfig(rounds=1, shard_bytes=8 * 1024, messages=2, seed=1, fail_path=3,
                 fail_direction=0, sample_cycles=250)
T0 = 10_000.0


def frame(psn, ev, n=1024, opcode=L.OP_WRITE_MIDDLE, src=0):
    addr = dict(src_mac=f"02:00:00:00:00:0{src + 1}", dst_mac=f"02:00:00:00:00:0{2 - src}",
                src_ip=f"10.0.0.{src + 1}", dst_ip=f"10.0.0.{2 - src}")
    return bytes(L.write_packet(opcode=opcode, dqpn=1, psn=psn, va=0x1000 + psn * n, rkey=7,
                                dma_len=4096, payload=bytes([psn & 0xFF]) * n, ev=ev, **addr))


def synthetic_raw(verified=True):
    cap = []
    # direction 0: 8 frames of 1 KiB over 2 us each, path 3 dies at T0 + 4000 ns,
    # PSN 3 (on path 3) dropped and retransmitted on path 4; PSN 5 delivered twice
    t = T0
    for psn in range(8):
        ev = 0xC000 + psn % 8
        f = frame(psn, ev)
        fate = "delivered"
        if psn == 3:
            fate = "dropped"
        cap.append((t, 0, ev % 8, ev, fate, "down" if fate == "dropped" else "", False, f,
                    None if fate == "dropped" else t + 400))
        t += 1000
    cap.append((t, 0, 4, 0xC004, "delivered", "", False, frame(3, 0xC004), t + 400))
    cap.append((t + 500, 0, 5, 0xC005, "delivered", "", False, frame(5, 0xC005), t + 900))
    # direction 1: one CE-marked, one trimmed
    cap.append((T0 + 100, 1, 0, 0xD000, "delivered", "", True,
                mark_ce(frame(0, 0xD000, src=1)), T0 + 500))
    cap.append((T0 + 1200, 1, 1, 0xD001, "trimmed", "trim", False,
                L.trim(frame(1, 0xD001, src=1)), T0 + 1600))
    rec = {
        "start_ns": T0, "end_ns": T0 + 12_000.0,
        "rounds": [(1, 0, T0 + 11_000.0), (0, 0, T0 + 11_500.0)],
        "rounds_posted": [(0, 0, T0), (1, 0, T0)],
        "send_cqes": [(0, T0 + 11_000.0, 1, 0, 4096), (1, T0 + 11_800.0, 1, 0, 4096)],
        "recv_cqes": [],
        "ev_events": [(T0 + 6000.0, 0, 0, 3, 0xC003, 0, 1, 2),
                      (T0 + 9500.0, 0, 0, 3, 0xC003, 1, 0, 0)],
        "progress": [], "received": [8192, 8192], "round_done": [1, 1],
        "ev_state": [[0] * 8, [0] * 8], "errors": [] if verified else ["nic1 round 0: differs"],
        "done": True,
    }
    return {
        "config": asdict(CFG), "clk_ns": 8, "line_rate_gbps": 8.0, "nic_params": {},
        "evs": [list(range(0xC000, 0xC008)), list(range(0xD000, 0xD008))],
        "recorder": rec,
        "faults": [(T0 + 4000.0, 3, 0, False), (T0 + 8000.0, 3, 0, True)],
        "counters": [{"rel.retx_sack": 1, "rel.retx_nak": 0, "rel.retx_timeout": 0,
                      "rel.timeouts": 0, "rx.duplicate": 0},
                     {"rel.retx_sack": 0, "rel.retx_nak": 1, "rel.retx_timeout": 0,
                      "rel.timeouts": 0, "rx.duplicate": 1}],
        "ev_states_final": [[0] * 8, [0] * 8],
        "fabric": {"nic0->nic1": [{"carried": 1, "dropped": 0, "trimmed": 0, "ecn_marked": 0,
                                   "reordered": 0, "max_queue_bytes": 0}] * 8,
                   "nic1->nic0": [{"carried": 1, "dropped": 0, "trimmed": 0, "ecn_marked": 0,
                                   "reordered": 0, "max_queue_bytes": 0}] * 8},
        "capture": cap, "sim_end_ns": T0 + 13_000.0, "wall_workload_s": 2.0,
        "verified": verified,
    }


def test_data_frame_info():
    assert data_frame_info(frame(7, 0xC001, n=1001)) == (L.OP_WRITE_MIDDLE, 7, 1001)
    assert data_frame_info(L.trim(frame(7, 0xC001))) == (L.OP_WRITE_MIDDLE, 7, 0)
    assert data_frame_info(bytes(L.ack_packet(dqpn=1, cum_psn=3, bitmap=0, ev=1))) is None


def test_pcap_has_every_frame_at_its_simulated_time_and_decodes(tmp_path):
    raw = synthetic_raw()
    n = write_pcap(raw["capture"], tmp_path / "traffic.pcap")
    assert n == len(raw["capture"])
    with PcapReader(str(tmp_path / "traffic.pcap")) as reader:
        assert reader.linktype == 1
        pkts = list(reader)
    want = sorted(raw["capture"], key=lambda c: c[0])
    assert len(pkts) == len(want)
    for pkt, c in zip(pkts, want, strict=True):
        assert bytes(pkt) == c[7]
        assert round(float(pkt.time) * 1e9) == round(c[0])  # ns resolution
        assert pkt[L.BTH].psn == data_frame_info(c[7])[1]
    trimmed = [p for p, c in zip(pkts, want, strict=True) if c[4] == "trimmed"]
    assert len(trimmed) == 1 and trimmed[0][IP].tos >> 2 == L.TRIM_DSCP_DEFAULT
    marked = [p for p, c in zip(pkts, want, strict=True) if c[6]]
    assert len(marked) == 1 and marked[0][IP].tos & 3 == L.ECN_CE
    with open(tmp_path / "traffic_fates.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["fate"] for r in rows] == [c[4] for c in want]
    assert [r["record"] for r in rows] == [str(i) for i in range(1, len(want) + 1)]


def test_analysis_goodput_retransmissions_and_recovery():
    s = analyse(synthetic_raw())
    assert s["verified"] is True
    d0 = s["directions"][0]
    # round done at nic1 at T0 + 11000, last send CQE of nic0 at T0 + 11000
    assert d0["completion_ns"] == pytest.approx(11_000.0)
    assert d0["of_line_rate"] == pytest.approx(8192 * 8 / 11_000.0 / 8.0)
    # goodput counts each PSN once: 8 distinct PSNs of 1 KiB delivered in direction 0
    series = s["_series"]
    assert series["goodput"][0].sum() * series["bin_ns"] / 8 == pytest.approx(8 * 1024)
    assert series["pkts"][0].sum() == 10  # data frames sent, any fate
    assert series["plane_goodput"].shape[1] == 1  # a record without planes: one
    assert [(x["nic"], x["retx_sack"], x["retx_nak"]) for x in s["retransmissions"]] == [
        (0, 1, 0), (1, 0, 1)]
    r = s["recovery"]
    assert r["failure_ns"] == T0 + 4000 and r["return_ns"] == T0 + 8000
    assert r["assumed_bad_after_ns"] == pytest.approx(2000.0)
    assert r["good_after_return_ns"] == pytest.approx(1500.0)
    assert r["last_data_on_dead_path_after_ns"] is None  # PSN 3 was sent before the failure


def test_report_files_and_plots(tmp_path):
    s = analyse(synthetic_raw())
    write_report(s, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "byte exact" in md and "8 Gb/s" in md
    assert "path failure -> EV ASSUMED_BAD: **2.0 us**" in md
    assert "path return -> EV GOOD again (probe): **1.5 us**" in md
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["recovery"]["assumed_bad_after_ns"] == pytest.approx(2000.0)
    files = plot(s, tmp_path)
    for name in files:
        assert (tmp_path / name).stat().st_size > 1000
    assert set(files) == {"goodput.png", "paths.png", "ev_states.png"}


def test_goodput_per_plane(tmp_path):
    """With the EVs' planes in the record (EV i on plane i mod 4), goodput is
    split by the plane of each delivered PSN's EV (first delivery only), sums
    to the total, and planes.png is drawn."""
    raw = synthetic_raw()
    raw["ev_planes"] = [[(base + i, i % 4) for i in range(8)] for base in (0xC000, 0xD000)]
    s = analyse(raw)
    series = s["_series"]
    per_plane = series["plane_goodput"][0].sum(axis=1) * series["bin_ns"] / 8
    # direction 0: PSNs 0..7 first delivered on EVs 0xC000 + psn, PSN 3 on 0xC004
    # (plane 0) after its loss
    assert list(per_plane) == [3072, 2048, 2048, 1024]
    assert per_plane.sum() == pytest.approx(series["goodput"][0].sum() * series["bin_ns"] / 8)
    assert "planes.png" in plot(s, tmp_path)
    assert "`planes.png`" in report_markdown(s)


def test_report_says_so_when_memory_is_wrong(tmp_path):
    s = analyse(synthetic_raw(verified=False))
    write_report(s, tmp_path)
    assert "WRONG" in (tmp_path / "report.md").read_text()


def test_config_errors():
    with pytest.raises(ValueError, match="multiple of"):
        DemoConfig(shard_bytes=1000, messages=3).check()
    with pytest.raises(ValueError, match="12 MiB"):
        DemoConfig(rounds=13, shard_bytes=1 << 20).check()
    DemoConfig(rounds=12, shard_bytes=1 << 20).check()
    with pytest.raises(ValueError, match="fail_at_frac"):
        DemoConfig(fail_at_frac=0.7, up_at_frac=0.5).check()


def test_bench_update_replaces_only_the_named_section():
    from sim.bench import update_sections

    text = "# Benchmarks\n\nintro\n\n## A\n\na\n\n## Two NICs\n\nold\n\n## C\n\nc\n"
    out = update_sections(text, ["## Two NICs\n\nnew\n"])
    assert out == "# Benchmarks\n\nintro\n\n## A\n\na\n\n## Two NICs\n\nnew\n\n## C\n\nc\n"
    assert update_sections(text, ["## D\n\nd\n"]).endswith("## C\n\nc\n\n## D\n\nd\n")


def test_goodput_recovery_is_measured_from_the_first_dip():
    import numpy as np

    from sim.system.demo import _recovery

    raw = {"capture": [], "clk_ns": 8}
    faults = [{"time_ns": 10_000.0, "path": 3, "direction": 0, "up": False}]
    dipped = [8.0] * 10 + [8.0, 0.0, 0.0, 0.0, 4.0] + [8.0] * 10
    s = {"t0": 0.0, "bin_ns": 1000.0, "goodput": np.array([dipped, [8.0] * len(dipped)])}
    r = _recovery(raw, DemoConfig(), s, faults, [])
    # the 3-bin mean drops below 4 Gb/s at bin 10 and is back at >= 7.2 Gb/s from bin 15
    assert r["goodput_dipped"] and r["goodput_recovered_after_ns"] == pytest.approx(5000.0)
    s["goodput"] = np.full((2, 25), 8.0)
    r = _recovery(raw, DemoConfig(), s, faults, [])
    assert not r["goodput_dipped"] and r["goodput_recovered_after_ns"] is None


@pytest.mark.parametrize("verified", [True, False])
def test_run_writes_everything_and_fails_loudly_on_wrong_memory(tmp_path, monkeypatch, verified):
    from sim.system import demo

    def fake_simulate(outdir, cfg, *, waves, **_kw):
        raw = synthetic_raw(verified=verified)
        raw.update(wall_build_and_run_s=1.0, test_dir=str(tmp_path / "sim"))
        return raw

    monkeypatch.setattr(demo, "simulate", fake_simulate)
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "dump.fst").write_bytes(b"fst")
    if verified:
        summary = demo.run(tmp_path / "out", CFG)
        assert summary["verified"] and summary["pcap_frames"] == len(synthetic_raw()["capture"])
    else:
        with pytest.raises(RuntimeError, match="not byte exact"):
            demo.run(tmp_path / "out", CFG)
    for name in ("report.md", "report.json", "traffic.pcap", "traffic_fates.csv", "goodput.png",
                 "paths.png", "ev_states.png", "waves.fst"):
        assert (tmp_path / "out" / name).exists(), name
