"""Connections between NICs through the host driver, the same on the RTL
system (sim/system/harness.py) and on model NICs (sim/system/incast.py):
the NICs' addresses and EV blocks, and the QP pairs bound through the
driver's verbs. Needs no simulator.

``MACS[i]``, ``IPS[i]``, ``IPS6[i]``: NIC i's addresses (its IPv6 one on a
NIC built with IPv6: locator ``SRV6_LOCATOR``, uSID ``SRV6_NIC_USIDS[i]``,
zeros, so that SRv6 EVs can end at it; ``srv6_evs``); ``EV_BASES[i]``: NIC i's EVs
(connection k sprays over ``EV_BASES[i] + 16 k + 0..``).
``new_conn(dev, pd, ...)``: a QP in INIT with its CQs and buffers.
``connect_pair(ends, a, b, ...)``: a QP of ``ends[a]`` and one of ``ends[b]``
bound to each other and in RTS (``ends[i]``: anything with ``dev`` and a
``conns`` list).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from host_driver.driver import EvProfile, MemoryRegion, QueuePair
from hw.protocol import srv6_carrier
from sim.fabric.routing import SPINE_USID_BASE
from sim.system.top import MAX_NICS

__all__ = ["MACS", "IPS", "IPS6", "SRV6_LOCATOR", "SRV6_NIC_USIDS", "srv6_evs", "EV_BASES", "EVS",
           "RAM_SIZE", "Connection", "check_memory", "zeroed_region", "new_conn", "connect_pair",
           "families", "ip_of"]

RAM_SIZE = 1 << 25  # 32 MiB of host memory per NIC
MACS = tuple(f"02:00:00:00:00:{i + 1:02x}" for i in range(MAX_NICS))
IPS = tuple(f"10.0.0.{i + 1}" for i in range(MAX_NICS))
SRV6_LOCATOR = 0xFD00_0000
SRV6_NIC_USIDS = tuple(range(1, MAX_NICS + 1))
IPS6 = tuple(str(ipaddress.IPv6Address(srv6_carrier(SRV6_LOCATOR << 96, u << 48)))
             for u in SRV6_NIC_USIDS)


def srv6_evs(dst: int, count: int) -> list[int]:
    """``count`` SRv6 EVs to NIC ``dst`` over an SRv6 fabric's spines
    (sim/fabric/routing.py): EV k goes through spine k (its uSID first), then
    to the NIC (its own uSID last)."""
    return [(SPINE_USID_BASE + k) << 48 | SRV6_NIC_USIDS[dst] << 32 for k in range(count)]


def families(ipv6, count: int) -> list[bool]:
    """Per connection, whether it binds over IPv6: ``ipv6`` one flag for all
    ``count`` connections, or one per connection."""
    out = [ipv6] * count if isinstance(ipv6, bool) else list(ipv6)
    if len(out) != count or not all(isinstance(v, bool) for v in out):
        raise ValueError(f"ipv6 must be one flag, or one flag per connection ({count}), "
                         f"not {ipv6!r}")
    return out


def ip_of(nic: int, v6: bool) -> str:
    """NIC ``nic``'s address of a family: ``IPS6`` over IPv6, else ``IPS``."""
    return (IPS6 if v6 else IPS)[nic]


# NIC i's connection k sprays over EV_BASES[i] + 16 k + (0..7): a NIC's block is 0x1000
EV_BASES = (0xC000, 0xD000, 0xE000, 0xF000, 0x8000, 0x9000, 0xA000, 0xB000)
# the two-NIC systems' EV profiles (SystemTB.connect, ModelSystem): NIC i's first 8 EVs
EVS = [EvProfile.explicit(range(base, base + 8)) for base in EV_BASES[:2]]


@dataclass
class Connection:
    """One QP of a NIC and what the driver made for it: the memory region the
    peer writes into (``recv_buf``) and the buffer it sends from."""

    qp: QueuePair
    mr: MemoryRegion
    recv_buf: int
    send_buf: int
    buf_size: int
    peer: int = 0  # index of the peer's connection on the other NIC


def check_memory(qps: int, buf_size: int, sq_log2: int) -> None:
    """A ValueError when ``qps`` connections do not fit a NIC's host memory."""
    need = qps * (2 * buf_size + (64 << sq_log2) + (32 << max(sq_log2, 8)) + 3 * 4096)
    if need > RAM_SIZE - 0x1000:
        raise ValueError(f"{qps} QPs with {buf_size}-byte buffers need about {need} bytes "
                         f"of host memory per NIC; there are {RAM_SIZE}: use smaller "
                         f"buffers or fewer QPs")


async def zeroed_region(dev, pd, size: int) -> tuple[int, MemoryRegion]:
    """``size`` zeroed bytes of ``dev``'s host memory, registered in ``pd`` as
    a memory region: (address, region)."""
    addr = dev.mem.alloc(size, align=4096)
    dev.mem.write(addr, bytes(size))
    return addr, await pd.reg_mr(addr, size)


async def new_conn(dev, pd, buf_size: int, sq_log2: int, recv_cq_log2: int, *,
                   qpn: int | None = None,
                   region: tuple[int, MemoryRegion] | None = None) -> Connection:
    """A QP in INIT on ``dev`` with its CQs, a zeroed receive buffer registered
    as a memory region and a send buffer. ``qpn``: its QP number (None: the
    lowest free). ``region``: (receive buffer, the region that holds it) when
    the connection shares a region of ``pd`` with others instead of its own."""
    send_cq = dev.create_cq(sq_log2)
    recv_cq = dev.create_cq(recv_cq_log2)
    qp = await dev.create_qp(pd, send_cq, recv_cq, sq_log2=sq_log2, qpn=qpn)
    recv_buf, mr = region or await zeroed_region(dev, pd, buf_size)
    send_buf = dev.mem.alloc(buf_size, align=4096)
    await qp.to_init()
    return Connection(qp, mr, recv_buf, send_buf, buf_size)


async def connect_pair(ends, a: int, b: int, *, buf_size: int = 1 << 20, sq_log2: int = 4,
                       mtu: int = 1024, timeout: int = 10, mpr: int = 2, ack_n: int = 4,
                       ack_t: int = 256, evs: int = 8,
                       sack_threshold: int = 0) -> tuple[Connection, Connection]:
    """One QP on NIC ``a`` and one on NIC ``b``, bound to each other and in RTS;
    returns their connections (each also appended to its end's ``conns``, its
    ``peer`` the index of the other's). Each sprays over ``evs`` EVs of its
    NIC's block (EV_BASES, 16 per connection); probes off. ``timeout``,
    ``sack_threshold``: ``QueuePair.to_rts``'s."""
    if a == b or not (0 <= a < len(ends) and 0 <= b < len(ends)):
        raise ValueError(f"a and b must be two different NICs of 0..{len(ends) - 1}, "
                         f"not {a!r} and {b!r}")
    if not 1 <= evs <= 16:
        raise ValueError(f"evs must be in 1..16 (each connection's EV block), not {evs!r}")
    pair = ends[a], ends[b]
    conns = []
    for end in pair:
        check_memory(len(end.conns) + 1, buf_size, sq_log2)
        await end.dev.set_probe_period(0)
        conns.append(await new_conn(end.dev, end.dev.alloc_pd(), buf_size, sq_log2, 8))
    conns[0].peer, conns[1].peer = len(pair[1].conns), len(pair[0].conns)
    # distinct start PSNs per connection; b's near the PSN wrap
    psns = [(0x100 + 0x1000 * len(pair[0].conns) + 0x10 * a) & 0xFFFFFF,
            (0xFFFF00 - 0x1000 * len(pair[1].conns) - 0x10 * b) & 0xFFFFFF]
    bases = [EV_BASES[nic] + 16 * len(end.conns) for nic, end in zip((a, b), pair, strict=True)]
    for end, conn in zip(pair, conns, strict=True):
        end.conns.append(conn)
    for i, peer_nic in enumerate((b, a)):
        await conns[i].qp.to_rtr(dest_qpn=conns[1 - i].qp.qpn, peer_mac=MACS[peer_nic],
                                 peer_ip=IPS[peer_nic], rq_psn=psns[1 - i], mpr=mpr,
                                 ack_n=ack_n, ack_t=ack_t, mtu=mtu)
    for i in range(2):
        await conns[i].qp.to_rts(evs=EvProfile.explicit(range(bases[i], bases[i] + evs)),
                                 sq_psn=psns[i], mtu=mtu, timeout=timeout,
                                 sack_threshold=sack_threshold)
    return conns[0], conns[1]
