"""Constants and small helpers of the model NIC (sim/nicmodel/)."""

from __future__ import annotations

from hw.protocol import EvState, QpState
from hw.reliability.layouts import CqeStatus
from hw.rx.mr_table import MR_ACCESS_VALID, MR_ACCESS_WRITE
from sim.model.qp import (
    LOC_QP_OP_ERR,
    REM_ACCESS_ERR,
    REM_INV_REQ_ERR,
    RETRY_EXC_ERR,
    SUCCESS,
)

NIC_PARAM_NAMES = ("data_width", "num_qps", "evs_per_qp", "sack_bits", "max_mtu", "mpr_max",
                   "num_mrs", "window", "inflight_depth", "clk_freq_hz")
# NicCore parameters a model NIC takes but may go without (default 1: one plane)
NIC_OPTIONAL_PARAMS = ("num_planes", "ipv6", "ev_width")
STATE_CODES = {s.name: int(s) for s in QpState}
EV_CODES = {s.name: int(s) for s in EvState}
EV_NAMES = {v: k for k, v in EV_CODES.items()}
CQE_STATUS = {SUCCESS: CqeStatus.SUCCESS, RETRY_EXC_ERR: CqeStatus.RETRY_EXCEEDED,
              LOC_QP_OP_ERR: CqeStatus.LOC_QP_OP_ERR,
              REM_ACCESS_ERR: CqeStatus.REM_ACCESS, REM_INV_REQ_ERR: CqeStatus.REM_INV_REQ}
MR_VALID, MR_REMOTE_WRITE = MR_ACCESS_VALID, MR_ACCESS_WRITE
EV_EVENT_DEPTH = 32
NEVER = 1 << 30  # an EV loss threshold of 0 means never


class _Ram:
    def __init__(self, size: int):
        self.data = bytearray(size)

    def read(self, addr: int, n: int) -> bytes:
        if addr < 0 or addr + n > len(self.data):
            raise ValueError(f"host memory access [0x{addr:x}, +{n}) outside "
                             f"0x{len(self.data):x} bytes")
        return bytes(self.data[addr:addr + n])

    def write(self, addr: int, data: bytes) -> None:
        if addr < 0 or addr + len(data) > len(self.data):
            raise ValueError(f"host memory access [0x{addr:x}, +{len(data)}) outside "
                             f"0x{len(self.data):x} bytes")
        self.data[addr:addr + len(data)] = data


class _Payload:
    """A WQE's payload in host memory, read when a packet slices it (TX's DMA
    reads payload per packet, retransmissions included)."""

    __slots__ = ("mem", "addr", "length")

    def __init__(self, mem, addr, length):
        self.mem, self.addr, self.length = mem, addr, length

    def __len__(self):
        return self.length

    def __getitem__(self, s: slice) -> bytes:
        start, stop, _ = s.indices(self.length)
        return self.mem.read(self.addr + start, stop - start) if stop > start else b""


# ---- the fabric ---------------------------------------------------------------------------


def _phase(pi: int, log2: int) -> int:
    """Flags byte: bit 7 = phase, 1 on the ring's first pass, toggling on each pass."""
    return (1 - ((pi >> log2) & 1)) << 7
