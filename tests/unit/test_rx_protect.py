"""The responder's protocol and protection checks of ``RxValidator`` (docs/rx.md
"Validation", docs/security.md "Responder protection checks"), each with its
NAK and counter, in Amaranth's simulator."""

import pytest

from hw.headers import Opcode
from hw.reliability.layouts import NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS
from hw.rx.layouts import ReqKind
from hw.rx.mr_table import make_rkey

from .validator_bench import MR, run_validator, write

BASE, TOP = MR["base"], MR["base"] + MR["length"]
FIRST, MIDDLE, LAST, LAST_IMM, ONLY = (Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE,
                                       Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM,
                                       Opcode.WRITE_ONLY)
DATA = (ReqKind.DATA, 0x62)  # a DATA request's syndrome is not used; the validator leaves 0x62
INVALID = (ReqKind.NAK, NAK_INVALID_REQUEST)
ACCESS = (ReqKind.NAK, NAK_REMOTE_ACCESS)


def outcomes(frames, **kwargs):
    results, strobes = run_validator(frames, **kwargs)
    assert len(results) == len(frames)
    return [(kind, syn if kind == ReqKind.NAK else 0x62) for kind, syn, _ in results], strobes


def test_payload_against_the_path_mtu():
    """FIRST and MIDDLE carry exactly the MTU (1024 here), no packet more:
    NAK 0x61, counted bad_length."""
    frames = [
        write(BASE, 1024, opcode=FIRST, dma_len=3000),  # right
        write(BASE, 1000, opcode=FIRST, dma_len=3000),  # FIRST short
        write(BASE, 1024, opcode=MIDDLE, dma_len=3000),  # right
        write(BASE, 512, opcode=MIDDLE, dma_len=3000),  # MIDDLE short
        write(BASE, 1025, opcode=MIDDLE, dma_len=4000),  # MIDDLE long
        write(BASE, 1024),  # ONLY of one MTU
        write(BASE, 1025),  # ONLY above the MTU
        write(BASE, 1025, opcode=LAST, dma_len=2049),  # LAST above the MTU
        write(BASE, 1, opcode=ONLY),  # ONLY, one byte
    ]
    got, strobes = outcomes(frames)
    assert got == [DATA, INVALID, DATA, INVALID, INVALID, DATA, INVALID, INVALID, DATA]
    assert strobes["bad_length"] == 5 and strobes["bad_reth"] == 0


@pytest.mark.parametrize("code, mtu", [(1, 256), (5, 4096)])
def test_each_path_mtu(code, mtu):
    frames = [write(BASE, 256, opcode=FIRST, dma_len=mtu + 1),
              write(BASE, mtu, opcode=FIRST, dma_len=mtu + 1),
              write(BASE, mtu + 1, opcode=LAST, dma_len=2 * mtu + 1)]
    got, _ = outcomes(frames, mtu_code=code, mrs=[dict(MR, length=0x4000)])
    assert got == [DATA if mtu == 256 else INVALID, DATA, INVALID]


def test_an_unset_path_mtu_takes_no_data():
    got, strobes = outcomes([write(BASE, 64), write(BASE, 0)], mtu_code=0)
    assert got == [INVALID, INVALID] and strobes["bad_length"] == 2


def test_reth_length_against_the_message():
    """The RETH DMA length L against the packet's place in its message
    (docs/rx.md): ONLY carries L; FIRST needs L > MTU, MIDDLE L > 2 MTU; LAST
    carries the rest after whole MTUs; L <= 2^31. NAK 0x61, bad_reth."""
    frames = [
        write(BASE, 64, dma_len=65),  # ONLY: payload != L
        write(BASE, 0, dma_len=64),  # ONLY, empty with L > 0
        write(BASE, 1024, opcode=FIRST, dma_len=1024),  # FIRST of a one-packet message
        write(BASE, 1024, opcode=FIRST, dma_len=1025),  # right
        write(BASE, 1024, opcode=MIDDLE, dma_len=2048),  # MIDDLE of a two-packet message
        write(BASE, 1024, opcode=MIDDLE, dma_len=2049),  # right
        write(BASE + 2048, 952, opcode=LAST, dma_len=3000),  # right: 3000 = 2 x 1024 + 952
        write(BASE + 2048, 951, opcode=LAST, dma_len=3000),  # LAST: not the rest
        write(BASE + 2048, 1024, opcode=LAST_IMM, dma_len=3072),  # right: the rest is one MTU
        write(BASE, 0, opcode=LAST, dma_len=2048),  # LAST with nothing left
        write(BASE, 512, opcode=LAST, dma_len=512),  # LAST of a one-packet message
        write(BASE, 1024, opcode=FIRST, dma_len=(1 << 31) + 1),  # L above 2^31
    ]
    got, strobes = outcomes(frames, mrs=[dict(MR, length=0x10000)])
    assert got == [INVALID, INVALID, INVALID, DATA, INVALID, DATA, DATA, INVALID, DATA,
                   INVALID, INVALID, INVALID]
    assert strobes["bad_reth"] == 8 and strobes["bad_length"] == 0


def test_the_message_that_a_reth_declares_lies_in_the_region():
    """A FIRST packet's message is [VA, VA + L), a LAST packet's ends with it
    and starts L - payload bytes before: both must lie in the region (NAK
    0x62, bad_bounds), even where the packet itself does."""
    frames = [
        write(BASE, 1024, opcode=FIRST, dma_len=0x1000),  # the whole region
        write(BASE, 1024, opcode=FIRST, dma_len=0x1001),  # one byte past it
        write(BASE + 0xC00, 1024, opcode=LAST, dma_len=0x1000),  # starts at BASE
        write(BASE + 0x400, 1024, opcode=LAST, dma_len=0x1000),  # starts 0x800 below BASE
        write(BASE + 0x800, 1024, opcode=MIDDLE, dma_len=0x1000),  # its own bytes only
    ]
    got, strobes = outcomes(frames)
    assert got == [DATA, ACCESS, DATA, ACCESS, DATA]
    assert strobes["bad_bounds"] == 2


def test_zero_length_write_at_the_region_edges():
    """An empty WRITE (ONLY, L = 0) needs base <= VA <= base + length, and a
    VA below 2^addr_width: it is placed (nothing written) at either edge and
    refused (0x62) one byte outside."""
    frames = [write(BASE, 0), write(TOP, 0), write(TOP + 1, 0), write(BASE - 1, 0)]
    got, strobes = outcomes(frames)
    assert got == [DATA, DATA, ACCESS, ACCESS] and strobes["bad_bounds"] == 2
    # a region that ends at 2^32 exactly: its end is no 32-bit address
    top_mr = dict(MR, base=0xFFFF_F000, length=0x1000)
    got, _ = outcomes([write(0xFFFF_FFFF, 0), write(1 << 32, 0), write(0xFFFF_FFC0, 64)],
                      mrs=[top_mr])
    assert got == [DATA, ACCESS, DATA]


def test_protection_domains():
    """A QP writes only regions of its own PD: another PD's region is NAK
    0x62, counted bad_pd (not bad_rkey: the R_Key names a region)."""
    other = make_rkey(1, tag=0x78)
    mrs = [dict(MR, pd=1), dict(MR, base=0x9000_0000, rkey=other, pd=2)]
    frames = [write(BASE, 64), write(0x9000_0000, 64, rkey=other)]
    got, strobes = outcomes(frames, mrs=mrs, qp_pd=1)
    assert got == [DATA, ACCESS] and strobes["bad_pd"] == 1 and strobes["bad_rkey"] == 0
    got, strobes = outcomes(frames, mrs=mrs, qp_pd=2)
    assert got == [ACCESS, DATA] and strobes["bad_pd"] == 1


def test_a_stale_rkey_is_refused():
    """The whole R_Key is compared, its key byte included: the key of a
    region before re-registration (the driver changes the key byte) finds no
    region."""
    new = dict(MR, rkey=0x0200_014D)
    got, strobes = outcomes([write(BASE, 64, rkey=0x0100_014D), write(BASE, 64, rkey=0x0200_014D)],
                            mrs=[new])
    assert got == [ACCESS, DATA] and strobes["bad_rkey"] == 1


def test_an_rkey_names_its_entry():
    """RX reads the entry an R_Key's bits 23:8 name and compares the whole
    key: the same key byte and tag at another index, an index past the
    table, or a region whose R_Key names another entry than the one it is
    written at, find no region (bad_rkey, NAK 0x62)."""
    key = make_rkey(1, tag=0x4D, generation=3)
    mrs = [dict(MR, rkey=key), dict(MR, base=0x9000_0000, rkey=make_rkey(3), index=2)]
    frames = [write(BASE, 64, rkey=key),
              write(BASE, 64, rkey=make_rkey(0, tag=0x4D, generation=3)),
              write(BASE, 64, rkey=make_rkey(1 + 256, tag=0x4D, generation=3)),
              write(BASE, 64, rkey=make_rkey(7, tag=0x4D, generation=3)),
              write(0x9000_0000, 64, rkey=make_rkey(3))]
    got, strobes = outcomes(frames, mrs=mrs)
    assert got == [DATA, ACCESS, ACCESS, ACCESS, ACCESS] and strobes["bad_rkey"] == 4


def test_invalid_request_comes_before_the_access_checks():
    """A packet failing both kinds is NAKed 0x61 and counted once."""
    got, strobes = outcomes([write(BASE, 2000, rkey=0x9999), write(TOP, 64, dma_len=65)])
    assert got == [INVALID, INVALID]
    assert strobes["bad_length"] == 1 and strobes["bad_reth"] == 1
    assert strobes["bad_rkey"] == 0 and strobes["bad_bounds"] == 0


OWN_IP6 = 0x2001_0DB8_0000_0000_0000_0000_0000_0002
PEER_IP6 = 0x2001_0DB8_0000_0000_0000_0000_0000_0001


def test_ipv6_source_and_destination():
    """Built with ``ipv6``: a write over IPv6 is taken only from the QP's peer
    over the peer's family and for ``own_ip6`` (all 128 bits); the rest are
    silent drops, counted not_for_us or bad_source."""
    from hw.rx.validate import VALIDATOR_COUNTERS

    v6 = dict(ip_src=PEER_IP6, ip_dst=OWN_IP6, v6=1)
    frames = [
        dict(write(BASE, 64), **v6),
        dict(write(BASE, 64), **dict(v6, ip_dst=OWN_IP6 ^ 1)),
        dict(write(BASE, 64), **dict(v6, ip_dst=0x0A000002)),  # own_ip's value, over IPv6
        write(BASE, 64),  # over IPv4 from the IPv4 address: the peer is IPv6
        dict(write(BASE, 64), **dict(v6, ip_src=PEER_IP6 ^ (1 << 127))),
    ]
    results, strobes = run_validator(frames, ipv6=(OWN_IP6, PEER_IP6, 1))
    # a dropped write's payload is drained (DROP)
    assert [kind for kind, _, _ in results] == [ReqKind.DATA] + [ReqKind.DROP] * 4
    assert {n: c for n, c in strobes.items() if c and n in VALIDATOR_COUNTERS} == {
        "not_for_us": 2, "bad_source": 2}
    # an IPv4 peer in an ipv6 build: its address over IPv6 is another family
    frames = [write(BASE, 64), dict(write(BASE, 64), ip_src=0x0A000001, ip_dst=OWN_IP6, v6=1)]
    results, strobes = run_validator(frames, ipv6=(OWN_IP6, 0x0A000001, 0))
    assert [kind for kind, _, _ in results] == [ReqKind.DATA, ReqKind.DROP]
    assert strobes["bad_source"] == 1
