"""sim/system/incast.py's scenario on model NICs (``run_model``), the
counterpart of tests/system/test_incast.py's RTL run: the golden model's
NSCC cuts the senders' windows under incast and keeps goodput; a plane's
failure sends its EVs ASSUMED_BAD and the transfer completes; bad
configurations are refused by what to fix."""

from dataclasses import replace

import pytest

from sim.system.incast import IncastConfig, figures, mean_window, run_model
from sim.system.top import NIC_PARAMS

PARAMS = dict(NIC_PARAMS, num_planes=2)


def test_model_incast_cuts_windows_and_keeps_goodput():
    cfg = IncastConfig()
    run, link = run_model(cfg, PARAMS, 2)  # byte exact, every WQE SUCCESS (run_incast)
    got = figures(run, cfg, PARAMS)
    assert run.start_window == 13  # 1.5 x BDP at fabric_base_rtt_ns (78 us at 2 planes)
    assert all(w < run.start_window for w in got["min_windows"]), got
    assert got["goodput_ratio"] >= 0.9, got
    assert link["ecn_marks"] > 0 and link["drops_overflow"] == 0
    assert link["max_queue_bytes"] <= 2 * cfg.port_queue_bytes


def test_model_planes_spread_and_count_frames_per_plane():
    """One sender over 4 planes: NicCore's TX rule takes the EVs in turn, so each
    plane carries a quarter of the data frames; each NIC's planes block counts
    per plane exactly the frames its ports sent and received (the fabric's own
    counts), ACKs included."""
    import asyncio

    cfg = replace(IncastConfig(), senders=1, bytes_per_sender=256 * 1024)
    params = dict(NIC_PARAMS, num_planes=4)
    keep = {}
    run, _ = run_model(cfg, params, 4, keep)
    hosts = keep["fabric"].paths.hosts
    got = [asyncio.run(end.dev.plane_counters()) for end in keep["ends"]]
    for i, name in ((0, "nic0"), (1, "nic1")):
        up = [link.tx_packets for link in hosts[name].uplinks]
        down = [link.tx_packets for link in hosts[name].downlinks]
        assert [c["tx_frames"] for c in got[i]] == up, (i, got[i], up)
        assert [c["rx_frames"] for c in got[i]] == down, (i, got[i], down)
        assert all(c["up"] == 1 and c["link_drops"] == 0 for c in got[i])
    sent = [c["tx_frames"] for c in got[1]]  # the sender's: 256 data frames and no ACKs
    assert sent == [64, 64, 64, 64], sent
    assert sum(c["tx_frames"] for c in got[0]) > 0  # the receiver's ACKs


def test_model_plane_failure_marks_its_evs_bad():
    """Plane 1 of 4 fails mid-transfer: sender 1's EVs 1 and 5 (EV i on plane
    i mod 4) go ASSUMED_BAD, no other EV does, the transfer completes."""
    cfg = replace(IncastConfig(), senders=1, bytes_per_sender=512 * 1024, fail_plane=1,
                  fail_at_cycle=20_000, sample_cycles=64, timeout=7, sack_threshold=3)
    params = dict(NIC_PARAMS, num_planes=4)
    run, _ = run_model(cfg, params, 4)
    times = run.to_bad(0, 4, 1)
    assert len(times) == 2 and all(0 < t < 20_000 for t in times), times
    bad = {ev for _, ev, new in run.ev_events[0] if new == 1}
    assert bad == {1, 5}, run.ev_events[0]


def test_mean_window_weights_by_time():
    samples = [(20, 10), (100, 4), (300, 6)]
    assert mean_window(samples, 20, 400) == (10 * 80 + 4 * 200 + 6 * 100) / 380
    samples = [(0, 10), (100, 4), (300, 6)]
    assert mean_window(samples, 0, 400) == (10 * 100 + 4 * 200 + 6 * 100) / 400
    assert mean_window(samples, 100, 200) == 4
    assert mean_window(samples, 500, 600) == 6  # the last sample holds to the end
    with pytest.raises(ValueError, match="no window sample"):
        mean_window([(100, 4)], 0, 50)  # before the first sample


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="senders must be in 1..7"):
        run_model(IncastConfig(senders=0), PARAMS, 2)
    with pytest.raises(ValueError, match="whole number of messages"):
        run_model(IncastConfig(bytes_per_sender=1000), PARAMS, 2)
    with pytest.raises(ValueError, match="port_ecn_bytes < port_queue_bytes"):
        run_model(IncastConfig(port_ecn_bytes=1 << 20), PARAMS, 2)
