"""Host-driver model of the MRC NIC: async Python that mirrors what a real
driver does, in the manner of Corundum's ``tb/mqnic.py``.

It finds the hardware by walking the self-describing register blocks from
offset 0 (docs/registers.md), reads the build parameters from the
device-info block, and then addresses every register by name through the
same ``RegisterMap`` objects the gateware decodes (``hw.nic.csr.host_view``).

Objects:

``Device``            discovery, addresses, ``query`` (capabilities and limits),
                      controller API (EV states, EV events, probe period,
                      counters)
``ProtectionDomain``  ``reg_mr`` into RX's MR table (rkey, access rights)
``CompletionQueue``   a ring of 32-byte CQEs in host memory, polled by phase bit
``QueuePair``         RESET -> INIT -> RTR -> RTS, ``post_send`` (WRITE,
                      WRITE_WITH_IMM); a send CQ (reliability's) and a receive
                      CQ (RX's); ``query`` (as the NIC holds it), ``destroy``
``EvProfile``         the EVs (UDP source ports) a QP sprays over: an EXPLICIT
                      list, or GENERATED or AUTO, derived by the NIC's EV
                      generator (``Device.generate_evs``)

docs/api.md maps MRC's API (``mrc.h``, ``mrc_ctl.h``) to these.

Host addresses: the NIC keeps ``addr_width`` bits of every DMA address
(device info). ``create_cq``, ``create_qp``, ``reg_mr`` and ``post_send``
raise a ``ValueError`` for a ring, region or local buffer that does not lie
below 2^addr_width; the remote address of a WRITE is the peer's, any 64 bits.

The driver talks to the hardware only through a transport
(``host_driver.transport``): ``read32`` / ``write32`` on the CSR space, a
host memory with an allocator, and ``idle(cycles)`` to let time pass.
"""

from __future__ import annotations

import ipaddress
import string
import struct
from dataclasses import dataclass, field

from hw.csr import RegisterMap
from hw.headers import PATH_MTU, mtu_code
from hw.nic.csr import (
    DEVICE_INFO_TYPE_ID,
    DEVICE_INFO_VERSION,
    device_info_register_map,
    host_view,
)
from hw.nic.ev_gen import EV_WIDTH_MAX
from hw.nic.ev_load import (
    EV_GEN_TYPE_ID,
    EV_GEN_VERSION,
    SRV6_FIRST_USID,
    auto_params,
    ev_gen_register_map,
)
from hw.nic.plane_status import PLANE_COUNTERS, PLANES_TYPE_ID, PLANES_VERSION, plane_register_map
from hw.protocol import (
    EV_FORMAT_BITS,
    MAX_PLANES,
    PSN_MASK,
    SRV6_LOCATOR_BITS,
    SRV6_USID_BITS,
    SRV6_USIDS,
    EvFormat,
    EvState,
    QpState,
    ev_formats,
    ev_hi_values,
    ev_hi_words,
    srv6_carrier,
    srv6_usids,
)
from hw.reliability.cc_defaults import (
    DATA_WIRE_OVERHEAD,
    DEFAULT_BASE_RTT_NS,
    line_rate_bps,
    start_cwnd_packets,
    target_rtt_units,
)
from hw.reliability.layouts import CqeStatus, WqeFlags, WqeOpcode
from hw.reliability.nscc_path import nscc_register_values, nscc_register_words
from hw.reliability.registers import PEER_ADDRESS_REGS as REL_PEER_ADDRESS
from hw.reliability.registers import TYPE_ID as REL_TYPE_ID
from hw.reliability.registers import VERSION as REL_VERSION
from hw.reliability.registers import register_map as rel_register_map
from hw.rx.mr_table import MR_ACCESS_VALID, MR_ACCESS_WRITE, make_rkey
from hw.rx.regs import PEER_ADDRESS_REGS as RX_PEER_ADDRESS
from hw.rx.regs import RX_TYPE_ID, RX_VERSION, rx_register_map
from hw.tx.regs import PEER_ADDRESS_REGS as TX_PEER_ADDRESS
from hw.tx.regs import TX_TYPE_ID, TX_VERSION, tx_register_map

__all__ = [
    "Completion",
    "CompletionQueue",
    "Device",
    "DriverError",
    "EvEvent",
    "EvProfile",
    "MemoryRegion",
    "ProtectionDomain",
    "QpState",
    "QueuePair",
    "RegisterBlock",
    "WrOpcode",
    "gid_to_address",
    "ip_to_int",
    "mac_to_int",
]

CQE_BYTES = 32
WQE_BYTES = 64
MPR_UNIT = 128  # PSNs
# congestion control by name (Device.set_congestion): MRC's default, and the NIC's reset
NSCC = "uet-1.0-nscc"
PACKET_WINDOW = "packet-window"
CONGESTION_ALGORITHMS = (NSCC, PACKET_WINDOW)


class DriverError(Exception):
    """The hardware is not what the driver expects, or did not respond in time."""


class WrOpcode:
    WRITE = WqeOpcode.WRITE
    WRITE_WITH_IMM = WqeOpcode.WRITE_WITH_IMM


class Access:
    """Memory-region access rights (RX's MR_ACCESS bits)."""

    VALID = MR_ACCESS_VALID
    REMOTE_WRITE = MR_ACCESS_WRITE


def mac_to_int(mac: str) -> int:
    """A MAC address ``aa:bb:cc:dd:ee:ff`` as the NIC's 48-bit register value."""
    parts = str(mac).split(":")
    if len(parts) != 6 or not all(len(p) == 2 and all(c in string.hexdigits for c in p)
                                  for p in parts):
        raise ValueError(f"{mac!r} is not a MAC address (six hex pairs: 02:00:00:00:00:01)")
    return int("".join(parts), 16)


def gid_to_address(ip: str, ipv6: bool) -> tuple[int, bool]:
    """(address, over IPv6) of a peer GID or an own address: an IPv4 address or
    an IPv4-mapped GID (``::ffff:a.b.c.d``) as IPv4, any other IPv6 address as
    IPv6, which only a NIC built with IPv6 (TX ``caps.ipv6``) speaks."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"{ip!r} is not an IP address (10.0.0.2, fd00::2, or a GID "
                         f"::ffff:10.0.0.2)") from None
    if addr.version == 4 or addr.ipv4_mapped is not None:
        return ip_to_int(ip), False
    if not ipv6:
        ip_to_int(ip)  # refuses it, saying why
    return int(addr), True


def ip_to_int(ip: str) -> int:
    """An IPv4 address, or a GID that is IPv4-mapped (``::ffff:a.b.c.d``), as the
    NIC's 32-bit register value; any other IPv6 address is refused (a NIC
    built without IPv6 speaks IPv4 only: ``gid_to_address`` takes both)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"{ip!r} is not an IP address (10.0.0.2, or a GID "
                         f"::ffff:10.0.0.2)") from None
    if addr.version == 6:
        if addr.ipv4_mapped is None:
            raise ValueError(f"{ip!r} is an IPv6 address: this NIC is built without IPv6 "
                             f"(TX caps.ipv6 = 0, NicCore ipv6=False); a peer GID must be "
                             f"IPv4-mapped (::ffff:a.b.c.d)")
        addr = addr.ipv4_mapped
    return int(addr)


# ---- registers ----------------------------------------------------------------------


class RegisterBlock:
    """One discovered register block: its base and its map, registers by name."""

    def __init__(self, transport, base: int, regmap: RegisterMap):
        self.transport, self.base, self.map = transport, base, regmap

    @property
    def name(self) -> str:
        return self.map.name

    def addr(self, name: str, index: int = 0) -> int:
        return self.base + self.map[name].addr(index)

    async def read(self, name: str, index: int = 0) -> int:
        return await self.transport.read32(self.addr(name, index))

    async def write(self, name: str, value: int, index: int = 0) -> None:
        if not 0 <= value < 1 << 32:
            raise ValueError(f"{self.name}.{name}: {value!r} is not a 32-bit value")
        if self.map[name].access == "RO":
            raise ValueError(f"{self.name}.{name} is read only")
        await self.transport.write32(self.addr(name, index), value)

    def pack(self, name: str, **values: int) -> int:
        """The word of register ``name`` with its fields set; unnamed fields are 0."""
        fields = {f[0]: f for f in self.map[name].fields}
        word = 0
        for fname, value in values.items():
            if fname not in fields:
                raise ValueError(f"{self.name}.{name} has no field {fname!r} "
                                 f"(it has {sorted(fields)})")
            _, lsb, width, _ = fields[fname]
            if not 0 <= value < 1 << width:
                raise ValueError(f"{self.name}.{name}.{fname} is {width} bits; {value!r} "
                                 f"does not fit")
            word |= value << lsb
        return word

    def unpack(self, name: str, word: int) -> dict[str, int]:
        return {f[0]: (word >> f[1]) & ((1 << f[2]) - 1) for f in self.map[name].fields}

    async def write_fields(self, name: str, index: int = 0, **values: int) -> None:
        await self.write(name, self.pack(name, **values), index)

    async def read_fields(self, name: str, index: int = 0) -> dict[str, int]:
        return self.unpack(name, await self.read(name, index))


@dataclass(frozen=True)
class BlockHeader:
    type_id: int
    version: int
    base: int


async def discover(transport, max_blocks: int = 64) -> list[BlockHeader]:
    """Walk the block chain from offset 0: header (type << 16 | version), next."""
    blocks, offset, seen = [], 0, set()
    while True:
        if offset in seen or len(blocks) >= max_blocks:
            raise DriverError(f"the block chain loops or is longer than {max_blocks} blocks "
                              f"(next pointer 0x{offset:x})")
        seen.add(offset)
        header = await transport.read32(offset)
        blocks.append(BlockHeader(header >> 16, header & 0xFFFF, offset))
        offset = await transport.read32(offset + 4)
        if offset == 0:
            return blocks


# ---- completions ------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    """One CQE. ``wqe_index``: the send WQE's ring index (0 in receive CQEs)."""

    wr_id: int
    byte_len: int
    imm: int
    qpn: int
    status: int
    opcode: int
    wqe_index: int = 0

    SUCCESS = CqeStatus.SUCCESS
    RETRY_EXCEEDED = CqeStatus.RETRY_EXCEEDED
    LOC_QP_OP_ERR = CqeStatus.LOC_QP_OP_ERR  # the WQE's opcode is unknown
    FLUSHED = CqeStatus.FLUSHED
    REM_INV_REQ = CqeStatus.REM_INV_REQ  # NAK 0x61
    REM_ACCESS = CqeStatus.REM_ACCESS  # NAK 0x62

    @classmethod
    def unpack(cls, raw: bytes) -> Completion:
        wr_id, byte_len, imm, qpn, status, opcode, wqe_index = struct.unpack_from(
            "<QIIIBBxxH", raw)
        return cls(wr_id, byte_len, imm, qpn, status, opcode, wqe_index)


class CompletionQueue:
    """A ring of ``2**log2_entries`` 32-byte CQEs in host memory.

    The NIC writes entry ``n mod size`` with the phase bit (byte 0x17, bit 7)
    set to 1 on the first pass and flipped on every wrap; the host polls the
    entry at its consumer index until the phase matches the pass it expects.
    A CQ serves one direction of one QP (the hardware keeps one ring per QP
    and direction): the QP's send completions (reliability) or its receive
    completions (RX).
    """

    def __init__(self, device: Device, log2_entries: int):
        if not 1 <= log2_entries <= 15:
            raise ValueError(f"log2_entries must be in 1..15, not {log2_entries!r}")
        self.device = device
        self.log2_entries = log2_entries
        self.size = 1 << log2_entries
        self.addr = device.mem.alloc(self.size * CQE_BYTES, align=4096)
        device.mem.write(self.addr, bytes(self.size * CQE_BYTES))
        self.consumer = 0  # free-running
        self.qp: QueuePair | None = None
        self.direction: str | None = None

    def _reset(self):
        """Empty, as the NIC's producer index restarts at 0 (its QP's RESET)."""
        self.device.mem.write(self.addr, bytes(self.size * CQE_BYTES))
        self.consumer = 0

    def _bind(self, qp: QueuePair, direction: str):
        if self.addr is None:
            raise DriverError("CQ destroyed: create another")
        if self.qp is not None:
            raise ValueError(f"CQ already serves QP {self.qp.qpn} ({self.direction}); the NIC "
                             f"keeps one ring per QP and direction")
        self.qp, self.direction = qp, direction

    def _phase(self, index: int) -> int:
        return 1 - ((index >> self.log2_entries) & 1)

    def destroy(self):
        """Free the ring; its QP must have been destroyed first (the NIC would
        go on writing CQEs into it)."""
        if self.qp is not None:
            raise DriverError(f"CQ serves QP {self.qp.qpn} ({self.direction}): destroy the QP "
                              f"first")
        if self.addr is None:
            raise DriverError("CQ already destroyed")
        self.device.mem.free(self.addr)
        self.addr = None

    async def poll(self, max_entries: int | None = None) -> list[Completion]:
        """Take the completions that are there, without waiting."""
        out = []
        while max_entries is None or len(out) < max_entries:
            slot = self.addr + (self.consumer % self.size) * CQE_BYTES
            raw = self.device.mem.read(slot, CQE_BYTES)
            if raw[0x17] >> 7 != self._phase(self.consumer):
                break
            out.append(Completion.unpack(raw))
            self.consumer += 1
        if out and self.qp is not None:
            await self.qp._consumed(self.direction, self.consumer, out)
        return out

    async def wait(self, count: int, *, timeout_cycles: int = 1_000_000,
                   poll_cycles: int = 200) -> list[Completion]:
        """Poll until ``count`` completions are taken; DriverError on timeout."""
        out: list[Completion] = []
        waited = 0
        while len(out) < count:
            out += await self.poll(count - len(out))
            if len(out) >= count:
                break
            if waited >= timeout_cycles:
                raise DriverError(f"{len(out)} of {count} completions after {waited} cycles")
            await self.device.transport.idle(poll_cycles)
            waited += poll_cycles
        return out


# ---- protection domain and memory regions ----------------------------------------------


@dataclass
class MemoryRegion:
    pd: ProtectionDomain
    index: int
    addr: int
    length: int
    rkey: int
    access: int

    async def deregister(self):
        await self.pd.dereg_mr(self)

    async def query(self) -> MemoryRegion:
        """The region as RX's MR table holds it (a copy; ``access`` 0 once
        deregistered)."""
        rx, i = self.pd.device.rx, self.index
        addr = await rx.read("MR_BASE_LO", i) | await rx.read("MR_BASE_HI", i) << 32
        access = await rx.read("MR_ACCESS", i)
        return MemoryRegion(self.pd, i, addr, await rx.read("MR_LENGTH", i),
                            await rx.read("MR_RKEY", i), access & 0xFF)


class ProtectionDomain:
    """Groups memory regions and QPs: the NIC lets a QP write only the
    regions of its own PD (RX's ``QP_CTRL.pd`` and ``MR_ACCESS.pd``; another
    PD's region is NAK 0x62, counted ``bad_pd``). ``pdn`` is its 8-bit number.
    An rkey carries a key byte (bits 31:24) that changes every time its MR
    table entry is registered again, so a deregistered region's rkey no longer
    names the entry's next region (256 registrations of one entry bring a key
    back)."""

    def __init__(self, device: Device, pdn: int):
        self.device, self.pdn = device, pdn
        self.mrs: list[MemoryRegion] = []

    async def reg_mr(self, addr: int, length: int, *, remote_write: bool = True) -> MemoryRegion:
        """Register ``[addr, addr + length)``; a region that would pass the top
        of the NIC's address space (2^addr_width) is refused, so no region
        wraps to address 0."""
        dev = self.device
        if not 0 < length < 1 << 32:
            raise ValueError(f"length must be in 1..2^32-1, not {length!r}")
        width = dev.params["addr_width"]
        if addr < 0 or addr + length > 1 << width:
            raise ValueError(f"memory region addr 0x{addr:x} + length 0x{length:x} passes the "
                             f"top of the NIC's {width}-bit DMA addresses (device info "
                             f"addr_width): the region must end at or below 0x{1 << width:x}")
        index = dev._alloc_mr_index()
        dev._mr_generation[index] = (dev._mr_generation[index] + 1) & 0xFF
        # the R_Key names its entry (bits 23:8, which RX reads the entry at)
        rkey = make_rkey(index, generation=dev._mr_generation[index])
        access = Access.VALID | (Access.REMOTE_WRITE if remote_write else 0)
        rx = dev.rx
        # invalid while it is rewritten, valid last
        await rx.write("MR_ACCESS", 0, index)
        await rx.write("MR_BASE_LO", addr & 0xFFFFFFFF, index)
        await rx.write("MR_BASE_HI", addr >> 32, index)
        await rx.write("MR_LENGTH", length, index)
        await rx.write("MR_RKEY", rkey, index)
        await rx.write("MR_ACCESS", access | self.pdn << 8, index)
        mr = MemoryRegion(self, index, addr, length, rkey, access)
        self.mrs.append(mr)
        return mr

    async def dereg_mr(self, mr: MemoryRegion):
        await self.device.rx.write("MR_ACCESS", 0, mr.index)
        self.mrs.remove(mr)
        self.device._mr_used.discard(mr.index)

    def dealloc(self):
        """Free the PD's number; it must hold no region and no QP."""
        dev = self.device
        if self.mrs or any(qp.pd is self for qp in dev.qps.values()):
            raise DriverError(f"PD {self.pdn} still has regions or QPs")
        dev._pd_used.discard(self.pdn)


# ---- EV profiles --------------------------------------------------------------------------


@dataclass(frozen=True)
class EvProfile:
    """The EV values (UDP source ports) a QP sprays over, and how they are
    found: ``explicit`` (the driver writes them), ``generated`` (the NIC derives
    them from ``params``, MRC's width/init/min/max/mask/count) or ``auto`` (the
    NIC chooses: ``hw.nic.ev_load.auto_params``). A profile the NIC derives has
    the values it loaded once ``QueuePair.to_rts`` has run (``qp.evs``).

    ``phy_port_mask`` (MRC's): the planes (physical ports) the EVs are bound
    to, bit p for plane p; None (the default) is every plane of the NIC. EV
    i is bound to the (i mod k)-th plane of the mask's k, lowest first, so
    the QP's EVs, and its packets, spread evenly over them.

    ``ev_format`` (``hw.protocol.EvFormat``, or its name): where the EVs ride,
    MRC's three formats: ``udp`` (16-bit source ports), ``stev`` (32 bits:
    flow label and source port) and ``srv6`` (64 bits: up to four 16-bit
    uSIDs, first hop in bits 63..48, ended by a zero uSID; the last is the
    peer's own, its address being the locator, that uSID, zeros). STEV and
    SRv6 need an IPv6 peer and a NIC whose EV entries hold them
    (``Device.ev_formats``). GENERATED and AUTO derive values of up to 16
    bits and deposit each in ``ev_bits`` of a ``template`` EV
    (``hw.nic.ev_load.deposit``: the value's bit j in the j-th lowest set bit,
    the other bits the template's). By default those are UDP's source port,
    STEV's flow label (the template holding the source port) and SRv6's first
    uSID (the template holding the others); ``ev_bits`` may split the value,
    as MRC's STEV example of 8 + 4 + 4 bits over the flow label and the source
    port does."""

    values: tuple[int, ...]
    mode: str = "explicit"
    params: tuple[tuple[str, int], ...] = ()
    phy_port_mask: int | None = None
    ev_format: EvFormat = EvFormat.UDP

    @classmethod
    def explicit(cls, values, *, ev_format="udp", phy_port_mask=None) -> EvProfile:
        fmt = ev_format_of(ev_format)
        bits = EV_FORMAT_BITS[fmt]
        values = tuple(int(v) for v in values)
        if not values or any(not 0 <= v < 1 << bits for v in values):
            raise ValueError(f"{fmt.name} EVs are {bits}-bit values, at least one: "
                             f"{[hex(v) for v in values]}")
        if len(set(values)) != len(values):
            raise ValueError(f"EVs must be distinct: {values!r}")
        if fmt == EvFormat.SRV6:
            for v in values:
                if len(srv6_usids(v)) == 0 or srv6_carrier(0, v) != srv6_carrier(
                        0, _usids_value(srv6_usids(v))):
                    raise ValueError(f"SRv6 EV {v:#018x}: its uSIDs start in bits 63..48 and a "
                                     f"zero uSID ends them (no uSID after it)")
        return cls(values, "explicit", (), _check_port_mask(phy_port_mask), fmt)

    @classmethod
    def generated(cls, *, width=16, init=0, min_ev=0, max_ev=None, mask=None,
                  count=8, phy_port_mask=None, ev_format="udp", template=0,
                  ev_bits=None) -> EvProfile:
        """The GENERATED profile: the NIC derives the EVs (its ``ev_gen`` block).
        ``values`` holds what the rule gives (the golden model's
        ``generated_evs``), each deposited in ``ev_bits`` of ``template``
        (``ev_format``, ``ev_bits``: the class's docstring), which also checks
        the parameters here, with a message that says what to fix; ``to_rts``
        keeps what the NIC loaded."""
        from hw.nic.ev_load import deposit
        from sim.model.ev import generated_evs

        if not isinstance(width, int) or not 1 <= width <= 16:
            raise ValueError(f"width must be 1..16 bits (the UDP source port's 16), "
                             f"not {width!r}")
        top = (1 << width) - 1
        max_ev = top if max_ev is None else max_ev
        mask = top if mask is None else mask
        if not 0 <= init <= 0xFFFF or not 0 <= mask <= 0xFFFF:
            raise ValueError(f"init and mask are 16-bit values, not {init!r} and {mask!r}")
        fmt, bits = _derived_format(ev_format, template, ev_bits, width)
        evs = generated_evs(width=width, init=init, min_ev=min_ev, max_ev=max_ev, mask=mask,
                            count=count)
        params = (("width", width), ("init", init), ("min", min_ev), ("max", max_ev),
                  ("mask", mask), ("count", count), ("bits", bits), ("template", template))
        values = tuple(deposit(v, bits, template) for v, _ in evs)
        if fmt == EvFormat.SRV6:
            cls.explicit(values, ev_format=fmt)  # each a uSID list, or what to fix
        return cls(values, "generated", params, _check_port_mask(phy_port_mask), fmt)

    @classmethod
    def auto(cls, *, phy_port_mask=None, ev_format="udp", template=0,
             ev_bits=None) -> EvProfile:
        """AUTO: the NIC chooses (``hw.nic.ev_load.auto_params``, every entry of
        the QP's table): GENERATED over the ephemeral ports, deposited in
        ``ev_bits`` of ``template`` (UDP's source port or STEV's flow label by
        default; the class's docstring); in SRv6, whose uSIDs name fabric nodes,
        the ``evs_per_qp`` first hops from ``template``'s first uSID on (a
        fabric's first-hop uSIDs consecutive), the rest of the list the
        template's. ``to_rts`` then defaults ``ev_min_active`` to a quarter of
        them, as MRC's example does."""
        fmt = ev_format_of(ev_format)
        if fmt == EvFormat.SRV6:
            if ev_bits not in (None, SRV6_FIRST_USID):
                raise ValueError(f"SRv6 AUTO derives the first uSID: ev_bits must be "
                                 f"{SRV6_FIRST_USID:#x} (or left out), not {ev_bits!r}")
            if not srv6_usids(template):
                raise ValueError("SRv6 AUTO takes the first hops from the template's first uSID "
                                 "(bits 63..48) on: give a template whose first uSID is the "
                                 "fabric's first first-hop uSID, not 0")
            cls.explicit((template,), ev_format=fmt)  # a uSID list, or what to fix
            bits = SRV6_FIRST_USID
        else:
            fmt, bits = _derived_format(fmt, template, ev_bits, EV_WIDTH_MAX)
        return cls((), "auto", (("bits", bits), ("template", template)),
                   _check_port_mask(phy_port_mask), fmt)


def ev_format_of(ev_format) -> EvFormat:
    """An ``EvFormat`` from itself or its name (``"udp"``, ``"stev"``, ``"srv6"``)."""
    if isinstance(ev_format, EvFormat):
        return ev_format
    names = {f.name.lower(): f for f in EvFormat}
    if not isinstance(ev_format, str) or ev_format.lower() not in names:
        raise ValueError(f"ev_format must be one of {sorted(names)}, not {ev_format!r}")
    return names[ev_format.lower()]


# The EV bits a derived value fills by default, per format (gen_bits)
_DERIVED_BITS = {EvFormat.UDP: 0xFFFF, EvFormat.STEV: 0xFFFF << 16,
                 EvFormat.SRV6: SRV6_FIRST_USID}


def _derived_format(ev_format, template, ev_bits, width) -> tuple[EvFormat, int]:
    """(format, EV bits) of a derived profile of ``width``-bit values; a
    ValueError says what to fix."""
    fmt = ev_format_of(ev_format)
    size = EV_FORMAT_BITS[fmt]
    bits = _DERIVED_BITS[fmt] if ev_bits is None else ev_bits
    if not isinstance(template, int) or not 0 <= template < 1 << size:
        raise ValueError(f"template must be a {size}-bit {fmt.name} EV, not {template!r}")
    if not isinstance(bits, int) or not 0 < bits < 1 << size:
        raise ValueError(f"ev_bits must be a nonzero {size}-bit mask of the {fmt.name} EV's "
                         f"bits, not {ev_bits!r}")
    if bits.bit_count() < width:
        raise ValueError(f"ev_bits {bits:#x} has {bits.bit_count()} bits, fewer than the "
                         f"{width} of the derived values: give at least {width}")
    if template & bits:
        raise ValueError(f"template {template:#x} sets bits that ev_bits {bits:#x} gives the "
                         f"derived value: clear them in the template")
    return fmt, bits


def _usids_value(usids) -> int:
    """uSIDs (first hop first) as an SRv6 EV holds them."""
    value = 0
    for i, usid in enumerate(usids):
        value |= usid << SRV6_USID_BITS * (SRV6_USIDS - 1 - i)
    return value


def check_srv6_peer(peer: int, evs) -> None:
    """Each SRv6 EV of ``evs`` ends at ``peer`` (a 128-bit IPv6 address): its
    last uSID is the peer's own, the peer's address being the locator, that
    uSID and zeros; a ValueError says what to fix."""
    keep = 128 - SRV6_LOCATOR_BITS - SRV6_USID_BITS
    if peer & ((1 << keep) - 1):
        raise ValueError(f"an SRv6 peer's address is its locator, its uSID and zeros "
                         f"(locator:uSID::), not {ipaddress.IPv6Address(peer)}")
    own = peer >> keep & ((1 << SRV6_USID_BITS) - 1)
    for v in evs:
        if srv6_usids(v)[-1] != own:
            raise ValueError(f"SRv6 EV {v:#018x} ends at uSID {srv6_usids(v)[-1]:#06x}, not at "
                             f"the peer's own {own:#06x} ({ipaddress.IPv6Address(peer)}): "
                             f"the fabric consumes the others and delivers on the last")


def _check_port_mask(mask):
    """``mask`` as given, or a ValueError saying what to fix (the NIC's own
    plane count is checked at ``to_rts``)."""
    if mask is not None and (not isinstance(mask, int) or not 0 < mask < 1 << MAX_PLANES):
        raise ValueError(f"phy_port_mask must name at least one of the {MAX_PLANES} planes "
                         f"(bit p: plane p; None: every plane), not {mask!r}")
    return mask


@dataclass(frozen=True)
class EvEvent:
    qpn: int
    ev_index: int
    old: int
    new: int
    drops: int
    rtt_ns: int | None = None  # the probe answer's round trip, if one made the event


@dataclass
class PlaneEvent:
    plane: int
    up: bool  # the plane's link as the event was read


# ---- queue pairs ----------------------------------------------------------------------------


@dataclass
class _Wqe:
    wr_id: int
    opcode: int


class QueuePair:
    """One reliable connection: a send queue (ring of 64-byte WQEs), its send
    CQ (reliability writes it) and its receive CQ (RX writes it).

    Send completions follow verbs: a WQE posted with ``signaled`` (or on a QP
    created with ``sq_sig_all``) gets a CQE when it succeeds, an unsignaled
    one does not (its ring slot is free once a later WQE's CQE arrives: CQEs
    carry the WQE's ring index), and every WQE that ends in an error gets
    one. A WQE posted while the QP is in ERROR completes FLUSHED. ``to_reset``
    (from any state) makes the QP reusable: to_init .. to_rts bring it back."""

    def __init__(self, device, qpn, pd, send_cq, recv_cq, sq_log2, sq_sig_all=False):
        self.device, self.qpn, self.pd = device, qpn, pd
        self.send_cq, self.recv_cq = send_cq, recv_cq
        self.sq_log2 = sq_log2
        self.sq_size = 1 << sq_log2
        self.sq_addr = device.mem.alloc(self.sq_size * WQE_BYTES, align=4096)
        device.check_allocated_dma_range("send queue", self.sq_addr, self.sq_size * WQE_BYTES)
        device.mem.write(self.sq_addr, bytes(self.sq_size * WQE_BYTES))
        self.producer = 0  # free-running, 16 bits on the wire
        self.sq_done = 0  # ring index of the oldest WQE not known to be completed
        self.outstanding = 0  # WQEs posted and not yet completed
        self.sq_sig_all = bool(sq_sig_all)
        self.state = QpState.RESET
        self.evs: EvProfile | None = None
        self.ev_planes: list[int] = []  # each EV entry's plane, from to_rts
        self.mpr, self.trim_nack, self.mtu = 1, True, 1024  # set at RTR (responder)
        self.req_mpr = 1  # set at RTS (requester)
        self.next_wr_id = 1
        send_cq._bind(self, "send")
        recv_cq._bind(self, "recv")

    async def _consumed(self, direction, consumer, cqes):
        if direction == "send":
            # a CQE completes its WQE and every (unsignaled) WQE before it
            for c in cqes:
                done = (c.wqe_index - self.sq_done + 1) & 0xFFFF
                if done > self.outstanding:
                    raise DriverError(f"QP {self.qpn}: send CQE for WQE {c.wqe_index}, but "
                                      f"only {self.outstanding} WQEs from {self.sq_done} "
                                      f"are outstanding")
                self.outstanding -= done
                self.sq_done = (c.wqe_index + 1) & 0xFFFF
        else:
            await self.device.rx.write("QP_CQ_CONS", consumer & 0xFFFF, self.qpn)

    def _need(self, *states):
        if self.state not in states:
            names = " or ".join(QpState(s).name for s in states)
            raise DriverError(f"QP {self.qpn} is {QpState(self.state).name}, needs {names}")

    async def _rx_ctrl(self, state):
        """RX's QP_CTRL: the state with the QP's PD, path MTU, MPR and TRIM_NACK."""
        await self.device.rx.write_fields(
            "QP_CTRL", self.qpn, state=state, trim_nack=int(self.trim_nack), mpr=self.mpr,
            mtu=mtu_code(self.mtu), pd=self.pd.pdn)

    async def to_init(self):
        self._need(QpState.RESET)
        dev = self.device
        await dev.rel.write_fields("qp_ctrl", self.qpn, state=QpState.RESET)
        await self._rx_ctrl(QpState.INIT)
        await dev.rel.write_fields("qp_ctrl", self.qpn, state=QpState.INIT)
        self.state = QpState.INIT

    async def to_rtr(self, *, dest_qpn: int, peer_mac: str, peer_ip: str, rq_psn: int = 0,
                     mpr: int = 1, ack_n: int = 4, ack_t: int = 256, trim_nack: bool = True,
                     mtu: int = 1024):
        """The responder side: accept data from (peer_ip, dest_qpn) in packets
        of path MTU ``mtu`` (as verbs, an RTR attribute: FIRST and MIDDLE
        packets must carry exactly it)."""
        self._need(QpState.INIT)
        dev = self.device
        self._check_mpr(mpr)
        self._check_mtu(mtu)
        rx, q = dev.rx, self.qpn
        await dev.write_address(rx, peer_ip, q, RX_PEER_ADDRESS)
        await rx.write("QP_PEER_QPN", dest_qpn, q)
        await rx.write("QP_EPSN", rq_psn & PSN_MASK, q)
        await rx.write("QP_CQ_BASE_LO", self.recv_cq.addr & 0xFFFFFFFF, q)
        await rx.write("QP_CQ_BASE_HI", self.recv_cq.addr >> 32, q)
        await rx.write("QP_CQ_CONS", self.recv_cq.consumer & 0xFFFF, q)
        await rx.write_fields("QP_CQ_CTRL", q, log2_entries=self.recv_cq.log2_entries, enable=1)
        await rx.write_fields("QP_ACK", q, n=ack_n, t=ack_t)
        self.mpr, self.trim_nack, self.mtu = mpr, trim_nack, mtu
        await self._rx_ctrl(QpState.RTR)
        self.dest_qpn, self.peer_mac, self.peer_ip = dest_qpn, peer_mac, peer_ip
        await dev.rel.write_fields("qp_ctrl", q, state=QpState.RTR)
        self.state = QpState.RTR

    async def to_rts(self, *, evs: EvProfile, sq_psn: int = 0, mtu: int | None = None,
                     timeout: int = 12, linear_cnt: int = 7, exp_cnt: int = 7,
                     ev_min_active: int | None = None, sack_threshold: int = 0, dscp: int = 0,
                     max_wimm: int | None = None, mpr: int | None = None):
        """The requester side: send to the peer given at RTR over ``evs``.
        ``mpr``: the requester's MPR (PSNs in flight, units of 128), MRC's
        requester MPR, apart from the responder's given at RTR (default: that
        one).
        The retransmit timeout is 1.024 us x 2^``timeout``; ``linear_cnt``
        retries at it, then ``exp_cnt`` doubling (25 = forever): exactly
        ``linear_cnt + exp_cnt`` retries, then the QP goes to ERROR. ``mtu``
        is the path MTU given at RTR (both directions use it); given here, it
        must be that one.

        ``max_wimm`` (MRC's QP attribute): at most this many WRITE_WITH_IMM
        messages started and not yet completed; the next one waits, and the
        WQEs posted after it wait behind it (a QP's WQEs go in order). Give the
        peer's receive CQ depth (exchanged with its QPN), or less: then the
        requester never sends more immediates than the peer can hold, and the
        peer drops none for a full CQ (``cq_full``) while its host polls.
        Default: the NIC's maximum (``params["max_wimm"]``, the in-flight
        table's entries per QP), which bounds nothing the in-flight table does
        not: this end cannot know the peer's CQ, and a full peer CQ loses
        nothing (the peer leaves the message unacknowledged, this end resends
        it), it only costs retransmissions."""
        self._need(QpState.RTR)
        dev = self.device
        dev.planes_of(evs.phy_port_mask)  # refused before any register is written
        dev.check_ev_format(evs, self.peer_ip)
        if mtu is None:
            mtu = self.mtu
        self._check_mtu(mtu)
        if mtu != self.mtu:
            raise ValueError(f"mtu {mtu} is not the path MTU {self.mtu} given at RTR (to_rtr's "
                             f"mtu): both directions of a QP use one")
        if not 0 <= timeout <= 24:
            raise ValueError(f"timeout (t) must be in 0..24, not {timeout!r}")
        if not 0 <= linear_cnt <= 7:
            raise ValueError(f"linear_cnt must be in 0..7, not {linear_cnt!r}")
        if not 0 <= exp_cnt <= 25:
            raise ValueError(f"exp_cnt must be in 0..24 retries, or 25 = forever, "
                             f"not {exp_cnt!r}")
        wimm_limit = dev.params["max_wimm"]
        if max_wimm is None:
            max_wimm = wimm_limit
        if not isinstance(max_wimm, int) or not 1 <= max_wimm <= wimm_limit:
            raise ValueError(f"max_wimm must be in 1..{wimm_limit} (WRITE_WITH_IMM messages "
                             f"outstanding; the NIC's limit, params['max_wimm']), "
                             f"not {max_wimm!r}")
        if len(evs.values) > dev.params["evs_per_qp"]:
            raise ValueError(f"{len(evs.values)} EVs, the NIC holds {dev.params['evs_per_qp']} "
                             f"per QP")
        if ev_min_active is None:
            ev_min_active = max(1, dev.params["evs_per_qp"] // 4) if evs.mode == "auto" else 1
        req_mpr = self.mpr if mpr is None else mpr
        self._check_mpr(req_mpr)
        tx, rel, q = dev.tx, dev.rel, self.qpn
        peer_mac = mac_to_int(self.peer_mac)
        # TX: per-QP settings and EV table
        await tx.write("qp_ctrl", 0, q)
        for name, value in (("qp_mtu", mtu), ("qp_mpr", req_mpr),
                            ("qp_cwnd", dev.params["window"]),
                            ("qp_next_psn", sq_psn & PSN_MASK), ("qp_dest_qpn", self.dest_qpn),
                            ("qp_dst_mac_lo", peer_mac & 0xFFFFFFFF),
                            ("qp_dst_mac_hi", peer_mac >> 32),
                            ("qp_dscp", dscp), ("qp_sq_base_lo", self.sq_addr & 0xFFFFFFFF),
                            ("qp_sq_base_hi", self.sq_addr >> 32),
                            ("qp_sq_log2_size", self.sq_log2), ("qp_max_wimm", max_wimm)):
            await tx.write(name, value, q)
        await dev.write_address(tx, self.peer_ip, q, TX_PEER_ADDRESS, evs.ev_format)
        self.max_wimm, self.req_mpr = max_wimm, req_mpr
        # reliability: timers, rings, peer (probes), EVs
        await rel.write_fields("qp_rel_cfg", q, t=timeout, linear_cnt=linear_cnt,
                               exp_cnt=exp_cnt, ev_min_active=ev_min_active,
                               sack_threshold=sack_threshold)
        for name, value in (("sq_base_lo", self.sq_addr & 0xFFFFFFFF),
                            ("sq_base_hi", self.sq_addr >> 32),
                            ("cq_base_lo", self.send_cq.addr & 0xFFFFFFFF),
                            ("cq_base_hi", self.send_cq.addr >> 32),
                            ("peer_mac_lo", peer_mac & 0xFFFFFFFF),
                            ("peer_mac_hi", peer_mac >> 32),
                            ("dest_qpn", self.dest_qpn)):
            await rel.write(name, value, q)
        await dev.write_address(rel, self.peer_ip, q, REL_PEER_ADDRESS, evs.ev_format)
        await rel.write_fields("ring_sizes", q, sq_log2=self.sq_log2,
                               cq_log2=self.send_cq.log2_entries)
        await self._load_evs(evs)
        await rel.write_fields("qp_ctrl", q, state=QpState.RTS)
        await self._rx_ctrl(QpState.RTS)
        self.producer = self.sq_done = await tx.read("qp_doorbell", q)
        self.outstanding = 0
        await tx.write_fields("qp_ctrl", q, enable=1)
        self.state = QpState.RTS

    async def _load_evs(self, evs: EvProfile):
        dev, q = self.device, self.qpn
        per_qp = dev.params["evs_per_qp"]
        planes = dev.planes_of(evs.phy_port_mask)
        self.ev_planes = [planes[i % len(planes)] for i in range(per_qp)]
        if evs.mode != "explicit":
            self.evs = await dev.generate_evs(q, evs)
            if dev.num_planes > 1:  # the generator loads values and states: bind planes
                for i in range(per_qp):
                    await dev.tx.write_fields("ev_select", ev_index=i, qpn=q)
                    entry = await dev.tx.read_fields("ev_entry")
                    await dev.write_ev(q, i, await dev.read_ev_value(q, i),
                                       plane=self.ev_planes[i], tx_state=entry["state"])
            return
        for i in range(per_qp):
            used = i < len(evs.values)
            value = evs.values[i] if used else 0
            state = EvState.GOOD if used else EvState.DENIED
            await dev.write_ev(q, i, value, plane=self.ev_planes[i], tx_state=state,
                               rel_state=state)
        self.evs = evs

    def _check_mtu(self, mtu):
        largest = self.device.params["max_mtu"]
        if mtu not in PATH_MTU.values() or mtu > largest:
            raise ValueError(f"mtu must be a power of two in 256..{largest}, not {mtu!r}")

    def _check_mpr(self, mpr):
        limit = self.device.params["mpr_max"] // MPR_UNIT
        if not 1 <= mpr <= limit:
            raise ValueError(f"mpr must be in 1..{limit} (units of {MPR_UNIT} PSNs), not {mpr!r}")

    async def to_error(self):
        await self.device.rel.write_fields("qp_ctrl", self.qpn, state=QpState.ERROR)
        await self.device.tx.write("qp_ctrl", 0, self.qpn)
        self.state = QpState.ERROR

    async def to_reset(self):
        """Any state -> RESET: the WQEs not completed are dropped (their CQEs are
        not delivered), reliability's record and TX's ring position are reset
        (reliability tells TX: qp_ctrl.reset), RX stops taking data, and both
        CQs start empty (the NIC restarts their producer indices at 0)."""
        dev = self.device
        await dev.rel.write_fields("qp_ctrl", self.qpn, state=QpState.RESET)
        await dev.rx.write_fields("QP_CTRL", self.qpn, state=QpState.RESET)
        self.send_cq._reset()
        self.recv_cq._reset()
        self.outstanding = 0
        self.state = QpState.RESET

    async def query(self):
        """The QP as the NIC holds it (``host_driver.query.QpAttr``)."""
        from .query import query_qp

        return await query_qp(self)

    async def destroy(self):
        """To RESET (from any state), TX's sending stopped, the send queue's
        memory freed and the QPN free again; its CQs are unbound (destroy them
        or give them to a new QP)."""
        dev = self.device
        if dev.qps.get(self.qpn) is not self:
            raise DriverError(f"QP {self.qpn} already destroyed")
        await self.to_reset()
        await dev.tx.write("qp_ctrl", 0, self.qpn)
        self.send_cq.qp = self.recv_cq.qp = None
        dev.mem.free(self.sq_addr)
        del dev.qps[self.qpn]

    async def post_send(self, opcode: int, *, local_addr: int, length: int, remote_addr: int,
                        rkey: int, imm: int = 0, wr_id: int | None = None,
                        signaled: bool = True, ring: bool = True) -> int:
        """Write one WQE and (with ``ring``) the doorbell. Returns the wr_id.
        The ring slot is reused only after the WQE's send completion (or a later
        WQE's) was polled. Unsignaled (``signaled=False`` on a QP without
        ``sq_sig_all``): no CQE on success. In ERROR the WQE completes FLUSHED."""
        self._need(QpState.RTS, QpState.ERROR)
        if opcode not in (WrOpcode.WRITE, WrOpcode.WRITE_WITH_IMM):
            raise ValueError(f"opcode must be WRITE or WRITE_WITH_IMM, not {opcode!r}")
        if not 0 <= length < 1 << 31:
            raise ValueError(f"length must be in 0..2^31-1, not {length!r}")
        self.device.check_dma_range("local buffer", local_addr, length)
        if self.outstanding >= self.sq_size:
            raise DriverError(f"QP {self.qpn}: send queue full ({self.sq_size} WQEs not "
                              f"completed); poll the send CQ")
        if wr_id is None:
            wr_id, self.next_wr_id = self.next_wr_id, self.next_wr_id + 1
        flags = WqeFlags.SIGNALED if signaled or self.sq_sig_all else 0
        wqe = struct.pack("<BBHIQQQII", opcode, flags, 0, imm, wr_id, local_addr,
                          remote_addr, length, rkey).ljust(WQE_BYTES, b"\0")
        slot = self.sq_addr + (self.producer % self.sq_size) * WQE_BYTES
        self.device.mem.write(slot, wqe)
        self.producer = (self.producer + 1) & 0xFFFF
        self.outstanding += 1
        if ring:
            await self.ring_doorbell()
        return wr_id

    async def ring_doorbell(self):
        await self.device.tx.write("qp_doorbell", self.producer, self.qpn)


# ---- the device ------------------------------------------------------------------------------


@dataclass
class Device:
    """One NIC: discovered register blocks, parameters, objects."""

    transport: object
    blocks: list[BlockHeader] = field(default_factory=list)
    params: dict[str, int] = field(default_factory=dict)

    KNOWN = {TX_TYPE_ID: ("tx", TX_VERSION), RX_TYPE_ID: ("rx", RX_VERSION),
             REL_TYPE_ID: ("reliability", REL_VERSION),
             DEVICE_INFO_TYPE_ID: ("device_info", DEVICE_INFO_VERSION),
             EV_GEN_TYPE_ID: ("ev_gen", EV_GEN_VERSION),
             PLANES_TYPE_ID: ("planes", PLANES_VERSION)}
    OPTIONAL = (EV_GEN_TYPE_ID, PLANES_TYPE_ID)

    def __post_init__(self):
        self.mem = self.transport.mem
        self.ip6: str | None = None  # the NIC's own IPv6 address (set_address)
        self.qps: dict[int, QueuePair] = {}
        self._mr_used: set[int] = set()
        self._pd_used: set[int] = set()

    async def init(self, *, ready_timeout_cycles: int = 100_000):
        self.blocks = await discover(self.transport)
        by_type = {}
        for b in self.blocks:
            if b.type_id in self.KNOWN:
                name, version = self.KNOWN[b.type_id]
                if b.version != version:
                    raise DriverError(f"{name} block version {b.version}, driver knows "
                                      f"{version}")
                by_type[b.type_id] = b
        # the EV generator is optional (NicCore ev_gen=False: EXPLICIT EVs
        # only), the planes block only in a NIC with planes
        missing = [self.KNOWN[t][0] for t in self.KNOWN
                   if t not in by_type and t not in self.OPTIONAL]
        if missing:
            raise DriverError(f"blocks not found: {missing}; found "
                              f"{[(hex(b.type_id), hex(b.base)) for b in self.blocks]}")
        info = RegisterBlock(self.transport, by_type[DEVICE_INFO_TYPE_ID].base,
                             host_view(device_info_register_map()))
        for reg in info.map.registers:
            if reg.name not in ("header", "next", "scratch"):
                self.params[reg.name] = await info.read(reg.name)
        p = self.params
        if not 32 <= p["addr_width"] <= 64:
            raise DriverError(f"device info addr_width is {p['addr_width']}, not a DMA address "
                              f"width in 32..64: the gateware is older than NIC version 1.1 "
                              f"(reports {p['nic_version'] >> 16}.{p['nic_version'] & 0xFFFF})")
        self.info = info
        # TX caps (at the same offset with or without IPv6) says whether the
        # blocks have their IPv6 registers
        self.tx = RegisterBlock(self.transport, by_type[TX_TYPE_ID].base,
                                host_view(tx_register_map(p["num_qps"], p["evs_per_qp"])))
        caps = await self.tx.read_fields("caps")
        p["ipv6"] = ipv6 = bool(caps["ipv6"])
        p["ev_width"] = ev_width = 64 if caps["srv6"] else 32 if caps["stev"] else 16
        self.tx = RegisterBlock(self.transport, by_type[TX_TYPE_ID].base,
                                host_view(tx_register_map(p["num_qps"], p["evs_per_qp"], ipv6,
                                                          ev_width)))
        # the largest max_wimm (QueuePair.to_rts): a bound above the in-flight
        # table's entries per QP binds nothing more (every message takes a PSN)
        p["max_wimm"] = 1 << caps["inflight_log2"]
        self.rx = RegisterBlock(self.transport, by_type[RX_TYPE_ID].base,
                                host_view(rx_register_map(p["num_qps"], p["num_mrs"],
                                                          ipv6=ipv6)))
        self.rel = RegisterBlock(self.transport, by_type[REL_TYPE_ID].base,
                                 host_view(rel_register_map(p["num_qps"], p["evs_per_qp"],
                                                            p["window"], ipv6, ev_width)))
        self.ev_gen = None if EV_GEN_TYPE_ID not in by_type else RegisterBlock(
            self.transport, by_type[EV_GEN_TYPE_ID].base,
            host_view(ev_gen_register_map(ev_width)))
        self.planes = None
        if self.num_planes > 1:
            if PLANES_TYPE_ID not in by_type:
                raise DriverError(f"device info says {self.num_planes} planes but the planes "
                                  "block is missing")
            self.planes = RegisterBlock(self.transport, by_type[PLANES_TYPE_ID].base,
                                        host_view(plane_register_map(self.num_planes)))
        self._mr_generation = [0] * p["num_mrs"]
        waited = 0
        while not (await self.tx.read_fields("status"))["ready"]:
            if waited >= ready_timeout_cycles:
                raise DriverError("TX tables did not come out of reset")
            await self.transport.idle(64)
            waited += 64

    async def set_address(self, mac: str, ip: str, ip6: str | None = None):
        """The NIC's own MAC and IPv4 address (``ip``), and on a NIC built
        with IPv6 its IPv6 address (``ip6``), in every block that uses them.
        QPs whose peer is IPv6 send from ``ip6``; frames to either address
        are taken."""
        mac_i = mac_to_int(mac)
        ip_i, v6 = gid_to_address(ip, self.params.get("ipv6", False))
        if v6:
            raise ValueError(f"ip={ip!r} is an IPv6 address: give the NIC's IPv4 address as "
                             f"ip and its IPv6 address as ip6")
        if ip6 is not None:
            if not self.params.get("ipv6"):
                raise ValueError(f"ip6={ip6!r}: this NIC is built without IPv6 (TX caps.ipv6 "
                                 f"= 0, NicCore ipv6=False)")
            ip6_i, v6 = gid_to_address(ip6, True)
            if not v6:
                raise ValueError(f"ip6={ip6!r} is an IPv4 address: give it as ip")
        for blk, lo, hi, ip_reg, ip6_reg in (
                (self.tx, "src_mac_lo", "src_mac_hi", "src_ip", "src_ip6"),
                (self.rx, "OWN_MAC_LO", "OWN_MAC_HI", "OWN_IP", "OWN_IP6"),
                (self.rel, "own_mac_lo", "own_mac_hi", "own_ip", "own_ip6")):
            await blk.write(lo, mac_i & 0xFFFFFFFF)
            await blk.write(hi, mac_i >> 32)
            await blk.write(ip_reg, ip_i)
            if ip6 is not None:
                for i in range(4):
                    await blk.write(ip6_reg, ip6_i >> 32 * i & 0xFFFFFFFF, i)
        self.mac, self.ip, self.ip6 = mac, ip, ip6

    async def write_address(self, blk, ip: str, q: int, regs: tuple[str, str, str],
                            ev_format: EvFormat = EvFormat.UDP):
        """QP ``q``'s peer address ``ip`` (a GID: IPv4, IPv4-mapped or, on a
        NIC built with IPv6, IPv6) into block ``blk``'s registers ``regs``
        (the block's ``PEER_ADDRESS_REGS``: low, high, family): its low 32
        bits into ``low``, and on a NIC built with IPv6 bits 127..32 into
        ``high`` (a format for 1..3) and the family, with the QP's
        ``ev_format`` above it (TX and reliability), into ``family``."""
        low, high, family = regs
        value, v6 = gid_to_address(ip, self.params.get("ipv6", False))
        if v6 and self.ip6 is None:
            raise ValueError(f"peer {ip!r} is IPv6 but the NIC has no IPv6 address: give it "
                             f"one first (Device.set_address(mac, ip, ip6=...))")
        await blk.write(low, value & 0xFFFFFFFF, q)
        if self.params.get("ipv6"):
            for i in (1, 2, 3):
                await blk.write(high.format(i), value >> 32 * i & 0xFFFFFFFF, q)
            await blk.write(family, int(v6) | ev_format << 1, q)

    @property
    def ev_formats(self) -> tuple[EvFormat, ...]:
        """The EV formats this NIC's EV entries hold (TX ``caps.stev``/``srv6``)."""
        return ev_formats(self.params.get("ev_width", 16))

    def check_ev_format(self, evs: EvProfile, peer_ip: str) -> None:
        """A ValueError that says what to fix unless the NIC and the peer take
        ``evs``'s format: STEV and SRv6 need EV entries that hold them and an
        IPv6 peer, SRv6 EVs that end at the peer (``check_srv6_peer``)."""
        fmt = evs.ev_format
        if fmt == EvFormat.UDP:
            return
        if fmt not in self.ev_formats:
            raise ValueError(f"{fmt.name} EVs need a NIC whose EV entries hold "
                             f"{EV_FORMAT_BITS[fmt]} bits (NicCore ev_width >= "
                             f"{EV_FORMAT_BITS[fmt]}); this one holds "
                             f"{self.params.get('ev_width', 16)}: use ev_format='udp'")
        value, v6 = gid_to_address(peer_ip, self.params.get("ipv6", False))
        if not v6:
            raise ValueError(f"{fmt.name} EVs ride in IPv6 headers: peer {peer_ip!r} is IPv4; "
                             f"use ev_format='udp' or an IPv6 peer")
        if fmt == EvFormat.SRV6:
            check_srv6_peer(value, evs.values)

    async def write_ev(self, q: int, i: int, value: int, *, plane: int, tx_state: int,
                       rel_state: int | None = None):
        """EV ``i`` of QP ``q``: its value (every bit the entries hold, bits
        above 15 staged in each block's ``ev_value_hi`` first: an entry write
        clears them) and plane into TX and reliability; ``tx_state`` into TX's
        entry, ``rel_state`` (None: left as it is) into reliability's."""
        await self.tx.write_fields("ev_select", ev_index=i, qpn=q)
        await self._stage_ev_hi(self.tx, value)
        await self.tx.write_fields("ev_entry", value=value & 0xFFFF, state=tx_state,
                                   plane=plane)
        await self._stage_ev_hi(self.rel, value)
        per_qp = self.params["evs_per_qp"]
        state = {} if rel_state is None else {"state": rel_state, "set_state": 1}
        await self.rel.write_fields("ev", q * per_qp + i, value=value & 0xFFFF, plane=plane,
                                    **state)

    async def _stage_ev_hi(self, blk, value: int):
        """EV ``value``'s bits above 15 into ``blk``'s ``ev_value_hi``, for its
        next entry write (which takes and clears them)."""
        for k, word in enumerate(ev_hi_values(value, self.params.get("ev_width", 16))):
            await blk.write("ev_value_hi", word, k)

    async def read_ev_value(self, q: int, i: int) -> int:
        """EV ``i`` of QP ``q``'s value, every bit of it (TX's entry)."""
        await self.tx.write_fields("ev_select", ev_index=i, qpn=q)
        value = (await self.tx.read_fields("ev_entry"))["value"]
        for k in range(ev_hi_words(self.params.get("ev_width", 16))):
            value |= await self.tx.read("ev_value_hi", k) << 16 + 32 * k
        return value

    def check_dma_range(self, what: str, addr: int, length: int):
        """Raise a ValueError unless ``[addr, addr + length)`` lies below
        2^addr_width, where the NIC's DMA addresses reach (device info
        ``addr_width``): the NIC keeps only that many address bits."""
        width = self.params["addr_width"]
        if addr < 0 or addr + length > 1 << width:
            raise ValueError(f"{what} [0x{addr:x}, 0x{addr + length:x}) does not fit the NIC's "
                             f"{width}-bit DMA addresses (device info addr_width): place it "
                             f"below 0x{1 << width:x}")

    def check_allocated_dma_range(self, what: str, addr: int, length: int):
        """``check_dma_range`` for host memory the driver allocated: freed if it
        does not fit."""
        try:
            self.check_dma_range(what, addr, length)
        except ValueError:
            self.mem.free(addr)
            raise

    def alloc_pd(self) -> ProtectionDomain:
        """A PD with the lowest free number (1..255; RX's registers reset to PD
        0, which the driver never hands out)."""
        pdn = next((n for n in range(1, 256) if n not in self._pd_used), None)
        if pdn is None:
            raise DriverError("all 255 protection domains are in use")
        self._pd_used.add(pdn)
        return ProtectionDomain(self, pdn)

    def _alloc_mr_index(self) -> int:
        for i in range(self.params["num_mrs"]):
            if i not in self._mr_used:
                self._mr_used.add(i)
                return i
        raise DriverError(f"MR table full ({self.params['num_mrs']} regions)")

    def create_cq(self, log2_entries: int) -> CompletionQueue:
        cq = CompletionQueue(self, log2_entries)
        self.check_allocated_dma_range("completion queue", cq.addr, cq.size * CQE_BYTES)
        return cq

    async def create_qp(self, pd: ProtectionDomain, send_cq: CompletionQueue,
                        recv_cq: CompletionQueue, sq_log2: int = 6,
                        sq_sig_all: bool = False, qpn: int | None = None) -> QueuePair:
        """``sq_sig_all``: every WQE is signaled, whatever ``post_send``'s
        ``signaled`` says (verbs' sq_sig_all). ``qpn``: a free QP number of the
        caller's choosing (None: the lowest free one)."""
        if not 1 <= sq_log2 <= 15:
            raise ValueError(f"sq_log2 must be in 1..15, not {sq_log2!r}")
        if send_cq.size < 1 << sq_log2:
            # reliability writes send CQEs without a consumer index: a send CQ at
            # least as large as the SQ cannot be overrun, since a WQE slot is
            # reused only after its completion is polled
            raise ValueError(f"send CQ ({send_cq.size} entries) must be at least as large as "
                             f"the SQ ({1 << sq_log2})")
        num_qps = self.params["num_qps"]
        if qpn is None:
            qpn = next((q for q in range(num_qps) if q not in self.qps), None)
            if qpn is None:
                raise DriverError(f"all {num_qps} QPs are in use")
        elif not isinstance(qpn, int) or not 0 <= qpn < num_qps:
            raise ValueError(f"qpn must be in 0..{num_qps - 1} (num_qps), not {qpn!r}")
        elif qpn in self.qps:
            raise DriverError(f"QP {qpn} is in use")
        qp = QueuePair(self, qpn, pd, send_cq, recv_cq, sq_log2, sq_sig_all)
        self.qps[qpn] = qp
        return qp

    async def query(self):
        """Capabilities and limits, from the NIC's registers
        (``host_driver.query.DeviceAttr``)."""
        from .query import query_device

        return await query_device(self)

    # ---- controller API ----------------------------------------------------------------------

    async def generate_evs(self, qpn: int, evs: EvProfile, *,
                           timeout_cycles: int = 1_000_000) -> EvProfile:
        """Have the NIC derive and load QP ``qpn``'s EVs (its ``ev_gen`` block):
        ``evs`` GENERATED (its parameters) or AUTO. Every entry past the EVs
        found is DENIED. Returns the profile with the values the NIC loaded,
        read back from reliability's EV table. Raises DriverError if the NIC
        refused the run."""
        g = self.ev_gen
        if evs.mode not in ("generated", "auto"):
            raise ValueError(f"the NIC derives GENERATED and AUTO profiles, not {evs.mode!r}")
        if g is None:
            raise ValueError("this NIC was built without the EV generator (NicCore "
                             "ev_gen=False: no ev_gen block in its CSR chain); give the EVs "
                             "as an EXPLICIT profile")
        p = dict(evs.params)
        ne = self.params["evs_per_qp"]
        auto = auto_params(qpn, ne, p["bits"], p["template"]) if evs.mode == "auto" else None
        if auto is not None and auto["max_ev"] > 0xFFFF:  # SRv6's first hops, too many
            raise ValueError(f"SRv6 AUTO takes {ne} first hops from uSID {auto['min_ev']:#06x} "
                             f"on, past the last uSID 0xffff: give a template whose first "
                             f"uSID is at most {0x10000 - ne:#06x}")
        await g.write_fields("gen_qp", qpn=qpn)
        if evs.mode == "generated":
            await g.write_fields("gen_range", min=p["min"], max=p["max"])
            await g.write_fields("gen_init", init=p["init"], mask=p["mask"])
            await g.write_fields("gen_shape", width=p["width"], count=p["count"])
        bits, template = p["bits"], p["template"]
        if self.params.get("ev_width", 16) > 16:
            for k in (0, 1):
                await g.write("gen_template", template >> 32 * k & 0xFFFFFFFF, k)
                await g.write("gen_bits", bits >> 32 * k & 0xFFFFFFFF, k)
        elif evs.ev_format != EvFormat.UDP:
            raise ValueError(f"{evs.ev_format.name} EVs need a NIC whose EV entries hold them "
                             f"(this one holds 16 bits): use ev_format='udp'")
        elif bits != 0xFFFF or template:
            raise ValueError("this NIC's EV entries are 16 bits, each the derived value itself: "
                             "leave ev_bits and template out")
        await g.write_fields("gen_start", auto=int(evs.mode == "auto"))
        waited = 0
        while (status := await g.read_fields("gen_status"))["busy"]:
            if waited >= timeout_cycles:
                raise DriverError(f"the EV generator ran {timeout_cycles} cycles for QP {qpn}")
            await self.transport.idle(64)
            waited += 64
        if status["bad_qp"] or status["error"]:
            raise DriverError(f"the NIC refused the {evs.mode} EV profile {dict(evs.params)} "
                              f"for QP {qpn}: gen_status {status} (every EV entry DENIED)")
        values = [await self.read_ev_value(qpn, i) for i in range(status["found"])]
        return EvProfile(tuple(values), evs.mode, evs.params, evs.phy_port_mask, evs.ev_format)

    @property
    def num_planes(self) -> int:
        """The NIC's planes (MAC ports); device info reads 0 for one."""
        return self.params.get("num_planes") or 1

    def planes_of(self, phy_port_mask) -> list[int]:
        """The planes a ``phy_port_mask`` names (None: every plane), lowest
        first; a ValueError says what to fix if it names a plane the NIC lacks."""
        n = self.num_planes
        if phy_port_mask is None:
            return list(range(n))
        if phy_port_mask >> n:
            raise ValueError(f"phy_port_mask {phy_port_mask:#x} names plane(s) this NIC does not "
                             f"have: it has {n} (mask bits 0..{n - 1})")
        return [p for p in range(n) if phy_port_mask >> p & 1]

    async def set_ev_state(self, qp: QueuePair, ev_index: int, *, denied: bool):
        """DENIED takes an EV out of use (TX stops spraying on it at once);
        GOOD brings it back. Reliability forwards the change to TX."""
        per_qp = self.params["evs_per_qp"]
        if not 0 <= ev_index < per_qp:
            raise ValueError(f"ev_index must be in 0..{per_qp - 1}, not {ev_index!r}")
        value = qp.evs.values[ev_index] if qp.evs and ev_index < len(qp.evs.values) else 0
        await self._stage_ev_hi(self.rel, value)
        await self.rel.write_fields("ev", qp.qpn * per_qp + ev_index, value=value & 0xFFFF,
                                    state=EvState.DENIED if denied else EvState.GOOD,
                                    set_state=1,
                                    plane=qp.ev_planes[ev_index] if qp.ev_planes else 0)

    async def ev_states(self, qp: QueuePair) -> list[int]:
        per_qp = self.params["evs_per_qp"]
        return [(await self.rel.read_fields("ev", qp.qpn * per_qp + i))["state"]
                for i in range(per_qp)]

    async def ev_events_pending(self) -> bool:
        """Whether reliability's EV event queue holds events, as an interrupt
        handler learns it. With the transport's interrupt line
        (``irq_high()``) low, nothing is queued (``irq`` is the queue's
        not-empty, a send CQE since ``irq_status`` was last read, or a plane
        event: ``read_plane_events``) and no CSR is read; high,
        ``irq_status`` is read, which clears its completion cause, and its
        event cause answers. A transport without the line:
        True, with no CSR read (``read_ev_events`` reads the count)."""
        level = getattr(self.transport, "irq_high", lambda: None)()
        if level is None:
            return True
        return level and bool((await self.rel.read_fields("irq_status"))["event"])

    async def read_plane_events(self) -> list[PlaneEvent]:
        """The planes whose link went down or came up since the last call
        (the planes block's ``link_changes``, which the read clears; NicCore's
        ``irq`` is high while any is pending), each with its link now; [] for
        a NIC with one plane."""
        if self.planes is None:
            return []
        changed = (await self.planes.read_fields("link_changes"))["changed"]
        up = (await self.planes.read_fields("link_up"))["up"] if changed else 0
        return [PlaneEvent(p, bool(up >> p & 1)) for p in range(self.num_planes)
                if changed >> p & 1]

    async def plane_counters(self) -> list[dict[str, int]]:
        """Per plane: ``up`` (its link now) and the planes block's frame counters
        (``tx_frames``, ``rx_frames``, ``link_drops``); one plane: []."""
        if self.planes is None:
            return []
        up = (await self.planes.read_fields("link_up"))["up"]
        return [{"up": up >> p & 1, **{name: await self.planes.read(name, p)
                                      for name in PLANE_COUNTERS}}
                for p in range(self.num_planes)]

    async def read_ev_events(self) -> list[EvEvent]:
        """Pop every queued EV state change (reliability's event queue)."""
        events = []
        for _ in range(await self.rel.read("ev_event_count")):
            head = await self.rel.read_fields("ev_event_qpn")
            rtt = (await self.rel.read_fields("ev_event_rtt"))["rtt_ns"]
            ev = await self.rel.read_fields("ev_event")
            if not ev["valid"]:
                break
            events.append(EvEvent(head["qpn"], ev["ev_index"], ev["old"], ev["new"], ev["drops"],
                                  rtt or None))
        return events

    def congestion_defaults(self, *, base_rtt_ns: float = DEFAULT_BASE_RTT_NS,
                            link_gbps: float | None = None) -> dict[str, int]:
        """NSCC's ``target_rtt`` and ``cwnd_init`` for a fabric whose unloaded RTT is
        ``base_rtt_ns`` and whose line rate is ``link_gbps`` (default: the NIC's data
        path, ``data_width`` bits per cycle): the target at 1.75 x the base RTT, the
        start window at 1.5 x BDP in ``max_mtu`` packets (hw/reliability/cc_defaults.py).
        With the defaults they are the NIC's reset values."""
        p = self.params
        rate = self._line_rate_bps(link_gbps)
        return {"target_rtt": target_rtt_units(base_rtt_ns, p["clk_freq_hz"]),
                "cwnd_init": start_cwnd_packets(base_rtt_ns, rate, p["max_mtu"],
                                                p["window"])}

    def _line_rate_bps(self, link_gbps: float | None) -> float:
        """``link_gbps`` in b/s, or the NIC's data path rate (``data_width`` bits per
        cycle) when it is None; a ValueError for a rate not above 0."""
        if link_gbps is None:
            return line_rate_bps(self.params["data_width"], self.params["clk_freq_hz"])
        if not link_gbps > 0:
            raise ValueError(f"link_gbps must be > 0, not {link_gbps!r}")
        return link_gbps * 1e9

    async def set_congestion(self, algorithm: str = PACKET_WINDOW, *,
                             base_rtt_ns: float = DEFAULT_BASE_RTT_NS,
                             link_gbps: float | None = None, mtu: int | None = None,
                             **nscc) -> dict[str, int]:
        """Select the congestion control by name, as MRC's API does, for QPs brought
        to RTS from now on; returns the register words it wrote.

        - ``"packet-window"`` (the NIC's reset): the window in packets,
          ``congestion_defaults(...)``'s target and start window;
        - ``"uet-1.0-nscc"``: UET 1.0 NSCC in bytes (docs/reliability.md), its
          parameters by MRC's names in ``nscc`` (eta, fi, gamma, max_md_jump,
          qa_gate, qa_threshold, ewma, target_delay_ns, max_cwnd, min_cwnd; the
          rest NSCC's defaults at ``base_rtt_ns`` and the line rate), the window
          counted in packets of ``mtu`` (default ``max_mtu``) bytes of payload.

        NSCC keeps a QP's state from its RTS entry, so it is selected while no QP
        is in RTS: a ValueError names those that are. A NIC built without NSCC
        (``NicCore(nscc=False)``, the Versa board's) refuses it."""
        if algorithm not in CONGESTION_ALGORITHMS:
            raise ValueError(f"congestion control must be one of {CONGESTION_ALGORITHMS}, "
                             f"not {algorithm!r}")
        if nscc and algorithm != NSCC:
            raise ValueError(f"{sorted(nscc)} are NSCC's parameters; {algorithm!r} takes none")
        p = self.params
        mtu = p["max_mtu"] if mtu is None else mtu
        if mtu not in PATH_MTU.values() or mtu > p["max_mtu"]:
            raise ValueError(f"mtu must be a path MTU of {sorted(PATH_MTU.values())} up to "
                             f"the NIC's max_mtu {p['max_mtu']}, not {mtu!r}")
        words = self.congestion_defaults(base_rtt_ns=base_rtt_ns, link_gbps=link_gbps)
        values = nscc_register_values(
            clk_freq_hz=p["clk_freq_hz"], mtu_wire=mtu + DATA_WIRE_OVERHEAD,
            rate_bps=self._line_rate_bps(link_gbps), base_rtt_ns=base_rtt_ns,
            enabled=algorithm == NSCC, **nscc)
        if algorithm == NSCC:
            if not await self.rel.read("nscc_rtt"):  # its target is never 0 when built
                raise ValueError("this NIC was built without NSCC (NicCore nscc=False: its "
                                 "NSCC registers read 0); use 'packet-window'")
            in_rts = [q for q in range(p["num_qps"])
                      if (await self.rel.read_fields("qp_ctrl", q))["state"] == QpState.RTS]
            if in_rts:
                raise ValueError(f"select {NSCC!r} before bringing QPs to RTS: NSCC starts a "
                                 f"QP's state at its RTS entry; QPs {in_rts} are in RTS")
        words.update(nscc_register_words(values))
        for name, value in words.items():
            await self.rel.write(name, value)
        return words

    def min_probe_period(self) -> int:
        """The shortest probe period: a round sweeps every QP, 3 cycles each and one
        per ASSUMED_BAD EV (docs/reliability.md), and the next may not start before."""
        p = self.params
        return p["num_qps"] * (3 + p["evs_per_qp"]) + 1

    async def set_probe_period(self, cycles: int):
        """Probe every ASSUMED_BAD EV once per ``cycles`` (0 = no probes). An answer
        counts only within two periods of its probe, so the period should exceed
        the paths' round trip."""
        low = self.min_probe_period()
        if not isinstance(cycles, int) or not (cycles == 0 or low <= cycles <= 0xFFFF_FFFF):
            raise ValueError(f"probe period must be 0 (off) or {low}..{0xFFFF_FFFF} cycles "
                             f"(a round sweeps {self.params['num_qps']} QPs x (3 + "
                             f"{self.params['evs_per_qp']} EVs) cycles; rounds may not "
                             f"overlap), not {cycles!r}")
        await self.rel.write("probe_period", cycles)

    async def counters(self) -> dict[str, int]:
        out = {}
        for blk, prefix in ((self.rx, "rx."), (self.rel, "rel.")):
            for reg in blk.map.registers:
                if reg.name.lower().startswith("cnt_"):
                    out[prefix + reg.name.lower()[4:]] = await blk.read(reg.name)
        for name in ("retx_ignored", "retx_no_ev"):
            out["tx." + name] = await self.tx.read(name)
        return out
