"""Register map of the reliability block (type 0x0004): one description for the
decode logic in ``engine.py``, the tests and docs/reliability.md."""

from hw.counters import CounterBank
from hw.csr import RegisterMap
from hw.protocol import PLANE_BITS, ev_hi_words
from hw.tx.regs import EV_PLANE_LSB

__all__ = [
    "COUNTER_LAG",
    "COUNTER_NAMES",
    "COUNTER_SLOT_BITS",
    "MAX_QPS",
    "NSCC_REGISTERS",
    "OWN_IP6",
    "EV_VALUE_HI",
    "PEER_ADDRESS_REGS",
    "QP6_STRIDE",
    "QP6_WORDS",
    "QP_BASE",
    "QP_STRIDE",
    "QP_WORDS",
    "RTT_NS_BITS",
    "RTT_NS_MAX",
    "TYPE_ID",
    "VERSION",
    "region_bases",
    "register_map",
]

TYPE_ID = 0x0004
VERSION = 2
QP_BASE = 0x1000
QP_STRIDE = 0x40
COUNTER_BASE = 0x100
MAX_QPS = 4096  # the largest built; params.num_qps has 14 bits

# Per-QP words (offset / 4 inside a QP's 0x40 block).
QP_WORDS = {
    "qp_ctrl": 0,
    "qp_rel_cfg": 1,
    "sq_base_lo": 2,
    "sq_base_hi": 3,
    "cq_base_lo": 4,
    "cq_base_hi": 5,
    "ring_sizes": 6,
    "peer_mac_lo": 7,
    "peer_mac_hi": 8,
    "peer_ip": 9,
    "dest_qpn": 10,
    "una_psn": 11,
    "nxt_psn": 12,
    "qp_cc": 13,
}
# With ``ipv6`` (a build parameter): each QP's peer over IPv6, 4 words per QP
# at the QP6 base (``region_bases``), and the NIC's own IPv6 address, 4 words
# at OWN_IP6.
QP6_STRIDE = 0x10
QP6_WORDS = {"peer_ip6_1": 0, "peer_ip6_2": 1, "peer_ip6_3": 2, "peer_v6": 3}
# A QP's peer address in this block's registers, as the driver writes it and the
# model NIC reads it: (bits 31..0, bits 32i+31..32i for i = 1..3 as a format,
# the family), the last two in ipv6 builds only.
PEER_ADDRESS_REGS = ("peer_ip", "peer_ip6_{}", "peer_v6")
OWN_IP6 = 0xA0
EV_VALUE_HI = 0xB0  # with ev_width above 16: ev_hi_words words

# 32-bit saturating event counters, in register order from COUNTER_BASE.
COUNTER_NAMES = (
    "acks",
    "acks_stale",
    "acks_unsent",
    "acks_ignored",
    "naks_trimmed",
    "naks_fatal",
    "retx_timeout",
    "retx_sack",
    "retx_nak",
    "timeouts",
    "retry_exhausted",
    "ev_to_bad",
    "ev_to_good",
    "floor_blocked",
    "probes_sent",
    "probe_resps",
    "sent_dropped",
    "events_lost",
    "cmds_lost",
    "cqes",
    "dma_errors",
    "probes_stale",
    "naks_trim_repeat",
)
# The counters lie in one aligned slot of 2**COUNTER_SLOT_BITS bytes at
# COUNTER_BASE, which holds no other register.
COUNTER_SLOT_BITS = 8
assert 4 * len(COUNTER_NAMES) <= 1 << COUNTER_SLOT_BITS
# The counters are one hw.counters.CounterBank read at r_stb: a read includes
# every event strobed at least this many cycles before its r_stb.
COUNTER_LAG = CounterBank.lag(len(COUNTER_NAMES))

COUNTER_DOCS = {
    "acks": "ACK/NAK records processed for a QP in RTS",
    "acks_stale": "ACKs that brought nothing new (old or duplicate)",
    "acks_unsent": "ACKs naming PSNs never sent: dropped whole",
    "acks_ignored": "records not processed: QP not in RTS or out of range, other opcodes "
                    "or NAK syndromes",
    "naks_trimmed": "NAK TRIMMED received",
    "naks_fatal": "NAK invalid request (0x61) or remote access error (0x62) received: the "
                  "oldest WQE not completed by it completes with the error, the QP goes "
                  "to ERROR",
    "retx_timeout": "retransmit requests, reason timeout",
    "retx_sack": "retransmit requests, reason SACK hole",
    "retx_nak": "retransmit requests, reason NAK TRIMMED",
    "timeouts": "retransmit timer expiries acted on",
    "retry_exhausted": "QPs put in ERROR by retry exhaustion",
    "ev_to_bad": "EV transitions GOOD -> ASSUMED_BAD",
    "ev_to_good": "EV transitions ASSUMED_BAD -> GOOD (probe answer or controller)",
    "floor_blocked": "ASSUMED_BAD transitions refused by ev_min_active",
    "probes_sent": "probe requests queued",
    "probe_resps": "probe responses received",
    "sent_dropped": "sent records not tracked: QP not in RTS, PSN out of sequence or beyond "
                    "the window, retransmission of a PSN no longer in flight",
    "events_lost": "EV events not queued: event queue full",
    "cmds_lost": "controller commands not queued: command FIFO full",
    "cqes": "send CQEs written",
    "dma_errors": "CQE writes or WQE reads answered with an AXI error",
    "probes_stale": "probe responses dropped: no outstanding probe of their round and time "
                    "(replayed or unsolicited)",
    "naks_trim_repeat": "NAK TRIMMED refused: its PSN was already retransmitted by a NAK "
                        "or a SACK hole since the last timeout (no retransmit, no window "
                        "cut; the timer resends it)",
}

_G = {
    "block_id": 0x00,
    "next_ptr": 0x04,
    "params": 0x08,
    "timeout_unit": 0x0C,
    "own_mac_lo": 0x10,
    "own_mac_hi": 0x14,
    "own_ip": 0x18,
    "probe_period": 0x1C,
    "ev_loss_threshold": 0x20,
    "cwnd_min": 0x24,
    "cwnd_max": 0x28,
    "cwnd_init": 0x2C,
    "cwnd_ai": 0x30,
    "cwnd_ai_fast": 0x34,
    "cwnd_md_shift": 0x38,
    "cwnd_trim_dec": 0x3C,
    "target_rtt": 0x40,
    "irq_status": 0x44,
    "ev_event_count": 0x50,
    "ev_event_qpn": 0x54,
    "ev_event": 0x58,
    "ev_event_rtt": 0x5C,
}
# The global registers of NSCC (hw/reliability/nscc_path.py, docs/reliability.md): name ->
# (offset, fields as (name, low bit, width, doc)). Every field is an ``NsccConfig``
# field but ``mtu_wire``, ``pkt_shift`` and ``pkt_mul`` (the packet count's divider).
NSCC_REGISTERS = {
    "nscc_ctrl": (0x60, [("enabled", 0, 1, "1: TX's window is NSCC's (bytes // mtu_wire); "
                                           "0: the window in packets (cwnd_* registers)"),
                         ("ewma_shift", 4, 3, "the delay average's gain is 2^-ewma_shift"),
                         ("eta_s", 8, 6, "eta / target x 2^8 = eta_m x 2^-eta_s")]),
    "nscc_rtt": (0x64, [("base_rtt", 0, 16, "base RTT, 16-cycle units"),
                        ("target", 16, 16, "target queueing delay, 16-cycle units, >= 1")]),
    "nscc_qa_delay": (0x68, [("qa_delay", 0, 24, "qa_threshold x target, Q16.8 units")]),
    "nscc_qa_period": (0x6C, [("qa_period", 0, 16, "quick adapt's period, base_rtt + target")]),
    "nscc_eta_m": (0x70, [("eta_m", 0, 17, "eta / target's mantissa")]),
    "nscc_fi_mtu": (0x74, [("fi_mtu", 0, 17, "fair increase: fi x mtu_wire bytes")]),
    "nscc_gamma": (0x78, [("gamma", 0, 17, "decrease gain, Q1.16")]),
    "nscc_max_md_jump": (0x7C, [("max_md_jump", 0, 17, "largest decrease, Q1.16 of the "
                                                       "window")]),
    "nscc_qa_gate": (0x80, [("qa_gate", 0, 17, "quick adapt below qa_gate x window, Q1.16")]),
    "nscc_min_cwnd": (0x84, [("min_cwnd", 0, 24, "smallest window, bytes")]),
    "nscc_max_cwnd": (0x88, [("max_cwnd", 0, 24, "largest and first window, bytes")]),
    "nscc_mtu": (0x8C, [("mtu_wire", 0, 14, "wire bytes of a full packet: an ACK's bytes are "
                                            "its PSNs x this, a trim's this"),
                        ("pkt_shift", 16, 6, "packets = (bytes x pkt_mul) >> pkt_shift")]),
    "nscc_pkt_mul": (0x90, [("pkt_mul", 0, 26, "see pkt_shift: bytes // mtu_wire")]),
}
_G.update({name: offset for name, (offset, _) in NSCC_REGISTERS.items()})
# a probe answer's round trip in its EV event (``ev_event_rtt``): ns, saturating
RTT_NS_BITS = 20
RTT_NS_MAX = (1 << RTT_NS_BITS) - 1
GLOBAL_OFFSETS = _G


def region_bases(num_qps: int) -> tuple[int, int]:
    """(QP6 base, EV base) for ``num_qps`` QPs: the QP blocks from QP_BASE,
    then the QP6 words, then the EV table at a power of two (its decode is an
    OR of the address bits from it up). 0x6000 and 0x8000 up to 256 QPs."""
    qp6_size = max(0x2000, num_qps * QP6_STRIDE)
    ev_base = max(0x8000, 1 << (QP_BASE + num_qps * QP_STRIDE + qp6_size - 1).bit_length())
    return ev_base - qp6_size, ev_base


def register_map(num_qps: int = 16, evs_per_qp: int = 16, window: int = 64,
                 ipv6: bool = False, ev_width: int = 16) -> RegisterMap:
    qp6_base, ev_base = region_bases(num_qps)
    r = RegisterMap(
        "reliability",
        TYPE_ID,
        VERSION,
        "ACK/SACK/NAK processing, retransmit timers, EV health, congestion window and "
        "send completions (docs/reliability.md). Global registers, then one 0x40-byte block "
        f"per QP at 0x{QP_BASE:04x}, then one word per (QP, EV) at 0x{ev_base:04x}.",
    )
    r.add("block_id", _G["block_id"], "RO", "block type and version",
          fields=[("type", 0, 16, f"0x{TYPE_ID:04x}"), ("version", 16, 16, str(VERSION))])
    r.add("next_ptr", _G["next_ptr"], "RO", "offset of the next register block, 0 = last")
    r.add("params", _G["params"], "RO", "build parameters",
          fields=[("num_qps", 0, 14, "QPs"), ("evs_per_qp", 14, 8, "EVs per QP"),
                  ("window", 22, 10, "PSNs tracked per QP; cwnd never exceeds it")])
    r.add("timeout_unit", _G["timeout_unit"], "RO",
          "cycles of 1.024 us (round(1.024e-6 x clk_freq_hz)): timeout = this x 2^t")
    r.add("own_mac_lo", _G["own_mac_lo"], "RW", "own MAC address bits 31..0 (probe source)")
    r.add("own_mac_hi", _G["own_mac_hi"], "RW", "own MAC address bits 47..32")
    r.add("own_ip", _G["own_ip"], "RW", "own IPv4 address (probe source)")
    if ipv6:
        r.add("own_ip6", OWN_IP6, "RW", "(ipv6 builds) own IPv6 address (probe source), "
              "word i its bits 32i+31..32i", count=4, stride=4)
    r.add("probe_period", _G["probe_period"], "RW",
          "cycles between probe rounds; each round probes every ASSUMED_BAD EV once. 0 = off")
    r.add("ev_loss_threshold", _G["ev_loss_threshold"], "RW",
          "losses on an EV, with no delivery on it in between, that make it ASSUMED_BAD "
          "(1..15; 0 = never)")
    r.add("cwnd_min", _G["cwnd_min"], "RW", "smallest window in packets (>= 1)")
    r.add("cwnd_max", _G["cwnd_max"], "RW", "largest window in packets (capped at `window`)")
    r.add("cwnd_init", _G["cwnd_init"], "RW",
          "window of a QP entering RTS, in packets; reset: NSCC's start, 1.5 x BDP at the "
          "default base RTT (docs/reliability.md)")
    r.add("cwnd_ai", _G["cwnd_ai"], "RW",
          "fair increase: 1/256 packets added per packet acknowledged, per packet of window "
          "(256 = +1 packet per window), when the RTT is at or above target_rtt")
    r.add("cwnd_ai_fast", _G["cwnd_ai_fast"], "RW",
          "proportional increase, same unit, when the RTT sample is below target_rtt")
    r.add("cwnd_md_shift", _G["cwnd_md_shift"], "RW",
          "ECN decrease: cwnd -= max(1, cwnd >> shift), at most once per window of PSNs")
    r.add("cwnd_trim_dec", _G["cwnd_trim_dec"], "RW", "packets removed per NAK TRIMMED")
    r.add("target_rtt", _G["target_rtt"], "RW",
          "RTT target in units of 16 cycles; an ECN echo with an RTT at or above it "
          "decreases the window, below it holds it; reset: 1.75 x the default base RTT")
    for name, (offset, fields) in NSCC_REGISTERS.items():
        r.add(name, offset, "RW", "NSCC (UET 1.0, docs/reliability.md); reset: disabled, "
              "the defaults at the default base RTT", fields=list(fields))
    r.add("irq_status", _G["irq_status"], "RC", "interrupt causes; reading clears [1]",
          fields=[("event", 0, 1, "EV event queue not empty"),
                  ("completion", 1, 1, "a send CQE was written since the last read")])
    r.add("ev_event_count", _G["ev_event_count"], "RO", "EV events queued")
    r.add("ev_event_qpn", _G["ev_event_qpn"], "RO", "QPN of the event at the head",
          fields=[("qpn", 0, 24, "QP"), ("valid", 31, 1, "queue not empty")])
    r.add("ev_event", _G["ev_event"], "RP", "the event at the head; reading pops it",
          fields=[("ev_index", 0, 8, "EV index in the QP's table"),
                  ("old", 8, 2, "old state (0 GOOD, 1 ASSUMED_BAD, 2 DENIED)"),
                  ("new", 10, 2, "new state"),
                  ("valid", 15, 1, "an event was popped"),
                  ("drops", 16, 16, "packets declared lost on the EV so far (saturating)")])
    r.add("ev_event_rtt", _G["ev_event_rtt"], "RO",
          "the round trip of the event at the head, if a probe answer made it; read it "
          "before `ev_event` pops the event",
          fields=[("rtt_ns", 0, RTT_NS_BITS,
                   f"ns from the probe's timestamp to its answer reaching reliability "
                   f"(saturating at {RTT_NS_MAX}); 0: the event is not a probe answer"),
                  ("valid", 31, 1, "queue not empty")])
    for i, name in enumerate(COUNTER_NAMES):
        r.add(f"cnt_{name}", COUNTER_BASE + 4 * i, "RO", f"{COUNTER_DOCS[name]} (saturating)")

    def qp(name, access, doc, fields=()):
        r.add(name, QP_BASE + 4 * QP_WORDS[name], access, doc, count=num_qps,
              stride=QP_STRIDE, fields=fields)

    qp("qp_ctrl", "RW", "QP state; a write is a command: RESET clears the QP, RTS (from "
       "another state) starts it, ERROR flushes every outstanding WQE (status FLUSHED)",
       [("state", 0, 3, "RESET 0, INIT 1, RTR 2, RTS 3, ERROR 4")])
    qp("qp_rel_cfg", "RW", "reliability parameters",
       [("t", 0, 5, "ACK timeout 1.024 us x 2^t, 0..24"),
        ("linear_cnt", 5, 3, "retries at the base timeout"),
        ("exp_cnt", 8, 5, "retries doubling the timeout, 0..24; 25 (and above) = forever"),
        ("ev_min_active", 16, 8, "GOOD EVs that loss evidence never goes below"),
        ("sack_threshold", 24, 8, "SACKed PSNs past a hole that make it lost (0 = off)")])
    qp("sq_base_lo", "RW", "send queue ring base, bits 31..0 (64-byte WQEs)")
    qp("sq_base_hi", "RW", "send queue ring base, bits 63..32; bits at and above the "
       "device's `addr_width` are not kept and read 0")
    qp("cq_base_lo", "RW", "send completion ring base, bits 31..0 (32-byte CQEs)")
    qp("cq_base_hi", "RW", "send completion ring base, bits 63..32; bits at and above the "
       "device's `addr_width` are not kept and read 0")
    qp("ring_sizes", "RW", "ring sizes",
       [("sq_log2", 0, 5, "log2 of SQ entries"), ("cq_log2", 8, 5, "log2 of CQ entries")])
    qp("peer_mac_lo", "RW", "peer MAC bits 31..0 (probe destination)")
    qp("peer_mac_hi", "RW", "peer MAC bits 47..32")
    qp("peer_ip", "RW", "peer IPv4 address")
    qp("dest_qpn", "RW", "peer QPN (probe BTH DestQP)")
    qp("una_psn", "RO", "oldest unacknowledged PSN (0 until the QP's first packet after "
       "RTS: reliability learns its PSNs from TX's first sent record)")
    qp("nxt_psn", "RO", "next PSN expected from TX (0 until the QP's first packet after RTS)")
    qp("qp_cc", "RO", "window and retries",
       [("cwnd", 0, 16, "congestion window, packets"), ("retries", 16, 5, "timeouts without "
                                                                          "progress")])
    if ipv6:
        for i in (1, 2, 3):
            r.add(f"peer_ip6_{i}", qp6_base + 4 * QP6_WORDS[f"peer_ip6_{i}"], "RW",
                  f"(ipv6 builds) peer IPv6 address bits {32 * i + 31}..{32 * i} (bits "
                  "31..0: peer_ip)", count=num_qps, stride=QP6_STRIDE)
        r.add("peer_v6", qp6_base + 4 * QP6_WORDS["peer_v6"], "RW",
              "(ipv6 builds) the peer's family: probes go over it", count=num_qps,
              stride=QP6_STRIDE, fields=[("v6", 0, 1, "1: IPv6, 0: IPv4"),
                                         ("ev_format", 1, 2, "where probes carry the EV, as "
                                          "TX's qp_ip6.ev_format")])
    if ev_width > 16:
        r.add("ev_value_hi", EV_VALUE_HI, "RW",
              "(ev_width above 16) EV bits above 15 (word i: bits 32i+47..32i+16), staged "
              "for the next ev write, which stores them with its value and clears them; reads "
              "give the staged bits",
              count=ev_hi_words(ev_width), stride=4)
    r.add("ev", ev_base, "RW", "EV i of QP q is entry q x evs_per_qp + i",
          count=num_qps * evs_per_qp, stride=4,
          fields=[("value", 0, 16, "EV bits 15..0 (the UDP format's source port)"),
                  ("state", 16, 2, "state; written only when [31] is set: 0 GOOD, 2 DENIED"),
                  ("plane", EV_PLANE_LSB, PLANE_BITS, "the plane (MAC port) its probes leave "
                   "on, as TX's ev_entry.plane; reads 0 on a one-plane NIC"),
                  ("set_state", 31, 1, "write 1 to apply [17:16]")])
    return r
