"""Each protocol constant has one definition (hw/protocol.py), which the
gateware, the driver, the scapy layers and the golden model all use: no
literal redefinition of a constant, no PSN width written as 24, no EV state
compared by a string of its own."""

import re
from pathlib import Path

from host_driver import driver, layers
from hw import protocol
from hw.protocol import PSN_BITS, EvState, Opcode, QpState, Syndrome
from hw.reliability import layouts as rel_layouts
from hw.rx import layouts as rx_layouts
from sim.model import ev as model_ev
from sim.model import packet as model_packet
from sim.model import qp as model_qp

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("hw", "host_driver", "sim")

# A name of a protocol constant bound to a literal, or a class of one, anywhere
# but hw/protocol.py.
LITERAL = re.compile(
    r"^\s*(PSN_BITS|PSN_MASK|PSN_HALF|ROCE_UDP_PORT|IP_PROTO_UDP|AETH_ACK|NAK_[A-Z_]+|OP_[A-Z_]+"
    r"|ETHERTYPE_\w+(?:, ETHERTYPE_\w+)*|ECN_\w+(?:, ECN_\w+)*|IP_TTL|IP_FLAGS_DF|PKEY_DEFAULT"
    r"|TRIM_DSCP_DEFAULT)"
    r"\s*=\s*(0x[0-9a-fA-F]+|\d+|\(1 <<)", re.MULTILINE)
CLASS = re.compile(r"^class (QpState|EvState|Opcode|Syndrome)\b", re.MULTILINE)
# a state name bound to a string or number literal (the model names states)
STATE = re.compile(r'^\s*(RESET|INIT|RTR|RTS|ERROR|GOOD|ASSUMED_BAD|DENIED)\b[^=\n]*=\s*["\d]',
                   re.MULTILINE)


# a PSN's width as the literal 24: a signal, a layout field or port, a scapy
# field or a truncation of a PSN-named value (its width is PSN_BITS)
_PSN = r"\b(?:\w+_)?(?:e?psn|una|nxt|cum|md_recover|sack_base)(?:_\w+|\d)*"
PSN_WIDTH = re.compile(
    rf"{_PSN}\s*=\s*Signal\(24\b|[\"']{_PSN}[\"']\s*:\s*(?:(?:unsigned|In|Out)\()?24\b"
    rf"|BitField\([\"']{_PSN}[\"'],\s*\w+,\s*24\)|{_PSN}\b[^\n]*\[:24\]")
# an EV state's (or RTR's/RTS's) name as a string compared or used as a key:
# compare with ``EvState.X.name`` (the golden model's and the driver's names)
STATE_STRING = re.compile(
    r"(?:==|!=)\s*[\"'](?:ASSUMED_BAD|GOOD|DENIED|RTR|RTS)[\"']"
    r"|[\"'](?:ASSUMED_BAD|GOOD|DENIED|RTR|RTS)[\"']\s*(?:==|!=|:)")


def redefinitions(text: str) -> list[str]:
    return [m.group(0).strip()
            for m in (*LITERAL.finditer(text), *CLASS.finditer(text), *STATE.finditer(text),
                      *PSN_WIDTH.finditer(text), *STATE_STRING.finditer(text))]


def test_checker_finds_a_redefinition():
    text = "PSN_BITS = 24\nclass QpState:\nNAK_TRIMMED = 0x70\nGOOD = \"GOOD\"\n"
    assert redefinitions(text) == [
        "PSN_BITS = 24", "NAK_TRIMMED = 0x70", "class QpState", 'GOOD = "']
    assert redefinitions("ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD\n") == [
        "ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800"]
    assert redefinitions('RESET, INIT, RTR, RTS, ERROR = "RESET", "INIT"\n') == [
        'RESET, INIT, RTR, RTS, ERROR = "']
    assert redefinitions("AETH_ACK = Syndrome.ACK\nfrom hw.protocol import QpState\n") == []


def test_checker_finds_a_psn_width_or_a_state_string():
    text = ("a_cum_next = Signal(24)\n"
            '"una": 24, "md_recover": In(24),\n'
            '"psn": unsigned(24),\n'
            'BitField("sack_base", 0, 24),\n'
            "x = (h.sack.cum_psn + 1)[:24]\n"
            'if e["new"] == "ASSUMED_BAD":\n'
            'colors = {"GOOD": 1}\n')
    assert redefinitions(text) == [
        "a_cum_next = Signal(24", '"una": 24', '"md_recover": In(24', '"psn": unsigned(24',
        'BitField("sack_base", 0, 24)', "cum_psn + 1)[:24]", '== "ASSUMED_BAD"', '"GOOD":']
    # other 24-bit fields and other names are not PSNs
    assert redefinitions('{"qpn": 24, "psn": PSN_BITS, "msn": unsigned(24)}\n'
                         'probe_round = Signal(24)\nunaligned = Signal(24)\n'
                         'fp.get("REGSET", "RESET") != "RESET"\n') == []


def test_no_constant_is_defined_twice():
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "hw" / "protocol.py":
                continue
            found += [f"{path.relative_to(ROOT)}: {d}" for d in redefinitions(path.read_text())]
    assert not found, "define these in hw/protocol.py and import them:\n" + "\n".join(found)


def test_every_user_shares_the_definition():
    assert driver.QpState is QpState and driver.EvState is EvState
    assert rel_layouts.QpState is QpState and rx_layouts.QpState is QpState
    assert rel_layouts.PSN_BITS == model_packet.PSN_BITS == PSN_BITS == protocol.PSN_BITS
    assert layers.PSN_MASK == model_packet.PSN_MASK == (1 << PSN_BITS) - 1
    assert layers.OPCODES == Opcode.NAMES and layers.SYNDROMES == Syndrome.NAMES
    assert rel_layouts.NAK_TRIMMED == model_packet.NAK_TRIMMED == Syndrome.NAK_TRIMMED
    # the golden model names states as the enums do; the model NIC's register codes are theirs
    assert (model_qp.RESET, model_qp.INIT, model_qp.RTR, model_qp.RTS, model_qp.ERROR) == tuple(
        s.name for s in QpState)
    assert (model_ev.GOOD, model_ev.ASSUMED_BAD, model_ev.DENIED) == tuple(s.name for s in EvState)


def test_state_enums_are_register_codes():
    # QP_CTRL.state and the EV table hold these values (docs/registers.md)
    assert [int(s) for s in QpState] == [0, 1, 2, 3, 4]
    assert [int(s) for s in EvState] == [0, 1, 2]
    assert QpState.RTS == 3 and EvState.ASSUMED_BAD == 1


def test_ev_formats_and_the_srv6_carrier():
    """Where each EV format rides (hw/protocol.py ``EvFormat``): STEV's two
    fields; an SRv6 EV's carrier to its peer, whose uSIDs a fabric consumes
    one by one until the address is the peer's (its last uSID the peer's
    own); the widths a build holds, and what a bad one is told."""
    from hw.protocol import (
        EvFormat,
        check_ev_width,
        ev_echo,
        ev_formats,
        ev_hi_words,
        srv6_carrier,
        srv6_shift,
        srv6_sport,
        srv6_usids,
        stev_fields,
    )

    assert stev_fields(0x1234_C00B) == (0xC00B, 0x1234)
    peer = 0xFD00_0000_0002 << 80  # fd00:0:2::, its uSID 2
    ev = 0x0E03_0E10_0002_0000  # spine 3, another node, the peer
    assert srv6_usids(ev) == [0x0E03, 0x0E10, 0x0002]
    address = srv6_carrier(peer, ev)
    assert address == 0xFD00_0000_0E03_0E10_0002_0000 << 32
    address = srv6_shift(srv6_shift(address))
    assert address == peer
    assert ev_echo(ev) == 0x0E03 ^ 0x0E10 ^ 0x0002 and ev_echo(0xC00B) == 0xC00B
    assert srv6_sport(ev) == 0xC000 | (0x0E03 ^ 0x0E10 ^ 0x0002) & 0x3FFF
    assert ev_formats(16) == (EvFormat.UDP,) and ev_formats(64) == tuple(EvFormat)
    assert [ev_hi_words(w) for w in (16, 32, 64)] == [0, 1, 2]
    for width, ipv6, fix in ((24, True, "one of"), (32, False, "ipv6=True")):
        try:
            check_ev_width(width, ipv6)
        except ValueError as e:
            assert fix in str(e)
        else:
            raise AssertionError(f"ev_width {width} (ipv6 {ipv6}) was taken")
