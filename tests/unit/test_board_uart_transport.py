"""host_driver.uart_transport against a Python model of the UART bridge.

``BridgeModel`` is a byte-level reference of hw/board/uart.py's framing as
docs/board.md specifies it (the cocotb test checks the gateware against the
same transport); here it stands in for the serial port, so the transport's
encoding, decoding and error handling are checked without a simulator.
"""


import pytest

from host_driver.uart_transport import (
    CMD_READ,
    CMD_WRITE,
    RESPONSE_BYTES,
    UARTBridgeError,
    UARTLinkError,
    UARTTransport,
    decode_response,
    encode_read,
    encode_write,
)
from hw.board import uart as gateware
from tests.models.uart_bridge import BridgeModel


def test_wire_format():
    assert encode_read(0x00001234) == bytes([0x52, 0, 0, 0x12, 0x34, (-(0x52 + 0x46)) & 0xFF])
    frame = encode_write(0x40000010, 0xDEADBEEF)
    assert frame[:9] == b"W" + bytes.fromhex("40000010deadbeef")
    assert len(frame) == 10 and sum(frame) & 0xFF == 0
    assert decode_response(bytes([0, 1, 2, 3, 4, (-10) & 0xFF])) == (0, 0x01020304)


def test_constants_match_gateware():
    assert (CMD_READ, CMD_WRITE) == (gateware.CMD_READ, gateware.CMD_WRITE)
    assert RESPONSE_BYTES == gateware.RESPONSE_BYTES


def test_read_write_round_trip():
    port = BridgeModel()
    host = UARTTransport(port)
    for i in range(32):
        host.write32(0x1000 + 4 * i, (i * 0x9E3779B9) & 0xFFFFFFFF)
    for i in range(32):
        assert host.read32(0x1000 + 4 * i) == (i * 0x9E3779B9) & 0xFFFFFFFF
    assert not port.out and not port.pending


def test_bridge_errors_raise():
    port = BridgeModel()
    port.slverr.add(0x20)
    host = UARTTransport(port)
    with pytest.raises(UARTBridgeError) as err:
        host.read32(0x20)
    assert err.value.status == 2 and "SLVERR" in str(err.value)
    with pytest.raises(UARTBridgeError) as err:
        host.write32(0x20, 5)
    assert err.value.status == 2
    # A request corrupted on the way: the bridge says so.
    port.write(bytes([CMD_READ, 0, 0, 0, 0, 0x13]))
    assert decode_response(port.read(6))[0] == gateware.STATUS_BAD_CHECKSUM
    host.write32(0x24, 7)
    assert host.read32(0x24) == 7


def test_link_errors_raise_and_resync():
    port = BridgeModel()
    host = UARTTransport(port, quiet_time=0)
    host.write32(0x8, 0x55)
    port.corrupt_next = True
    with pytest.raises(UARTLinkError, match="checksum"):
        host.read32(0x8)
    port.truncate_next = True
    with pytest.raises(UARTLinkError, match="3 bytes"):
        host.read32(0x8)
    port.out += b"\x99\x98"  # stale bytes on the line
    host.resync()
    assert host.read32(0x8) == 0x55
