"""Scenario files of the two-NIC simulation (sim/system/scenario.py): every
shipped file parses and checks, bad files raise errors that name the field,
``python -m sim --list``, the fault schedule and rates they produce, and a
small scenario end to end on the golden model (pure Python)."""

import csv
import json
from dataclasses import asdict, replace

import pytest
from scapy.utils import RawPcapReader

from sim.__main__ import main
from sim.system.demo import DemoConfig
from sim.system.fabric import Fabric
from sim.system.scenario import ScenarioError, list_scenarios, load, parse
from sim.system.workload import apply_rates, fault_events, final_check

SHIPPED = [name for name, _ in list_scenarios()]
# the RTL versions of the golden model's scenarios, the demo, and the 4-QP one
REQUIRED = {"demo", "loss", "blackhole", "flap", "reorder", "ack_loss", "qps4_loss2", "small"}


def test_the_required_scenarios_are_shipped():
    assert REQUIRED <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_parses_and_checks(name):
    cfg = load(name)
    assert cfg.name == name and cfg.description
    assert cfg.check() is cfg
    for t, path, _up, direction in fault_events(cfg):
        assert t >= 0 and 0 <= path < cfg.paths and direction in (None, 0, 1)


def test_demo_scenario_is_the_demo():
    """make sim's demo from the file: 8 MiB sent and 8 MiB received per NIC,
    every other setting DemoConfig's defaults give (whose smaller ring the
    benchmarks run), and the same path down/up at the same fractions of the
    run."""
    file = load("demo")
    assert file.rounds * file.shard_bytes == 8 << 20
    default = DemoConfig(rounds=file.rounds, shard_bytes=file.shard_bytes)
    assert fault_events(file) == fault_events(default) and len(fault_events(file)) == 2
    differ = {k for k, v in asdict(file).items() if asdict(default)[k] != v}
    assert differ == {"description", "fail", "events"}


def test_seed_overrides_the_file():
    assert load("small", seed=99).seed == 99 and load("small").seed != 99


def good():
    return {"description": "x", "qps": 2, "workload": {"rounds": 2, "shard_kib": 16,
                                                     "messages": 4},
            "faults": {"loss": 0.01, "down": [{"path": 1, "at": 0.2, "up": 0.5}],
                       "rates": [{"direction": "nic1->nic0", "paths": [2], "loss": 0.5}]}}


def bad(change):
    table = good()
    change(table)
    return table


def test_ipv6_binds_connection_0_over_ipv6_unless_the_file_says():
    assert parse(good(), "ok").ipv6 is True
    assert parse({**good(), "nic": {"ipv6": False}}, "v4").ipv6 is False


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("description"), "description is missing"),
    (lambda t: t.update(qpz=2), "unknown field 'qpz'"),
    (lambda t: t["workload"].update(round=3), r"\[workload\]: unknown field 'round'"),
    (lambda t: t.update(qps=True), "qps must be an integer, not True"),
    (lambda t: t.update(qps=17), r"qps must be in 1\.\.16"),
    (lambda t: t.update(qps=3), r"messages \(4\) must be a multiple of qps \(3\)"),
    (lambda t: t.update(mtu=4096), "mtu must be 256, 512 or 1024"),
    (lambda t: t["workload"].update(kind="incast"), "workload must be 'ring' or 'stream'"),
    (lambda t: t["workload"].update(shard_kib=0.1), "workload.shard_kib must be a positive"),
    (lambda t: t["workload"].update(shard_kib="16"), "workload.shard_kib must be a number"),
    (lambda t: t["workload"].update(rounds=40, shard_kib=1024), "32 MiB host memory"),
    (lambda t: t["faults"].update(loss=1.5), r"faults.loss is a probability in \[0, 1\]"),
    (lambda t: t["faults"].update(reorder_prob=0.1), "reorder_prob needs faults.reorder_ns"),
    (lambda t: t["faults"]["down"][0].update(path=8), r"faults.down\[0\].path must be in 0..7"),
    (lambda t: t["faults"]["down"][0].pop("path"), r"faults.down\[0\].path is missing"),
    (lambda t: t["faults"]["down"][0].update(up=0.1), "must come up after it goes down"),
    (lambda t: t["faults"]["down"][0].update(at_us=5.0), "give at .* or at_us .*, not both"),
    (lambda t: t["faults"]["down"][0].update(up_us=50.0, up=None) or
     t["faults"]["down"][0].pop("up"), r"both times as fractions \(at, up\) or both in micro"),
    (lambda t: t["faults"]["down"][0].pop("at"), r"faults.down\[0\]: give at"),
    (lambda t: t["faults"]["down"][0].update(direction="a->b"),
     r"faults.down\[0\].direction must be one of 'nic0->nic1', 'nic1->nic0', 'both'"),
    (lambda t: t["faults"]["down"][0].update(flap_down_us=10.0),
     r"flap_up_us must be > 0 us in a flap"),
    (lambda t: t["faults"]["down"][0].update(flap_down_us=10.0, flap_up_us=10.0) or
     t["faults"]["down"][0].pop("up"), "a flap needs its end"),
    (lambda t: t["faults"]["rates"][0].update(paths=[9]), r"rates\[0\].paths: each path is"),
    (lambda t: t["faults"]["rates"][0].pop("loss"), r"rates\[0\] sets no rate"),
    (lambda t: t["faults"]["rates"][0].update(reorder_prob=0.1, reorder_ns=10.0),
     "apply to a whole direction"),
    (lambda t: t["faults"]["rates"][0].update(ce=-0.1), r"rates\[0\].ce is a probability"),
    (lambda t: t.update(nic={"ipv6": 1}), "nic.ipv6 must be true or false, not 1"),
])
def test_bad_scenarios_name_the_field(change, message):
    parse(good(), "ok")
    with pytest.raises(ScenarioError, match=message):
        parse(bad(change), "broken")


def test_bad_files_name_the_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('description = "x"\n[faults]\nloss = 2\n')
    with pytest.raises(ScenarioError, match=f"{f}: scenario 'mine': faults.loss is a "):
        load(f)
    f.write_text("description = \n")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(f)
    with pytest.raises(ScenarioError, match="no scenario 'nope': give a .toml file or one of "
                       "ack_loss, blackhole, demo"):
        load("nope")


def test_main_reports_a_bad_scenario_as_a_usage_error(tmp_path, capsys):
    f = tmp_path / "mine.toml"
    f.write_text('description = "x"\nqps = 0\n')
    with pytest.raises(SystemExit) as exc:
        main(["--scenario", str(f), "--model-only", "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert "qps must be in 1..16" in capsys.readouterr().err


def test_list(capsys):
    main(["--list"])
    out = capsys.readouterr().out.splitlines()
    for name, desc in list_scenarios():
        assert any(line.split(None, 1) == [name, desc] for line in out), name


def test_flap_and_windows_expand_to_path_events():
    cfg = replace(DemoConfig(fail=False), events=[
        {"path": 2, "direction": None, "at_us": 10.0, "up_us": 60.0, "flap_down_us": 10.0,
         "flap_up_us": 15.0},
        {"path": 4, "direction": 1, "at": 0.5, "up": None}])
    got = [(round(t), p, up, d) for t, p, up, d in fault_events(cfg)]
    half = round(0.5 * cfg.ideal_ns())
    assert got == [(10_000, 2, False, None), (20_000, 2, True, None),
                   (35_000, 2, False, None), (45_000, 2, True, None), (half, 4, False, 1)]
    cfg.events[0]["up_us"] = 40.0  # ends while down: up at the end
    assert [round(t) for t, *_ in fault_events(cfg)][:4] == [10_000, 20_000, 35_000, 40_000]


def test_rates_reach_only_their_paths():
    cfg = load("small")
    cfg = replace(cfg, rates=[{"direction": 1, "paths": [2, 5], "loss": 0.5, "trim": 0.25},
                              {"direction": 0, "reorder_prob": 0.1, "reorder_ns": 700.0}])
    fab = Fabric([None, None], [None, None], num_paths=8)
    apply_rates(fab, cfg)
    for d in (0, 1):
        for p, path in enumerate(fab.directions[d].paths):
            hit = d == 1 and p in (2, 5)
            assert path.loss == (0.5 if hit else cfg.loss)
            assert path.trim_prob == (0.25 if hit else cfg.trim_prob)
            assert path.ecn_prob == cfg.ecn_prob
            assert (path.reorder_prob, path.reorder_ns) == ((0.1, 700.0) if d == 0 else (0, 0))


def test_final_check_finds_a_wrong_byte():
    from host_driver.transport import HostMemory
    from sim.system.workload import Conn, Recorder

    cfg = DemoConfig(rounds=2, shard_bytes=4096, messages=4, qps=2, fail=False)

    class Ram:
        def __init__(self):
            self.data = bytearray(1 << 16)

        def read(self, addr, n):
            return bytes(self.data[addr:addr + n])

        def write(self, addr, data):
            self.data[addr:addr + len(data)] = data

    class End:
        def __init__(self):
            self.dev = type("Dev", (), {"mem": HostMemory(Ram(), 1 << 16)})()

    ends = [End(), End()]
    conns = [[Conn(None, None, 0x1000 * (j + 1), 0x8000, 1 - j) for j in range(2)]
             for _ in ends]
    expected = {(i, r): bytes(range(16 * i + r, 16 * i + r + 16)) * 256 for i in (0, 1)
                for r in (0, 1)}
    # message k of round r: sent on QP k % 2, lands on its peer QP 1 - k % 2
    for (i, r), data in expected.items():
        for k in range(4):
            ends[i].dev.mem.write(conns[i][1 - k % 2].recv_buf + (r * 2 + k // 2) * 1024,
                                  data[k * 1024:(k + 1) * 1024])
    system = type("S", (), {"ends": ends})()
    rec = Recorder()
    assert final_check(system, conns, cfg, expected, rec) and rec.errors == []
    # message 1 of round 1 (sent on QP 1, so on the receiver's QP 0), its byte 7
    ends[1].dev.mem.write(conns[1][0].recv_buf + (1 * 2 + 0) * 1024 + 7, b"\xff")
    assert final_check(system, conns, cfg, expected, rec)
    assert rec.errors == ["nic1: receive memory of round 1 differs from byte 1031 of 4096 at "
                          "the end"]


def test_small_scenario_on_the_golden_model(tmp_path):
    """``python -m sim --scenario small --model-only``: the model's side of the
    side-by-side run, with its report, pcap, fates and plots; the pcap holds
    every frame the model fabric carried or dropped (its counters agree)."""
    main(["--scenario", "small", "--model-only", "--out", str(tmp_path)])
    out = tmp_path / "scenario-small"
    for name in ("report.md", "report.json", "traffic.pcap", "traffic_fates.csv",
                 "model/report.md", "model/goodput.png", "model/paths.png",
                 "model/ev_states.png", "model/traffic.pcap"):
        assert (out / name).exists(), name
    assert (tmp_path / "traffic.pcap").read_bytes() == (out / "traffic.pcap").read_bytes()
    rep = json.loads((out / "report.json").read_text())
    model = rep["model"]
    assert model["verified"] and model["errors"] == [] and rep["pcap_of"] == "model"
    assert model["config"]["qps"] == 2 and [d["payload_bytes"] for d in model["directions"]] \
        == [32 * 1024, 32 * 1024]
    with open(out / "traffic_fates.csv") as f:
        fates = list(csv.DictReader(f))
    frames = [data for data, _ in RawPcapReader(str(out / "traffic.pcap"))]
    assert len(frames) == len(fates) == model["pcap_frames"] > 0
    for name in ("nic0->nic1", "nic1->nic0"):
        rows = [r for r in model["fabric"] if r["direction"] == name]
        mine = [f for f in fates if f["direction"] == name]
        assert sum(r["carried"] for r in rows) == sum(f["fate"] != "dropped" for f in mine)
        assert sum(r["dropped"] for r in rows) == sum(f["fate"] == "dropped" for f in mine)
        assert sum(r["trimmed"] for r in rows) == sum(f["fate"] == "trimmed" for f in mine)
    # the path down/up was applied at the times the file gives
    cfg = load("small")
    start = model["faults"][0]["time_ns"] - 0.2 * cfg.ideal_ns()
    assert [(round(f["time_ns"] - start), f["path"], f["up"]) for f in model["faults"]] == [
        (0 + round(0.2 * cfg.ideal_ns()), 5, False), (round(0.6 * cfg.ideal_ns()), 5, True)]
    report = (tmp_path / "report.md").read_text()
    assert "Scenario `small`" in report and "model byte exact" in report


def test_ack_loss_scenario_loses_acks_only():
    """The RTL version of the model's ack_loss on the model: nic1 sends no
    data, and only nic1 -> nic0 loses frames."""
    from sim.system.demo import analyse
    from sim.system.scenario_run import model_raw

    s = analyse(model_raw(load("ack_loss"), capture=False))
    assert s["verified"]
    assert s["directions"][1]["payload_bytes"] == 0
    dropped = {d: sum(r["dropped"] for r in s["fabric"] if r["direction"] == d)
               for d in ("nic0->nic1", "nic1->nic0")}
    assert dropped["nic0->nic1"] == 0 and dropped["nic1->nic0"] > 0
    assert s["retransmissions"][0]["rx.placed"] == 0  # nic0 received no data


def test_make_sim_steps():
    """Without a scenario ``python -m sim`` runs what it did (the demo, from
    demo.toml, then the model's blackhole); with one, that scenario only."""
    from sim.__main__ import steps_for

    assert [k for k, *_ in steps_for()] == ["system", "model"]
    assert [k for k, *_ in steps_for(parser=True)] == ["system", "parser", "model"]
    assert [k for k, *_ in steps_for(model_only=True)] == ["model"]
    assert [k for k, *_ in steps_for(scenario=load("small"))] == ["scenario"]
    assert [k for k, *_ in steps_for(demo_cfg=load("demo", seed=5))] == ["system", "model"]
