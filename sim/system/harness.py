"""System cocotb harness: the system top (sim/system/top.py, two NICs or more)
with, per NIC, an AxiLiteMaster on its CSR port, an AxiRam as its host memory
and the host driver (host_driver/driver.py) on a CocotbTransport; the MAC
ports are joined by a fabric model: two NICs by sim/system/fabric.py's paths,
more by sim/system/switch.py's switch per plane (``SystemTB.fabric``).

``SystemTB.connect(qps=n)`` brings n QPs on each NIC to RTS: QP k of NIC 0
and QP ``peer_of(k)`` of NIC 1 are each other's peer (a distinct QP on the
peer, not the same number, so that QPN routing is exercised), and every QP
has its own receive buffer registered as its own memory region and its own
send buffer. ``SystemTB.connect_pair(a, b)`` connects one QP of NIC ``a``
to one of NIC ``b``, on a system of any size. ``SystemTB.counters()`` reads
every NIC's counters through the driver, and ``check_counters()`` asserts
the equations that tie the sender's TX and reliability counters, the
fabric's carried and dropped frames and the receiver's RX counters together (see its docstring).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiRam,
    AxiStreamBus,
    AxiStreamSink,
    AxiStreamSource,
)

from host_driver import layers as L
from host_driver.driver import Device, EvProfile, MemoryRegion, QueuePair
from host_driver.transport import CocotbTransport
from sim.system.fabric import Fabric
from sim.system.pairs import (
    EV_BASES,
    EVS,
    IPS,
    IPS6,
    MACS,
    RAM_SIZE,
    Connection,
    check_memory,
    connect_pair,
    families,
    ip_of,
    new_conn,
    zeroed_region,
)
from sim.system.simhw import SimHw, plane_suffix
from sim.system.switch import SwitchFabric

__all__ = ["SystemTB", "Endpoint", "Connection", "CLK_NS", "RAM_SIZE", "MACS", "IPS", "IPS6", "EVS",
           "ev_owner", "whole_bursts"]

CLK_NS = 8
# The RX drop reasons of a data frame (docs/rx.md), besides placed and duplicate;
# wimm_full (the pending-completion table was full) and cq_full (no receive CQ
# slot for the message's CQE) are drops the requester recovers like a loss
# (RECOVERED_DROPS), every other one is an error in these tests.
RECOVERED_DROPS = ("wimm_full", "cq_full")
RX_DROP_REASONS = ("bad_qpn", "not_for_us", "qp_state", "bad_source", "bad_length", "bad_reth",
                   "bad_rkey", "bad_pd", "bad_bounds", "out_of_window", "dma_error",
                   "trimmed", "trim_stale") + RECOVERED_DROPS
# Why RX's peer-frame filter drops an ACK/NAK or probe response (docs/security.md).
RX_PEER_DROP_REASONS = ("peer_bad_qpn", "peer_not_for_us", "peer_bad_mac", "peer_qp_state",
                        "peer_bad_source", "peer_bad_sack")
RX_PARSER_REJECTS = ("parser_bad_frame", "parser_truncated", "parser_not_ipv4",
                     "parser_ipv4_options", "parser_ipv4_checksum", "parser_not_roce",
                     "parser_unknown_opcode", "parser_length_mismatch", "parser_bad_icrc")


def whole_bursts(ram: AxiRam) -> AxiRam:
    """``ram`` with each write burst landing whole, as its B response goes,
    as two_nic_sim's memory lands it at its last beat (sim/system/simhw.py)
    and a PCIe write lands in host memory: a polling driver never sees half
    a burst, such as a CQE whose phase byte is in and whose WQE index (its
    last beat) is not. cocotbext-axi's AxiRam writes beat by beat."""
    port = ram.write_if
    held: list[tuple[int, bytes]] = []
    respond = port.b_channel.send

    async def write(address, data):
        held.append((address % port.size, bytes(data)))

    async def send(b):
        for address, data in held:
            port.write(address, data)
        held.clear()
        await respond(b)

    port._write = write
    port.b_channel.send = send
    return ram


def ev_owner(ev: int | None) -> int | None:
    """The NIC whose QPs spray over EV ``ev`` (data frames and probe requests
    carry their sender's EVs; ACKs and probe responses carry the peer's)."""
    if ev is None:
        return None
    for i, base in enumerate(EV_BASES):
        if base <= ev < base + 0x1000:
            return i
    return None


@dataclass
class Endpoint:
    """One NIC and the objects the driver made on it. ``qp``, ``mr``,
    ``recv_buf`` and ``send_buf`` are those of its first connection."""

    dev: Device
    ram: object  # AxiRam, or sim.system.simhw.HostRam: read(addr, n), write(addr, data)
    conns: list[Connection] = field(default_factory=list)

    @property
    def qp(self) -> QueuePair:
        return self.conns[0].qp

    @property
    def mr(self) -> MemoryRegion:
        return self.conns[0].mr

    @property
    def recv_buf(self) -> int:
        return self.conns[0].recv_buf

    @property
    def send_buf(self) -> int:
        return self.conns[0].send_buf


def num_planes(dut) -> int:
    """The planes of the NICs in ``dut`` (either top), from its ports."""
    n = 1
    while hasattr(dut, f"n0_tx_frames_p{n}") or hasattr(dut, f"n0_mac_tx_p{n}__tvalid"):
        n += 1
    return n


def num_nics(dut) -> int:
    """The NICs in ``dut`` (either top), from its ports."""
    n = 2
    while hasattr(dut, f"n{n}_irq"):
        n += 1
    return n


class SystemTB:
    """The NICs, their host memories, CSR masters, drivers and the fabric
    (``Fabric`` between two NICs, ``SwitchFabric`` between more, or between
    two with ``switch``).

    ``dut`` is either ``two_nic_sim`` (``sim.system.simhw.SimTwoNicTop``: host
    memories and MAC streams in the simulator, Python woken per frame and per
    driver poll; what the tests build) or the bare ``two_nic``
    (``sim.system.top.TwoNicTop``: cocotbext-axi's AxiRam and stream models in
    Python, every cycle; kept for the speed comparison, sim/bench/speed.py).
    The API and every check are the same on both. ``wire_macs`` (a
    ``SwitchFabric`` on ``two_nic_sim``): the NICs' MACs as wires
    (``SwitchFabric``'s ``beat_ns``: paced at the ports' rate, frames into
    RX as they come off the wire). ``routing``: how the fabric picks a
    frame's path (sim/fabric/routing.py: ``explicit``, ``hash``, ``srv6``)."""

    def __init__(self, dut, *, seed: int = 1, delay_ns: float = 400.0, num_paths: int = 8,
                 keep_log: bool = False, switch: bool = False, wire_macs: bool = False,
                 routing: str = "explicit"):
        self.dut = dut
        self.num_nics = nics = num_nics(dut)
        if wire_macs and (not SimHw.present(dut) or (nics == 2 and not switch)):
            raise ValueError("wire_macs needs a two_nic_sim dut (SimTwoNicTop) and a "
                             "SwitchFabric (switch=True, or more than two NICs)")
        self.simhw = SimHw(dut, RAM_SIZE, nics) if SimHw.present(dut) else None
        for name in ("s_axil", "m_axi", "mac_tx", "mac_rx"):
            for i in range(nics):
                logging.getLogger(f"cocotb.{dut._name}.n{i}_{name}").setLevel(logging.WARNING)
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.rng = random.Random(seed)
        self.ends: list[Endpoint] = []
        self.num_planes = planes = num_planes(dut)
        sinks, sources = [], []
        for i in range(nics):
            if planes > 1:  # every plane's link up; a test may take one down
                getattr(dut, f"n{i}_link_up").value = (1 << planes) - 1
            axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"n{i}_s_axil", bus_separator="__"),
                                 dut.clk, dut.rst)
            if self.simhw:
                ram = self.simhw.ram(i)
                sinks.append([self.simhw.sink(i, p) for p in range(planes)])
                sources.append([self.simhw.source(i, p) for p in range(planes)])
                cocotb.start_soon(self.simhw.watch(i))
                transport = CocotbTransport(axil, ram, RAM_SIZE, dut.clk, clock_ns=CLK_NS,
                                            irq=getattr(dut, f"n{i}_irq"))
            else:
                ram = whole_bursts(AxiRam(AxiBus.from_prefix(dut, f"n{i}_m_axi",
                                                             bus_separator="__"),
                                          dut.clk, dut.rst, size=RAM_SIZE))
                sinks.append([AxiStreamSink(
                    AxiStreamBus.from_prefix(dut, f"n{i}_mac_tx{plane_suffix(p)}",
                                             bus_separator="__"), dut.clk, dut.rst)
                    for p in range(planes)])
                sources.append([AxiStreamSource(
                    AxiStreamBus.from_prefix(dut, f"n{i}_mac_rx{plane_suffix(p)}",
                                             bus_separator="__"), dut.clk, dut.rst)
                    for p in range(planes)])
                transport = CocotbTransport(axil, ram, RAM_SIZE, dut.clk,
                                            irq=getattr(dut, f"n{i}_irq"))
            self.ends.append(Endpoint(Device(transport), ram))
        if nics == 2 and not switch:
            self.fabric = Fabric(sinks, sources, num_paths=num_paths, delay_ns=delay_ns,
                                 seed=seed, keep_log=keep_log, routing=routing)
        else:
            self.fabric = SwitchFabric(sinks, sources, MACS[:nics], num_paths=num_paths,
                                       delay_ns=delay_ns, seed=seed, keep_log=keep_log,
                                       beat_ns=CLK_NS if wire_macs else None, routing=routing)

    async def cycles(self, n: int):
        """Let ``n`` clock cycles pass (one timer, not n clock edges, on two_nic_sim)."""
        if self.simhw:
            await Timer(n * CLK_NS, unit="ns")
        else:
            await ClockCycles(self.dut.clk, n)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 8)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 8)
        self.fabric.start()

    async def init(self):
        """Reset, then each NIC found by its driver and given its addresses
        (``MACS``, ``IPS``, and ``IPS6`` on NICs built with IPv6)."""
        await self.reset()
        for i, end in enumerate(self.ends):
            await end.dev.init()
            await end.dev.set_address(MACS[i], IPS[i],
                                      ip6=IPS6[i] if end.dev.params["ipv6"] else None)

    @staticmethod
    def peer_of(k: int, qps: int) -> int:
        """The connection of NIC 1 that connection k of NIC 0 is bound to."""
        return qps - 1 - k

    async def connect(self, *, qps: int = 1, buf_size: int = 1 << 20, sq_log2: int = 4,
                      mtu: int = 1024, timeout: int = 10, mpr: int = 2, evs=None,
                      ack_n: int = 4, ack_t: int = 256, probe_period: int = 0,
                      linear_cnt: int = 7, exp_cnt: int = 7, sack_threshold: int = 0,
                      recv_cq_log2: int = 8, max_wimm: int | None = None,
                      ipv6: bool | list[bool] = False, qpns=None, shared_mr: bool = False):
        """``qps`` QPs on each NIC to RTS, connection k of NIC 0 bound to
        connection ``peer_of(k)`` of NIC 1; per QP a receive MR and a send
        buffer of ``buf_size`` bytes, and a receive CQ of 2^``recv_cq_log2``
        entries. ``evs``: one EvProfile per NIC for every QP (default: QP k
        of NIC i sprays over EV_BASES[i] + 16 k + 0..7). ``max_wimm``: every
        QP's (``QueuePair.to_rts``; None: the driver's default). ``ipv6``:
        the connections bound over IPv6 (the peers' ``IPS6``), one flag for
        all or one per connection k of NIC 0. ``qpns``: per NIC the QP number of
        each connection (None: the lowest free ones). ``shared_mr``: per NIC one
        region holding every connection's receive buffer, for more QPs than
        the NIC has MR entries."""
        if self.num_nics != 2:
            raise ValueError(f"connect() binds NIC 0 to NIC 1 of a two-NIC system; this one "
                             f"has {self.num_nics} NICs: use connect_pair(a, b)")
        num_qps = self.ends[0].dev.params["num_qps"]
        if not 1 <= qps <= num_qps:
            raise ValueError(f"qps must be in 1..{num_qps} (the NICs' num_qps), not {qps!r}")
        check_memory(qps, buf_size, sq_log2)
        qpns = qpns or [[None] * qps] * 2
        if [len(q) for q in qpns] != [qps, qps]:
            raise ValueError(f"qpns must be two lists of {qps} QP numbers, not {qpns!r}")
        for end, nic_qpns in zip(self.ends, qpns, strict=True):
            pd = end.dev.alloc_pd()
            await end.dev.set_probe_period(probe_period)
            regions = [None] * qps
            if shared_mr:
                base, mr = await zeroed_region(end.dev, pd, qps * buf_size)
                regions = [(base + k * buf_size, mr) for k in range(qps)]
            for qpn, region in zip(nic_qpns, regions, strict=True):
                end.conns.append(await new_conn(end.dev, pd, buf_size, sq_log2, recv_cq_log2,
                                                qpn=qpn, region=region))
        v6s = families(ipv6, qps)
        for k in range(qps):
            self.ends[0].conns[k].peer = self.peer_of(k, qps)
            self.ends[1].conns[self.peer_of(k, qps)].peer = k
        # per connection a different start PSN; NIC 1's near the PSN wrap
        psns = [[(0x10 + 0x1000 * k) & 0xFFFFFF for k in range(qps)],
                [(0xFFFFF0 - 0x100 * k) & 0xFFFFFF for k in range(qps)]]
        for i, end in enumerate(self.ends):
            peer_end = self.ends[1 - i]
            for k, conn in enumerate(end.conns):
                peer = peer_end.conns[conn.peer]
                await conn.qp.to_rtr(dest_qpn=peer.qp.qpn, peer_mac=MACS[1 - i],
                                     peer_ip=ip_of(1 - i, v6s[k if i == 0 else conn.peer]),
                                     rq_psn=psns[1 - i][conn.peer], mpr=mpr,
                                     ack_n=ack_n, ack_t=ack_t, mtu=mtu)
        for i, end in enumerate(self.ends):
            for k, conn in enumerate(end.conns):
                profile = evs[i] if evs else EvProfile.explicit(
                    range(EV_BASES[i] + 16 * k, EV_BASES[i] + 16 * k + 8))
                await conn.qp.to_rts(evs=profile, sq_psn=psns[i][k], mtu=mtu, timeout=timeout,
                                     linear_cnt=linear_cnt, exp_cnt=exp_cnt,
                                     sack_threshold=sack_threshold, max_wimm=max_wimm)

    async def connect_pair(self, a: int, b: int, **kw) -> tuple[Connection, Connection]:
        """One QP of NIC ``a`` bound to one of NIC ``b``, on a system of any
        size (sim/system/pairs.py ``connect_pair``, which takes ``kw``)."""
        return await connect_pair(self.ends, a, b, **kw)

    def random_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    # ---- counters --------------------------------------------------------------------------

    async def counters(self, i: int) -> dict[str, int]:
        """NIC i's counters through the driver: RX, reliability, TX globals,
        and TX's per-QP data packets summed over its QPs (``tx.packets``,
        ``tx.retx_packets``)."""
        dev = self.ends[i].dev
        c = await dev.counters()
        c["tx.packets"] = c["tx.retx_packets"] = 0
        for conn in self.ends[i].conns:
            c["tx.packets"] += await dev.tx.read("qp_tx_packets", conn.qp.qpn)
            c["tx.retx_packets"] += await dev.tx.read("qp_retx_packets", conn.qp.qpn)
        return c

    def fabric_frames(self, direction: int, since_ns: float = 0.0) -> dict[str, int]:
        """Frames the fabric took from NIC ``direction``'s mac_tx (from its
        log), by class: ``data`` (the sender's EVs: data frames and probe
        requests) and ``ack`` (the receiver's EVs: ACK/NAK and probe
        responses), each ``_carried`` and ``_dropped``."""
        if not self.fabric.keep_log:
            raise ValueError("the fabric keeps no log: make the SystemTB with keep_log=True")
        out = dict.fromkeys(("data_carried", "data_dropped", "ack_carried", "ack_dropped"), 0)
        for ns, ev, _path, dropped in self.fabric.directions[direction].log:
            if ns < since_ns:
                continue
            kind = "data" if ev_owner(ev) == direction else "ack"
            out[f"{kind}_{'dropped' if dropped else 'carried'}"] += 1
        return out

    def injected_frames(self, to_nic: int) -> dict[str, int]:
        """The attacker's frames handed to NIC ``to_nic`` (``Fabric.inject``),
        by kind: ``peer`` (ACK/NAK, probe response) and ``data`` (WRITEs,
        trimmed or not)."""
        out = {"peer": 0, "data": 0}
        for nic, frame in self.fabric.injected:
            if nic == to_nic:
                off = L.bth_offset(frame)
                peer = off is not None and frame[off] in (L.OP_ACKNOWLEDGE, L.OP_PROBE_RESP)
                out["peer" if peer else "data"] += 1
        return out

    async def quiesce(self, cycles: int = 2000):
        """Let ACK coalescing timers, the fabric's delays and the last CQE
        writes run out before counters are compared."""
        await self.cycles(cycles)

    async def check_counters(self, src: int, *, packets: int, messages: int,
                             imm_messages: int = 0) -> dict[str, int]:
        """Assert the counter equations of one direction, NIC ``src`` -> the
        other, after a run in which NIC ``src`` sent ``messages`` WQEs of
        ``packets`` packets in all (every one completed SUCCESS), with probes
        off, and return the figures. With A the sender, B the receiver, F the
        fabric's frames from A (log, classed by EV: ``fabric_frames``):

        1. F.data = A.tx.packets: every data frame TX counted went to the fabric
           (probes are off, so A's EVs carry data frames only).
        2. F.ack = A.rx.acks_sent + A.rx.naks_sent + A.rx.probes_answered:
           every other frame A sent was its RX's answer to B's data.
        3. B.rx.parser_accepted = F.data_carried + F.ack_carried and no
           parser reject: the fabric delivers frames intact.
        4. B.rx.peer_frames = F.ack_carried = B.rel.acks + B.rel.acks_ignored
           + B.rel.probe_resps: every ACK that arrived reached B's reliability.
        5. F.data_carried = B.rx.placed + B.rx.duplicate + B's drops by reason
           (RX_DROP_REASONS; all but RECOVERED_DROPS must be 0): every data frame
           delivered is accounted for once.
        (``Fabric.inject``), ACK/NAK or probe responses and data frames; each
        must be dropped and counted, none may change state (7 and 9 hold).

        3. B.rx.parser_accepted = F.data_carried + F.ack_carried + I.peer +
           I.data and no parser reject: the fabric delivers frames intact.
        4. B.rx.peer_frames = F.ack_carried + I.peer = B.rel.acks +
           B.rel.acks_unsent + B.rel.acks_ignored + B.rel.probe_resps +
           B.rel.probes_stale + B's peer-frame drops (RX_PEER_DROP_REASONS):
           every ACK that arrived reached B's reliability or was dropped for
           one reason; without injection none is dropped.
        5. F.data_carried + I.data = B.rx.placed + B.rx.duplicate + B's drops
           by reason (RX_DROP_REASONS; all but wimm_full must be I.data):
           every data frame delivered is accounted for once.
        6. B.rx.placed = ``packets``: each PSN placed exactly once.
        7. A.tx.retx_packets = F.data_dropped + B's RECOVERED_DROPS + B.rx.duplicate:
           every retransmission replaced a frame lost in the fabric or dropped
           by B, or arrived as a duplicate. So retransmissions >= the losses
           that mattered (here all of them: a lost data frame is always sent
           again); and A.tx.packets = ``packets`` + A.tx.retx_packets.
        8. A.rel.retx_timeout + retx_sack + retx_nak = A.tx.retx_packets +
           A.tx.retx_ignored + A.tx.retx_no_ev: every retransmit request was
           sent or counted as dropped by TX.
        9. A.rel.cqes = ``messages``; B.rx.cqe_written = ``imm_messages``; no
           CQ overflow, no DMA error, no lost event or command.
        """
        dst = 1 - src
        a, b = await self.counters(src), await self.counters(dst)
        f = self.fabric_frames(src)
        inj = self.injected_frames(dst)
        got = {"packets": packets, **{f"fabric.{k}": v for k, v in f.items()},
               **{f"A.{k}": v for k, v in a.items()}, **{f"B.{k}": v for k, v in b.items()}}

        def eq(name, left, right):
            assert left == right, f"counter equation {name}: {left} != {right}; {got}"

        eq("1 data frames", f["data_carried"] + f["data_dropped"], a["tx.packets"])
        eq("2 ack frames", f["ack_carried"] + f["ack_dropped"],
           a["rx.acks_sent"] + a["rx.naks_sent"] + a["rx.probes_answered"])
        eq("3 parser", b["rx.parser_accepted"],
           f["data_carried"] + f["ack_carried"] + inj["peer"] + inj["data"])
        for name in RX_PARSER_REJECTS:
            eq(f"3 {name}", b[f"rx.{name}"], 0)
        eq("4 peer frames", b["rx.peer_frames"], f["ack_carried"] + inj["peer"])
        peer_drops = sum(b[f"rx.{r}"] for r in RX_PEER_DROP_REASONS)
        eq("4 acks processed", b["rel.acks"] + b["rel.acks_unsent"] + b["rel.acks_ignored"]
           + b["rel.probe_resps"] + b["rel.probes_stale"] + peer_drops, b["rx.peer_frames"])
        if not inj["peer"]:
            eq("4 peer drops", peer_drops, 0)
        drops = sum(b[f"rx.{r}"] for r in RX_DROP_REASONS)
        eq("5 data delivered", f["data_carried"] + inj["data"],
           b["rx.placed"] + b["rx.duplicate"] + drops)
        recovered = sum(b[f"rx.{r}"] for r in RECOVERED_DROPS)
        eq("5 drops by reason", drops - recovered, inj["data"])
        eq("6 placed", b["rx.placed"], packets)
        eq("7 retransmissions", a["tx.retx_packets"],
           f["data_dropped"] + recovered + b["rx.duplicate"])
        eq("7 packets", a["tx.packets"], packets + a["tx.retx_packets"])
        eq("8 retransmit requests",
           a["rel.retx_timeout"] + a["rel.retx_sack"] + a["rel.retx_nak"],
           a["tx.retx_packets"] + a["tx.retx_ignored"] + a["tx.retx_no_ev"])
        eq("9 send CQEs", a["rel.cqes"], messages)
        eq("9 receive CQEs", b["rx.cqe_written"], imm_messages)
        for side, c in (("A", a), ("B", b)):
            for name in ("rx.cq_overflow", "rel.dma_errors", "rel.events_lost",
                         "rel.cmds_lost", "rel.probes_sent"):
                eq(f"9 {side}.{name}", c[name], 0)
        return got
