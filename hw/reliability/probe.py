"""EV probe request frames (docs/protocol.md, MRC PROBE, opcode 0xC0)."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.crc import ICRC_INIT, crc32_bytes
from hw.headers import (
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    IP_PROTO_UDP,
    IPV4,
    OFF_BTH,
    OFF_EXT,
    OFF_IPV4,
    OFF_UDP,
    PROBE,
    ROCE_UDP_PORT,
    UDP,
    Opcode,
)
from hw.stream import AXIStreamSignature

__all__ = ["NetConfig", "PROBE_FRAME_BYTES", "ProbeBuilder", "ProbeRequest"]

PROBE_FRAME_BYTES = OFF_EXT + PROBE.size + 4  # 74
_CRC_START = OFF_IPV4
_CRC_END = OFF_EXT + PROBE.size  # the ICRC covers bytes 14..69 (masked), after 8 bytes of ones
_MASKED = (OFF_IPV4 + 1, OFF_IPV4 + 8, OFF_IPV4 + 10, OFF_IPV4 + 11, OFF_UDP + 6, OFF_UDP + 7,
           OFF_BTH + 4)
_ECT0 = 0b10
_DF = 0b010


def ProbeRequest(num_qps, evs_per_qp):
    return data.StructLayout({"qpn": range(num_qps), "ev_index": range(evs_per_qp),
                              "probe_id": 32})


NetConfig = data.StructLayout({"peer_mac": 64, "peer_ip": 32, "dest_qpn": 32})


class ProbeBuilder(wiring.Component):
    """Builds one 74-byte probe request per ``req`` and sends it on ``m_axis``.

    Interface
    ---------
    ``req``        In(stream(ProbeRequest)): probe EV ``ev_index`` of ``qpn`` with ``probe_id``.
    ``net_addr`` / ``net_data``: synchronous read port on the per-QP peer addresses
                   (``NetConfig``: peer MAC, peer IPv4, peer QPN).
    ``ev_addr`` / ``ev_data``: synchronous read port on the EV values (qpn x evs + index).
    ``own_mac``, ``own_ip``: the NIC's addresses. ``now_ns``: the timestamp put in the probe.
    ``m_axis``     Out(AXIStreamSignature(data_width)): Eth / IPv4 (ECT(0), DF, TTL 64) /
                   UDP (sport = the EV, dport 4791, checksum 0) / BTH (0xC0, P_Key 0xFFFF,
                   DestQP = peer QPN, PSN 0) / PROBE (probe_id, ev, 0, timestamp) / ICRC.

    Latency: 4 cycles to read the configuration and sum the IPv4 header, 2 to build the
    header, ceil(56 / bytes per beat) cycles of ICRC,
    then ceil(74 / bytes per beat) beats (10 at 64 bits) at one per cycle.
    Throughput: one probe per about 22 cycles at 64 bits; probes are rare (the IPv4
    checksum's sum and each CRC step's input are registered: 2 cycles more than a
    single-cycle header and CRC feed).
    """

    def __init__(self, num_qps: int, evs_per_qp: int, data_width: int = 64):
        self.num_qps, self.evs_per_qp, self.data_width = num_qps, evs_per_qp, data_width
        super().__init__(
            {
                "req": In(stream.Signature(ProbeRequest(num_qps, evs_per_qp))),
                "net_addr": Out(range(num_qps)),
                "net_data": In(NetConfig),
                "ev_addr": Out(range(num_qps * evs_per_qp)),
                "ev_data": In(16),
                "own_mac": In(48),
                "own_ip": In(32),
                "now_ns": In(64),
                "m_axis": Out(AXIStreamSignature(data_width)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        dw = self.data_width
        lanes = dw // 8
        req = Signal(ProbeRequest(self.num_qps, self.evs_per_qp))
        ev_bits = (self.evs_per_qp - 1).bit_length()
        m.d.comb += [
            self.net_addr.eq(req.qpn),
            self.ev_addr.eq(Cat(req.ev_index, req.qpn) if ev_bits else req.qpn),
        ]

        net = Signal(NetConfig)
        ev = Signal(16)
        stamp = Signal(64)
        frame = Signal(8 * PROBE_FRAME_BYTES)

        ip_fields = {
            "version": 4, "ihl": 5, "dscp": 0, "ecn": _ECT0,
            "total_len": PROBE_FRAME_BYTES - OFF_IPV4, "ident": 0, "flags": _DF, "frag_off": 0,
            "ttl": 64, "proto": IP_PROTO_UDP, "checksum": 0,
            "src": self.own_ip, "dst": net.peer_ip,
        }
        ip_raw = IPV4.pack(ip_fields)
        words = [Cat(ip_raw[8 * i + 8 : 8 * i + 16], ip_raw[8 * i : 8 * i + 8])
                 for i in range(0, IPV4.size, 2)]
        def tree_sum(values):
            if len(values) == 1:
                return values[0]
            h = len(values) // 2
            return tree_sum(values[:h]) + tree_sum(values[h:])

        ipsum = Signal(20)  # registered in SUM, folded in BUILD
        fold1 = Signal(17)
        fold2 = Signal(16)
        m.d.comb += [
            fold1.eq(ipsum[:16] + ipsum[16:]),
            fold2.eq(fold1[:16] + fold1[16]),
        ]
        header = Cat(
            ETH.pack({"dst": net.peer_mac[:48], "src": self.own_mac, "ethertype": ETHERTYPE_IPV4}),
            IPV4.pack({**ip_fields, "checksum": ~fold2}),
            UDP.pack({"sport": ev, "dport": ROCE_UDP_PORT,
                      "length": PROBE_FRAME_BYTES - OFF_UDP, "checksum": 0}),
            BTH.pack({"opcode": Opcode.PROBE_REQ, "pkey": 0xFFFF,
                      "dqpn": net.dest_qpn[:24], "psn": 0}),
            PROBE.pack({"probe_id": req.probe_id, "ev": ev, "timestamp": stamp}),
        )

        # ICRC over bytes 14..69 with the variant bytes as ones
        masked = Signal(8 * (_CRC_END - _CRC_START))
        parts = []
        for pos in range(_CRC_START, _CRC_END):
            byte = frame[8 * pos : 8 * pos + 8]
            parts.append(Const(0xFF, 8) if pos in _MASKED else byte)
        m.d.comb += masked.eq(Cat(*parts))
        steps = -(-len(masked) // dw)
        step = Signal(range(steps + 1))
        chunks = Array([masked[k * dw : (k + 1) * dw] for k in range(steps)])
        counts = Array([Const(min(lanes, len(masked) // 8 - k * lanes), range(lanes + 1))
                        for k in range(steps)])
        crc = Signal(32)
        # the chunk of step, registered every cycle: in CRC, step is one ahead of the
        # chunk (CRC_WAIT starts it at 1 with chunk 0 registered)
        chunk = Signal(dw)
        chunk_count = Signal(range(lanes + 1))
        m.d.sync += [chunk.eq(chunks[step]), chunk_count.eq(counts[step])]
        crc_next = crc32_bytes(crc, chunk, chunk_count)

        beats = -(-PROBE_FRAME_BYTES // lanes)
        beat = Signal(range(beats + 1))
        padded = Cat(frame, Const(0, beats * dw - len(frame)))
        # the beat on m_axis, from a register: the next one is selected as one
        # is taken, so no beat mux sits between the state and the output
        out_word = Signal(dw)
        out_last = Signal()

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.req.ready.eq(1)
                with m.If(self.req.valid):
                    m.d.sync += req.eq(self.req.payload)
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.next = "LATCH"
            with m.State("LATCH"):
                m.d.sync += [net.eq(self.net_data), ev.eq(self.ev_data), stamp.eq(self.now_ns)]
                m.next = "SUM"
            with m.State("SUM"):
                m.d.sync += ipsum.eq(tree_sum(words))
                m.next = "BUILD"
            with m.State("BUILD"):
                m.d.sync += [frame[: len(header)].eq(header), crc.eq(ICRC_INIT), step.eq(0)]
                m.next = "CRC_WAIT"
            with m.State("CRC_WAIT"):
                m.d.sync += step.eq(1)
                m.next = "CRC"
            with m.State("CRC"):
                m.d.sync += [crc.eq(crc_next), step.eq(step + 1)]
                with m.If(step == steps):
                    m.next = "ICRC"
            with m.State("ICRC"):
                # The first beat is all header (the ICRC is in the last 4 of 74
                # bytes and a beat is at most 64): loaded here, while the ICRC
                # goes into the frame.
                m.d.sync += [frame[len(header) :].eq(~crc), beat.eq(0),
                             out_word.eq(padded[:dw]), out_last.eq(beats == 1)]
                m.next = "SEND"
            with m.State("SEND"):
                axis = self.m_axis
                m.d.comb += [
                    axis.tvalid.eq(1),
                    axis.tdata.eq(out_word),
                    axis.tlast.eq(out_last),
                    axis.tkeep.eq(Mux(out_last,
                                      (1 << (PROBE_FRAME_BYTES - (beats - 1) * lanes)) - 1,
                                      (1 << lanes) - 1)),
                ]
                with m.If(axis.tready):
                    # the next beat's word into the output register
                    m.d.sync += [beat.eq(beat + 1),
                                 out_word.eq(padded.word_select(beat + 1, dw)),
                                 out_last.eq(beat == beats - 2)]
                    with m.If(out_last):
                        m.next = "IDLE"
        return m
