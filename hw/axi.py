"""AXI4 and AXI4-Lite port signatures, named as cocotbext-axi expects.

A port ``m_axi: Out(AXI4Signature(...))`` exports ``m_axi__awaddr`` and so on;
in cocotb bind it with ``AxiBus.from_prefix(dut, "m_axi", bus_separator="__")``
(``AxiLiteBus`` for AXI4-Lite). The signatures are drawn from the master's
side: ``Out`` members are driven by the master.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "AXI4Signature",
    "AXI4LiteSignature",
    "AXI_RESP_DECERR",
    "AXI_RESP_OKAY",
    "AXI_RESP_SLVERR",
    "AXI_BURST_INCR",
    "check_dma_addr_width",
]

AXI_RESP_OKAY = 0b00
AXI_RESP_SLVERR = 0b10
AXI_RESP_DECERR = 0b11
AXI_BURST_INCR = 0b01


def check_dma_addr_width(addr_width) -> None:
    """Raise a ValueError unless ``addr_width``, the bits of a host DMA address
    the NIC keeps and issues (NicCore's ``addr_width``), is an integer in 32..64."""
    if not isinstance(addr_width, int) or not 32 <= addr_width <= 64:
        raise ValueError(f"addr_width (bits of a host DMA address) must be an integer in "
                         f"32..64, not {addr_width!r}")


class AXI4Signature(wiring.Signature):
    """Full AXI4 (bursts of up to 256 beats), master side."""

    def __init__(self, addr_width: int = 64, data_width: int = 64, id_width: int = 4):
        if data_width not in (32, 64, 128, 256, 512, 1024):
            raise ValueError(
                f"AXI4 data_width must be a power of two in 32..1024, not {data_width}"
            )
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__(
            {
                "awid": Out(id_width),
                "awaddr": Out(addr_width),
                "awlen": Out(8),
                "awsize": Out(3),
                "awburst": Out(2),
                "awlock": Out(1),
                "awcache": Out(4),
                "awprot": Out(3),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(data_width),
                "wstrb": Out(data_width // 8),
                "wlast": Out(1),
                "wvalid": Out(1),
                "wready": In(1),
                "bid": In(id_width),
                "bresp": In(2),
                "bvalid": In(1),
                "bready": Out(1),
                "arid": Out(id_width),
                "araddr": Out(addr_width),
                "arlen": Out(8),
                "arsize": Out(3),
                "arburst": Out(2),
                "arlock": Out(1),
                "arcache": Out(4),
                "arprot": Out(3),
                "arvalid": Out(1),
                "arready": In(1),
                "rid": In(id_width),
                "rdata": In(data_width),
                "rresp": In(2),
                "rlast": In(1),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )

    def __eq__(self, other):
        return isinstance(other, AXI4Signature) and (
            self.addr_width,
            self.data_width,
            self.id_width,
        ) == (other.addr_width, other.data_width, other.id_width)

    def __repr__(self):
        return f"AXI4Signature({self.addr_width}, {self.data_width}, {self.id_width})"


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, master side."""

    def __init__(self, addr_width: int = 16, data_width: int = 32):
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__(
            {
                "awaddr": Out(addr_width),
                "awprot": Out(3),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(data_width),
                "wstrb": Out(data_width // 8),
                "wvalid": Out(1),
                "wready": In(1),
                "bresp": In(2),
                "bvalid": In(1),
                "bready": Out(1),
                "araddr": Out(addr_width),
                "arprot": Out(3),
                "arvalid": Out(1),
                "arready": In(1),
                "rdata": In(data_width),
                "rresp": In(2),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )

    def __eq__(self, other):
        return isinstance(other, AXI4LiteSignature) and (self.addr_width, self.data_width) == (
            other.addr_width,
            other.data_width,
        )

    def __repr__(self):
        return f"AXI4LiteSignature({self.addr_width}, {self.data_width})"
