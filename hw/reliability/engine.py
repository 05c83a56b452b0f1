"""``ReliabilityEngine``: the reliability block of the NIC (issue 6), wiring

- ``ReliabilityCore`` (core.py): ACK/SACK/NAK processing, retransmit decisions, EV
  health, congestion window, per-QP records;
- ``RetransmitTimers`` (timer.py): one deadline per QP, pipelined scan;
- ``CompletionWriter`` (completion.py): send CQEs over AXI4;
- ``ProbeBuilder`` (probe.py): EV probe request frames;
- ``NsccPath`` (nscc_path.py): UET NSCC's windows from the core's events;

and the CSR block (registers.py) that holds the configuration memories, the EV event
queue and the counters. docs/reliability.md describes the whole.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4Signature, check_dma_addr_width
from hw.bits import greater_than_const, one_hot_select
from hw.counters import CounterBank
from hw.csr import CSRBusSignature, RegisteredWrites, grouped_read
from hw.headers import ev_fold, sack_bitmap
from hw.pipeline import AXIStreamRegister
from hw.protocol import check_ev_width, ev_hi_words
from hw.protocol import plane_bits as plane_bits_for
from hw.rx.parser import ParsedHeader
from hw.stream import AXIStreamSignature, check_data_width

from .cc_defaults import (
    DEFAULT_BASE_RTT_NS,
    line_rate_bps,
    start_cwnd_packets,
    target_rtt_units,
)
from .completion import CompletionWriter, DmaConfig
from .core import Command, GlobalParams, RelConfig, ReliabilityCore
from .layouts import (
    AckUpdate,
    CwndUpdate,
    EvUpdate,
    QpStateUpdate,
    RetxRequest,
    SentRecord,
    SqProducer,
    WimmDone,
)
from .nscc_path import nscc_reset_values, nscc_window
from .probe import ProbeBuilder, ProbeReplyCheck, net_config
from .registers import (
    COUNTER_BASE,
    COUNTER_NAMES,
    COUNTER_SLOT_BITS,
    EV_PLANE_LSB,
    EV_VALUE_HI,
    GLOBAL_OFFSETS,
    MAX_QPS,
    OWN_IP6,
    QP6_STRIDE,
    QP6_WORDS,
    QP_BASE,
    QP_STRIDE,
    QP_WORDS,
    TYPE_ID,
    VERSION,
    region_bases,
    register_map,
)
from .timer import RetransmitTimers

__all__ = ["ReliabilityEngine", "ns_per_cycle", "timeout_unit_cycles"]


def ns_per_cycle(clk_freq_hz: int) -> int:
    """The ns a cycle of ``clk_freq_hz`` adds to the NIC's ns clocks (the probes'
    timestamps, the ACKs' service time): rounded to the nearest."""
    return round(1e9 / clk_freq_hz)


def timeout_unit_cycles(clk_freq_hz: int) -> int:
    """Cycles of 1.024 us at ``clk_freq_hz``, rounded to the nearest (at least 1)."""
    return max(1, round(1.024e-6 * clk_freq_hz))


class ReliabilityEngine(wiring.Component):
    """The requester side of MRC reliability for ``num_qps`` QPs.

    Parameters
    ----------
    num_qps : 2..4096 QPs (``MAX_QPS``); local QPN q is QP index q (``sent.qpn``, ACK BTH DestQP).
    evs_per_qp : EVs per QP, a power of two in 2..128 (EV index width of ``sent``).
    sack_bits : SACK bitmap width of ``peer_ack`` (the RX parser's).
    clk_freq_hz : clock; the timer unit is round(1.024 us x clk_freq_hz) cycles.
    data_width : width of ``m_axis_probe`` and ``m_axi``, 64..512.
    csr_addr_width : width of the CSR bus; the map needs the EV base (0x8000 up to 256
        QPs, ``region_bases``) + 4 x num_qps x evs bytes.
    window : PSNs tracked per QP (a power of two, 2..256): the window (cwnd) reported to
        TX never exceeds it, so TX never has more PSNs in flight.
    addr_width : bits of the host DMA addresses, 32..64 (default 64): ``sq_base_*`` and
        ``cq_base_*`` keep that many bits (the upper bits of the ``_hi`` words read 0),
        and the WQE and CQE addresses wrap within them.
    max_mtu : the largest payload (256..4096); with ``data_width`` x ``clk_freq_hz`` as
        the line rate it sets the reset values of ``cwnd_init`` and ``target_rtt``:
        NSCC's starting window and target at the default base RTT
        (hw/reliability/cc_defaults.py).
    nscc : build UET NSCC (``NsccPath``, default True). Without it the window is
        the core's packet window only, and the NSCC registers read 0 and ignore
        writes (the driver reads ``nscc_rtt`` to tell).
    num_planes : MAC ports (planes), 1..8. Above 1 each EV entry also holds its
        plane (``ev`` bits 22..20, as TX's ``ev_entry``) and a probe leaves
        tagged with its EV's plane in ``m_axis_probe.tuser``; with 1 the field
        is not stored and reads 0.
    ipv6 : probes over IPv6 too: ``own_ip6``, and per QP the peer's IPv6
        address (``peer_ip6_*`` above ``peer_ip``) and family (``peer_v6``),
        at the QP6 base; each QP's probes go over its peer's family
        (``ProbeBuilder``).

    Interface
    ---------
    ``peer_ack``   In(stream(ParsedHeader(sack_bits))): ACK / NAK / probe response records
                   from RX. Opcode ACKNOWLEDGE with syndrome 0x1F (ACK) or 0x70 (NAK
                   TRIMMED), and MRC_PROBE_RESPONSE are used; anything else is counted in
                   ``acks_ignored`` and dropped. Records pass ``ProbeReplyCheck`` (3
                   cycles; a probe response that answers no outstanding probe is
                   dropped, ``probes_stale``) before the core.
    ``sent``       In(stream(SentRecord)): one record per data packet TX put on the wire.
    ``sq_producer`` In(stream(SqProducer)): a QP's send-queue producer index, from each
                   doorbell write (``ready`` is always 1): retry exhaustion and the
                   controller's ERROR complete every WQE posted up to it, begun or not.
    ``retx``       Out(stream(RetxRequest)): PSNs to send again; reason 0 timeout, 1 SACK
                   hole, 2 NAK TRIMMED.
    ``ack_update`` Out(stream(AckUpdate)): a QP's oldest unacknowledged PSN and how many
                   PSNs above it are SACKed, after each event that moves either.
    ``ev_update``  Out(stream(EvUpdate)): EV state changes (0 GOOD, 1 ASSUMED_BAD, 2 DENIED).
    ``cwnd_update`` Out(stream(CwndUpdate)): new window of a QP, packets: the core's
                   packet window, or UET NSCC's while ``nscc_ctrl.enabled`` is set
                   (``NsccPath``, nscc_path.py).
    ``qp_state_update`` Out(stream(QpStateUpdate)): QP state changes (ERROR on retry
                   exhaustion; also the controller's commands).
    ``wimm_done``  Out(stream(WimmDone)): a WRITE_WITH_IMM WQE of the QP completed
                   SUCCESS (``CompletionWriter``; no backpressure): TX's count of the QP's
                   outstanding WRITE_WITH_IMMs against ``max_wimm`` goes down.
    ``m_axis_probe`` Out(AXIStreamSignature(data_width)): EV probe requests, from a
                   register stage (1 cycle after ``ProbeBuilder``).
    ``m_axi``      Out(AXI4Signature(addr_width, data_width, 4)): WQE reads and CQE writes.
    ``csr``        In(CSRBusSignature(csr_addr_width)): ``register_map()``. A
                   read answers ``CSR_READ_LATENCY`` (2) cycles after
                   ``r_stb`` (registered read data; a bridge in front takes
                   ``read_latency=2``). A write takes effect the cycle after
                   ``w_stb`` (decoded at ``w_stb``, applied from registers); a
                   read strobed in that cycle returns the written value for a
                   global register, the old one for a per-QP word or an EV
                   entry (a bridge leaves 2 cycles between them). A read of
                   ``ev_event`` pops the event the cycle after ``r_stb``; reads of
                   ``ev_event_qpn``, ``ev_event_rtt`` and ``ev_event`` see the queue's
                   head as of the cycle before ``r_stb`` (read strobes come at least 3
                   cycles apart).
    ``irq``        Out(1): the EV event queue is not empty, or a CQE was written since
                   ``irq_status`` was last read.

    Latency: a retransmit request for a NAK is on ``retx`` about 12 + 2 x (PSNs the ACK
    newly acknowledges) cycles after the ACK record is taken, for a hole about 16 + 2 x;
    ``ack_update`` and ``cwnd_update`` follow at the end of the ACK's processing; a
    timeout's requests come at most ``num_qps`` + 7 cycles after the deadline when the
    core is idle.
    Throughput: one event (sent record, ACK, timer report, command) at a time; a sent
    record takes 4 cycles, an ACK 20 cycles plus 2 per PSN it acknowledges and 3 per
    hole it examines for loss (docs/reliability.md: the steps are pipelined for 125 MHz).
    Every output is a FIFO; the block waits when one is full. One CQE per ~13 cycles
    plus the memory's latencies.
    """

    CSR_READ_LATENCY = 2

    def __init__(self, num_qps=16, evs_per_qp=16, sack_bits=64, clk_freq_hz=125_000_000,
                 data_width=64, csr_addr_width=16, window=64, addr_width=64, max_mtu=4096,
                 nscc=True, num_planes=1, ipv6=False, ev_width=16):
        self.plane_bits = plane_bits_for(num_planes)  # raises for a bad count
        self.ipv6 = bool(ipv6)
        self.ev_width = check_ev_width(ev_width, self.ipv6)
        if not isinstance(num_qps, int) or not 2 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be an integer in 2..{MAX_QPS}, not {num_qps!r}")
        if (not isinstance(evs_per_qp, int) or evs_per_qp & (evs_per_qp - 1)
                or not 2 <= evs_per_qp <= 128):
            raise ValueError(f"evs_per_qp must be a power of two in 2..128, not {evs_per_qp!r}")
        sack_bitmap(sack_bits)  # raises for a bad width
        if not isinstance(clk_freq_hz, int) or not 1_000_000 <= clk_freq_hz <= 1_000_000_000:
            raise ValueError(f"clk_freq_hz must be an integer in 1 MHz..1 GHz, not {clk_freq_hz!r}")
        check_data_width(data_width)
        check_dma_addr_width(addr_width)
        if max_mtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"max_mtu must be a power of two in 256..4096, not {max_mtu!r}")
        if not isinstance(window, int) or window & (window - 1) or not 2 <= window <= 256:
            raise ValueError(f"window must be a power of two in 2..256, not {window!r}")
        self.qp6_base, self.ev_base = region_bases(num_qps)
        need = self.ev_base + 4 * num_qps * evs_per_qp
        if not isinstance(csr_addr_width, int) or not 16 <= csr_addr_width <= 32 or (
                need > 1 << csr_addr_width):
            raise ValueError(
                f"csr_addr_width must be 16..32 and cover 0x{need:x} bytes of registers "
                f"for {num_qps} QPs x {evs_per_qp} EVs, not {csr_addr_width!r}")
        self.num_qps, self.evs_per_qp, self.sack_bits = num_qps, evs_per_qp, sack_bits
        self.clk_freq_hz, self.data_width = clk_freq_hz, data_width
        self.csr_addr_width, self.window = csr_addr_width, window
        self.addr_width = addr_width
        self.nscc = bool(nscc)
        # NSCC's defaults at the default base RTT (hw/reliability/cc_defaults.py)
        self.target_rtt_reset = target_rtt_units(DEFAULT_BASE_RTT_NS, clk_freq_hz)
        self.cwnd_init_reset = start_cwnd_packets(
            DEFAULT_BASE_RTT_NS, line_rate_bps(data_width, clk_freq_hz), max_mtu, window)
        self.nscc_reset = nscc_reset_values(clk_freq_hz, data_width, max_mtu,
                                            DEFAULT_BASE_RTT_NS)
        self.timeout_unit = timeout_unit_cycles(clk_freq_hz)
        self.ns_per_cycle = ns_per_cycle(clk_freq_hz)
        self.registers = register_map(num_qps, evs_per_qp, window, self.ipv6, ev_width)
        self.params_word = self.registers["params"].pack(
            num_qps=num_qps, evs_per_qp=evs_per_qp, window=window)
        super().__init__(
            {
                "peer_ack": In(stream.Signature(ParsedHeader(sack_bits))),
                "sent": In(stream.Signature(SentRecord)),
                "sq_producer": In(stream.Signature(SqProducer)),
                "retx": Out(stream.Signature(RetxRequest)),
                "ack_update": Out(stream.Signature(AckUpdate)),
                "ev_update": Out(stream.Signature(EvUpdate)),
                "cwnd_update": Out(stream.Signature(CwndUpdate)),
                "qp_state_update": Out(stream.Signature(QpStateUpdate)),
                "wimm_done": Out(stream.Signature(WimmDone)),
                "m_axis_probe": Out(AXIStreamSignature(data_width, max(1, self.plane_bits))),
                "m_axi": Out(AXI4Signature(addr_width, data_width, 4)),
                "csr": In(CSRBusSignature(csr_addr_width)),
                "irq": Out(1),
            }
        )

    def _probe_timer(self, m, core, pcheck, probe_period, ns):
        """The probe rounds' timer, every ``probe_period`` cycles (0: off), to
        the core and the probe-reply check (``ns``: the engine's ns clock)."""
        # The probe timer counts down to -1: its sign bit, a flip-flop, is the tick
        # (no compare in front of the counter's reload), and the tick reloads
        # period - 2, so a tick comes every period cycles. The reload value and
        # the enable are registered (a write applies a cycle later). While probing
        # is off the reload is -2: the sign stays set, and the first round comes
        # as probing starts.
        probe_count = Signal(33)
        period_m2 = Signal(33)
        probing = Signal()
        m.d.sync += [period_m2.eq(probe_period - 2), probing.eq(probe_period != 0)]
        m.d.comb += core.probe_tick.eq(probing & probe_count[-1])
        m.d.comb += [pcheck.round.eq(core.probe_round), pcheck.sweeping.eq(core.probe_sweeping),
                     pcheck.probing.eq(probing),
                     pcheck.tick.eq(probing & probe_count[-1]), pcheck.now_ns.eq(ns)]
        with m.If(probe_count[-1]):
            m.d.sync += probe_count.eq(period_m2)
        with m.Else():
            m.d.sync += probe_count.eq(probe_count - 1)

    def _counter_bank(self, m, core, cpl, pcheck, cmds_lost):
        """The counters (``COUNTER_NAMES``), one ``CounterBank``: the core's
        strobes and the engine's (``cmds_lost``, the completion writer's and
        the probe-reply check's), registered."""
        top_counts = {"cmds_lost": cmds_lost, "cqes": cpl.cqe_done, "dma_errors": cpl.dma_error,
                      "probes_stale": pcheck.stale}
        # One saturating counter bank (a block RAM) for every counter: the core's
        # strobes are flip-flops, the engine's are registered here.
        strobes = []
        for name in COUNTER_NAMES:
            if name in top_counts:
                strobe = Signal(name=f"cnt_{name}")
                m.d.sync += strobe.eq(top_counts[name])
                strobes.append(strobe)
            else:
                strobes.append(core.counter_strobes[name])
        m.submodules.counter_bank = bank = CounterBank(len(COUNTER_NAMES), saturate=True)
        m.d.comb += bank.strobe.eq(Cat(strobes))
        return bank

    def _event_head(self, m, core, cpl):
        """The EV event queue's head and valid flag registered every cycle (the
        head is a block RAM's output, late in the cycle, too late for the read
        groups' multiplexers behind it: a read sees the queue as of the cycle
        before r_stb), the completion flag, and ``irq``; returns the three."""
        cpl_flag = Signal()
        event = Signal.like(core.event.payload)
        event_valid = Signal()
        m.d.sync += [event.eq(core.event.payload), event_valid.eq(core.event.valid)]
        m.d.comb += self.irq.eq(core.event.valid | cpl_flag)
        with m.If(cpl.cqe_done):
            m.d.sync += cpl_flag.eq(1)
        return event, event_valid, cpl_flag

    def elaborate(self, platform):
        m = Module()
        nq, E = self.num_qps, self.evs_per_qp
        ebits = (E - 1).bit_length()

        m.submodules.core = core = ReliabilityCore(
            num_qps=nq, evs_per_qp=E, sack_bits=self.sack_bits, window=self.window,
            timeout_unit=self.timeout_unit, clk_freq_hz=self.clk_freq_hz)
        m.submodules.timers = timers = RetransmitTimers(nq)
        m.submodules.completions = cpl = CompletionWriter(nq, self.data_width, self.addr_width)
        m.submodules.probes = probes = ProbeBuilder(nq, E, self.data_width, self.plane_bits,
                                                    self.ipv6, self.ev_width)

        # probe responses are checked against the outstanding probes first
        m.submodules.probe_check = pcheck = ProbeReplyCheck(self.sack_bits)
        wiring.connect(m, wiring.flipped(self.peer_ack), pcheck.i)
        wiring.connect(m, pcheck.o, core.peer_ack)
        m.d.comb += core.probe_rtt_ns.eq(pcheck.rtt_ns)
        wiring.connect(m, wiring.flipped(self.sent), core.sent)
        wiring.connect(m, wiring.flipped(self.sq_producer), core.sq_producer)
        wiring.connect(m, core.retx, wiring.flipped(self.retx))
        wiring.connect(m, core.ack_update, wiring.flipped(self.ack_update))
        wiring.connect(m, core.ev_update, wiring.flipped(self.ev_update))
        # the window TX gets: the core's, or NSCC's (nscc_ctrl.enabled)
        nscc_regs = nscc_window(m, core, wiring.flipped(self.cwnd_update), num_qps=nq,
                                window=self.window, reset=self.nscc_reset, build=self.nscc)
        wiring.connect(m, core.qp_state_update, wiring.flipped(self.qp_state_update))
        wiring.connect(m, core.timer_arm, timers.arm)
        wiring.connect(m, timers.expired, core.expired)
        wiring.connect(m, core.cpl, cpl.req)
        wiring.connect(m, core.probe_req, probes.req)
        # A register stage: the builder's beat comes from its FSM through a
        # lane mux, and the NIC's MAC TX arbiter adds its own mux behind it.
        m.submodules.probe_stage = probe_stage = AXIStreamRegister(self.data_width,
                                                                    max(1, self.plane_bits))
        wiring.connect(m, probes.m_axis, probe_stage.s_axis)
        wiring.connect(m, probe_stage.m_axis, wiring.flipped(self.m_axis_probe))
        wiring.connect(m, cpl.m_axi, wiring.flipped(self.m_axi))
        wiring.connect(m, cpl.wimm_done, wiring.flipped(self.wimm_done))
        m.d.comb += core.now.eq(timers.now)

        # --- global registers -----------------------------------------------------------
        own_mac = Signal(48)
        own_ip = Signal(32)
        probe_period = Signal(32)
        params = Signal(GlobalParams, init={
            "ev_loss_threshold": 2, "cwnd_min": 1, "cwnd_max": self.window,
            "cwnd_init": self.cwnd_init_reset, "cwnd_ai": 256, "cwnd_ai_fast": 1024,
            "cwnd_md_shift": 1, "cwnd_trim_dec": 1, "target_rtt": self.target_rtt_reset})
        m.d.comb += [core.params.eq(params), probes.own_mac.eq(own_mac),
                     probes.own_ip.eq(own_ip)]
        if self.ipv6:
            own_ip6 = Signal(128)
            m.d.comb += probes.own_ip6.eq(own_ip6)

        ns = Signal(64)
        m.d.sync += ns.eq(ns + self.ns_per_cycle)
        m.d.comb += probes.now_ns.eq(ns)

        self._probe_timer(m, core, pcheck, probe_period, ns)

        # --- configuration memories -----------------------------------------------------------
        m.submodules.rel_mem = rel_mem = Memory(shape=RelConfig, depth=nq, init=[])
        m.submodules.dma_mem = dma_mem = Memory(shape=160, depth=nq, init=[])
        net_words = net_config(self.ipv6).size // 32
        m.submodules.net_mem = net_mem = Memory(shape=32 * net_words, depth=nq, init=[])
        # an entry: its value (ev_width bits), then its plane
        m.submodules.ev_mem = ev_mem = Memory(shape=self.ev_width + self.plane_bits,
                                              depth=nq * E, init=[])
        rel_wr, rel_core, rel_csr = rel_mem.write_port(), rel_mem.read_port(), rel_mem.read_port()
        dma_wr, dma_cpl, dma_csr = (dma_mem.write_port(granularity=32), dma_mem.read_port(),
                                    dma_mem.read_port())
        net_wr, net_probe, net_csr = (net_mem.write_port(granularity=32), net_mem.read_port(),
                                      net_mem.read_port())
        ev_wr, ev_probe, ev_core, ev_csr = (ev_mem.write_port(), ev_mem.read_port(),
                                            ev_mem.read_port(), ev_mem.read_port())
        m.d.comb += [
            rel_core.addr.eq(core.rel_addr), core.rel_data.eq(rel_core.data),
            dma_cpl.addr.eq(cpl.cfg_addr), cpl.cfg_data.eq(dma_cpl.data),
            net_probe.addr.eq(probes.net_addr), probes.net_data.eq(net_probe.data),
            ev_probe.addr.eq(probes.ev_addr), probes.ev_data.eq(ev_probe.data),
            ev_core.addr.eq(core.evv_addr),  # the answer's echo: the EV's fold
            core.evv_data.eq(ev_fold(ev_core.data[: self.ev_width])),
        ]

        # --- controller commands ------------------------------------------------------------
        m.submodules.cmd_fifo = cmd_fifo = SyncFIFOBuffered(
            width=Command(nq, E).size, depth=4)
        m.d.comb += [core.cmd.payload.eq(cmd_fifo.r_data), core.cmd.valid.eq(cmd_fifo.r_rdy),
                     cmd_fifo.r_en.eq(core.cmd.ready)]
        cmds_lost = Signal()

        # --- address decode -------------------------------------------------------------------
        csr = self.csr
        addr = csr.addr
        in_qp, in_ev = Signal(), Signal()
        m.d.comb += [in_qp.eq((addr >= QP_BASE) & (addr < QP_BASE + nq * QP_STRIDE)),
                     in_ev.eq((addr >= self.ev_base) & (addr < self.ev_base + 4 * nq * E))]
        qp_off = Signal(self.csr_addr_width)
        m.d.comb += qp_off.eq(_offset(addr, QP_BASE))
        qp_idx = qp_off[6:][: max(1, (nq - 1).bit_length())]
        word = qp_off[2:6]
        # with ipv6, the QPs' IPv6 words (at the QP6 base): net_mem's words 4..7
        if self.ipv6:
            in_qp6 = Signal()
            qp6_off = Signal(self.csr_addr_width)
            m.d.comb += [
                qp6_off.eq(_offset(addr, self.qp6_base)),
                in_qp6.eq((addr >= self.qp6_base) & (addr < self.qp6_base + nq * QP6_STRIDE)),
            ]
            qp6_idx, word6 = qp6_off[4:][: len(qp_idx)], qp6_off[2:4]
        ev_off = Signal(self.csr_addr_width)
        m.d.comb += ev_off.eq(_offset(addr, self.ev_base))
        ev_idx = ev_off[2:][: max(1, (nq * E - 1).bit_length())]

        ev_hi_count = ev_hi_words(self.ev_width)
        G = {**GLOBAL_OFFSETS, **{f"own_ip6_{i}": OWN_IP6 + 4 * i for i in range(4)},
             **{f"ev_value_hi_{i}": EV_VALUE_HI + 4 * i for i in range(ev_hi_count)}}
        param_regs = {
            "ev_loss_threshold": params.ev_loss_threshold, "cwnd_min": params.cwnd_min,
            "cwnd_max": params.cwnd_max, "cwnd_init": params.cwnd_init,
            "cwnd_ai": params.cwnd_ai, "cwnd_ai_fast": params.cwnd_ai_fast,
            "cwnd_md_shift": params.cwnd_md_shift, "cwnd_trim_dec": params.cwnd_trim_dec,
            "target_rtt": params.target_rtt,
        }
        rw_regs = {"own_mac_lo": own_mac[:32], "own_mac_hi": own_mac[32:], "own_ip": own_ip,
                   "probe_period": probe_period, **param_regs,
                   **nscc_regs}
        if self.ipv6:
            rw_regs.update({f"own_ip6_{i}": own_ip6[32 * i : 32 * (i + 1)] for i in range(4)})
        # an EV's bits above 15, staged for the next EV entry write, which takes
        # them and clears them (a 16-bit writer stores zeros there)
        ev_hi = Signal(self.ev_width - 16) if ev_hi_count else Const(0, 0)
        rw_regs.update({f"ev_value_hi_{i}": ev_hi[32 * i : 32 * (i + 1)]
                        for i in range(ev_hi_count)})

        # Writes are decoded at w_stb and applied in the next cycle from registers
        # (hw.csr.RegisteredWrites: the data, the QP and EV indices and one strobe
        # per target), so the address compares are not in series with the
        # memories' write enables and the registers' clock enables, each a wide
        # fan-out: every enable is a flip-flop. A global register read strobed in
        # between returns the written value (the read-back masks below, applied
        # to the flip-flop registers' read groups). The per-QP memories and the EV
        # table are read through ports addressed at r_stb, which a write landing
        # in that cycle passes by: a bypass there would put a multiplexer after
        # their read data or one more level in front of r_out (both already
        # deep), so a read of such a word strobed the cycle right after its
        # write returns the old word (the AXI4-Lite bridge leaves at least two
        # cycles between a write strobe and the next read strobe).
        def width(value):
            return min(32, Value.cast(value).shape().width)

        is_global = addr < QP_BASE
        qp_word = ~is_global & in_qp
        targets = {
            **{name: (is_global & (addr == G[name]), (1 << width(reg)) - 1)
               for name, reg in rw_regs.items()},
            "qp_ctrl": (qp_word & (word == QP_WORDS["qp_ctrl"]), None),  # a command
            "qp_rel_cfg": (qp_word & (word == QP_WORDS["qp_rel_cfg"]), None),
            **{f"dma{i}": (qp_word & (word == QP_WORDS["sq_base_lo"] + i), None)
               for i in range(5)},  # sq_base_lo .. the four words after it
            **{f"net{i}": (qp_word & (word == QP_WORDS["peer_mac_lo"] + i), None)
               for i in range(4)},  # peer_mac_lo .. the three words after it
            **{f"net{4 + i}": (~is_global & in_qp6 & (word6 == i), None)
               for i in range(net_words - 4)},  # peer_ip6_1 .. peer_v6
            "ev_cfg": (~is_global & ~in_qp & in_ev, None),
        }
        # (a QP's IPv6 words are QP6_WORDS' order in net_mem, after peer_mac_lo's four)
        assert list(QP6_WORDS.values()) == list(range(4))
        qp_field = Mux(in_qp6, qp6_idx, qp_idx) if self.ipv6 else qp_idx
        w = RegisteredWrites(m, csr, targets, fields={"qp": qp_field, "ev": ev_idx})
        w_data, w_qp, w_ev = w.data, w.fields["qp"], w.fields["ev"]

        # the ring bases keep addr_width bits: the _hi words store (and read back) only
        # their bits below it
        base_hi = Signal(32)
        m.d.comb += base_hi.eq(w_data[: self.addr_width - 32])
        dma_lanes = range(QP_WORDS["sq_base_lo"], QP_WORDS["sq_base_lo"] + 5)  # dma_mem's words
        hi_words = (QP_WORDS["sq_base_hi"], QP_WORDS["cq_base_hi"])
        m.d.comb += [
            rel_wr.addr.eq(w_qp), rel_csr.addr.eq(qp_idx),
            dma_wr.addr.eq(w_qp), dma_csr.addr.eq(qp_idx),
            net_wr.addr.eq(w_qp), net_csr.addr.eq(qp_field),
            ev_wr.addr.eq(w_ev), ev_csr.addr.eq(ev_idx),
            # an EV entry's QP or a QP word's, chosen by addr >= the EV base (a power of
            # two: an OR of the upper address bits, not in_ev's compares): the
            # record is read only for those words
            core.rec_addr.eq(Mux(addr[self.ev_base.bit_length() - 1 :].any(), ev_idx >> ebits,
                                 qp_idx)),
            rel_wr.data.eq(w_data),
            dma_wr.data.eq(Cat(*[base_hi if word in hi_words else w_data
                                 for word in dma_lanes])),
            net_wr.data.eq(Cat(*[w_data] * net_words)),
            ev_wr.data.eq(Cat(w_data[:16], ev_hi, w_data[EV_PLANE_LSB:][: self.plane_bits])),
        ]

        def push_cmd(value):
            with m.If(cmd_fifo.w_rdy):
                m.d.comb += [cmd_fifo.w_data.eq(value), cmd_fifo.w_en.eq(1)]
            with m.Else():
                m.d.comb += cmds_lost.eq(1)

        # an ev write clears the staged high bits (before the loop: its writes win)
        if ev_hi_count:
            m.d.sync += ev_hi.eq(Mux(w.stb["ev_cfg"], 0, ev_hi))
        for name, reg in rw_regs.items():
            with m.If(w.stb[name]):
                m.d.sync += reg.eq(w_data)
        with m.If(w.stb["qp_ctrl"]):
            # layout order: ev, qpn, ev_index, state
            push_cmd(Cat(Const(0, 1), w_qp, Const(0, max(1, ebits)), w_data[:3]))
        m.d.comb += [rel_wr.en.eq(w.stb["qp_rel_cfg"]),
                     dma_wr.en.eq(Cat(w.stb[f"dma{i}"] for i in range(5))),
                     net_wr.en.eq(Cat(w.stb[f"net{i}"] for i in range(net_words))),
                     ev_wr.en.eq(w.stb["ev_cfg"])]
        with m.If(w.stb["ev_cfg"] & w_data[31]):
            push_cmd(Cat(Const(1, 1), (w_ev >> ebits)[: len(qp_idx)], w_ev[:ebits],
                         w_data[16:19]))

        # --- counters and events ---------------------------------------------------------------
        bank = self._counter_bank(m, core, cpl, pcheck, cmds_lost)

        event, event_valid, cpl_flag = self._event_head(m, core, cpl)

        # --- reads: registered decode, data 2 cycles after r_stb (registered) -----------
        # The kind of word read, registered one-hot at r_stb: r_qp_word[k] for QP word
        # k, r_ev_entry for an EV entry (a global read has neither: grouped_read's
        # value is 0 for any other address). Every source of r_out is then ANDed with
        # a flip-flop, not with a decode of a word index (a wide fan-out).
        r_qp_word = Signal(len(QP_WORDS))
        r_ev_entry = Signal()
        # A counter: the bank is read at r_stb (its address the word in the
        # COUNTER_BASE slot, no subtract), its word comes the cycle after.
        r_counter = Signal()
        counter_word = addr[2:COUNTER_SLOT_BITS]
        m.d.comb += bank.rd_addr.eq(counter_word)
        r_ev = Signal(max(1, ebits))
        global_words = {
            G["block_id"]: Const(TYPE_ID | (VERSION << 16), 32),
            G["params"]: Const(self.params_word, 32),
            G["timeout_unit"]: Const(self.timeout_unit, 32),
            **{G[name]: reg for name, reg in rw_regs.items()},
            G["irq_status"]: Cat(core.event.valid, cpl_flag),
            G["ev_event_count"]: core.event_count,
            G["ev_event_qpn"]: Cat(event.qpn, Const(0, 7), event_valid),
            G["ev_event"]: Cat(event.ev_index, event.old, event.new, Const(0, 3),
                               event_valid, event.drops),
            G["ev_event_rtt"]: Cat(event.rtt_ns, Const(0, 31 - len(event.rtt_ns)), event_valid),
        }
        r_global = w.read_after_strobe(m, grouped_read(m, addr, csr.r_stb, global_words))

        # A read of ev_event pops the event the cycle after r_stb, from a flip-flop
        # (no address compare in front of the event queue's read enable): its read
        # group registered the head at r_stb, and the next read strobe is later. It
        # pops only the event it returns (none when it returns the valid flag clear).
        ev_pop = Signal()
        m.d.sync += ev_pop.eq(0)
        m.d.comb += core.event.ready.eq(ev_pop)

        with m.If(csr.r_stb):
            m.d.sync += [
                r_ev_entry.eq(in_ev),
                r_counter.eq((addr[COUNTER_SLOT_BITS:] == COUNTER_BASE >> COUNTER_SLOT_BITS)
                             & ~greater_than_const(counter_word, len(COUNTER_NAMES) - 1)),
                r_qp_word.eq(Cat(in_qp & (word == k) for k in range(len(QP_WORDS)))),
                r_ev.eq(ev_idx[: max(1, ebits)]),
            ]
            with m.If(addr == G["ev_event"]):
                m.d.sync += ev_pop.eq(event_valid)
            with m.If(addr == G["irq_status"]):
                m.d.sync += cpl_flag.eq(cpl.cqe_done)

        rec = core.rec_data
        qp_words = {
            QP_WORDS["qp_ctrl"]: rec.state,
            QP_WORDS["qp_rel_cfg"]: rel_csr.data,
            **{QP_WORDS["sq_base_lo"] + i: dma_csr.data[32 * i : 32 * (i + 1)]
               for i in range(5)},
            **{QP_WORDS["peer_mac_lo"] + i: net_csr.data[32 * i : 32 * (i + 1)]
               for i in range(4)},
            QP_WORDS["una_psn"]: rec.una,
            QP_WORDS["nxt_psn"]: rec.nxt,
            QP_WORDS["qp_cc"]: Cat(rec.cwnd, rec.retries),
        }
        qp_read = one_hot_select(r_qp_word, [qp_words[k] for k in range(len(QP_WORDS))])
        if self.ipv6:
            r_qp6_word = Signal(net_words - 4)  # QP6 word k
            with m.If(csr.r_stb):
                m.d.sync += r_qp6_word.eq(Cat(in_qp6 & (word6 == k)
                                              for k in range(net_words - 4)))
            qp_read = qp_read | one_hot_select(
                r_qp6_word, [net_csr.data[32 * k : 32 * (k + 1)] for k in range(4, net_words)])
        ev_read = Cat(ev_csr.data[:16], rec.ev_state[r_ev] if ebits else rec.ev_state[0],
                      Const(0, EV_PLANE_LSB - 18), ev_csr.data[self.ev_width :])
        # registered: a read answers 2 cycles after r_stb (CSR_READ_LATENCY)
        r_out = Signal(32)
        m.d.sync += r_out.eq(r_global | qp_read | Mux(r_ev_entry, ev_read, 0)
                             | Mux(r_counter, bank.rd_data, 0))
        m.d.comb += csr.r_data.eq(r_out)
        return m


def _offset(addr, base):
    """``addr - base`` with no carry chain below the lowest set bit of ``base``
    (those bits are ``addr``'s): a register index or word within a block is
    then address bits, not an adder's outputs."""
    low = (base & -base).bit_length() - 1
    return Cat(addr[:low], addr[low:] - (base >> low))


def _unused():  # keep imports used by type annotations in docs
    return data, DmaConfig
