"""Receive completion entries (CQEs) for the host's completion rings."""

from amaranth.hdl import Cat, Const, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .dma import CQE_BYTES, WriteCmd
from .layouts import CqeJob

__all__ = ["RxCqeFormatter", "cqe_bytes"]


def cqe_bytes(job):
    """The 32 CQE bytes (byte 0 in bits 7..0) of a ``CqeJob`` view.

    Little-endian, docs/rx.md: 0x00 u64 wr_id (the message's MSN), 0x08 u32
    byte_len, 0x0C u32 imm, 0x10 u32 qpn, 0x14 u8 status, 0x15 u8 opcode,
    0x16 u8 reserved, 0x17 u8 flags (bit 7 = phase), 0x18..0x1F reserved.
    """
    return Cat(
        job.msn,
        Const(0, 40),
        job.byte_len,
        job.imm,
        job.qpn,
        Const(0, 8),
        job.status,
        job.opcode,
        Const(0, 8),
        Const(0, 7),
        job.phase,
        Const(0, 64),
    )


class RxCqeFormatter(wiring.Component):
    """Turns completion records into inline 32-byte writes for ``RxDmaWriter``.

    Interface: ``cqe`` In(stream.Signature(CqeJob(addr_width))), ``cmd``
    Out(stream.Signature(WriteCmd(tag_width, addr_width))). Combinational:
    latency 0, one CQE per cycle.
    """

    def __init__(self, tag_width, addr_width=64):
        self.tag_width = tag_width
        super().__init__(
            {
                "cqe": In(stream.Signature(CqeJob(addr_width))),
                "cmd": Out(stream.Signature(WriteCmd(tag_width, addr_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        c = self.cmd.payload
        m.d.comb += [
            self.cmd.valid.eq(self.cqe.valid),
            self.cqe.ready.eq(self.cmd.ready),
            c.addr.eq(self.cqe.payload.addr),
            c.len.eq(CQE_BYTES),
            c.inline.eq(1),
            c.inline_data.eq(cqe_bytes(self.cqe.payload)),
        ]
        return m
