"""host_driver/driver.py against a register-level fake of the NIC's CSR space
(the RTL runs the same driver in tests/system)."""

import asyncio
import struct

import pytest

from host_driver.driver import (
    Completion,
    Device,
    DriverError,
    EvProfile,
    QpState,
    WrOpcode,
    discover,
)
from host_driver.transport import HostMemory
from hw.nic.csr import NIC_VERSION
from hw.nic.ev_load import EV_GEN_VERSION
from hw.protocol import EvFormat
from hw.reliability.registers import VERSION as REL_VERSION
from hw.rx.regs import RX_VERSION
from hw.tx.layouts import WQE_LAYOUT

BLOCK = 0x10000
PARAMS = {"nic_version": NIC_VERSION, "build_id": 7, "data_width": 64, "num_qps": 2,
          "evs_per_qp": 8, "sack_bits": 64, "max_mtu": 1024, "mpr_max": 256, "num_mrs": 2,
          "window": 64, "clk_freq_hz": 15_625_000, "block_size": BLOCK, "addr_width": 64,
          "caps": 1, "num_planes": 0}  # 0: one plane


class Ram:
    def __init__(self, size):
        self.data = bytearray(size)

    def read(self, addr, n):
        return self.data[addr:addr + n]

    def write(self, addr, data):
        self.data[addr:addr + len(data)] = data


class FakeNic:
    """Headers and device info as NicCore presents them; every other word is
    a plain register that remembers writes (TX status reads ready)."""

    def __init__(self, chain=((1, 1), (2, 1), (3, RX_VERSION), (4, REL_VERSION),
                              (5, EV_GEN_VERSION)),
                 next_override=None):
        from hw.nic.csr import device_info_register_map

        self.words = {}
        for i, (type_id, version) in enumerate(chain):
            self.words[i * BLOCK] = type_id << 16 | version
            self.words[i * BLOCK + 4] = (i + 1) * BLOCK if i + 1 < len(chain) else 0
        self.words.update(next_override or {})
        info = device_info_register_map()
        for name, value in PARAMS.items():
            self.words[info[name].offset] = value
        self.words[BLOCK + 0x14] = 1  # TX status: ready
        self.words[BLOCK + 0x10] = 8 << 12  # TX caps: 256 in-flight entries per QP
        self.writes = []
        self.mem = HostMemory(Ram(1 << 20), 1 << 20)
        self.cycles = 0

    async def read32(self, addr):
        return self.words.get(addr, 0)

    async def write32(self, addr, value):
        self.writes.append((addr, value))
        self.words[addr] = value

    async def idle(self, cycles):
        self.cycles += cycles


def run(coro):
    return asyncio.run(coro)


async def ready_device(nic=None):
    nic = nic or FakeNic()
    dev = Device(nic)
    await dev.init()
    return dev, nic


def test_discovery_and_parameters():
    dev, _ = run(ready_device())
    assert [(b.type_id, b.base) for b in dev.blocks] == [(1, 0), (2, BLOCK), (3, 2 * BLOCK),
                                                          (4, 3 * BLOCK), (5, 4 * BLOCK)]
    # and the largest max_wimm, TX's in-flight entries per QP (caps.inflight_log2),
    # and whether it is built with IPv6 (caps.ipv6)
    assert dev.params == {**PARAMS, "max_wimm": 256, "ipv6": False, "ev_width": 16}
    assert dev.tx.base == BLOCK and dev.rx.base == 2 * BLOCK and dev.rel.base == 3 * BLOCK
    # maps sized from the discovered parameters
    assert dev.tx.map["qp_ctrl"].count == 2 and dev.rel.map["ev"].count == 16
    assert dev.rx.map["MR_RKEY"].count == 2


def test_discovery_finds_blocks_in_any_order_and_skips_unknown_ones():
    nic = FakeNic(chain=((1, 1), (0x77, 3), (5, EV_GEN_VERSION), (4, REL_VERSION),
                         (3, RX_VERSION), (2, 1)))
    nic.words[5 * BLOCK + 0x14] = 1  # TX status ready, where TX now sits
    dev, _ = run(ready_device(nic))
    assert dev.tx.base == 5 * BLOCK and dev.rel.base == 3 * BLOCK and dev.ev_gen.base == 2 * BLOCK
    assert (0x77, 3, BLOCK) in [(b.type_id, b.version, b.base) for b in dev.blocks]


def test_discovery_errors():
    assert len(run(discover(FakeNic(next_override={BLOCK + 4: 0})))) == 2  # chain ends early
    with pytest.raises(DriverError, match="loops"):
        run(discover(FakeNic(next_override={2 * BLOCK + 4: BLOCK})))
    with pytest.raises(DriverError, match=r"blocks not found: \['reliability'\]"):
        run(ready_device(FakeNic(chain=((1, 1), (2, 1), (3, RX_VERSION), (5, EV_GEN_VERSION)))))
    with pytest.raises(DriverError, match=f"rx block version 9, driver knows {RX_VERSION}"):
        run(ready_device(FakeNic(chain=((1, 1), (2, 1), (3, 9), (4, REL_VERSION),
                                        (5, EV_GEN_VERSION)))))
    nic = FakeNic()
    nic.words[BLOCK + 0x14] = 0
    with pytest.raises(DriverError, match="did not come out of reset"):
        run(ready_device(nic))
    assert nic.cycles >= 100_000


def test_register_fields():
    dev, nic = run(ready_device())
    assert dev.rel.pack("qp_rel_cfg", t=12, linear_cnt=7, exp_cnt=25) == 12 | 7 << 5 | 25 << 8
    with pytest.raises(ValueError, match="linear_cnt is 3 bits; 8 does not fit"):
        dev.rel.pack("qp_rel_cfg", linear_cnt=8)
    with pytest.raises(ValueError, match="has no field 'bogus'"):
        dev.rx.pack("QP_CTRL", bogus=1)
    with pytest.raises(ValueError, match="read only"):
        run(dev.tx.write("qp_consumer", 1, 0))
    run(dev.rx.write_fields("QP_CTRL", 1, state=QpState.RTR, mpr=2))
    assert nic.writes[-1] == (2 * BLOCK + 0x1000 + 0x40, QpState.RTR | 2 << 8)


def test_host_memory_allocator():
    mem = HostMemory(Ram(1 << 16), 1 << 16)
    a = mem.alloc(100, align=64)
    b = mem.alloc(4096, align=4096)
    assert a % 64 == 0 and b % 4096 == 0 and b >= a + 100
    mem.free(a)
    assert mem.alloc(64, align=64) == a  # first fit reuses the hole
    with pytest.raises(MemoryError):
        mem.alloc(1 << 16)
    with pytest.raises(ValueError):
        mem.alloc(10, align=3)


async def _connected_qp(nic=None):
    dev, nic = await ready_device(nic)
    pd = dev.alloc_pd()
    qp = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(2), sq_log2=4)
    mr = await pd.reg_mr(0x80000, 0x1000)
    await qp.to_init()
    await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2", rq_psn=5)
    await qp.to_rts(evs=EvProfile.explicit([0xC000, 0xC001, 0xC002]), sq_psn=9)
    return dev, nic, qp, mr


def test_qp_bring_up_programs_every_block():
    dev, nic, qp, mr = run(_connected_qp())
    w = dict(nic.writes)
    rx, tx, rel = dev.rx, dev.tx, dev.rel
    assert w[rx.addr("MR_RKEY", mr.index)] == mr.rkey
    assert w[rx.addr("MR_ACCESS", mr.index)] == 0b11 | mr.pd.pdn << 8  # valid, remote write
    assert mr.pd.pdn == qp.pd.pdn == 1
    ctrl = rx.unpack("QP_CTRL", w[rx.addr("QP_CTRL", 0)])
    assert ctrl["pd"] == 1 and ctrl["mtu"] == 3  # the QP's PD; path MTU 1024
    assert w[rx.addr("QP_EPSN", 0)] == 5 and w[rx.addr("QP_PEER_QPN", 0)] == 1
    assert w[rx.addr("QP_PEER_IP", 0)] == 0x0A000002
    assert rx.unpack("QP_CTRL", w[rx.addr("QP_CTRL", 0)])["state"] == QpState.RTS
    assert w[tx.addr("qp_next_psn", 0)] == 9 and w[tx.addr("qp_mtu", 0)] == 1024
    assert w[tx.addr("qp_sq_base_lo", 0)] == qp.sq_addr == w[rel.addr("sq_base_lo", 0)]
    assert w[rel.addr("cq_base_lo", 0)] == qp.send_cq.addr
    assert w[rx.addr("QP_CQ_BASE_LO", 0)] == qp.recv_cq.addr
    assert w[tx.addr("qp_ctrl", 0)] == 1  # enabled last
    assert nic.writes[-1] == (tx.addr("qp_ctrl", 0), 1)
    # EVs: 3 GOOD with their values, the other 5 DENIED, in TX and reliability
    ev_entries = [v for a, v in nic.writes if a == tx.addr("ev_entry")]
    assert [tx.unpack("ev_entry", v) for v in ev_entries] == (
        [{"value": 0xC000 + i, "state": 0, "plane": 0} for i in range(3)] +
        [{"value": 0, "state": 2, "plane": 0} for _ in range(5)])
    rel_evs = [rel.unpack("ev", w[rel.addr("ev", i)]) for i in range(8)]
    assert [(e["value"], e["state"], e["set_state"]) for e in rel_evs] == (
        [(0xC000 + i, 0, 1) for i in range(3)] + [(0, 2, 1)] * 5)


def test_post_send_writes_the_wqe_tx_reads_and_rings():
    dev, nic, qp, mr = run(_connected_qp())
    wr_id = run(qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=0x1234, length=5000,
                             remote_addr=0xABCD0000, rkey=mr.rkey, imm=0xFEEDF00D, wr_id=77))
    assert wr_id == 77
    raw = dev.mem.read(qp.sq_addr, 64)
    fields = {name: int.from_bytes(raw[off:off + size], "little")
              for name, off, size in WQE_LAYOUT}
    assert fields == {"opcode": 1, "flags": 1, "imm": 0xFEEDF00D, "wr_id": 77,
                      "laddr": 0x1234, "raddr": 0xABCD0000, "length": 5000, "rkey": mr.rkey}
    assert nic.writes[-1] == (dev.tx.addr("qp_doorbell", 0), 1)
    for _ in range(15):
        run(qp.post_send(WrOpcode.WRITE, local_addr=0, length=1, remote_addr=0, rkey=1))
    with pytest.raises(DriverError, match="send queue full"):
        run(qp.post_send(WrOpcode.WRITE, local_addr=0, length=1, remote_addr=0, rkey=1))


def _cqe(wr_id, phase, status=0):
    return struct.pack("<QIIIBBBB", wr_id, 10, 0, 0, status, 0, 0, phase << 7).ljust(32, b"\0")


def test_completion_queue_phase_polling_across_wraps():
    dev, nic, qp, _ = run(_connected_qp())
    cq = qp.recv_cq  # 4 entries
    assert run(cq.poll()) == []
    for n in range(6):  # the NIC's producer: pass 1 phase 1, pass 2 phase 0
        dev.mem.write(cq.addr + (n % 4) * 32, _cqe(100 + n, 1 - (n // 4) % 2))
        if n == 3:
            assert [c.wr_id for c in run(cq.poll())] == [100, 101, 102, 103]
    got = run(cq.poll())
    assert [c.wr_id for c in got] == [104, 105]
    assert nic.writes[-1] == (dev.rx.addr("QP_CQ_CONS", 0), 6)  # consumer index reported
    # an old-phase entry is not taken again
    assert run(cq.poll()) == []
    with pytest.raises(DriverError, match="0 of 1 completions"):
        run(cq.wait(1, timeout_cycles=1000))


def test_send_completions_free_send_queue_slots():
    dev, nic, qp, mr = run(_connected_qp())
    for _ in range(3):
        run(qp.post_send(WrOpcode.WRITE, local_addr=0, length=1, remote_addr=0, rkey=1))
    assert qp.outstanding == 3
    dev.mem.write(qp.send_cq.addr, _cqe(1, 1, Completion.SUCCESS))
    assert [c.status for c in run(qp.send_cq.poll())] == [Completion.SUCCESS]
    assert qp.outstanding == 2


def test_qp_state_rules_and_limits():
    async def body():
        dev, nic = await ready_device()
        pd = dev.alloc_pd()
        with pytest.raises(ValueError, match="send CQ .4 entries. must be at least"):
            await dev.create_qp(pd, dev.create_cq(2), dev.create_cq(2), sq_log2=3)
        cq = dev.create_cq(4)
        qp = await dev.create_qp(pd, cq, dev.create_cq(2), sq_log2=4)
        with pytest.raises(ValueError, match="already serves QP 0"):
            await dev.create_qp(pd, cq, dev.create_cq(2), sq_log2=4)
        with pytest.raises(DriverError, match="QP 0 is RESET, needs RTS"):
            await qp.post_send(WrOpcode.WRITE, local_addr=0, length=1, remote_addr=0, rkey=1)
        with pytest.raises(DriverError, match="QP 0 is RESET, needs INIT"):
            await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2")
        await qp.to_init()
        with pytest.raises(ValueError, match=r"mpr must be in 1\.\.2"):
            await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2",
                            mpr=3)
        await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2")
        with pytest.raises(ValueError, match="9 EVs, the NIC holds 8"):
            await qp.to_rts(evs=EvProfile.explicit(range(9)))
        with pytest.raises(ValueError, match=r"mtu must be a power of two in 256\.\.1024"):
            await qp.to_rts(evs=EvProfile.explicit([1]), mtu=2048)
        await pd.reg_mr(0, 16)
        await pd.reg_mr(16, 16)
        with pytest.raises(DriverError, match="MR table full"):
            await pd.reg_mr(32, 16)

    run(body())


async def _qp_in_rtr():
    dev, nic = await ready_device()
    pd = dev.alloc_pd()
    qp = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(2), sq_log2=4)
    await qp.to_init()
    await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2")
    return dev, nic, qp


def test_to_rts_refuses_retry_counts_out_of_range():
    """linear_cnt 0..7, exp_cnt 0..25 (docs/protocol.md): the error names the field
    and the QP stays in RTR with nothing written; the bounds themselves are taken."""
    async def body():
        dev, nic, qp = await _qp_in_rtr()
        before = len(nic.writes)
        for kw, match in ((dict(linear_cnt=8), r"linear_cnt must be in 0\.\.7, not 8"),
                          (dict(linear_cnt=-1), "linear_cnt must be in"),
                          (dict(exp_cnt=26), r"exp_cnt must be in 0\.\.24 .* 25 = forever"),
                          (dict(exp_cnt=31), "exp_cnt must be in"),
                          (dict(exp_cnt=-1), "exp_cnt must be in")):
            with pytest.raises(ValueError, match=match):
                await qp.to_rts(evs=EvProfile.explicit([1]), **kw)
            assert qp.state == QpState.RTR and len(nic.writes) == before
        await qp.to_rts(evs=EvProfile.explicit([1]), linear_cnt=7, exp_cnt=25)
        assert await dev.rel.read_fields("qp_rel_cfg", qp.qpn) == {
            "t": 12, "linear_cnt": 7, "exp_cnt": 25, "ev_min_active": 1, "sack_threshold": 0}

    run(body())


def test_to_rts_max_wimm():
    """max_wimm 1..params["max_wimm"] (TX's in-flight entries per QP): out of range
    the error names the field and nothing is written; the default is the maximum;
    the value goes to TX's qp_max_wimm."""
    async def body():
        dev, nic, qp = await _qp_in_rtr()
        before = len(nic.writes)
        for bad in (0, -1, 257, 1.5):
            with pytest.raises(ValueError, match=r"max_wimm must be in 1\.\.256"):
                await qp.to_rts(evs=EvProfile.explicit([1]), max_wimm=bad)
            assert qp.state == QpState.RTR and len(nic.writes) == before
        await qp.to_rts(evs=EvProfile.explicit([1]), max_wimm=3)
        assert await dev.tx.read("qp_max_wimm", qp.qpn) == 3 and qp.max_wimm == 3
        await qp.to_reset()
        await qp.to_init()
        await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2")
        await qp.to_rts(evs=EvProfile.explicit([1]))
        assert await dev.tx.read("qp_max_wimm", qp.qpn) == 256

    run(body())


def test_mr_rkeys_change_when_an_index_is_reused():
    async def body():
        dev, nic = await ready_device()
        pd = dev.alloc_pd()
        mr = await pd.reg_mr(0x1000, 64)
        await mr.deregister()
        assert nic.words[dev.rx.addr("MR_ACCESS", mr.index)] == 0
        again = await pd.reg_mr(0x2000, 64)
        assert again.index == mr.index and again.rkey != mr.rkey

    run(body())


def test_ev_profiles_match_the_golden_model():
    from sim.model.ev import generated_evs

    prof = EvProfile.generated(init=5, min_ev=0xC000, max_ev=0xC0FF, mask=0xFF, count=8)
    assert prof.values == tuple(v for v, _ in generated_evs(init=5, min_ev=0xC000,
                                                            max_ev=0xC0FF, mask=0xFF, count=8))
    assert prof.mode == "generated" and len(set(prof.values)) == 8
    with pytest.raises(ValueError, match="distinct"):
        EvProfile.explicit([1, 1])
    with pytest.raises(ValueError, match="16-bit"):
        EvProfile.explicit([0x10000])


def test_controller_ev_state_and_events():
    dev, nic, qp, _ = run(_connected_qp())
    run(dev.set_ev_state(qp, 2, denied=True))
    assert dev.rel.unpack("ev", nic.writes[-1][1]) == {"value": 0xC002, "state": 2,
                                                       "set_state": 1, "plane": 0}
    # one queued event: count 1, head QPN, its RTT (none), then the pop
    nic.words[dev.rel.addr("ev_event_count")] = 1
    nic.words[dev.rel.addr("ev_event_qpn")] = 1 | 1 << 31
    nic.words[dev.rel.addr("ev_event_rtt")] = 0 | 1 << 31
    nic.words[dev.rel.addr("ev_event")] = 3 | 0 << 8 | 1 << 10 | 1 << 15 | 9 << 16
    events = run(dev.read_ev_events())
    assert [(e.qpn, e.ev_index, e.old, e.new, e.drops, e.rtt_ns) for e in events] == [
        (1, 3, 0, 1, 9, None)]
    # a probe answer's event: ASSUMED_BAD -> GOOD with its round trip in ns
    nic.words[dev.rel.addr("ev_event_rtt")] = 2184 | 1 << 31
    nic.words[dev.rel.addr("ev_event")] = 3 | 1 << 8 | 0 << 10 | 1 << 15 | 9 << 16
    events = run(dev.read_ev_events())
    assert [(e.old, e.new, e.rtt_ns) for e in events] == [(1, 0, 2184)]


def test_ev_events_pending_reads_irq_status_only_when_the_line_is_high():
    """The interrupt line low: no CSR read, nothing pending. High: one read
    of irq_status, whose event cause answers. No line: pending, no read."""

    class Reads(FakeNic):
        def __init__(self):
            super().__init__()
            self.reads = []

        async def read32(self, addr):
            self.reads.append(addr)
            return await super().read32(addr)

    async def body():
        nic = Reads()
        dev, _ = await ready_device(nic)
        status = dev.rel.addr("irq_status")
        nic.words[status] = 0
        nic.reads.clear()
        assert await dev.ev_events_pending() is True and nic.reads == []  # no line
        nic.irq_high = lambda: False
        nic.words[status] = 1
        nic.reads.clear()
        assert await dev.ev_events_pending() is False and nic.reads == []
        nic.irq_high = lambda: True
        for word, pending in ((1, True), (2, False), (3, True)):
            nic.words[status] = word
            nic.reads.clear()
            assert await dev.ev_events_pending() is pending and nic.reads == [status]

    run(body())


def test_addresses_must_fit_the_devices_dma_address_width():
    from hw.nic.csr import device_info_register_map

    async def body():
        nic = FakeNic()
        nic.words[device_info_register_map()["addr_width"].offset] = 32
        dev, _ = await ready_device(nic)
        assert dev.params["addr_width"] == 32
        pd = dev.alloc_pd()
        with pytest.raises(ValueError, match=r"memory region addr 0x100000000 \+ length 0x1000 "
                                             r"passes the top of the NIC's 32-bit DMA addresses"):
            await pd.reg_mr(1 << 32, 0x1000)
        with pytest.raises(ValueError, match="memory region .* 32-bit"):
            await pd.reg_mr(0xFFFF_F000, 0x1001)  # its last byte is past 2^32
        with pytest.raises(ValueError, match="addr 0xfffff800 \\+ length 0x1000 passes"):
            await pd.reg_mr(0xFFFF_F800, 0x1000)  # would wrap to address 0
        assert not pd.mrs and not dev._mr_used  # nothing was written
        mr = await pd.reg_mr(0xFFFF_F000, 0x1000)  # up to the last byte below 2^32
        assert nic.words[dev.rx.addr("MR_BASE_HI", mr.index)] == 0
        qp = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(2), sq_log2=4)
        await qp.to_init()
        await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2", rq_psn=5)
        await qp.to_rts(evs=EvProfile.explicit([0xC000]), sq_psn=9)
        with pytest.raises(ValueError, match="local buffer .* 32-bit"):
            await qp.post_send(WrOpcode.WRITE, local_addr=(1 << 40) | 0x1000, length=16,
                               remote_addr=1 << 40, rkey=mr.rkey)
        # the remote address is the peer's: any 64-bit VA
        await qp.post_send(WrOpcode.WRITE, local_addr=0x1000, length=16,
                           remote_addr=1 << 40, rkey=mr.rkey)

    run(body())


def test_queues_must_fit_the_devices_dma_address_width():
    from hw.nic.csr import device_info_register_map

    class SparseRam:
        def __init__(self):
            self.bytes = {}

        def read(self, addr, n):
            return bytes(self.bytes.get(addr + i, 0) for i in range(n))

        def write(self, addr, data):
            self.bytes.update((addr + i, b) for i, b in enumerate(data))

    async def body():
        nic = FakeNic()
        nic.words[device_info_register_map()["addr_width"].offset] = 32
        # host memory from 8 KiB below 2^32 up: two CQs fit below 2^32, an SQ does not
        nic.mem = HostMemory(SparseRam(), (1 << 32) + (1 << 20), base=(1 << 32) - 0x2000)
        dev, _ = await ready_device(nic)
        send_cq, recv_cq = dev.create_cq(2), dev.create_cq(2)
        with pytest.raises(ValueError, match=r"send queue \[0x100000000, 0x100000100\) does "
                                             r"not fit the NIC's 32-bit DMA addresses"):
            await dev.create_qp(dev.alloc_pd(), send_cq, recv_cq, sq_log2=2)
        assert not dev.qps and send_cq.qp is None and recv_cq.qp is None
        with pytest.raises(ValueError, match=r"completion queue \[0x100000000, 0x100000080\) "
                                             r"does not fit the NIC's 32-bit DMA addresses"):
            dev.create_cq(2)
        assert dev.mem.alloc(64, align=4096) == 1 << 32  # what did not fit was freed

    run(body())


def test_old_gateware_without_addr_width_is_refused():
    from hw.nic.csr import device_info_register_map

    nic = FakeNic()
    del nic.words[device_info_register_map()["addr_width"].offset]
    with pytest.raises(DriverError, match="addr_width is 0"):
        run(ready_device(nic))


def test_probe_period_is_off_or_longer_than_a_round():
    """0 turns probing off; otherwise the period must hold a whole round (every QP,
    3 cycles and one per EV) and fit the 32-bit register; anything else says so."""
    dev, nic = run(ready_device())
    low = dev.min_probe_period()
    assert low == dev.params["num_qps"] * (3 + dev.params["evs_per_qp"]) + 1
    for ok in (0, low, 4000, 0xFFFF_FFFF):
        run(dev.set_probe_period(ok))
        assert nic.writes[-1] == (dev.rel.addr("probe_period"), ok)
    writes = len(nic.writes)
    for bad in (1, low - 1, -1, 1 << 32, 4000.0):
        with pytest.raises(ValueError, match=rf"probe period must be 0 \(off\) or {low}\.\."):
            run(dev.set_probe_period(bad))
    assert len(nic.writes) == writes  # nothing written for a refused period


def test_addresses_are_checked_and_gids_ipv4_mapped():
    from host_driver.driver import ip_to_int, mac_to_int

    assert ip_to_int("10.0.0.2") == 0x0A000002
    assert ip_to_int("::ffff:10.0.0.2") == 0x0A000002  # an IPv4-mapped GID
    assert mac_to_int("02:00:00:00:00:0a") == 0x02000000000A
    for bad in ("10.0.0", "10.0.0.300", "host", ""):
        with pytest.raises(ValueError, match="is not an IP address"):
            ip_to_int(bad)
    with pytest.raises(ValueError, match="built without IPv6.*a peer GID must be IPv4-mapped"):
        ip_to_int("fd00::2")
    for bad in ("02:00:00:00:00:0", "02:00:00:00:00:00:01", "02-00-00-00-00-01",
                "zz:00:00:00:00:01"):
        with pytest.raises(ValueError, match="is not a MAC address"):
            mac_to_int(bad)


def _ipv6_nic():
    """A FakeNic whose TX caps says the NIC is built with IPv6."""
    nic = FakeNic()
    nic.words[BLOCK + 0x10] |= 1 << 16
    return nic


def test_ipv6_peers_program_each_blocks_ipv6_registers():
    """On a NIC built with IPv6 (TX caps.ipv6), the NIC's own IPv6 address goes
    to all three blocks, and a QP's IPv6 peer into each block's address words
    and family flag; an IPv4 (or IPv4-mapped) peer on the same NIC clears
    them."""
    async def bring_up():
        dev, nic = await ready_device(_ipv6_nic())
        assert dev.params["ipv6"]
        qps = []
        for _ in range(2):
            pd = dev.alloc_pd()
            qps.append(await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(2), sq_log2=4))
            await qps[-1].to_init()
        with pytest.raises(ValueError, match="has no IPv6 address: give it one first"):
            await qps[0].to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="fd00::2")
        await dev.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="fd00::1")
        for qp, peer in zip(qps, ("fd00::2:0:0:2", "::ffff:10.0.0.3"), strict=True):
            await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip=peer)
            await qp.to_rts(evs=EvProfile.explicit([0xC000]))
        assert [qp.qpn for qp in qps] == [0, 1]
        return dev, nic

    dev, nic = run(bring_up())
    w = dict(nic.writes)
    peer = 0xFD00_0000_0000_0000_0002_0000_0000_0002
    own = 0xFD00_0000_0000_0000_0000_0000_0000_0001
    for blk, own_reg in ((dev.tx, "src_ip6"), (dev.rx, "OWN_IP6"), (dev.rel, "own_ip6")):
        assert [w[blk.addr(own_reg, i)] for i in range(4)] == [
            own >> 32 * i & 0xFFFF_FFFF for i in range(4)]
    for blk, low, high, family in ((dev.tx, "qp_dst_ip", "qp_dst_ip6_{}", "qp_ip6"),
                                   (dev.rx, "QP_PEER_IP", "QP_PEER_IP6_{}", "QP_PEER_V6"),
                                   (dev.rel, "peer_ip", "peer_ip6_{}", "peer_v6")):
        words = [w[blk.addr(low, 0)], *(w[blk.addr(high.format(i), 0)] for i in (1, 2, 3))]
        assert words == [peer >> 32 * i & 0xFFFF_FFFF for i in range(4)], blk
        assert w[blk.addr(family, 0)] == 1
        words = [w[blk.addr(low, 1)], *(w[blk.addr(high.format(i), 1)] for i in (1, 2, 3))]
        assert words == [0x0A000003, 0, 0, 0] and w[blk.addr(family, 1)] == 0


def test_ipv6_addresses_are_refused_where_the_nic_has_no_ipv6():
    async def attempt():
        dev, _ = await ready_device()
        assert not dev.params["ipv6"]
        with pytest.raises(ValueError, match="built without IPv6"):
            await dev.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="fd00::1")
        pd = dev.alloc_pd()
        qp = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(2), sq_log2=4)
        await qp.to_init()
        with pytest.raises(ValueError, match="built without IPv6"):
            await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="fd00::2")
        dev6, _ = await ready_device(_ipv6_nic())
        with pytest.raises(ValueError, match="give the NIC's IPv4 address as ip"):
            await dev6.set_address("02:00:00:00:00:01", "fd00::1")
        with pytest.raises(ValueError, match="is an IPv4 address: give it as ip"):
            await dev6.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="10.0.0.9")

    run(attempt())


def test_ev_formats_program_each_evs_bits_and_each_qps_format():
    """On a NIC whose EV entries hold 64 bits (TX caps.stev, caps.srv6), a
    STEV QP and an SRv6 QP: each EV's bits above 15 go into TX's and
    reliability's ev_value_hi before the entry write that takes them, each
    QP's format into both blocks' family registers; read back whole."""
    async def bring_up():
        nic = _ipv6_nic()
        nic.words[BLOCK + 0x10] |= 3 << 17
        dev, _ = await ready_device(nic)
        assert dev.params["ev_width"] == 64 and len(dev.ev_formats) == 3
        assert (await dev.query()).ev_formats == ("udp", "stev", "srv6")
        await dev.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="fd00:0:1::")
        qps = []
        for peer, evs in (("fd00::2:0:0:2", EvProfile.explicit([0x1234_C000, 0x5678_C000],
                                                               ev_format="stev")),
                          ("fd00:0:2::", EvProfile.explicit([0x0E00_0002 << 32, 0x0E01_0002 << 32],
                                                            ev_format="srv6"))):
            qp = await dev.create_qp(dev.alloc_pd(), dev.create_cq(4), dev.create_cq(2), sq_log2=4)
            await qp.to_init()
            await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip=peer)
            nic.writes.clear()
            await qp.to_rts(evs=evs)
            qps.append((qp, list(nic.writes)))
        return dev, qps

    dev, qps = run(bring_up())
    per_qp = dev.params["evs_per_qp"]
    for (qp, writes), fmt in zip(qps, (EvFormat.STEV, EvFormat.SRV6), strict=True):
        w = dict(writes)
        family = 1 | fmt << 1
        assert w[dev.tx.addr("qp_ip6", qp.qpn)] == w[dev.rel.addr("peer_v6", qp.qpn)] == family
        for i, ev in enumerate(qp.evs.values):
            for blk, entry in ((dev.tx, dev.tx.addr("ev_entry")),
                               (dev.rel, dev.rel.addr("ev", qp.qpn * per_qp + i))):
                at = [a for a, _ in writes].index(entry)  # this EV's entry write
                staged = dict(writes[:at])  # each register's last write since the last entry
                for k in (0, 1):
                    assert staged[blk.addr("ev_value_hi", k)] == ev >> 16 + 32 * k & 0xFFFF_FFFF
                assert writes[at][1] & 0xFFFF == ev & 0xFFFF
                writes = writes[at + 1 :]


def test_ev_formats_are_refused_with_what_to_fix():
    async def attempt():
        dev, _ = await ready_device(_ipv6_nic())  # IPv6, 16-bit EV entries
        assert (await dev.query()).ev_formats == ("udp",)
        await dev.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="fd00:0:1::")
        qp = await dev.create_qp(dev.alloc_pd(), dev.create_cq(4), dev.create_cq(2), sq_log2=4)
        await qp.to_init()
        await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="fd00:0:2::")
        with pytest.raises(ValueError, match="EV entries hold 32 bits.*holds 16"):
            await qp.to_rts(evs=EvProfile.explicit([0x1_C000], ev_format="stev"))
        async def bound(*peers):  # a NIC with 64-bit EV entries, a QP in RTR per peer
            nic = _ipv6_nic()
            nic.words[BLOCK + 0x10] |= 3 << 17
            dev, _ = await ready_device(nic)
            await dev.set_address("02:00:00:00:00:01", "10.0.0.1", ip6="fd00:0:1::")
            qps = []
            for peer in peers:
                qps.append(await dev.create_qp(dev.alloc_pd(), dev.create_cq(4),
                                               dev.create_cq(2), sq_log2=4))
                await qps[-1].to_init()
                await qps[-1].to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip=peer)
            return nic, qps

        _, (qp6, qpx) = await bound("fd00:0:2::", "fd00:0:2::5")
        nic, (qp4,) = await bound("10.0.0.2")
        with pytest.raises(ValueError, match="ride in IPv6 headers: peer '10.0.0.2' is IPv4"):
            await qp4.to_rts(evs=EvProfile.explicit([0x1_C000], ev_format="stev"))
        with pytest.raises(ValueError, match="ends at uSID 0x0003, not at the peer's own 0x0002"):
            await qp6.to_rts(evs=EvProfile.explicit([0x0E00_0003 << 32], ev_format="srv6"))
        with pytest.raises(ValueError, match="locator, its uSID and zeros"):
            await qpx.to_rts(evs=EvProfile.explicit([0x0E00_0002 << 32], ev_format="srv6"))
        nic.writes.clear()
        await qp4.to_rts(evs=EvProfile.explicit([0xC000]))  # UDP over IPv4 still goes
        assert nic.writes

    run(attempt())
    for values, fmt, match in (([0x1_0000], "udp", "UDP EVs are 16-bit"),
                               ([1 << 32], "stev", "STEV EVs are 32-bit"),
                               ([0x0002 << 32], "srv6", "start in bits 63..48"),
                               ([0x0E00_0000_0002_0000], "srv6", "a zero uSID ends them"),
                               ([0xC000], "mpls", "ev_format must be one of")):
        with pytest.raises(ValueError, match=match):
            EvProfile.explicit(values, ev_format=fmt)


def test_derived_ev_formats_place_their_values():
    """GENERATED and AUTO in STEV's and SRv6's formats: the values deposited
    in their format's bits of the template (STEV's flow label, SRv6's first
    uSID), or in ``ev_bits`` (MRC's STEV 8 + 4 + 4 split over the flow label
    and the source port); SRv6's AUTO needs a template that starts a uSID
    list; a template over the value's bits, too few bits, or bits outside the
    format are refused, each saying what to fix."""
    stev = EvProfile.generated(width=4, min_ev=1, max_ev=3, count=3, ev_format="stev",
                               template=0xC00B)
    assert stev.values == (0x1_C00B, 0x2_C00B, 0x3_C00B) and stev.ev_format == EvFormat.STEV
    assert dict(stev.params)["bits"] == 0xFFFF << 16
    split = 0xFF << 24 | 0xF << 16 | 0xF << 4  # 8 + 4 bits of flow label, 4 of source port
    stev = EvProfile.generated(width=16, min_ev=0x1234, max_ev=0x1235, count=2,
                               ev_format="stev", template=0xC000, ev_bits=split)
    assert stev.values == (0x1203_C040, 0x1203_C050)
    srv6 = EvProfile.generated(min_ev=0x0E00, max_ev=0x0E01, count=2, ev_format="srv6",
                               template=0x0002 << 32)
    assert srv6.values == (0x0E00_0002 << 32, 0x0E01_0002 << 32)
    assert dict(EvProfile.auto(ev_format="stev", template=0xC000).params) == {
        "bits": 0xFFFF << 16, "template": 0xC000}
    auto6 = EvProfile.auto(ev_format="srv6", template=0x0E00_0002 << 32)
    assert dict(auto6.params) == {"bits": 0xFFFF << 48, "template": 0x0E00_0002 << 32}
    assert (auto6.mode, auto6.values, auto6.ev_format) == ("auto", (), EvFormat.SRV6)
    with pytest.raises(ValueError, match="fabric's first first-hop uSID, not 0"):
        EvProfile.auto(ev_format="srv6")
    with pytest.raises(ValueError, match="a zero uSID ends them"):
        EvProfile.auto(ev_format="srv6", template=0x0E00_0000_0002 << 16)
    with pytest.raises(ValueError, match="ev_bits must be 0xffff000000000000"):
        EvProfile.auto(ev_format="srv6", template=0x0E00_0002 << 32, ev_bits=0xFFFF)
    with pytest.raises(ValueError, match="clear them in the template"):
        EvProfile.generated(ev_format="udp", template=5)
    with pytest.raises(ValueError, match="fewer than the 16 of the derived values"):
        EvProfile.auto(ev_format="stev", ev_bits=0xFF << 16)
    with pytest.raises(ValueError, match="nonzero 32-bit mask"):
        EvProfile.generated(ev_format="stev", ev_bits=1 << 32)
    with pytest.raises(ValueError, match="template must be a 32-bit STEV EV"):
        EvProfile.generated(ev_format="stev", template=1 << 32)
    with pytest.raises(ValueError, match="a zero uSID ends them"):  # the list is cut short
        EvProfile.generated(min_ev=0x0E00, max_ev=0x0E01, count=2, ev_format="srv6",
                            template=0x0002 << 16)
