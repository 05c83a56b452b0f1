"""The Wireshark dissector for MRC's wire format (docs/protocol.md), a Lua plugin.

The plugin is ``host_driver/wireshark/mrc.lua``. Its constants (opcodes,
syndromes, the opcode classes, the RoCEv2 port, the PSN width, the EV formats
and their widths, the SRv6 carrier's widths) come from the
wire format's one definition, hw/protocol.py: ``python -m
host_driver.dissector`` rewrites the block between the plugin's ``BEGIN
GENERATED`` and ``END GENERATED`` lines, and a unit test checks that the
block in the tree is what ``constants()`` gives and runs tshark with the
plugin (tests/unit/test_wireshark_dissector.py).

The plugin takes UDP port 4791 from Wireshark's InfiniBand dissector, which
knows IBTA's RoCEv2 but shows MRC's extensions as trailing bytes or unknown
opcodes. It decodes:

- the EV, in the format the frame shows (a frame does not say its QP's
  format, so the plugin reads it by a rule, docs/protocol.md "EV formats"):
  IPv4, UDP format (the source port); IPv6 with a nonzero flow label, STEV
  (the flow label's low 16 bits above the source port); IPv6 to an address in
  one of the SRv6 locators of the preference ``mrc.srv6_locators``, SRV6 (the
  locator and the uSIDs still in the address); any other IPv6, UDP format;
- the BTH, every field;
- the RETH on every WRITE packet (MRC puts it on MIDDLE and LAST too), the
  ImmDt of the WITH_IMMEDIATE opcodes;
- the AETH with MRC's NAK TRIMMED syndrome, and the MRC SACK extension (the
  cumulative PSN, the SACK base, the ECN echo, the CE count, the bitmap and
  the PSNs it reports received);
- PROBE and PROBE_RESPONSE (the probe ID as round and EV index, the echoed
  EV, the timestamp);
- a trimmed data packet (headers only, no payload and no ICRC), the payload,
  the pad and the ICRC.

A frame too short for its headers, or with an opcode MRC does not send, gets
an expert error (``mrc.malformed``, ``mrc.unknown_opcode``), so that a
display filter ``_ws.expert.severity == error`` finds every frame the plugin
could not decode.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hw.protocol import (
    EV_FORMAT_BITS,
    PSN_BITS,
    ROCE_UDP_PORT,
    SRV6_LOCATOR_BITS,
    SRV6_USID_BITS,
    SRV6_USIDS,
    EvFormat,
    Opcode,
    Syndrome,
)

__all__ = ["LUA_PATH", "constants", "generated_block", "update"]

LUA_PATH = Path(__file__).resolve().parent / "wireshark" / "mrc.lua"
BEGIN, END = "-- BEGIN GENERATED\n", "-- END GENERATED\n"


def _names(names: dict[int, str]) -> str:
    return "{ " + ", ".join(f'[0x{k:02X}] = "{v}"' for k, v in sorted(names.items())) + " }"


def _set(codes) -> str:
    return "{ " + ", ".join(f"[0x{c:02X}] = true" for c in codes) + " }"


def _quoted(name: str) -> str:
    return f'"{name}"'


def _table(values: dict[int, object]) -> str:
    return "{ " + ", ".join(f"[{k}] = {v}" for k, v in sorted(values.items())) + " }"


def constants() -> str:
    """The plugin's generated block: Lua locals from hw/protocol.py."""
    return "".join(f"{line}\n" for line in (
        f"local OPCODES = {_names(Opcode.NAMES)}",
        f"local SYNDROMES = {_names(Syndrome.NAMES)}",
        f"local WRITES = {_set(Opcode.WRITES)}",
        f"local WITH_IMM = {_set(Opcode.WITH_IMM)}",
        f"local PROBES = {_set(Opcode.PROBES)}",
        f"local ACKNOWLEDGE = 0x{Opcode.ACKNOWLEDGE:02X}",
        f"local PSN_MASK = 0x{(1 << PSN_BITS) - 1:X}",
        f"local ROCE_UDP_PORT = {ROCE_UDP_PORT}",
        f"local EV_FORMATS = {_table({int(v): _quoted(v.name.lower()) for v in EvFormat})}",
        *(f"local EV_{v.name} = {int(v)}" for v in EvFormat),
        f"local EV_BITS = {_table({int(k): v for k, v in EV_FORMAT_BITS.items()})}",
        f"local SRV6_USIDS = {SRV6_USIDS}",
        f"local SRV6_USID_BITS = {SRV6_USID_BITS}",
        f"local SRV6_LOCATOR_BITS = {SRV6_LOCATOR_BITS}",
    ))


def generated_block(text: str) -> str:
    """The lines between the markers of the plugin's ``text``."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)]


def update(path: Path = LUA_PATH) -> bool:
    """Rewrite the generated block of the plugin at ``path``; True if it changed."""
    text = path.read_text()
    old = generated_block(text)
    new = constants()
    if old == new:
        return False
    start = text.index(BEGIN) + len(BEGIN)
    path.write_text(text[:start] + new + text[start + len(old):])
    return True


def main(argv=None) -> int:
    changed = update()
    print(f"{'updated' if changed else 'unchanged'}: {LUA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
