"""The two-NIC workloads and fault schedules of ``make sim`` and its scenarios
(sim/system/scenario.py), for either backend: the RTL (``SystemTB``,
sim/system/harness.py) or the golden model (``ModelSystem``,
sim/system/model_harness.py), driven only through the host driver.

``connect(system, cfg, timeout)``: ``cfg.qps`` QPs on each NIC to RTS and one
``Conn`` per QP (its QP, memory region, receive and send buffer, and the
index of its peer on the other NIC), each with room for its share of every
round.

``ring_workload(system, conns, cfg, rec, now_ns, log)``: ``cfg.workload`` is

- ``"ring"`` (the demo): in each of ``cfg.rounds`` rounds every NIC writes its
  shard (``cfg.shard_bytes``, as ``cfg.messages`` WRITE_WITH_IMM of equal
  size, immediate ``round << 8 | message``) into the other NIC's receive
  buffer, both directions at once; a NIC's shard of round r > 0 is its own
  fresh data XOR the shard it received in round r - 1, so it sends only once
  it has consumed the peer's immediates of round r - 1 (a reduce step);
- ``"stream"``: NIC 0 alone writes its ``cfg.rounds`` shards to NIC 1, the
  next round posted as soon as every QP's send queue has room for it; NIC 1
  only answers (ACKs), so faults of direction 1 hit ACKs only.

Message k of a shard goes on the sender's connection ``k % cfg.qps`` (so
``cfg.messages`` is a multiple of ``cfg.qps``) and lands on that connection's
peer (``landing``); each connection's receive CQ must give its messages in
order. Every received shard is checked byte for byte against what
the peer sent, as soon as its round is in on every QP and again at the end.

``apply_rates(fabric, cfg)`` sets the random loss, CE marks, trims and
reordering, ``schedule_faults(fabric, cfg, start_ns)`` schedules the path
down/up events of ``cfg``, on a fabric
(sim/system/fabric.py ``Fabric`` or the model harness's
``ModelFabricControl``: the same controls); times are relative to the
workload's start, as fractions of ``cfg.ideal_ns()`` or in microseconds.
``describe_workload(cfg)`` and ``describe_faults(cfg)`` say the same in words
for the reports.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

CLK_NS = 8  # sim.system.harness.CLK_NS: 125 MHz
EV_STATE_CHAR = {0: "G", 1: "B", 2: "D"}
DIRECTION_NAMES = {None: "both directions", 0: "nic0 -> nic1", 1: "nic1 -> nic0"}

__all__ = ["Conn", "Recorder", "connect", "ring_workload", "final_check", "apply_rates",
           "schedule_faults", "fault_events",
           "describe_workload", "describe_faults", "senders", "receivers"]


@dataclass
class Conn:
    """One QP of a NIC as the workload uses it."""

    qp: object
    mr: object
    recv_buf: int
    send_buf: int
    peer: int  # index of the peer's Conn on the other NIC


@dataclass
class Recorder:
    """What the workload and the monitors saw, in simulated ns."""

    start_ns: float = 0.0
    end_ns: float = 0.0
    rounds: list = field(default_factory=list)  # (nic, round, ns its peer's shard was in)
    rounds_posted: list = field(default_factory=list)  # (nic, round, ns posted)
    send_cqes: list = field(default_factory=list)  # (nic, ns, wr_id, status, byte_len)
    recv_cqes: list = field(default_factory=list)  # (nic, ns, msn, byte_len, imm, status)
    ev_events: list = field(default_factory=list)  # (ns, nic, qpn, ev_index, ev, old, new, drops)
    progress: list = field(default_factory=list)  # (ns, [recv bytes], [round], [ev states])
    received: list = field(default_factory=lambda: [0, 0])
    round_done: list = field(default_factory=lambda: [0, 0])
    ev_state: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    done: bool = False


def senders(cfg) -> tuple[int, ...]:
    return (0, 1) if cfg.workload == "ring" else (0,)


def receivers(cfg) -> tuple[int, ...]:
    return tuple(1 - i for i in senders(cfg))


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


async def connect(system, cfg, timeout: int) -> list[list[Conn]]:
    """``cfg.qps`` connections per NIC on ``system`` (the RTL's ``SystemTB``:
    a receive MR and a send buffer per QP; the model's ``ModelSystem``: one of
    each per NIC, cut into per-QP slices), with SACK loss detection at
    ``cfg.sack_threshold``; returns one list of ``Conn`` per NIC."""
    per_qp = cfg.rounds * cfg.shard_bytes // cfg.qps
    # connection 0 of NIC 0 (and its peer) over IPv6 with cfg.ipv6, on NICs built with it
    v6 = cfg.ipv6 and system.ends[0].dev.params.get("ipv6", False)
    common = dict(sq_log2=4, mtu=cfg.mtu, timeout=timeout, probe_period=cfg.probe_period,
                  ipv6=[v6 and j == 0 for j in range(cfg.qps)])
    if hasattr(system, "connect_qps") and cfg.qps > 1:  # the model harness
        await system.connect_qps(cfg.qps, buf_size=cfg.qps * per_qp, **common)
        conns = [[Conn(qp, end.mr, end.recv_buf + j * per_qp, end.send_buf + j * per_qp, j)
                  for j, qp in enumerate(end.qps)] for end in system.ends]
        for end in system.ends:
            end.qp = end.qps[0]
    elif cfg.qps > 1:
        await system.connect(qps=cfg.qps, buf_size=per_qp, **common)
        conns = [[Conn(c.qp, c.mr, c.recv_buf, c.send_buf, c.peer) for c in end.conns]
                 for end in system.ends]
    else:
        await system.connect(buf_size=per_qp, **common)
        conns = [[Conn(end.qp, end.mr, end.recv_buf, end.send_buf, 0)] for end in system.ends]
    for end, mine in zip(system.ends, conns, strict=True):
        for c in mine:  # as to_rts wrote it, with SACK loss detection on
            await end.dev.rel.write_fields("qp_rel_cfg", c.qp.qpn, t=timeout, linear_cnt=7,
                                           exp_cnt=7, ev_min_active=1,
                                           sack_threshold=cfg.sack_threshold)
    return conns


async def ring_workload(system, conns, cfg, rec: Recorder, now_ns, log=print,
                        poll_cycles: int = 100, limit_ns: float | None = None):
    """``cfg.workload`` (module docstring) over ``conns`` (``connect``),
    driven only through the host driver; ``now_ns()`` gives the simulated
    time. One polling loop serves both NICs (so it runs the same on cocotb
    and on a synchronous model transport): each ``poll_cycles`` it takes the
    send and receive completions, posts a NIC's next round when it may, pops
    EV events every ``cfg.sample_cycles`` (those a NIC's interrupt line says
    it holds, ``Device.ev_events_pending``) and logs progress every
    ``cfg.progress_us``. Fills ``rec``; returns {(dst, round): bytes expected
    in dst's slot}."""
    from host_driver.driver import Completion, WrOpcode

    ends = system.ends
    rng = random.Random(cfg.seed)
    own = [[rng.randbytes(cfg.shard_bytes) for _ in range(cfg.rounds)] for _ in range(2)]
    expected: dict[tuple[int, int], bytes] = {}
    m, size, nq = cfg.messages, cfg.message_bytes, cfg.qps
    mpq = m // nq  # messages per QP and round
    ring = cfg.workload == "ring"
    per_qp = ends[0].dev.params["evs_per_qp"]
    rec.ev_state = [[0] * per_qp for _ in ends]
    sent = [0, 0]  # rounds posted by NIC i
    got = [[0] * nq for _ in ends]  # receive completions of NIC i's connection j, in all
    inbound = [0, 0]  # the round NIC i is receiving
    received: list[bytes | None] = [None, None]
    limit = limit_ns if limit_ns is not None else 40 * cfg.ideal_ns() + 10_000_000
    t_start = now_ns()

    def offset(r: int, k: int) -> int:  # of message k of round r in its connection's buffers
        return (r * mpq + k // nq) * size

    def slot(i: int, r: int) -> bytes:  # round r's shard as NIC i received it
        return b"".join(ends[i].dev.mem.read(landing(conns, i, k).recv_buf + offset(r, k), size)
                        for k in range(m))

    async def post_round(i):
        me = ends[i]
        r = sent[i]
        shard = own[i][r] if received[i] is None else _xor(own[i][r], received[i])
        expected[(1 - i, r)] = shard
        for k in range(m):
            c = conns[i][k % nq]
            peer = conns[1 - i][c.peer]
            me.dev.mem.write(c.send_buf + offset(r, k), shard[k * size:(k + 1) * size])
            while c.qp.outstanding >= c.qp.sq_size:
                await take_send_cqes(i, wait=c.qp)
            await c.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=c.send_buf + offset(r, k),
                                 length=size, remote_addr=peer.recv_buf + offset(r, k),
                                 rkey=peer.mr.rkey, imm=(r << 8) | k)
        rec.rounds_posted.append((i, r, now_ns()))
        sent[i] += 1

    async def take_send_cqes(i, wait=None):
        for c in conns[i]:
            if wait is not None and c.qp is not wait:
                continue
            cqes = await (c.qp.send_cq.wait(1, timeout_cycles=4_000_000) if wait is not None
                          else c.qp.send_cq.poll())
            for e in cqes:
                rec.send_cqes.append((i, now_ns(), e.wr_id, e.status, e.byte_len))
                if e.status != Completion.SUCCESS:
                    rec.errors.append(f"nic{i}: send completion wr_id {e.wr_id} status "
                                      f"{e.status}")

    async def take_recv_cqes(i):
        for j, c in enumerate(conns[i]):
            q = c.peer  # the peer's connection: it sends messages q, q + nq, ...
            for e in await c.qp.recv_cq.poll():
                r, k = got[i][j] // mpq, q + (got[i][j] % mpq) * nq
                rec.recv_cqes.append((i, now_ns(), e.wr_id, e.byte_len, e.imm, e.status))
                if (e.imm, e.byte_len, e.status) != ((r << 8) | k, size, 0):
                    rec.errors.append(f"nic{i} round {r}: receive completion {e} is not "
                                      f"message {k} (imm {(r << 8) | k:#x}, {size} B)")
                rec.received[i] += e.byte_len
                got[i][j] += 1
                while inbound[i] < cfg.rounds and min(got[i]) >= (inbound[i] + 1) * mpq:
                    await round_in(i)

    async def round_in(i):
        r = inbound[i]
        data = slot(i, r)
        peer_shard = expected.get((i, r), b"")
        if data != peer_shard:
            first = next((j for j in range(len(data)) if data[j:j + 1] != peer_shard[j:j + 1]),
                         0)
            rec.errors.append(f"nic{i} round {r}: receive buffer differs from the peer's "
                              f"shard from byte {first} of {cfg.shard_bytes}")
        received[i] = data if ring else None
        rec.rounds.append((i, r, now_ns()))
        rec.round_done[i] = r + 1
        inbound[i] = r + 1
        log(f"[{now_ns() / 1000:9.1f} us] nic{i} round {r + 1}/{cfg.rounds}: shard of "
            f"nic{1 - i} in and checked, {rec.received[i] / 2**20:.2f} MiB received; "
            f"EVs nic0 {_ev_str(rec, 0)} nic1 {_ev_str(rec, 1)}")
        if ring and sent[i] < cfg.rounds:
            await post_round(i)

    async def take_ev_events():
        for i, end in enumerate(ends):
            if not await end.dev.ev_events_pending():
                continue
            mine = {c.qp.qpn: c.qp for c in conns[i]}
            for e in await end.dev.read_ev_events():
                qp = mine.get(e.qpn)
                values = qp.evs.values if qp is not None else ()
                value = values[e.ev_index] if e.ev_index < len(values) else None
                rec.ev_events.append((now_ns(), i, e.qpn, e.ev_index, value, e.old, e.new,
                                      e.drops))
                if e.qpn == end.qp.qpn and e.ev_index < per_qp:
                    rec.ev_state[i][e.ev_index] = e.new

    def room(i) -> bool:  # for a whole round on every connection of NIC i
        return all(c.qp.outstanding + mpq <= c.qp.sq_size for c in conns[i])

    for i in senders(cfg):
        await post_round(i)
    next_ev = next_progress = now_ns()
    outstanding = lambda: any(c.qp.outstanding for mine in conns for c in mine)  # noqa: E731
    while (min(rec.round_done[i] for i in receivers(cfg)) < cfg.rounds or outstanding()):
        for i in (0, 1):
            await take_send_cqes(i)
            await take_recv_cqes(i)
        if not ring and sent[0] < cfg.rounds and room(0):
            await post_round(0)
        t = now_ns()
        if t >= next_ev:
            await take_ev_events()
            next_ev = t + cfg.sample_cycles * CLK_NS
        if t >= next_progress:
            rec.progress.append((t, list(rec.received), list(rec.round_done),
                                 [list(x) for x in rec.ev_state]))
            log(f"[{t / 1000:9.1f} us] received nic0 {rec.received[0] / 2**20:.2f} MiB, "
                f"nic1 {rec.received[1] / 2**20:.2f} MiB; rounds {rec.round_done[0]}/"
                f"{cfg.rounds}, {rec.round_done[1]}/{cfg.rounds}; EVs nic0 {_ev_str(rec, 0)} "
                f"nic1 {_ev_str(rec, 1)}")
            next_progress = t + cfg.progress_us * 1000
        if t - t_start > limit:
            rec.errors.append(f"the workload did not finish in {limit / 1000:.0f} us: rounds "
                              f"{rec.round_done}, outstanding "
                              f"{[[c.qp.outstanding for c in mine] for mine in conns]}")
            break
        await ends[0].dev.transport.idle(poll_cycles)
    await take_ev_events()
    return expected


def final_check(system, conns, cfg, expected, rec: Recorder) -> bool:
    """Every slot of every receiving NIC against what its peer sent, at the
    end; appends to ``rec.errors``. True when every round was sent."""
    nq, mpq, size = cfg.qps, cfg.messages // cfg.qps, cfg.message_bytes
    if len(expected) < len(receivers(cfg)) * cfg.rounds:
        return False
    for i in receivers(cfg):
        mem = system.ends[i].dev.mem
        for r in range(cfg.rounds):
            want = expected[(i, r)]
            got = b"".join(mem.read(landing(conns, i, k).recv_buf
                                    + (r * mpq + k // nq) * size, size)
                           for k in range(cfg.messages))
            if got != want:
                first = next(j for j in range(len(want)) if got[j] != want[j])
                rec.errors.append(f"nic{i}: receive memory of round {r} differs from byte "
                                  f"{first} of {len(want)} at the end")
    return True


def landing(conns, i: int, k: int) -> Conn:
    """NIC i's connection that receives message k of the peer's shards: the
    peer of the connection that sends it (``k % qps`` on the peer)."""
    return conns[i][conns[1 - i][k % len(conns[i])].peer]


def _ev_str(rec: Recorder, i: int) -> str:
    if not rec.ev_state:
        return "-"
    return "".join(EV_STATE_CHAR.get(s, "?") for s in rec.ev_state[i])


# ---- faults ----------------------------------------------------------------------------------


def _ns(cfg, frac, us) -> float | None:
    if frac is not None:
        return frac * cfg.ideal_ns()
    return None if us is None else us * 1000.0


def fault_events(cfg) -> list[tuple[float, int, bool, int | None]]:
    """(ns after the workload's start, path, up, direction or None for both)
    of every path down/up in ``cfg``: the demo's window (``cfg.fail``), then
    ``cfg.events`` (sim/system/scenario.py: down at ``at``/``at_us``, up at
    ``up``/``up_us`` if given; or a flap between the two, ``flap_down_us`` down
    and ``flap_up_us`` up in turn)."""
    out = []
    if cfg.fail:
        out += [(cfg.fail_at_frac * cfg.ideal_ns(), cfg.fail_path, False, cfg.fail_direction),
                (cfg.up_at_frac * cfg.ideal_ns(), cfg.fail_path, True, cfg.fail_direction)]
    for e in cfg.events:
        down = _ns(cfg, e.get("at"), e.get("at_us"))
        up = _ns(cfg, e.get("up"), e.get("up_us"))
        if e.get("flap_down_us") is None:  # one window, or down for good
            out.append((down, e["path"], False, e.get("direction")))
            if up is not None:
                out.append((up, e["path"], True, e.get("direction")))
            continue
        t = down
        while t < up:  # flap: down, up, down, ... until ``up``; up again at the end
            out.append((t, e["path"], False, e.get("direction")))
            t = min(t + e["flap_down_us"] * 1000.0, up)
            out.append((t, e["path"], True, e.get("direction")))
            t += e["flap_up_us"] * 1000.0
    return out


def apply_rates(fab, cfg) -> None:
    """Random loss, CE marks, trims and reordering of ``cfg`` on ``fab``: every
    path of both directions, then ``cfg.rates``' overrides per direction and
    path."""
    fab.set_loss(cfg.loss)
    if cfg.ecn_prob:
        fab.set_ecn(prob=cfg.ecn_prob)
    if cfg.trim_prob or any(r.get("trim") for r in cfg.rates):
        fab.set_trim(on_overflow=False, prob=cfg.trim_prob)
    if cfg.reorder_prob:
        fab.set_reorder(cfg.reorder_prob, cfg.reorder_ns)
    for r in cfg.rates:
        if "reorder_prob" in r:
            fab.set_reorder(r["reorder_prob"], r.get("reorder_ns", cfg.reorder_ns),
                            direction=r.get("direction"))
        paths = fab.paths(r.get("direction"))
        for p in (range(fab.num_paths) if r.get("paths") is None else r["paths"]):
            for d in ([0, 1] if r.get("direction") is None else [0]):
                path = paths[d * fab.num_paths + p]
                for key, attr in (("loss", "loss"), ("ce", "ecn_prob"), ("trim", "trim_prob")):
                    if key in r:
                        setattr(path, attr, r[key])


def schedule_faults(fab, cfg, start_ns: float) -> None:
    """``cfg``'s path down/up events on ``fab`` at ``start_ns`` + their time."""
    for t, path, up, direction in fault_events(cfg):
        fab.schedule(_fault_event(start_ns + t, path, up, direction))


def _fault_event(at_ns, path, up, direction):
    from sim.system.fabric import FaultEvent

    return FaultEvent(at_ns, path, up, direction)


def describe_workload(cfg) -> str:
    qps = (f" over {cfg.qps} QPs per NIC (message k on QP k mod {cfg.qps})" if cfg.qps > 1
           else "")
    each = (f"{cfg.messages} WRITE_WITH_IMM of {cfg.message_bytes / 1024:g} KiB{qps} (MTU "
            f"{cfg.mtu})")
    if cfg.workload == "stream":
        return (f"a stream of {cfg.rounds} rounds from nic0 to nic1 only (nic1 only "
                f"answers): each round nic0 writes a {cfg.shard_bytes / 1024:g} KiB shard as "
                f"{each}, the next round as soon as its send queues have room.")
    return (f"a ring of {cfg.rounds} rounds; in each, both NICs write their "
            f"{cfg.shard_bytes / 1024:g} KiB shard to the other as {each}; the receiver "
            "consumes the immediates from its receive CQ before it sends its next shard (its "
            "own data XOR the shard it received).")


def describe_faults(cfg) -> str:
    """The faults of ``cfg`` in one paragraph (times relative to the start)."""
    parts = [f"on every path of both directions {cfg.loss:.2%} random loss, "
             f"{cfg.ecn_prob:.1%} of data frames CE-marked, {cfg.trim_prob:.2%} trimmed"]
    if cfg.reorder_prob:
        parts.append(f"{cfg.reorder_prob:.1%} of frames delayed by {cfg.reorder_ns:g} ns "
                     "(reordered)")
    for r in cfg.rates:
        what = ", ".join(f"{k} {r[k]:g}" if k != "reorder_ns" else f"{k} {r[k]:g} ns"
                         for k in ("loss", "ce", "trim", "reorder_prob", "reorder_ns")
                         if k in r)
        paths = "every path" if r.get("paths") is None else f"paths {r['paths']}"
        parts.append(f"{paths} of {DIRECTION_NAMES[r.get('direction')]}: {what}")
    events = fault_events(cfg)
    if events:
        parts.append("path events (after the start): " + "; ".join(
            f"{t / 1000:.1f} us path {p} of {DIRECTION_NAMES[d]} {'UP' if up else 'DOWN'}"
            for t, p, up, d in sorted(events, key=lambda e: e[0])[:12])
            + ("; ..." if len(events) > 12 else ""))
    else:
        parts.append("no path fails")
    return "; ".join(parts) + "."
