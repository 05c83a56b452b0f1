"""Constants, counters and beat layouts shared by the blocks of the Ethernet MAC
(hw/board/mac.py).
"""

from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

ETH_PREAMBLE = 0x55
ETH_SFD = 0xD5
IFG_BYTES = 12
MIN_FRAME = 64  # with FCS
FCS_BYTES = 4

# (name, description) of each 32-bit counter in ``stats``; they wrap.
STATS = (
    ("rx_frames", "good frames delivered on rx_axis"),
    ("rx_bad_fcs", "frames with a bad FCS"),
    ("rx_runt", "frames shorter than 64 bytes with FCS"),
    ("rx_oversize", "frames longer than max_frame bytes with FCS"),
    ("rx_odd_nibble", "100 Mb/s frames that ended on half a byte"),
    ("rx_error", "frames with RX_ER asserted by the PHY"),
    ("rx_overflow", "frames dropped for lack of buffer space"),
    ("tx_frames", "frames accepted whole for transmission"),
    ("tx_dropped", "frames dropped on TX: tuser set, or longer than the TX buffer"),
)


class MACStatsSignature(wiring.Signature):
    def __init__(self):
        super().__init__({name: Out(32) for name, _ in STATS})


class RxStatus(data.StructLayout):
    """Why a received frame is bad; valid with its last byte or beat."""

    def __init__(self):
        super().__init__(
            {
                "fcs_bad": 1,
                "runt": 1,
                "oversize": 1,
                "odd_nibble": 1,
                "rx_error": 1,
                "overflow": 1,  # a beat was lost crossing to the core clock
                "empty": 1,  # no byte left once the FCS is removed
            }
        )


class RxByte(data.StructLayout):
    def __init__(self):
        super().__init__({"data": 8, "last": 1, "status": RxStatus()})


class RxWord(data.StructLayout):
    """A beat crossing from eth_rx to the core clock."""

    def __init__(self, data_width):
        super().__init__(
            {
                "data": data_width,
                "keep": data_width // 8,
                "last": 1,
                "status": RxStatus(),
            }
        )


class TxWord(data.StructLayout):
    """A beat crossing from the core clock to eth_tx."""

    def __init__(self, data_width):
        super().__init__({"data": data_width, "keep": data_width // 8, "last": 1})


class BufferedBeat(data.StructLayout):
    """A beat into a PacketFIFO; ``drop`` is read on the last beat only."""

    def __init__(self, data_width):
        super().__init__(
            {
                "data": data_width,
                "keep": data_width // 8,
                "last": 1,
                "user": 1,
                "drop": 1,
            }
        )
