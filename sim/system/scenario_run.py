"""One scenario file (sim/system/scenario.py) on the two RTL NICs and on the
golden model, side by side: ``make sim SCENARIO=<name>``.

``run(cfg, outdir, waves="fst", rtl=True, model=True)`` runs

- the RTL: two NicCores under Verilator, the cocotb fabric, the host driver
  (``sim.system.demo.run``: the demo's build and cocotb test, so no second
  Verilator build), into ``outdir/rtl/``;
- the golden model: ``ModelSystem`` (sim/system/model_harness.py), the same
  host driver on ModelTransports and the same workload and fault schedule
  (``sim.system.demo.run_scenario``), into ``outdir/model/``; its frames are
  taken where they enter the model fabric and where they leave it
  (``ModelCapture``) and written as real frames (``host_driver.layers``);

each with the demo's report.md/json, traffic.pcap, traffic_fates.csv and
plots, then ``outdir/report.md`` and ``report.json``: the two side by side
(completion, goodput, retransmissions, recovery per direction) and both
reports, and ``outdir/traffic.pcap`` (+ ``traffic_fates.csv``): the RTL's
frames (the model's without the RTL). Raises RuntimeError, after writing
everything, when either side's receive memory is not byte exact.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from sim.system import demo
from sim.system.demo import CLK_NS, LINE_RATE_GBPS
from sim.system.fabric import DELIVERED, DROPPED, TRIMMED

__all__ = ["ModelCapture", "model_raw", "rtl_timed_system", "run", "comparison_markdown"]

TIMER_SHIFT = 3  # 2^t RTL timer units of 128 ns = 2^(t - 3) model units of 1.024 us


class ModelCapture:
    """Every frame of a ``ModelSystem`` run as sim/system/fabric.py captures
    the RTL's: (send ns, direction, path, EV, fate, reason, CE, frame bytes as
    delivered (as sent if dropped), arrival ns). A data frame carries the
    model packet's data (zeros if it has none). A frame still in flight when
    the capture is taken has no fate yet: one past its core link (which the
    fabric's counters count as carried) is taken as delivered, one before it
    is left out (no counter has it yet)."""

    def __init__(self, system):
        self.system = system
        self.rows: list[list] = []
        self._open: dict[int, list] = {}
        paths = system.model.paths
        paths.taps.append(self._tap)
        paths.delivery_hooks.append(self._delivered)
        paths.drop_hooks.append(self._dropped)

    def _tap(self, pkt, now):
        from sim.mrcsim import _snapshot

        ends = self.system.ends
        d = 0 if pkt.src is ends[0].nic.host else 1
        path = self.system.model.paths.path_of(pkt.src, pkt.dst, pkt.plane, pkt.ev)
        data = getattr(pkt, "data", None)
        row = [now, d, path, pkt.ev, DROPPED, "not delivered", False,
               _snapshot(pkt, now, None), None, bytes(data) if data is not None else None]
        self.rows.append(row)
        self._open[id(pkt)] = (row, pkt)

    def _dropped(self, pkt, now):
        self._open.pop(id(pkt), None)

    def _delivered(self, pkt, now):
        row, _ = self._open.pop(id(pkt), (None, None))
        if row is not None:
            row[4] = TRIMMED if pkt.trimmed else DELIVERED
            row[5] = "trim" if pkt.trimmed else ""
            row[6] = bool(pkt.ce)
            row[8] = now

    def capture(self) -> list[tuple]:
        from host_driver import layers as L
        from sim.mrcsim import model_frame
        from sim.system.fabric import mark_ce
        from sim.system.model_harness import IPS, MACS

        in_flight = {id(row): pkt for row, pkt in self._open.values()}
        out = []
        for row in self.rows:
            t, d, path, ev, fate, reason, ce, snap, arrival, data = row
            pkt = in_flight.get(id(row))
            if pkt is not None:
                if pkt.hop < 2:
                    continue  # before its core link: no fate, no counter yet
                fate = TRIMMED if pkt.trimmed else DELIVERED
                reason = "in flight at the end"
            addr = dict(src_mac=MACS[d], dst_mac=MACS[1 - d], src_ip=IPS[d], dst_ip=IPS[1 - d])
            payload = data if data is not None and len(data) == snap.get("payload_len") else None
            frame = bytes(model_frame(snap, addr, payload))
            if fate == TRIMMED:
                frame = L.trim(frame)
            if ce:
                frame = mark_ce(frame) or frame
            out.append((t, d, path, ev, fate, reason, ce, frame, arrival))
        return out


def rtl_timed_system(*, seed: int = 1, delay_ns: float = 400.0, num_paths: int = 8):
    """Two model NICs timed as the RTL system's: the NIC clock at the RTL's real
    125 MHz (so that times given in cycles, ACK delay and polling, mean the
    same), links at its line rate. Give them the RTL's retransmit t lowered by
    ``TIMER_SHIFT``."""
    from sim.system.model_harness import ModelSystem
    from sim.system.top import NIC_PARAMS

    return ModelSystem(dict(NIC_PARAMS, clk_freq_hz=round(1e9 / CLK_NS)), seed=seed,
                       delay_ns=delay_ns, num_paths=num_paths, gbps=LINE_RATE_GBPS)


def model_raw(cfg, *, capture: bool = True) -> dict:
    """``cfg`` on the golden model, the demo's driver-level script on
    ``ModelSystem`` with the NIC clock at the RTL's 125 MHz, links at the RTL's
    line rate and the retransmit timer's t lowered by ``TIMER_SHIFT``; the raw
    record of ``sim.system.demo.run_scenario`` with the model's frames."""
    system = rtl_timed_system(seed=cfg.seed, delay_ns=cfg.delay_ns, num_paths=cfg.paths)
    cap = ModelCapture(system) if capture else None
    raw = asyncio.run(demo.run_scenario(system, cfg, lambda: system.now_ns, lambda _m: None,
                                        timeout=max(0, cfg.timeout - TIMER_SHIFT)))
    raw["capture"] = cap.capture() if cap else []
    raw["backend"] = "model"
    return raw


def _model_side(cfg, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    raw = model_raw(cfg)
    summary = demo.analyse(raw)
    demo.write_report(summary, out)
    frames = demo.write_pcap(raw["capture"], out / "traffic.pcap")
    plots = demo.plot(summary, out)
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    public.update(outdir=str(out), pcap=str(out / "traffic.pcap"), pcap_frames=frames,
                  plots=plots)
    (out / "report.json").write_text(json.dumps(public, indent=1, default=str))
    return public


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f}"


def _retx(x: dict) -> str:
    return f"{x['retx_sack']} / {x['retx_nak']} / {x['retx_timeout']}"


def comparison_markdown(cfg, rtl: dict | None, model: dict | None) -> str:
    """The two summaries side by side."""
    sides = [(name, s) for name, s in (("RTL", rtl), ("model", model)) if s is not None]
    lines = [f"Scenario `{cfg.name}`: {cfg.description}", "",
             "Receiver memory: " + "; ".join(
                 f"{name} " + ("byte exact" if s["verified"] else "**WRONG** ("
                               + "; ".join(s["errors"][:3]) + ")") for name, s in sides), ""]
    head = ["direction"]
    for name, _ in sides:
        head += [f"{name} completion us", f"{name} Gb/s", f"{name} retx SACK / NAK / timeout"]
    if len(sides) == 2:
        head.append("time ratio RTL / model")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i in (0, 1):
        row = [sides[0][1]["directions"][i]["name"]]
        for _, s in sides:
            d = s["directions"][i]
            row += [_us(d["completion_ns"]) if d["payload_bytes"] else "-",
                    f"{d['goodput_gbps']:.2f}" if d["payload_bytes"] else "-",
                    _retx(s["retransmissions"][i])]
        if len(sides) == 2:
            a, b = rtl["directions"][i], model["directions"][i]
            row.append(f"{a['completion_ns'] / b['completion_ns']:.3f}" if a["payload_bytes"]
                       else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Recovery (us; '-': no such event):", "",
              "| | " + " | ".join(name for name, _ in sides) + " |",
              "|---|" + "---:|" * len(sides)]
    for key, what in (("assumed_bad_after_ns", "first path failure -> EV ASSUMED_BAD"),
                      ("goodput_recovered_after_ns", "failure -> goodput back at 90 %"),
                      ("good_after_return_ns", "path return -> EV GOOD (probe)")):
        lines.append(f"| {what} | " + " | ".join(_us(s["recovery"][key]) for _, s in sides)
                     + " |")
    lines += ["", "Retransmissions are each NIC's (the sender of the direction's data). The "
              "model is event-accurate, not cycle-accurate (docs/model.md, \"The model NIC\"); "
              "where the two differ, the reports below say how.", ""]
    return "\n".join(lines)


def run(cfg, outdir: Path, *, waves: bool | str = "fst", rtl: bool = True,
        model: bool = True) -> dict:
    """The scenario ``cfg`` (a checked ``DemoConfig``) into ``outdir``; returns
    the JSON-able summary (``outdir``, ``pcap_frames``, ``rtl``, ``model``)."""
    out = Path(outdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results, failures = {}, []
    if rtl:
        print(f"--- {cfg.name}: two RTL NICs ---", flush=True)
        try:
            results["rtl"] = demo.run(out / "rtl", cfg, waves=waves)
        except RuntimeError as exc:
            failures.append(f"RTL: {exc}")
            report = out / "rtl" / "report.json"
            results["rtl"] = json.loads(report.read_text()) if report.exists() else None
    if model:
        print(f"--- {cfg.name}: the golden model ---", flush=True)
        results["model"] = _model_side(cfg, out / "model")
        if not results["model"]["verified"]:
            failures.append("model: the receivers' memory is not byte exact: "
                            + "; ".join(results["model"]["errors"]))
    pcap_side = "rtl" if results.get("rtl") else "model"
    src = out / pcap_side
    for name in ("traffic.pcap", "traffic_fates.csv"):
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    sections = [comparison_markdown(cfg, results.get("rtl"), results.get("model"))]
    for key, title in (("rtl", "Two RTL NICs"), ("model", "The golden model")):
        if (out / key / "report.md").exists() and key in results:
            sections.append(f"### {title} (files in `{key}/`)\n\n"
                            + (out / key / "report.md").read_text())
    (out / "report.md").write_text("\n\n".join(sections))
    summary = {"outdir": str(out), "scenario": cfg.name, "pcap": str(out / "traffic.pcap"),
               "pcap_frames": (results.get(pcap_side) or {}).get("pcap_frames", 0),
               "pcap_of": pcap_side, **results}
    (out / "report.json").write_text(json.dumps(summary, indent=1, default=str))
    print(comparison_markdown(cfg, results.get("rtl"), results.get("model")))
    if failures:
        raise RuntimeError("; ".join(failures))
    return summary
