"""The TX register block, described once (hw.csr.RegisterMap) for the decode
logic, the host driver and docs/tx.md."""

from ..csr import RegisterMap
from ..protocol import PLANE_BITS, EvFormat, ev_hi_words

__all__ = ["TX_TYPE_ID", "TX_VERSION", "QP_BASE", "QP_STRIDE", "tx_register_map", "G", "Q",
           "CTRL_ENABLE_BIT", "CTRL_RESET_BIT", "CTRL_FLUSH_BIT", "PEER_ADDRESS_REGS"]

# A QP's peer address in this block's registers, as the driver writes it and the
# model NIC reads it: (bits 31..0, bits 32i+31..32i for i = 1..3 as a format,
# the family), the last two in ipv6 builds only.
PEER_ADDRESS_REGS = ("qp_dst_ip", "qp_dst_ip6_{}", "qp_ip6")

TX_TYPE_ID = 0x0002
TX_VERSION = 1
QP_BASE = 0x1000
QP_STRIDE = 0x80


class G:
    """Offsets of the global registers."""

    ID = 0x000
    NEXT = 0x004
    NUM_QPS = 0x008
    EVS_PER_QP = 0x00C
    CAPS = 0x010
    STATUS = 0x014
    SRC_MAC_LO = 0x020
    SRC_MAC_HI = 0x024
    SRC_IP = 0x028
    EV_SELECT = 0x030
    EV_ENTRY = 0x034
    EV_VALUE_HI = 0x038  # with ev_width above 16: ev_hi_words words
    RETX_IGNORED = 0x040
    RETX_NO_EV = 0x044
    SRC_IP6 = 0x050  # with ipv6: 4 words, the lowest address bits first


# qp_ctrl's fields (bit positions)
EV_PLANE_LSB = 20  # ev_entry: the plane field's lowest bit
CTRL_ENABLE_BIT = 0
CTRL_RESET_BIT = 1
CTRL_FLUSH_BIT = 2


class Q:
    """Offsets of the per-QP registers inside a QP's window."""

    CTRL = 0x00
    MTU = 0x04
    MPR = 0x08
    CWND = 0x0C
    NEXT_PSN = 0x10
    UNA_PSN = 0x14
    DEST_QPN = 0x18
    DST_MAC_LO = 0x1C
    DST_MAC_HI = 0x20
    DST_IP = 0x24
    DSCP = 0x28
    SQ_BASE_LO = 0x2C
    SQ_BASE_HI = 0x30
    SQ_LOG2_SIZE = 0x34
    DOORBELL = 0x38
    CONSUMER = 0x3C
    TX_PACKETS = 0x40
    RETX_PACKETS = 0x44
    STATUS = 0x48
    MAX_WIMM = 0x4C
    WIMM_OUTSTANDING = 0x50
    DST_IP6_1 = 0x54  # with ipv6: the peer's IPv6 address above DST_IP's bits 31..0
    DST_IP6_2 = 0x58
    DST_IP6_3 = 0x5C
    IP6 = 0x60


def tx_register_map(num_qps: int = 16, evs_per_qp: int = 16, ipv6: bool = False,
                    ev_width: int = 16) -> RegisterMap:
    rm = RegisterMap(
        "tx",
        TX_TYPE_ID,
        TX_VERSION,
        "TX engine: send queues, segmentation, PSNs, EV spraying, retransmits. "
        f"Global registers, then one window of 0x{QP_STRIDE:x} bytes per QP from "
        f"0x{QP_BASE:04x}. Unlisted offsets read 0 and ignore writes.",
    )
    rm.add(
        "id",
        G.ID,
        "RO",
        "block header",
        fields=[
            ("version", 0, 16, "register map version"),
            ("type", 16, 16, f"block type 0x{TX_TYPE_ID:04x} (tx)"),
        ],
    )
    rm.add("next", G.NEXT, "RO", "offset of the next register block (0: none)")
    rm.add("num_qps", G.NUM_QPS, "RO", "number of QPs (send queues)")
    rm.add("evs_per_qp", G.EVS_PER_QP, "RO", "EV table entries per QP")
    rm.add(
        "caps",
        G.CAPS,
        "RO",
        "build parameters",
        fields=[
            ("data_bytes", 0, 8, "datapath width in bytes"),
            ("max_mtu_log2", 8, 4, "log2 of the largest MTU"),
            ("inflight_log2", 12, 4, "log2 of the in-flight table entries per QP"),
            ("ipv6", 16, 1, "1: built with IPv6 (src_ip6, qp_dst_ip6_*, qp_ip6)"),
            ("stev", 17, 1, "1: EV entries hold STEV's 32 bits (ev_value_hi)"),
            ("srv6", 18, 1, "1: EV entries hold SRv6's 64 bits (ev_value_hi)"),
        ],
    )
    rm.add(
        "status",
        G.STATUS,
        "RO",
        "engine state",
        fields=[
            (
                "ready",
                0,
                1,
                "1 once the per-QP and EV tables are back to their defaults after "
                "reset (num_qps x evs_per_qp cycles); per-QP and EV writes before it are lost",
            )
        ],
    )
    rm.add("src_mac_lo", G.SRC_MAC_LO, "RW", "own MAC address, bits 31..0")
    rm.add("src_mac_hi", G.SRC_MAC_HI, "RW", "own MAC address, bits 47..32")
    rm.add("src_ip", G.SRC_IP, "RW", "own IPv4 address")
    if ipv6:
        rm.add("src_ip6", G.SRC_IP6, "RW", "(ipv6 builds) own IPv6 address, word i its bits "
               "32i+31..32i (word 3 the first four bytes on the wire)", count=4, stride=4)
    rm.add(
        "ev_select",
        G.EV_SELECT,
        "RW",
        "EV table entry that ev_entry reads and writes",
        fields=[("ev_index", 0, 8, "entry within the QP's table"), ("qpn", 8, 16, "QP")],
    )
    rm.add(
        "ev_entry",
        G.EV_ENTRY,
        "RW",
        "the selected EV entry; a write sets value and state (GOOD bitmap 3 cycles later)",
        fields=[
            ("value", 0, 16, "EV bits 15..0 (the UDP format's: the UDP source port)"),
            ("state", 16, 2, "0 GOOD, 1 ASSUMED_BAD, 2 DENIED"),
            ("plane", EV_PLANE_LSB, PLANE_BITS,
             "the plane (MAC port) the EV's packets leave on, 0..num_planes-1; reads 0 "
             "on a one-plane NIC; frames of an EV on a plane the NIC lacks are dropped "
             "and counted (plane_drops)"),
        ],
    )
    if ev_width > 16:
        rm.add("ev_value_hi", G.EV_VALUE_HI, "RW",
               "(ev_width above 16) EV bits above 15 (word i: bits 32i+47..32i+16): a write "
               "stages them for the "
               "next ev_entry write, which stores them with its value and clears them; a read "
               "gives the ev_select entry's", count=ev_hi_words(ev_width), stride=4)
    rm.add(
        "retx_ignored",
        G.RETX_IGNORED,
        "RO",
        "retransmit requests dropped: QP out of range or disabled, PSN not in flight",
    )
    rm.add(
        "retx_no_ev",
        G.RETX_NO_EV,
        "RO",
        "retransmit requests dropped because the QP had no GOOD EV",
    )

    def qp(name, off, access, doc, fields=()):
        rm.add(name, QP_BASE + off, access, doc, count=num_qps, stride=QP_STRIDE, fields=fields)

    qp("qp_ctrl", Q.CTRL, "RW", "QP control; any write also lets a QP stopped by an "
       "unknown WQE opcode take work again",
       fields=[("enable", CTRL_ENABLE_BIT, 1, "send from this QP"),
               ("reset", CTRL_RESET_BIT, 1, "write 1 (with enable 0: the QP's RESET): the "
                "ring is empty from the doorbell on (consumer = producer), a part-sent WQE "
                "is dropped, qp_wimm_outstanding is 0; reads 0"),
               ("flush", CTRL_FLUSH_BIT, 1, "write 1 (with enable 0: the QP entered ERROR, "
                "its WQEs are flushed): qp_wimm_outstanding is 0; reads 0")])
    qp(
        "qp_mtu",
        Q.MTU,
        "RW",
        "MTU in bytes: 256, 512, 1024, 2048 or 4096 up to the build's maximum; other values "
        "are ignored. Change only with nothing in flight (retransmits recompute offsets with it)",
    )
    qp("qp_mpr", Q.MPR, "RW", "MPR window in units of 128 PSNs (8 bits)")
    qp(
        "qp_cwnd",
        Q.CWND,
        "RW",
        "congestion window in packets (constant until reliability drives it)",
    )
    qp(
        "qp_next_psn",
        Q.NEXT_PSN,
        "RW",
        "PSN of the next new packet (24 bits); a write also sets una_psn (nothing in flight). "
        "Write only while the QP is disabled",
    )
    qp("qp_una_psn", Q.UNA_PSN, "RO", "oldest unacknowledged PSN (from ack_update)")
    qp("qp_dest_qpn", Q.DEST_QPN, "RW", "responder QPN, BTH DestQP (24 bits)")
    qp("qp_dst_mac_lo", Q.DST_MAC_LO, "RW", "peer (next hop) MAC, bits 31..0")
    qp("qp_dst_mac_hi", Q.DST_MAC_HI, "RW", "peer (next hop) MAC, bits 47..32")
    qp("qp_dst_ip", Q.DST_IP, "RW", "peer IPv4 address; with qp_ip6, the peer's IPv6 "
       "address's bits 31..0" if ipv6 else "peer IPv4 address")
    if ipv6:
        for i, off in enumerate((Q.DST_IP6_1, Q.DST_IP6_2, Q.DST_IP6_3), start=1):
            qp(f"qp_dst_ip6_{i}", off, "RW",
               f"(ipv6 builds) the peer's IPv6 address, bits {32 * i + 31}..{32 * i}")
        qp("qp_ip6", Q.IP6, "RW", "(ipv6 builds) the peer's address family",
           fields=[("v6", 0, 1, "1: frames go over IPv6 to qp_dst_ip6_3..1 and qp_dst_ip"),
                   ("ev_format", 1, 2, "where the EVs ride (with v6; caps.stev, caps.srv6): "
                    + ", ".join(f"{f.value} {f.name}" for f in EvFormat)
                    + "; a format the build lacks sends as UDP")])
    qp("qp_dscp", Q.DSCP, "RW", "IPv4 DSCP (6 bits); ECN is always ECT(0)")
    qp(
        "qp_sq_base_lo",
        Q.SQ_BASE_LO,
        "RW",
        "send-queue ring base in host memory, bits 31..0 (64-byte aligned)",
    )
    qp(
        "qp_sq_base_hi",
        Q.SQ_BASE_HI,
        "RW",
        "send-queue ring base, bits 63..32; bits at and above the device's `addr_width` are "
        "not kept and read 0",
    )
    qp("qp_sq_log2_size", Q.SQ_LOG2_SIZE, "RW", "log2 of the ring's entries (0..15)")
    qp(
        "qp_doorbell",
        Q.DOORBELL,
        "RW",
        "producer index (16-bit free-running); a write rings the doorbell",
    )
    qp("qp_consumer", Q.CONSUMER, "RO",
       "consumer index: WQEs taken for sending (16-bit free-running; the next may already "
       "be read ahead)")
    qp("qp_tx_packets", Q.TX_PACKETS, "RO", "data packets sent, retransmits included")
    qp("qp_retx_packets", Q.RETX_PACKETS, "RO", "retransmitted packets")
    qp(
        "qp_status",
        Q.STATUS,
        "RO",
        "scheduler state",
        fields=[
            ("wqe_active", 0, 1, "a WQE is part sent"),
            ("window_blocked", 1, 1, "waiting for the window (ack_update, cwnd or MPR write)"),
            ("ev_blocked", 2, 1, "waiting for a GOOD EV"),
            ("wimm_blocked", 3, 1, "waiting for a WRITE_WITH_IMM to complete: the next "
             "WQE is one and qp_max_wimm of them are outstanding"),
            ("inflight", 8, 24, "PSNs in flight: next_psn - una_psn"),
        ],
    )
    qp(
        "qp_max_wimm",
        Q.MAX_WIMM,
        "RW",
        "max_wimm: WRITE_WITH_IMM messages the QP may have started and not completed "
        "(16 bits); a WQE that would start one more waits, and the QP's WQEs behind it. "
        "0 (reset): no bound; above the in-flight table's entries (caps.inflight_log2) "
        "it acts as that many",
    )
    qp(
        "qp_wimm_outstanding",
        Q.WIMM_OUTSTANDING,
        "RO",
        "WRITE_WITH_IMM messages started (first packet sent) and not yet completed "
        "SUCCESS by reliability",
    )
    return rm
