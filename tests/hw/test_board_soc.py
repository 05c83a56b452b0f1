"""Board-level simulation of hw.board.soc.BoardSoC under Verilator.

Everything goes through the board's pins, as on the Versa board: the host
driver (host_driver/driver.py) runs over ``BoardTransport`` on
``AsyncUARTTransport`` on a bit-level UART model (tests/hw/test_board_uart.py)
at a fast simulation baud rate, and the peer is cocotbext-eth's ``RgmiiPhy``
at 1 Gb/s on the RGMII pins. Host memory is the SoC's BRAM, reached by the
driver only through the UART bridge.

``test_board_write_ack_completion``
    discovery of the NIC's and the board's register blocks; a QP brought to
    RTS; one WRITE posted. The frame that leaves on RGMII has a good FCS
    (the PHY model's check) and is parsed with scapy: Ethernet/IPv4/UDP
    addresses, EV in the QP's set, BTH opcode/PSN/QPN, RETH address, rkey
    and length, the payload, the ICRC and the IPv4 checksum. An ACK
    (host_driver.layers.ack_packet) is injected on RGMII RX and the send
    completion is found by the driver's CQ polling over the UART. MAC
    counters and LEDs (TX, RX, UART activity, heartbeat) agree.
``test_board_inbound_writes``
    WRITEs from the peer on RGMII RX: one in its region lands in the BRAM
    byte exact (nothing around it touched) and is ACKed; one that runs past
    its region is dropped, NAKed (0x62) and counted (``CNT_BAD_BOUNDS``);
    one into a region the host registered outside the BRAM window is not
    performed by the BRAM (``DMA_DECERR``, LED 6). A QP moved to ERROR and
    back to RESET lights and clears the QP-error LED.

Each test brings the board up from reset over the UART (about 1.5 ms
simulated, 10 s wall). ``test_board_soc`` is marked long (build and
elaboration dominate); run it with ``pytest -m long tests/hw/test_board_soc.py``.
"""

from __future__ import annotations

import logging
import time

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer, with_timeout
from cocotbext.eth import GmiiFrame, RgmiiPhy
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver.board_transport import BoardTransport
from host_driver.driver import Completion, Device, EvProfile, QpState, WrOpcode
from host_driver.layers import (
    AETH,
    AETH_ACK,
    BTH,
    NAK_REMOTE_ACCESS,
    OP_ACKNOWLEDGE,
    OP_WRITE_ONLY,
    RETH,
    ROCE_UDP_PORT,
    MRCSack,
    ack_packet,
    check_frame,
    write_packet,
    write_payload,
)
from host_driver.uart_transport import AsyncUARTTransport
from hw.board.soc import LEDS, MAC_BASE, BoardSoC
from tests import seeds
from tests.models.uart import UartModel

CLK_NS = 8  # core clock 125 MHz, as on the board
ETH_NS = 8  # 1 Gb/s RGMII
UART_DIVISOR = 4  # 1 bit = 32 ns: about 6.4 us per register write (the bridge's minimum)
# NicCore's timer unit is 16 cycles (as in the system tests), the heartbeat
# toggles every 4096 cycles: both in reach of a short simulation.
SOC_PARAMS = dict(clk_freq_hz=15_625_000, uart_divisor=UART_DIVISOR, heartbeat_log2=12)

OWN_MAC, OWN_IP = "02:00:00:00:00:0a", "10.0.0.10"
PEER_MAC, PEER_IP = "02:00:00:00:00:0b", "10.0.0.11"
PEER_QPN = 3
EVS = EvProfile.explicit([0xC100, 0xC101, 0xC102, 0xC103])
SQ_PSN, RQ_PSN = 0x000200, 0x000100
LED_BITS = {name: bit for bit, name, _ in LEDS}


class BoardTB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        cocotb.start_soon(Clock(dut.eth_tx_clk, ETH_NS, unit="ns").start())
        cocotb.start_soon(self._start_tx90())
        dut.mdio_i.value = 1
        self.phy = RgmiiPhy(dut.rgmii__txd, dut.rgmii__tx_ctl, dut.rgmii__tx_clk,
                            dut.rgmii__rxd, dut.rgmii__rx_ctl, dut.rgmii__rx_clk,
                            reset=dut.rst, speed=1000e6)
        for model in (self.phy.rx, self.phy.tx):
            model.log.setLevel(logging.WARNING)
        self.uart = UartModel(dut.uart_rx, dut.uart_tx, UART_DIVISOR * CLK_NS)
        self.leds_seen = 0  # every LED that was lit at some time
        self.heartbeat_edges = 0
        cocotb.start_soon(self._watch_leds())
        self.rng = seeds.rng(8)

    async def _start_tx90(self):
        await Timer(ETH_NS / 4, unit="ns")
        await Clock(self.dut.eth_tx90_clk, ETH_NS, unit="ns").start()

    async def _watch_leds(self):
        last = 0
        while True:
            await self.dut.leds.value_change
            value = self.dut.leds.value.to_unsigned()
            self.leds_seen |= value
            if (value ^ last) >> LED_BITS["heartbeat"] & 1:
                self.heartbeat_edges += 1
            last = value

    def led(self, name: str) -> int:
        return self.dut.leds.value.to_unsigned() >> LED_BITS[name] & 1

    async def reset(self):
        for sig in (self.dut.rst, self.dut.eth_tx_rst, self.dut.eth_tx90_rst):
            sig.value = 1
        await ClockCycles(self.dut.clk, 8)
        for sig in (self.dut.rst, self.dut.eth_tx_rst, self.dut.eth_tx90_rst):
            sig.value = 0
        await ClockCycles(self.dut.clk, 8)

    async def bring_up(self, *, buf_size: int = 128):
        """Reset, then over the UART only: find the board and the NIC, set the
        addresses, bring QP 0 to RTS bound to the peer, register a receive
        region of ``buf_size`` bytes with a guard area after it."""
        await self.reset()
        started = time.monotonic()
        self.transport = await BoardTransport.connect(AsyncUARTTransport(self.uart),
                                                      clock=self.dut.clk)
        self.dev = dev = Device(self.transport)
        await dev.init()
        await dev.set_address(OWN_MAC, OWN_IP)
        pd = dev.alloc_pd()
        self.send_cq, self.recv_cq = dev.create_cq(2), dev.create_cq(1)
        self.qp = qp = await dev.create_qp(pd, self.send_cq, self.recv_cq, sq_log2=2)
        self.recv_buf = dev.mem.alloc(2 * buf_size, align=256)
        self.buf_size = buf_size
        # the region, then a guard of the same size that nothing may touch
        self.guard = bytes(self.rng.randrange(256) for _ in range(buf_size))
        await self.transport.mem_write(self.recv_buf, bytes(buf_size) + self.guard)
        self.mr = await pd.reg_mr(self.recv_buf, buf_size)
        self.pd = pd
        await qp.to_init()
        await qp.to_rtr(dest_qpn=PEER_QPN, peer_mac=PEER_MAC, peer_ip=PEER_IP, rq_psn=RQ_PSN,
                        mpr=1, ack_n=1, ack_t=16, mtu=256)
        await qp.to_rts(evs=EVS, sq_psn=SQ_PSN, mtu=256, timeout=14)
        self.log.info("bring-up over the UART: %.1f us simulated, %.1f s wall",
                      cocotb.utils.get_sim_time("us"), time.monotonic() - started)

    async def recv_frame(self, timeout_us: float = 2000) -> bytes:
        frame = await with_timeout(self.phy.tx.recv(), timeout_us, "us")
        assert frame.check_fcs(), "bad FCS on RGMII TX"
        return bytes(frame.get_payload())

    async def send_frame(self, pkt):
        await self.phy.rx.send(GmiiFrame.from_payload(bytes(pkt)))

    def check_l3(self, frame: bytes, *, src_mac, dst_mac, src_ip, dst_ip):
        pkt = Ether(frame)
        assert pkt[Ether].src == src_mac and pkt[Ether].dst == dst_mac
        assert pkt[IP].src == src_ip and pkt[IP].dst == dst_ip
        assert pkt[UDP].dport == ROCE_UDP_PORT
        ip_ok, icrc_ok = check_frame(frame)
        assert ip_ok, "IPv4 header checksum"
        assert icrc_ok, "ICRC"
        return pkt


@cocotb.test()
async def test_board_write_ack_completion(dut):
    tb = BoardTB(dut)
    await tb.bring_up()
    dev, qp, t = tb.dev, tb.qp, tb.transport
    assert dev.params["num_qps"] == 4 and dev.params["evs_per_qp"] == 8
    assert t.mac is not None and t.mac.base == MAC_BASE

    payload = bytes(tb.rng.randrange(256) for _ in range(200))
    send_buf = dev.mem.alloc(256)
    dev.mem.write(send_buf, payload)  # posted: sent before the doorbell
    remote_va, rkey = 0x0000_7000_0000_1000, 0x1234_564D
    wr_id = await qp.post_send(WrOpcode.WRITE, local_addr=send_buf, length=len(payload),
                               remote_addr=remote_va, rkey=rkey)

    frame = await tb.recv_frame()
    pkt = tb.check_l3(frame, src_mac=OWN_MAC, dst_mac=PEER_MAC, src_ip=OWN_IP, dst_ip=PEER_IP)
    bth, reth = pkt[BTH], pkt[RETH]
    assert bth.opcode == OP_WRITE_ONLY
    assert bth.psn == SQ_PSN
    assert bth.dqpn == PEER_QPN
    assert pkt[UDP].sport in EVS.values
    assert (reth.va, reth.rkey, reth.dma_len) == (remote_va, rkey, len(payload))
    assert write_payload(pkt) == payload
    tb.log.info("WRITE on RGMII at %.1f us: %d bytes, EV 0x%04x",
                cocotb.utils.get_sim_time("us"), len(frame), pkt[UDP].sport)

    ack = ack_packet(dqpn=qp.qpn, cum_psn=SQ_PSN, ev=pkt[UDP].sport, src_mac=PEER_MAC,
                     dst_mac=OWN_MAC, src_ip=PEER_IP, dst_ip=OWN_IP)
    await tb.send_frame(ack)
    completions = await tb.send_cq.wait(1, timeout_cycles=400_000, poll_cycles=500)
    assert completions[0].wr_id == wr_id
    assert completions[0].status == Completion.SUCCESS
    assert completions[0].qpn == qp.qpn
    tb.log.info("send completion polled over the UART at %.1f us",
                cocotb.utils.get_sim_time("us"))

    # nothing else was sent: no retransmission once the ACK was in
    await ClockCycles(dut.clk, 2000)
    assert tb.phy.tx.empty()
    assert await t.mac.read("CNT_TX_FRAMES") == 1
    assert await t.mac.read("CNT_RX_FRAMES") == 1
    assert await t.mac.read("CNT_RX_BAD_FCS") == 0
    assert await t.board.read("DMA_DECERR") == 0
    assert await t.board.read("QP_ERROR") == 0
    for name in ("tx_activity", "rx_activity", "uart_activity"):
        assert tb.leds_seen >> LED_BITS[name] & 1, f"LED {name} never lit"
    for name in ("qp_error", "dma_error", "rx_bad_frame"):
        assert not tb.leds_seen >> LED_BITS[name] & 1, f"LED {name} lit"
    assert tb.heartbeat_edges >= 2
    leds = await t.board.read("LEDS")
    assert leds >> LED_BITS["dma_error"] & 1 == 0


@cocotb.test()
async def test_board_inbound_writes(dut):
    tb = BoardTB(dut)
    await tb.bring_up()
    dev, qp, t = tb.dev, tb.qp, tb.transport
    mr, base, size = tb.mr, tb.recv_buf, tb.buf_size

    def peer_write(psn, va, data, *, rkey=None, ev=0xD000):
        return write_packet(opcode=OP_WRITE_ONLY, dqpn=qp.qpn, psn=psn, va=va,
                            rkey=mr.rkey if rkey is None else rkey, dma_len=len(data),
                            payload=data, ev=ev, src_mac=PEER_MAC, dst_mac=OWN_MAC,
                            src_ip=PEER_IP, dst_ip=OWN_IP)

    def check_ack(frame, *, syndrome, psn):
        pkt = tb.check_l3(frame, src_mac=OWN_MAC, dst_mac=PEER_MAC, src_ip=OWN_IP,
                          dst_ip=PEER_IP)
        assert pkt[BTH].opcode == OP_ACKNOWLEDGE and pkt[BTH].dqpn == PEER_QPN
        assert pkt[AETH].syndrome == syndrome, hex(pkt[AETH].syndrome)
        return pkt

    # 1. in the region: lands byte exact
    data = bytes(tb.rng.randrange(256) for _ in range(100))
    offset = 20
    await tb.send_frame(peer_write(RQ_PSN, base + offset, data))
    ack = check_ack(await tb.recv_frame(), syndrome=AETH_ACK, psn=RQ_PSN)
    assert ack[MRCSack].cum_psn == RQ_PSN
    got = await t.mem_read(base, 2 * size)
    expect = bytes(offset) + data + bytes(size - offset - len(data)) + tb.guard
    assert got == expect, "inbound WRITE not placed byte exact"

    # 2. runs past the end of its region: dropped, NAK 0x62, counted
    before = (await dev.counters())["rx.bad_bounds"]
    await tb.send_frame(peer_write(RQ_PSN + 1, base + size - 40, data))
    check_ack(await tb.recv_frame(), syndrome=NAK_REMOTE_ACCESS, psn=RQ_PSN + 1)
    assert (await dev.counters())["rx.bad_bounds"] == before + 1
    assert await t.mem_read(base, 2 * size) == expect, "out-of-region WRITE touched memory"

    # 3. a region the host registered outside the BRAM window: the BRAM does
    #    not perform RX's DMA write (DECERR, counted, LED 6) and RX drops the
    #    packet on the error response (its dma_error counter)
    outside = t.window.size + 0x1000
    mr_out = await tb.pd.reg_mr(outside, 256)
    assert await t.board.read("DMA_DECERR") == 0
    assert tb.led("dma_error") == 0
    rx_dma_errors = (await dev.counters())["rx.dma_error"]
    await tb.send_frame(peer_write(RQ_PSN + 1, outside, data[:64], rkey=mr_out.rkey))
    await ClockCycles(dut.clk, 500)
    assert await t.board.read("DMA_DECERR") == 64 // 8  # one per 64-bit beat
    assert tb.led("dma_error") == 1
    assert (await dev.counters())["rx.dma_error"] == rx_dma_errors + 1
    assert await t.mem_read(base, 2 * size) == expect

    # 4. QP state on the LED: ERROR lights it, RESET clears it
    assert tb.led("qp_error") == 0
    await qp.to_error()
    await ClockCycles(dut.clk, 50)
    assert tb.led("qp_error") == 1
    assert await t.board.read("QP_ERROR") == 1 << qp.qpn
    await dev.rel.write_fields("qp_ctrl", qp.qpn, state=QpState.RESET)
    await ClockCycles(dut.clk, 50)
    assert tb.led("qp_error") == 0
    assert await t.board.read("QP_ERROR") == 0
    assert tb.leds_seen >> LED_BITS["rx_activity"] & 1
    assert await t.mac.read("CNT_RX_FRAMES") == 3


class SimBoardSoC(BoardSoC):
    """BoardSoC with a ``build_key``: run_cocotb reuses the simulator, without
    converting the design again, while the gateware sources and parameters
    are unchanged."""

    def build_key(self) -> str:
        from sim.cocotb_runner import ROOT, source_digest

        return source_digest(ROOT / "hw", extra=SOC_PARAMS)


@pytest.mark.long
def test_board_soc():
    """Build BoardSoC (simulation parameters) into a Verilator model and run the tests.

    Long: elaboration and the Verilator build of a NicCore take about 5 of
    the 6 minutes (2 shared cores); the two simulations about 40 s.
    """
    from sim.cocotb_runner import run_cocotb

    started = time.monotonic()
    # Python touches only the ports: Verilator may optimise the inside (public=False).
    run_cocotb(name="board_soc", elaborate=lambda: SimBoardSoC(**SOC_PARAMS), toplevel="board_soc",
               test_module="tests.hw.test_board_soc", public=False)
    print(f"test_board_soc: {time.monotonic() - started:.0f} s wall")


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
