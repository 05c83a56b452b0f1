"""The ``ParsedHeader`` record (hw/rx/layouts.py) that RX hands reliability for a
peer frame (ACK, NAK, probe response), built from scapy's dissection of the
frame: what the reliability benches feed ``peer_ack``."""

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver import layers as L

__all__ = ["parsed_header"]


def parsed_header(frame: bytes) -> dict:
    """The ParsedHeader record of an ACK/NAK/probe frame, from scapy's dissection."""
    pkt = Ether(frame)
    ip, udp, bth = pkt[IP], pkt[UDP], pkt[L.BTH]
    rec = {
        "eth_src": int(pkt.src.replace(":", ""), 16),
        "eth_dst": int(pkt.dst.replace(":", ""), 16),
        "ip_src": int.from_bytes(bytes(map(int, ip.src.split("."))), "big"),
        "ip_dst": int.from_bytes(bytes(map(int, ip.dst.split("."))), "big"),
        "dscp": ip.tos >> 2, "ecn": ip.tos & 3, "ev": udp.sport,
        "bth": {f: getattr(bth, f) for f in ("opcode", "se", "migreq", "padcount", "tver",
                                                "pkey", "fecn", "becn", "resv6", "dqpn",
                                                "ackreq", "resv7", "psn")},
    }
    if L.AETH in pkt:
        aeth, sack = pkt[L.AETH], pkt[L.MRCSack]
        rec["aeth"] = {"syndrome": aeth.syndrome, "msn": aeth.msn}
        rec["sack"] = {f: getattr(sack, f) for f in ("svc_hi", "cum_psn", "svc_lo", "sack_base",
                                                      "ece", "resv_c", "sack_words", "ce_count")}
        rec["sack_bitmap"] = sack.bitmap
    if L.MRCProbe in pkt:
        pr = pkt[L.MRCProbe]
        rec["probe"] = {"probe_id": pr.probe_id, "ev": pr.ev, "resv": pr.resv,
                        "timestamp": pr.timestamp}
    return rec
