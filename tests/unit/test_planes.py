"""PlaneSplit and PlaneMerge (hw/nic/planes.py) in Amaranth's simulator: random
frames (1..12 beats, random data, a random ``tkeep`` on the last beat), random
gaps on the inputs and random back-pressure on the outputs, against the
definitions: the split sends each frame whole to the output of its first beat's
plane, or discards it (one ``dropped`` strobe) when that plane does not exist or
its link is down as the first beat is first offered; the merge passes every
input's frames whole and in order, each beat tagged with its plane, and a frame
waits at most ``num_planes - 1`` frames of the other planes."""

import pytest
from amaranth.hdl import Cat
from amaranth.sim import Simulator

from hw.nic.planes import PlaneMerge, PlaneSplit
from hw.protocol import PLANE_BITS
from tests import seeds

FIELDS = ("tdata", "tkeep", "tlast", "tuser")


def cycle_limit(frames):
    """Cycles a run may take before a monitor calls it stalled: each beat's
    gaps and back-pressure, with a wide margin."""
    return 20 * sum(map(len, frames)) + 100


def pack(port, beat):
    """``beat`` as a value of ``Cat(tdata, tkeep, tlast, tuser)``: a source sets
    a beat in one ``ctx.set``, where each set costs a simulator step."""
    value, shift = 0, 0
    for name, field in zip(FIELDS, beat, strict=True):
        value |= field << shift
        shift += len(getattr(port, name))
    return value


def random_frame(rng, data_width, user_of):
    """A frame as a list of beats ``(tdata, tkeep, tlast, tuser)``; ``user_of(k)``
    gives beat k's ``tuser``."""
    nbytes = data_width // 8
    length = rng.randint(1, 12)
    return [(rng.getrandbits(data_width),
             (1 << rng.randint(1, nbytes)) - 1 if k == length - 1 else (1 << nbytes) - 1,
             int(k == length - 1), user_of(k)) for k in range(length)]


async def send_frames(ctx, port, frames, rng, gap_p):
    """Drive ``frames`` on the sink port ``port``, a gap of idle cycles (junk on
    the data) before each beat with probability ``gap_p`` per cycle."""
    beat_and_valid = Cat(*(getattr(port, name) for name in FIELDS), port.tvalid)
    valid = 1 << len(beat_and_valid) - 1
    for frame in frames:
        for beat in frame:
            while rng.random() < gap_p:
                ctx.set(beat_and_valid, rng.getrandbits(len(beat_and_valid) - 1))
                await ctx.tick()
            ctx.set(beat_and_valid, pack(port, beat) | valid)
            # not ``tick().until()``: an async generator left suspended when the
            # monitor ends the run fails as it is collected
            while not (await ctx.tick().sample(port.tready))[-1]:
                pass
    ctx.set(port.tvalid, 0)


class Receiver:
    """Collects the frames of one source port from its ``signals`` sampled at
    clock edges, and checks that an offered beat stays unchanged until taken."""

    def __init__(self, port, name):
        self.name = name
        self.signals = [port.tvalid, port.tready] + [getattr(port, name) for name in FIELDS]
        self.frames = []
        self.beats = []
        self.offered = None

    def edge(self, values):
        valid, ready, *beat = values
        beat = tuple(beat)
        if self.offered is not None:
            assert valid and beat == self.offered, f"{self.name}: offered beat changed"
        self.offered = beat if valid and not ready else None
        if valid and ready:
            self.beats.append(beat)
            if beat[2]:
                self.frames.append(self.beats)
                self.beats = []
        return valid, ready, beat


def simulate(dut, sources, monitor):
    """Run ``dut`` with the ``sources`` in the background until ``monitor``
    returns. A check that fails in the monitor is raised here, once the
    simulation has ended, not through the simulator."""
    errors = []

    async def checked(ctx):
        try:
            await monitor(ctx)
        except AssertionError as error:
            errors.append(error)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for source in sources:
        sim.add_testbench(source, background=True)
    sim.add_testbench(checked)
    sim.run()
    if errors:
        raise errors[0]


def run_split(data_width, num_planes, salt, *, frames, gap_p=0.3, ready_p=None,
              link_change_p=0.1, link_up=None):
    """Run a PlaneSplit; return (sent frames, the model's routes, outputs' frames,
    dropped strobes). ``link_up`` fixes the links; else each cycle sets each plane's link
    afresh with probability ``link_change_p``, and every cycle between frames."""
    dut = PlaneSplit(data_width, num_planes)
    rng = seeds.rng(salt)
    width = PLANE_BITS
    ready_p = ready_p or [rng.choice((0.3, 0.7, 1.0)) for _ in range(num_planes)]
    # Each plane on as many frames, and one frame in eight with a plane number
    # past the last plane (when tuser has one), in random order; a random
    # tuser on the later beats, to be ignored.
    past_last = range(num_planes, 1 << width)
    extra = frames // 8 if past_last else 0
    planes = [k % num_planes for k in range(frames - extra)]
    planes += [rng.choice(past_last) for _ in range(extra)]
    rng.shuffle(planes)
    sent = [random_frame(rng, data_width, lambda k, p=p: p if k == 0 else rng.getrandbits(width))
            for p in planes]
    outputs = [getattr(dut, f"m_axis{p}") for p in range(num_planes)]
    receivers = [Receiver(out, f"m_axis{p}") for p, out in enumerate(outputs)]
    routes = []  # per frame, the plane it goes to, or None (discarded)
    strobes = [0]

    async def source(ctx):
        await send_frames(ctx, dut.s_axis, sent, seeds.rng(f"{salt}-source"), gap_p)

    async def monitor(ctx):
        mon = seeds.rng(f"{salt}-monitor")
        links = (1 << num_planes) - 1 if link_up is None else link_up
        decided = mid = False
        signals = [dut.s_axis.tvalid, dut.s_axis.tready, dut.s_axis.tlast,
                   dut.s_axis.tuser, dut.link_up, dut.dropped]
        for rx in receivers:
            signals += rx.signals
        treadies = Cat(out.tready for out in outputs)
        beats = sum(map(len, sent))
        for _ in range(cycle_limit(sent)):
            for plane in range(num_planes if link_up is None else 0):
                # each link up 3/4 of the time; afresh after each frame, so that
                # frames see links independent of the frames before
                if mon.random() < link_change_p or not decided:
                    links = links & ~(1 << plane) | (mon.random() < 0.75) << plane
            ctx.set(dut.link_up, links)
            ctx.set(treadies, sum((mon.random() < p) << k for k, p in enumerate(ready_p)))
            _, _, *values = await ctx.tick().sample(*signals)
            valid, ready, last, user, link, dropped = values[:6]
            if valid and not decided:  # the first beat, first offered
                decided = True
                routes.append(user if user < num_planes and link >> user & 1 else None)
            first = valid and ready and not mid
            assert dropped == (first and routes[-1] is None), "dropped strobe"
            strobes[0] += dropped
            if valid and ready:
                mid = not last
                decided = not last
                beats -= 1
            for k, rx in enumerate(receivers):
                rx.edge(values[6 + 6 * k:12 + 6 * k])
            if not beats:
                return
        raise AssertionError("the split stalled")

    simulate(dut, [source], monitor)
    return sent, routes, [rx.frames for rx in receivers], strobes[0]


def check_split(num_planes, sent, routes, got, strobes):
    assert len(routes) == len(sent)
    for p in range(num_planes):
        want = [[(d, k, last, 0) for d, k, last, _ in frame]
                for frame, route in zip(sent, routes, strict=True) if route == p]
        assert got[p] == want, f"plane {p}"
    assert strobes == routes.count(None)


@pytest.mark.parametrize("data_width, num_planes", [(64, 2), (64, 3), (64, 8), (512, 3)])
def test_split_routes_frames(data_width, num_planes):
    sent, routes, got, strobes = run_split(data_width, num_planes,
                                           f"split-{data_width}-{num_planes}",
                                           frames=8 * num_planes + 16)
    check_split(num_planes, sent, routes, got, strobes)
    # every plane got frames, and frames were discarded (links down, or no such plane)
    assert all(routes.count(p) for p in range(num_planes)), routes
    assert routes.count(None) >= 1, routes


def test_split_dead_plane_does_not_stall():
    """Plane 1's link down and its MAC never ready: its frames are all discarded
    and the other planes' frames all arrive (a stall fails at ``cycle_limit``)."""
    sent, routes, got, strobes = run_split(
        64, 3, "split-dead", frames=50, ready_p=[0.7, 0.0, 0.7], link_up=0b101)
    check_split(3, sent, routes, got, strobes)
    planes = [frame[0][3] for frame in sent]
    assert routes == [p if p in (0, 2) else None for p in planes]
    assert got[0] and got[2]


def run_merge(data_width, num_planes, salt, *, frames=10, gap_p=0.3, ready_p=0.7):
    """Run a PlaneMerge; return (sent frames per input, m_axis's frames, the waits:
    for each frame, how many frames of other inputs started on m_axis between its
    first beat being offered and being taken)."""
    dut = PlaneMerge(data_width, num_planes)
    rng = seeds.rng(salt)
    sent = [[random_frame(rng, data_width, lambda k: rng.getrandbits(1))
             for _ in range(frames)] for _ in range(num_planes)]
    inputs = [getattr(dut, f"s_axis{p}") for p in range(num_planes)]
    receiver = Receiver(dut.m_axis, "m_axis")
    waits = []

    def source(p):
        async def bench(ctx):
            await send_frames(ctx, inputs[p], sent[p], seeds.rng(f"{salt}-{p}"), gap_p)
        return bench

    async def monitor(ctx):
        mon = seeds.rng(f"{salt}-monitor")
        signals = list(receiver.signals)
        for s in inputs:
            signals += [s.tvalid, s.tready, s.tlast]
        at_start = [True] * num_planes
        waiting = [None] * num_planes  # frames passed since this input's frame was offered
        out_start = True
        for _ in range(cycle_limit(sum(sent, []))):
            ctx.set(dut.m_axis.tready, mon.random() < ready_p)
            _, _, *values = await ctx.tick().sample(*signals)
            valid, ready, beat = receiver.edge(values[:6])
            for p in range(num_planes):
                s_valid, s_ready, s_last = values[6 + 3 * p:9 + 3 * p]
                if s_valid and at_start[p] and waiting[p] is None:
                    waiting[p] = 0
                if s_valid and s_ready:
                    at_start[p] = bool(s_last)
            if valid and ready and out_start:
                plane = beat[3] >> 1
                for p in range(num_planes):
                    if p != plane and waiting[p] is not None:
                        waiting[p] += 1
                waits.append(waiting[plane])
                waiting[plane] = None
            if valid and ready:
                out_start = bool(beat[2])
            if len(receiver.frames) == frames * num_planes:
                return
        raise AssertionError("the merge stalled")

    simulate(dut, [source(p) for p in range(num_planes)], monitor)
    return sent, receiver.frames, waits


def check_merge(num_planes, sent, got, waits):
    per_plane = [[] for _ in range(num_planes)]
    for frame in got:
        plane = frame[0][3] >> 1
        assert all(user >> 1 == plane for *_, user in frame), "frames interleaved"
        per_plane[plane].append([(d, k, last, user & 1) for d, k, last, user in frame])
    assert per_plane == sent
    assert len(waits) == sum(map(len, sent))
    assert max(waits) <= num_planes - 1, waits


@pytest.mark.parametrize("data_width, num_planes", [(64, 2), (64, 3), (64, 8), (512, 2)])
def test_merge_passes_frames_tagged(data_width, num_planes):
    sent, got, waits = run_merge(data_width, num_planes, f"merge-{data_width}-{num_planes}")
    check_merge(num_planes, sent, got, waits)


@pytest.mark.parametrize("num_planes", [3, 8])
def test_merge_fair_with_all_planes_busy(num_planes):
    """Every input always has a frame waiting: the planes take turns, and a frame
    waits exactly ``num_planes - 1`` frames (the bound, reached)."""
    sent, got, waits = run_merge(64, num_planes, f"busy-{num_planes}", frames=6, gap_p=0)
    check_merge(num_planes, sent, got, waits)
    assert max(waits) == num_planes - 1
    planes = [frame[0][3] >> 1 for frame in got]
    assert planes[:2 * num_planes] == [p % num_planes for p in range(2 * num_planes)]


@pytest.mark.parametrize("block", [PlaneSplit, PlaneMerge])
@pytest.mark.parametrize("data_width, num_planes, name", [
    (64, 1, "num_planes"), (64, 9, "num_planes"), (64, 0, "num_planes"),
    (48, 2, "data_width"), (1024, 2, "data_width"),
])
def test_bad_parameters(block, data_width, num_planes, name):
    with pytest.raises(ValueError, match=name):
        block(data_width, num_planes)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_up_plane(n):
    """``up_plane``: the plane itself while its link is up, else the lowest
    plane whose link is up, else (no link up) the plane; a plane the NIC lacks
    counts as down. Every plane number and every link state."""
    from amaranth.hdl import Module, Signal

    from hw.nic.planes import up_plane

    plane, links = Signal(PLANE_BITS), Signal(n)
    m = Module()
    out = Signal(PLANE_BITS)
    m.d.comb += out.eq(up_plane(plane, links))

    async def bench(ctx):
        for up in range(1 << n):
            ctx.set(links, up)
            for p in range(1 << PLANE_BITS):
                ctx.set(plane, p)
                live = [q for q in range(n) if up >> q & 1]
                want = p if (p < n and up >> p & 1) or not live else live[0]
                assert ctx.get(out) == want, (n, bin(up), p)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
