"""NicCore: the MRC NIC without its MAC: TX, RX and reliability behind the
NIC boundary of docs/architecture.md (AXI4-Stream to the MAC, one AXI4 DMA master, one
AXI4-Lite CSR slave, one interrupt)."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.arbiter import AXIStreamArbiter
from hw.axi import AXI4LiteSignature, AXI4Signature, check_dma_addr_width
from hw.axi_arbiter import AXI4Arbiter
from hw.csr import AXI4LiteToCSR
from hw.pipeline import AXI4RegisterSlice, AXIStreamRegister, StreamRegister
from hw.protocol import PLANE_BITS, check_ev_width, plane_bits
from hw.reliability.engine import ReliabilityEngine, ns_per_cycle
from hw.reliability.layouts import AckUpdate, CwndUpdate, QpState, QpStateUpdate, SqProducer
from hw.reliability.registers import MAX_QPS as REL_MAX_QPS
from hw.rx.engine import RxEngine
from hw.rx.parser import ParsedHeader
from hw.rx.regs import MAX_MRS as RX_MAX_MRS
from hw.stream import AXIStreamSignature, check_data_width
from hw.tx.engine import StreamFifo, TxEngine
from hw.tx.layouts import SentRecord
from hw.tx.regs import CTRL_FLUSH_BIT as TX_CTRL_FLUSH_BIT
from hw.tx.regs import CTRL_RESET_BIT as TX_CTRL_RESET_BIT
from hw.tx.regs import QP_BASE as TX_QP_BASE
from hw.tx.regs import QP_STRIDE as TX_QP_STRIDE
from hw.tx.regs import Q as TX_Q

from .csr import (
    NIC_CAPABILITIES,
    NIC_VERSION,
    BlockWindow,
    CsrInterconnect,
    DeviceInfo,
    caps_word,
    device_info_register_map,
    host_view,
)
from .ev_load import EvGenBlock, ev_gen_register_map
from .plane_status import PlaneStatus, plane_register_map
from .planes import PlaneMerge, PlaneSplit, up_plane

__all__ = ["NicCore", "TxControlBridge", "DoorbellSnoop", "check_nic_params", "BLOCK_ORDER"]

# Register blocks in CSR order; window i starts at i << block_bits.
BLOCK_ORDER = ("device_info", "tx", "rx", "reliability", "ev_gen")
# device info registers its read mux (grouped_read): 2 cycles from r_stb to r_data
DEVICE_INFO_READ_LATENCY = 2
BLOCK_AXI_ID_WIDTH = 4  # the ID width of each block's own DMA master
DMA_MASTERS = ("tx", "rx", "reliability")  # AXI4Arbiter port order: ID bits [5:4]
# Reliability's retransmit-request FIFO (hw/reliability/core.py, ``retx_fifo``).
REL_RETX_FIFO_DEPTH = 16


def sent_buffer_depth(window: int) -> int:
    """Entries of the ``sent`` buffer between TX and reliability that rule out
    the deadlock of the two (see NicCore's docstring, "sent buffer")."""
    return 2 * window + 2 * REL_RETX_FIFO_DEPTH


def _pow2(value) -> bool:
    return isinstance(value, int) and value > 0 and not value & (value - 1)


def check_nic_params(*, data_width, num_qps, evs_per_qp, sack_bits, max_mtu, mpr_max,
                     num_mrs, window, inflight_depth, clk_freq_hz, build_id, addr_width=64,
                     num_planes=1, ipv6=False, ev_width=16):
    """Raise a ValueError that says what to fix for a configuration the NIC cannot build.

    The checks are those every block needs together: each block checks its
    own parameters as well, but a NIC-level message names the NIC parameter.
    """
    check_data_width(data_width)
    if not _pow2(num_qps) or not 2 <= num_qps <= REL_MAX_QPS:
        raise ValueError(f"num_qps must be a power of two in 2..{REL_MAX_QPS}, "
                         f"not {num_qps!r}")
    if not _pow2(evs_per_qp) or not 2 <= evs_per_qp <= 128:
        raise ValueError(f"evs_per_qp must be a power of two in 2..128, not {evs_per_qp!r}")
    if sack_bits not in (32, 64, 128, 256):
        raise ValueError(f"sack_bits must be 32, 64, 128 or 256, not {sack_bits!r}")
    if max_mtu not in (256, 512, 1024, 2048, 4096):
        raise ValueError(f"max_mtu must be a power of two in 256..4096, not {max_mtu!r}")
    if not isinstance(mpr_max, int) or mpr_max % 128 or not 128 <= mpr_max <= 32640:
        raise ValueError(f"mpr_max must be a multiple of 128 PSNs in 128..32640 (the MPR "
                         f"unit is 128 PSNs), not {mpr_max!r}")
    if not isinstance(num_mrs, int) or not 1 <= num_mrs <= RX_MAX_MRS:
        raise ValueError(f"num_mrs must be in 1..{RX_MAX_MRS}, not {num_mrs!r}")
    if not _pow2(inflight_depth) or not 16 <= inflight_depth <= 32768:
        raise ValueError(f"inflight_depth must be a power of two in 16..32768, "
                         f"not {inflight_depth!r}")
    if not _pow2(window) or not 2 <= window <= 256:
        raise ValueError(f"window must be a power of two in 2..256, not {window!r}")
    if window > inflight_depth:
        raise ValueError(f"window ({window} PSNs tracked by reliability) must not exceed "
                         f"inflight_depth ({inflight_depth} PSNs TX can hold in flight)")
    if window > mpr_max:
        raise ValueError(f"window ({window} PSNs) must not exceed mpr_max ({mpr_max} PSNs): "
                         f"the peer would drop PSNs beyond its receive window")
    if not isinstance(clk_freq_hz, int) or not 1_000_000 <= clk_freq_hz <= 1_000_000_000:
        raise ValueError(f"clk_freq_hz must be an integer in 1 MHz..1 GHz, not {clk_freq_hz!r}")
    if not isinstance(build_id, int) or not 0 <= build_id < 1 << 32:
        raise ValueError(f"build_id must fit 32 bits, not {build_id!r}")
    check_dma_addr_width(addr_width)
    plane_bits(num_planes)  # raises for a count outside 1..8
    if not isinstance(ipv6, bool):
        raise ValueError(f"ipv6 must be True or False, not {ipv6!r}")
    check_ev_width(ev_width, ipv6)


TxRegWrite = data.StructLayout({"addr": 32, "data": 32})
TX_CTRL_RESET = 1 << TX_CTRL_RESET_BIT  # TX qp_ctrl: reset = 1, enable = 0
TX_CTRL_FLUSH = 1 << TX_CTRL_FLUSH_BIT  # TX qp_ctrl: flush = 1, enable = 0


class TxControlBridge(wiring.Component):
    """Hands reliability's ``cwnd_update`` and ``qp_state_update`` to TX
    through TX's own registers, because TX has no ports for them.

    A window update becomes a write of TX ``qp_cwnd``; a QP entering ERROR
    becomes a write of ``flush`` = 1, ``enable`` = 0 to TX ``qp_ctrl`` (stop
    sending from the QP; its WQEs are flushed, so its count of outstanding
    WRITE_WITH_IMMs goes to 0), one
    entering RESET a write of ``reset`` = 1, ``enable`` = 0 (stop, and empty
    TX's ring from the doorbell on, so that the QP is reusable).
    Other state changes need nothing from TX (the host enables TX when it
    brings the QP to RTS) and are taken at once. State changes go first.

    Interface: ``cwnd_update`` and ``qp_state_update`` In (streams from
    reliability), ``inject`` Out(stream(TxRegWrite)): writes into TX's
    register block, for ``CsrInterconnect.inject``.
    Latency: 0 cycles (combinational); throughput one update per write slot.
    """

    def __init__(self):
        super().__init__({
            "cwnd_update": In(stream.Signature(CwndUpdate)),
            "qp_state_update": In(stream.Signature(QpStateUpdate)),
            "inject": Out(stream.Signature(TxRegWrite)),
        })

    def elaborate(self, platform):
        m = Module()
        qsu, cwu, out = self.qp_state_update, self.cwnd_update, self.inject
        stops = (qsu.payload.state == QpState.ERROR) | (qsu.payload.state == QpState.RESET)
        with m.If(qsu.valid):
            m.d.comb += [
                out.valid.eq(stops),
                out.payload.addr.eq(TX_QP_BASE + TX_Q.CTRL + qsu.payload.qpn * TX_QP_STRIDE),
                out.payload.data.eq(Mux(qsu.payload.state == QpState.RESET,
                                        TX_CTRL_RESET, TX_CTRL_FLUSH)),
                qsu.ready.eq(~stops | out.ready),
            ]
        with m.Else():
            m.d.comb += [
                out.valid.eq(cwu.valid),
                out.payload.addr.eq(TX_QP_BASE + TX_Q.CWND + cwu.payload.qpn * TX_QP_STRIDE),
                out.payload.data.eq(cwu.payload.cwnd),
                cwu.ready.eq(out.ready),
            ]
        return m


class DoorbellSnoop(wiring.Component):
    """Watches the host's CSR writes into TX's register block and reports every
    write of a QP's ``qp_doorbell`` (the send queue's producer index) to
    reliability, which needs it to complete, on an ERROR, the WQEs TX has not
    begun.

    Parameters: ``num_qps``; ``addr_width``, the observed bus's address bits;
    ``base``, where TX's register block starts on that bus (0 for TX's own bus).

    Interface: ``addr`` In(addr_width), ``w_stb`` In(1), ``w_data`` In(16):
    the address, write strobe and low half of the write data of a CSR bus
    (observed, never driven); ``sq_producer`` Out(stream(SqProducer)):
    ``{qpn, producer}``, no backpressure (reliability's input is always ready).
    NicCore watches ``CsrInterconnect``'s upstream (host) bus, whose writes
    reach TX's bus two cycles later, so a doorbell is reported a cycle before
    it reaches TX (reliability uses it only to complete the posted WQEs of a
    QP going to ERROR); injected writes, which never write a doorbell, are
    not seen.
    Latency: 1 cycle, registered: the address decode (compares and a
    subtraction) ends at flip-flops, not at reliability's producer-index
    memory's write enable. Throughput: one doorbell per cycle.
    """

    def __init__(self, num_qps: int, addr_width: int, base: int = 0):
        self.num_qps = num_qps
        self.base = base
        super().__init__({
            "addr": In(addr_width),
            "w_stb": In(1),
            "w_data": In(16),
            "sq_producer": Out(stream.Signature(SqProducer)),
        })

    def elaborate(self, platform):
        m = Module()
        out = self.sq_producer
        stride_bits = TX_QP_STRIDE.bit_length() - 1
        start = self.base + TX_QP_BASE
        rel = Signal(len(self.addr))
        m.d.comb += rel.eq(self.addr - start)
        qpn = rel >> stride_bits
        m.d.sync += [
            out.valid.eq(self.w_stb & (self.addr >= start)
                         & (self.addr < start + self.num_qps * TX_QP_STRIDE)
                         & (rel[:stride_bits] == TX_Q.DOORBELL)),
            out.payload.qpn.eq(qpn),
            out.payload.producer.eq(self.w_data),
        ]
        return m


class NicCore(wiring.Component):
    """The MRC NIC core (docs/architecture.md).

    Parameters
    ----------
    data_width : 64..512, bits of the MAC streams and of the DMA data.
    num_qps : queue pairs, a power of two in 2..4096 (QPN i is entry i everywhere).
    evs_per_qp : EVs (paths) per QP, a power of two in 2..128.
    sack_bits : SACK bitmap width, 32/64/128/256.
    max_mtu : largest MTU in bytes, 256..4096 (also the largest payload RX takes).
    mpr_max : largest responder MPR window in PSNs, a multiple of 128.
    num_mrs : memory regions in the RX MR table, 1..4095.
    window : PSNs reliability tracks per QP (the ceiling of cwnd), power of two
        in 2..256, at most ``inflight_depth`` and ``mpr_max``.
    inflight_depth : PSNs TX can hold in flight per QP, power of two in 16..32768.
    clk_freq_hz : core clock (timer unit 1.024 us, reported in device info).
    build_id : 32-bit build identifier, readable in the device-info block.
    csr_addr_width : AXI4-Lite address bits; None picks the smallest that fits.
    addr_width : bits of every host DMA address the NIC keeps, computes and
        issues, 32..64 (default 64): ``m_axi``'s AW/AR addresses, the WQE,
        payload, receive-write and CQE addresses, the MR bases and the SQ/CQ
        ring bases. See "Host address width" below.
    nscc : build UET NSCC in reliability (default True; docs/reliability.md "UET
        NSCC in the engine"); without it (a small device) the window is the
        packet window only.
    ev_gen : build the EV generator (default True: MRC's GENERATED and AUTO EV
        profiles derived by the NIC, the CSR chain's last block); without it
        the chain ends at reliability and the host loads EXPLICIT EVs only.
    num_planes : planes, 1..8 (default 1): MAC port pairs, each its own fabric.
        See "Planes" below.
    ipv6 : RoCEv2 over IPv6 as well as IPv4 (default False): each QP's peer is
        an IPv4 or IPv6 address (a GID), and TX's data frames, RX's ACKs and
        probe answers and reliability's probes go over the peer's family; RX
        takes frames of both. The three blocks gain the IPv6 address registers
        (TX ``src_ip6``, ``qp_dst_ip6_*``, ``qp_ip6``; RX ``OWN_IP6``,
        ``QP_PEER_IP6_*``, ``QP_PEER_V6``; reliability ``own_ip6``,
        ``peer_ip6_*``, ``peer_v6``) and TX ``caps.ipv6`` reads 1.
    ev_width : the bits of an EV entry in TX and reliability (default 16):
        16 holds the UDP format's EVs; 32 STEV's too, 64 SRv6's too (both need
        ``ipv6``; ``hw.protocol.EvFormat``). Each QP's format is a field of
        its family registers (TX ``qp_ip6.ev_format``, reliability
        ``peer_v6.ev_format``); the bits above 15 are written through
        ``ev_value_hi``; TX ``caps.stev``/``caps.srv6`` say which it holds.

    Interface
    ---------
    ``mac_tx``  Out(AXIStreamSignature(data_width)): Ethernet frames without
                FCS. TX data frames, RX's ACK/NAK/probe-response frames and
                reliability's probe requests, merged a whole frame at a time
                by round robin: a source with a frame waiting goes after at
                most two frames of the others.
    ``mac_rx``  In(AXIStreamSignature(data_width, user_width=1)): received
                frames without FCS; ``tuser`` on the last beat = bad frame.
    ``m_axi``   Out(AXI4Signature(addr_width, data_width, 6)): the one DMA master.
                ID bits [5:4] name the block (0 TX: WQE and payload reads;
                1 RX: payload and receive-CQE writes; 2 reliability: WQE
                reads, send-CQE writes), bits [3:0] are the block's own ID.
    ``s_axil``  In(AXI4LiteSignature(csr_addr_width, 32)): the CSR space, a
                chain of self-describing register blocks (docs/registers.md):
                device info at 0, then TX, RX, reliability, the EV
                generator and, with planes, the planes block, each in a
                window of ``block_size`` bytes.
    ``irq``     Out(1): reliability's interrupt (EV event queued, or a send
                CQE written since ``irq_status`` was read), or with planes a
                plane event (the planes block's ``link_changes`` not 0).

    Planes: with ``num_planes`` above 1, ``mac_tx``/``mac_rx`` are plane 0's
    MAC streams and ``mac_tx_p{p}``/``mac_rx_p{p}`` plane p's, and ``link_up``
    In(num_planes) (reset all 1) says which planes' links are up. Every frame
    leaving carries a plane (a data frame or probe its EV's, an ACK, NAK or
    probe answer that of the last frame from the peer on its QP, or the
    probe's): the three sources are merged with it as ``tuser``, and
    ``PlaneSplit`` sends each frame to its plane's MAC, or drops it when that
    plane's link is down or the NIC lacks the plane (``plane_drops`` strobes
    it). An ACK, NAK or probe answer whose plane's link is down leaves on
    the lowest plane whose link is up (``up_plane``); TX sprays only on EVs
    whose plane's link is up. ``PlaneMerge`` merges the planes' received
    frames, whole frames round robin, tagging each with its plane; the
    core's beat rate (``data_width`` x clock) must be at least the sum of
    the planes' rates, and each plane's MAC must hold ``num_planes`` - 1
    frames while the others are served. Each plane's streams pass a
    register stage of their own. ``plane_drops`` Out(1): one strobe per
    frame dropped by the split. The planes register block
    (``PlaneStatus``, last in the CSR chain) gives the host each plane's
    link, an event (and ``irq``) when one goes down or comes back, and the
    frames sent, received and dropped per plane.

    Internal joins: RX ``peer_ack`` -> reliability; TX ``sent`` ->
    reliability through the sent buffer (below); reliability ``retx``,
    ``ack_update``, ``ev_update`` and ``wimm_done`` (a WRITE_WITH_IMM WQE
    completed SUCCESS: TX's ``max_wimm`` count) -> TX; reliability ``cwnd_update``
    and ``qp_state_update`` -> TX's ``qp_cwnd`` / ``qp_ctrl`` registers
    through ``TxControlBridge``, and the EV generator's (``EvGenBlock``:
    MRC's GENERATED and AUTO profiles) writes of TX's and reliability's EV
    tables, both as internal CSR writes (the bridge's first); the host's
    doorbell writes to TX -> reliability ``sq_producer`` through
    ``DoorbellSnoop``. ``peer_ack`` and
    ``ack_update`` pass a register stage each (1 cycle).

    Sent buffer: reliability takes a ``sent`` record only between events,
    and during an event (an ACK or timeout walk) it may wait for room in its
    16-entry retransmit FIFO, which TX drains only between packets; TX in
    turn waits for room for its packet's ``sent`` record. Without a buffer
    the two could wait for each other for good (a timeout walk of more than
    about 20 PSNs while TX is busy: seen in the total-outage system test).
    A walk pushes at most ``window`` PSNs; from its first push until it ends
    the retransmit FIFO is not empty, so TX sends only retransmissions, one
    per entry taken, and before that at most a packet or two. So TX makes at
    most ``window`` + 16 + a few records during an event, and between events
    reliability takes ``sent`` records before ACKs and timer reports: a
    FIFO of ``sent_buffer_depth(window)`` = 2 x window + 32 records (64 on
    the board, 160 by default) keeps TX from ever waiting on reliability in
    a walk. Latency 4 cycles (the FIFO with its output register, then a
    register stage: the FIFO is block RAM on the board).

    Host address width: with ``addr_width`` below 64 the NIC addresses only
    the low 2^addr_width bytes of host memory, and every address it holds is
    that many bits wide (on the ECP5 board, 32: its host memory is a 64 KiB
    window in a 32-bit map). Nothing on the wire changes.

    - The address registers (RX ``MR_BASE_*`` and ``QP_CQ_BASE_*``, TX
      ``qp_sq_base_*``, reliability ``sq_base_*`` and ``cq_base_*``) keep
      only bits ``addr_width - 1..0``: the ``_HI`` words' bits from
      ``addr_width - 32`` up are not stored and read back as 0.
    - A received WRITE's 64-bit RETH VA is parsed whole. A WRITE is in
      bounds only if ``[VA, VA + payload length)`` also lies below
      2^addr_width: a VA with any bit set at or above ``addr_width``, or a
      payload running past 2^addr_width, fails the MR check as an
      out-of-region VA does (counted ``bad_bounds``, NAK remote access
      error) and is never written, so it cannot alias into low memory.
    - The WQE's local address (``laddr``) is taken modulo 2^addr_width; the
      addresses formed from a base plus an offset (a WQE slot from the SQ
      base, a CQE slot from a CQ base, a payload segment from ``laddr``, the
      next burst of a write) wrap within ``addr_width`` bits. The host driver
      keeps rings, MRs and posted buffers below 2^addr_width (it reads
      ``addr_width`` from the device-info block).
    - The WQE's remote address (``raddr``, the RETH VA sent) is the peer's
      and stays 64 bits.

    No latency or throughput depends on ``addr_width``.

    Every output of the boundary comes from a flip-flop: ``mac_tx`` and
    ``mac_rx`` pass a register stage (hw/pipeline.py ``AXIStreamRegister``),
    ``m_axi`` an ``AXI4RegisterSlice`` on all five channels (each block's
    master passes one more before the arbiter), and the CSR path is
    registered in the bridge and in ``CsrInterconnect``, so the logic around
    NicCore (MAC, memory, interconnect) times on its own.

    Latency: NicCore adds 1 cycle on ``mac_tx`` and on ``mac_rx`` and 1 cycle
    per AXI4 channel behind its arbiters (2 from a block's master); see
    docs/tx.md, docs/rx.md and docs/reliability.md for the blocks'. A CSR
    read takes 7 cycles from AR accepted to R valid (bridge 1, interconnect
    3, block 3: TX's and RX's; the others' 2 are delayed to it); a write 2
    cycles from AW+W to B, and reaches the block 2 cycles after the bridge's
    strobe. Throughput: 1 beat per cycle on
    ``mac_tx`` (shared by the three sources), on ``mac_rx`` and on each AXI4
    channel; one CSR write per 3 cycles, one read per 9.
    """

    def __init__(self, *, data_width=64, num_qps=16, evs_per_qp=16, sack_bits=64, max_mtu=4096,
                 mpr_max=1024, num_mrs=16, window=64, inflight_depth=256,
                 clk_freq_hz=125_000_000, build_id=0, csr_addr_width=None, addr_width=64,
                 nscc=True, ev_gen=True, num_planes=1, ipv6=False, ev_width=16):
        check_nic_params(data_width=data_width, num_qps=num_qps, evs_per_qp=evs_per_qp,
                         sack_bits=sack_bits, max_mtu=max_mtu, mpr_max=mpr_max, num_mrs=num_mrs,
                         window=window, inflight_depth=inflight_depth,
                         clk_freq_hz=clk_freq_hz, build_id=build_id, addr_width=addr_width,
                         num_planes=num_planes, ipv6=ipv6, ev_width=ev_width)
        self.num_planes = num_planes
        self.ev_width = ev_width
        self.data_width, self.num_qps, self.evs_per_qp = data_width, num_qps, evs_per_qp
        self.sack_bits, self.max_mtu, self.mpr_max = sack_bits, max_mtu, mpr_max
        self.num_mrs, self.window, self.inflight_depth = num_mrs, window, inflight_depth
        self.clk_freq_hz, self.build_id = clk_freq_hz, build_id
        self.addr_width = addr_width
        self.nscc = bool(nscc)
        self.ipv6 = bool(ipv6)
        # the CSR chain's blocks: the EV generator (optional), then with planes
        # the planes block, last
        self.block_order = (BLOCK_ORDER if ev_gen else BLOCK_ORDER[:-1]) + \
            (("planes",) if num_planes > 1 else ())

        from hw.reliability.registers import register_map as rel_register_map
        from hw.rx.regs import rx_register_map
        from hw.tx.regs import tx_register_map

        # The maps as the host sees them (uniform headers): the decode, the
        # driver and docs/registers.md all use these.
        maps = {name: host_view(rm) for name, rm in (
            ("device_info", device_info_register_map()),
            ("tx", tx_register_map(num_qps, evs_per_qp, self.ipv6, ev_width)),
            ("rx", rx_register_map(num_qps, num_mrs, ipv6=self.ipv6)),
            ("reliability", rel_register_map(num_qps, evs_per_qp, window, self.ipv6,
                                             ev_width)),
            ("ev_gen", ev_gen_register_map(ev_width)),
            ("planes", plane_register_map(max(num_planes, 2))),
        )}
        # Every block decodes at least 16 address bits (reliability needs them).
        self.block_bits = max(16, *((m.size - 1).bit_length() for m in maps.values()))
        self.block_size = 1 << self.block_bits
        order = self.block_order
        index_bits = (len(order) - 1).bit_length()
        need = self.block_bits + index_bits
        if csr_addr_width is None:
            csr_addr_width = need
        elif not isinstance(csr_addr_width, int) or not need <= csr_addr_width <= 32:
            raise ValueError(f"csr_addr_width must be in {need}..32 for {len(order)} blocks "
                             f"of 0x{self.block_size:x} bytes, not {csr_addr_width!r}")
        self.csr_addr_width = csr_addr_width
        # Cycles from each block's r_stb to its r_data: TX and RX take their
        # read mux in two registered steps (3), the others register theirs
        # (2); the interconnect answers every block at the slowest's latency.
        read_latency = {"device_info": DEVICE_INFO_READ_LATENCY,
                        "tx": TxEngine.CSR_READ_LATENCY, "rx": RxEngine.CSR_READ_LATENCY,
                        "reliability": ReliabilityEngine.CSR_READ_LATENCY, "ev_gen": 1,
                        "planes": PlaneStatus.READ_LATENCY}
        self.windows = [
            BlockWindow(name, i << self.block_bits, maps[name],
                        (i + 1) << self.block_bits if i + 1 < len(order) else 0,
                        read_latency[name])
            for i, name in enumerate(order)
        ]
        self.csr_block_read_latency = max(read_latency[name] for name in order)
        self.id_width = BLOCK_AXI_ID_WIDTH + (len(DMA_MASTERS) - 1).bit_length()

        bb = self.block_bits
        self.tx = TxEngine(data_width=data_width, num_qps=num_qps, evs_per_qp=evs_per_qp,
                           max_mtu=max_mtu, csr_addr_width=bb, inflight_depth=inflight_depth,
                           addr_width=addr_width, num_planes=num_planes, max_span=window,
                           ipv6=self.ipv6, ev_width=ev_width)
        self.rx = RxEngine(data_width=data_width, num_qps=num_qps, num_mrs=num_mrs,
                           sack_bits=sack_bits, mpr_max=mpr_max, csr_addr_width=bb,
                           max_payload=max_mtu, addr_width=addr_width,
                           num_planes=num_planes, ns_per_cycle=ns_per_cycle(clk_freq_hz),
                           ipv6=self.ipv6)
        self.reliability = ReliabilityEngine(num_qps=num_qps, evs_per_qp=evs_per_qp,
                                             sack_bits=sack_bits, clk_freq_hz=clk_freq_hz,
                                             data_width=data_width, csr_addr_width=bb,
                                             window=window, addr_width=addr_width,
                                             max_mtu=max_mtu, nscc=nscc,
                                             num_planes=num_planes, ipv6=self.ipv6,
                                             ev_width=ev_width)
        self.ev_gen = None if not ev_gen else EvGenBlock(
            num_qps=num_qps, evs_per_qp=evs_per_qp, tx_map=maps["tx"],
            rel_map=maps["reliability"], tx_block=BLOCK_ORDER.index("tx"),
            rel_block=BLOCK_ORDER.index("reliability"), addr_width=bb, ev_width=ev_width)
        self.device_info = DeviceInfo(self.device_params(), addr_width=bb,
                                      read_latency=DEVICE_INFO_READ_LATENCY)
        self.plane_status = None if num_planes == 1 else PlaneStatus(num_planes, addr_width=bb)
        ports = {
            "mac_tx": Out(AXIStreamSignature(data_width)),
            "mac_rx": In(AXIStreamSignature(data_width, user_width=1)),
            "m_axi": Out(AXI4Signature(addr_width, data_width, self.id_width)),
            "s_axil": In(AXI4LiteSignature(csr_addr_width, 32)),
            "irq": Out(1),
        }
        if num_planes > 1:
            for p in range(1, num_planes):
                ports[f"mac_tx_p{p}"] = Out(AXIStreamSignature(data_width))
                ports[f"mac_rx_p{p}"] = In(AXIStreamSignature(data_width, user_width=1))
            ports["link_up"] = In(num_planes, init=(1 << num_planes) - 1)
            ports["plane_drops"] = Out(1)
        super().__init__(ports)

    def device_params(self) -> dict[str, int]:
        """The values the device-info block reports."""
        return {
            "nic_version": NIC_VERSION, "build_id": self.build_id,
            "data_width": self.data_width, "num_qps": self.num_qps,
            "evs_per_qp": self.evs_per_qp, "sack_bits": self.sack_bits,
            "max_mtu": self.max_mtu, "mpr_max": self.mpr_max, "num_mrs": self.num_mrs,
            "window": self.window, "clk_freq_hz": self.clk_freq_hz,
            "block_size": 1 << self.block_bits, "addr_width": self.addr_width,
            "caps": caps_word(NIC_CAPABILITIES),
            # 0 for one plane: the word as a NIC without planes reads it (no logic)
            "num_planes": self.num_planes if self.num_planes > 1 else 0,
        }

    def block_base(self, name: str) -> int:
        return self.block_order.index(name) << self.block_bits

    def mac_ports(self, plane: int):
        """``(mac_tx, mac_rx)`` of ``plane``: plane 0's are ``mac_tx``/``mac_rx``."""
        suffix = f"_p{plane}" if plane else ""
        return getattr(self, f"mac_tx{suffix}"), getattr(self, f"mac_rx{suffix}")

    def _mac_paths(self, m, tx, rx, rel):
        """MAC TX (data, ACK/NAK/probe answers, probe requests, merged whole
        frames at a time, then split by plane) and MAC RX (the planes merged)."""
        dw, n = self.data_width, self.num_planes
        uw = PLANE_BITS if n > 1 else 1  # tuser: each frame's plane
        m.submodules.mac_tx_arbiter = txarb = AXIStreamArbiter(dw, num_inputs=3, user_width=uw)
        wiring.connect(m, tx.m_axis, txarb.s_axis0)
        # ACK frames through a register stage: the ACK builder's beat comes from
        # its state through a lane pick, and the arbiter's mux follows it.
        m.submodules.ack_stage = ack_stage = AXIStreamRegister(dw, uw)
        wiring.connect(m, rx.m_axis_ack, ack_stage.s_axis)
        if n == 1:
            wiring.connect(m, ack_stage.m_axis, txarb.s_axis1)
        else:
            # an ACK leaves on its data's arrival plane, or while that plane's
            # link is down on the lowest plane whose link is up
            acks, port = ack_stage.m_axis, txarb.s_axis1
            m.d.comb += [port.tdata.eq(acks.tdata), port.tkeep.eq(acks.tkeep),
                         port.tlast.eq(acks.tlast), port.tvalid.eq(acks.tvalid),
                         acks.tready.eq(port.tready),
                         port.tuser.eq(up_plane(acks.tuser, self.link_up))]
        wiring.connect(m, rel.m_axis_probe, txarb.s_axis2)
        m.submodules.mac_tx_stage = tx_stage = AXIStreamRegister(dw, uw)
        wiring.connect(m, txarb.m_axis, tx_stage.s_axis)
        if n == 1:
            wiring.connect(m, tx_stage.m_axis, wiring.flipped(self.mac_tx))
            m.submodules.mac_rx_stage = rx_stage = AXIStreamRegister(dw)
            wiring.connect(m, wiring.flipped(self.mac_rx), rx_stage.s_axis)
            wiring.connect(m, rx_stage.m_axis, rx.s_axis)
            return
        m.submodules.plane_split = split = PlaneSplit(dw, n)
        m.submodules.plane_merge = merge = PlaneMerge(dw, n)
        wiring.connect(m, tx_stage.m_axis, split.s_axis)
        wiring.connect(m, merge.m_axis, rx.s_axis)
        m.submodules.plane_status = status = self.plane_status
        m.d.comb += [split.link_up.eq(self.link_up), tx.link_up.eq(self.link_up),
                     self.plane_drops.eq(split.dropped),
                     status.link_up.eq(self.link_up),
                     status.absent_drop.eq(split.dropped & (split.s_axis.tuser >= n))]
        for p in range(n):
            mac_tx, mac_rx = self.mac_ports(p)
            m.d.comb += [
                status.tx_frame[p].eq(mac_tx.tvalid & mac_tx.tready & mac_tx.tlast),
                status.rx_frame[p].eq(mac_rx.tvalid & mac_rx.tready & mac_rx.tlast),
                status.link_drop[p].eq(split.dropped & (split.s_axis.tuser == p)),
            ]
            # each plane's streams through a register stage of their own: the
            # split and the merge are combinational
            m.submodules[f"mac_tx_stage_p{p}"] = out_stage = AXIStreamRegister(dw)
            wiring.connect(m, getattr(split, f"m_axis{p}"), out_stage.s_axis)
            wiring.connect(m, out_stage.m_axis, wiring.flipped(mac_tx))
            m.submodules[f"mac_rx_stage_p{p}"] = in_stage = AXIStreamRegister(dw)
            wiring.connect(m, wiring.flipped(mac_rx), in_stage.s_axis)
            wiring.connect(m, in_stage.m_axis, getattr(merge, f"s_axis{p}"))

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = self.tx
        m.submodules.rx = rx = self.rx
        m.submodules.reliability = rel = self.reliability
        m.submodules.device_info = info = self.device_info
        ev_gen = self.ev_gen
        if ev_gen is not None:
            m.submodules.ev_gen = ev_gen

        # ---- CSR: AXI4-Lite -> CSR bus -> one window per block --------------------------
        m.submodules.csr_interconnect = ic = CsrInterconnect(
            self.windows, self.block_bits, block_read_latency=self.csr_block_read_latency)
        m.submodules.csr_bridge = bridge = AXI4LiteToCSR(
            self.csr_addr_width, read_latency=ic.read_latency)
        wiring.connect(m, wiring.flipped(self.s_axil), bridge.s_axil)
        # The bridge's address may be wider than the decoded space: addresses
        # above it select no block, drop writes and read 0.
        up = bridge.csr
        in_space = Signal()
        was_in_space = Signal()
        m.d.comb += in_space.eq(up.addr[ic.addr_width:] == 0)
        with m.If(up.r_stb):
            m.d.sync += was_in_space.eq(in_space)
        m.d.comb += [
            ic.csr.addr.eq(up.addr[: ic.addr_width]),
            ic.csr.w_data.eq(up.w_data),
            ic.csr.w_stb.eq(up.w_stb & in_space),
            ic.csr.r_stb.eq(up.r_stb & in_space),
            up.r_data.eq(Mux(was_in_space, ic.csr.r_data, 0)),
        ]
        blocks = {"device_info": info, "tx": tx, "rx": rx, "reliability": rel, "ev_gen": ev_gen,
                  "planes": self.plane_status}
        for i, name in enumerate(self.block_order):
            wiring.connect(m, ic.bus(i), blocks[name].csr)

        # ---- DMA: one AXI4 master -----------------------------------------------------------
        m.submodules.dma_arbiter = dma = AXI4Arbiter(
            len(DMA_MASTERS), addr_width=self.addr_width, data_width=self.data_width,
            id_width=BLOCK_AXI_ID_WIDTH)
        for i, name in enumerate(DMA_MASTERS):
            # A register slice in front of the arbiter on every master: the
            # requests and W beats come from the blocks' own logic (TX's through
            # its read arbiter), and the arbiter's muxes and its ready paths back
            # into the blocks would be in series with it.
            slice_ = AXI4RegisterSlice(self.addr_width, self.data_width, BLOCK_AXI_ID_WIDTH)
            m.submodules[f"{name}_axi_slice"] = slice_
            wiring.connect(m, blocks[name].m_axi, slice_.s_axi)
            wiring.connect(m, slice_.m_axi, dma.slave(i))
        m.submodules.m_axi_slice = axi_slice = AXI4RegisterSlice(
            self.addr_width, self.data_width, self.id_width)
        wiring.connect(m, dma.m_axi, axi_slice.s_axi)
        wiring.connect(m, axi_slice.m_axi, wiring.flipped(self.m_axi))

        self._mac_paths(m, tx, rx, rel)

        # ---- block to block ---------------------------------------------------------------------
        # ACK records come from the RX parser's record memory (block RAM on the
        # board) through the validator without a register: a stage keeps the
        # RAM's clock-to-output and the route across to reliability apart. It
        # loads only while empty (hold: reliability's ready reaches its flags
        # alone, not its data's enables; docs/timing.md#nic-core-glue), which
        # the ACK rate, one record per frame of 8 beats or more, leaves room
        # for.
        m.submodules.peer_ack_stage = peer_ack_stage = StreamRegister(
            ParsedHeader(self.sack_bits), hold=True)
        wiring.connect(m, rx.peer_ack, peer_ack_stage.i)
        wiring.connect(m, peer_ack_stage.o, rel.peer_ack)
        m.submodules.sent_buffer = sent_buffer = StreamFifo(
            SentRecord, sent_buffer_depth(self.window))
        wiring.connect(m, tx.sent, sent_buffer.i)
        # the buffer sits in block RAM: a register stage after it keeps the RAM's
        # clock-to-output out of reliability's input decode
        m.submodules.sent_stage = sent_stage = StreamRegister(SentRecord)
        wiring.connect(m, sent_buffer.o, sent_stage.i)
        wiring.connect(m, sent_stage.o, rel.sent)
        # the snoop watches the host's bus into the interconnect and registers its
        # decode: no address compare in front of reliability's producer-index
        # memory's write enable
        m.submodules.doorbell_snoop = snoop = DoorbellSnoop(
            self.num_qps, ic.addr_width, base=self.block_base("tx"))
        m.d.comb += [snoop.addr.eq(ic.csr.addr), snoop.w_stb.eq(ic.csr.w_stb),
                     snoop.w_data.eq(ic.csr.w_data[:16])]
        wiring.connect(m, snoop.sq_producer, rel.sq_producer)
        wiring.connect(m, rel.retx, tx.retx)
        # reliability's ACK FIFO is block RAM on the board: a register stage
        # keeps its clock-to-output out of TX's ACK compares
        # (docs/timing.md#nic-core-glue)
        m.submodules.ack_update_stage = ack_update_stage = StreamRegister(AckUpdate)
        wiring.connect(m, rel.ack_update, ack_update_stage.i)
        wiring.connect(m, ack_update_stage.o, tx.ack_update)
        wiring.connect(m, rel.ev_update, tx.ev_update)
        # completed WRITE_WITH_IMMs, for TX's max_wimm counts (a flip-flop out of
        # the completion writer, registered again at WimmBound's input)
        wiring.connect(m, rel.wimm_done, tx.wimm_done)
        m.submodules.tx_control = txc = TxControlBridge()
        wiring.connect(m, rel.cwnd_update, txc.cwnd_update)
        wiring.connect(m, rel.qp_state_update, txc.qp_state_update)
        # internal writes: the bridge's first (window and state updates, per
        # event), then the EV generator's (control path, while a QP is set up)
        if ev_gen is None:
            gen = Signal(ic.inject.payload.shape())  # 0: no second writer
            gen_valid = Const(0)
        else:
            gen, gen_valid = ev_gen.inject.payload, ev_gen.inject.valid
            m.d.comb += ev_gen.inject.ready.eq(ic.inject.ready & ~txc.inject.valid)
        m.d.comb += [
            ic.inject.valid.eq(txc.inject.valid | gen_valid),
            ic.inject.payload.block.eq(Mux(txc.inject.valid, BLOCK_ORDER.index("tx"), gen.block)),
            ic.inject.payload.addr.eq(Mux(txc.inject.valid, txc.inject.payload.addr, gen.addr)),
            ic.inject.payload.data.eq(Mux(txc.inject.valid, txc.inject.payload.data, gen.data)),
            txc.inject.ready.eq(ic.inject.ready),
        ]

        m.d.comb += self.irq.eq(rel.irq | (self.plane_status.irq if self.plane_status else 0))
        return m
