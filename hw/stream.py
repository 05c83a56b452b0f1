"""Stream interfaces shared by the gateware.

``AXIStreamSignature``
    The AXI4-Stream port used at the NicCore boundary (MAC TX/RX), with the
    members cocotbext-axi binds to: ``tdata``, ``tkeep``, ``tlast``,
    ``tuser``, ``tvalid`` and ``tready``. A port ``s_axis: In(...)`` exports
    ``s_axis__tdata`` and so on, bound in cocotb with
    ``AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__")``.
    Byte lane 0 (``tdata[7:0]``) carries the first byte on the wire; ``tkeep``
    is contiguous from lane 0 (a packed stream): only a frame's last beat may
    have bytes missing, and only at the top.

``Beat``
    The payload of an internal ``amaranth.lib.stream`` of data: ``data``,
    ``keep`` and ``last``, with the same lane order.
"""

from amaranth.hdl import unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXIStreamSignature", "Beat", "check_data_width"]


def check_data_width(data_width: int, *, minimum: int = 64, maximum: int = 512) -> None:
    """Raise a ValueError that says what to fix for an unsupported data width."""
    if not isinstance(data_width, int) or data_width & (data_width - 1):
        raise ValueError(f"data_width must be a power of two, not {data_width!r}")
    if not minimum <= data_width <= maximum:
        raise ValueError(f"data_width must be in {minimum}..{maximum} bits, not {data_width}")


class AXIStreamSignature(wiring.Signature):
    """AXI4-Stream, source side (use ``In(...)`` for a sink port)."""

    def __init__(self, data_width: int = 64, user_width: int = 1):
        if data_width % 8:
            raise ValueError(f"AXI-Stream data_width must be whole bytes, not {data_width}")
        self.data_width = data_width
        self.user_width = user_width
        super().__init__(
            {
                "tdata": Out(data_width),
                "tkeep": Out(data_width // 8),
                "tlast": Out(1),
                "tuser": Out(user_width),
                "tvalid": Out(1),
                "tready": In(1),
            }
        )

    def __eq__(self, other):
        return (
            isinstance(other, AXIStreamSignature)
            and self.data_width == other.data_width
            and self.user_width == other.user_width
        )

    def __repr__(self):
        return f"AXIStreamSignature({self.data_width}, user_width={self.user_width})"


class Beat(data.StructLayout):
    """One beat of an internal byte stream."""

    def __init__(self, data_width: int = 64):
        super().__init__(
            {
                "data": unsigned(data_width),
                "keep": unsigned(data_width // 8),
                "last": unsigned(1),
            }
        )
