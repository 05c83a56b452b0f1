"""A world: engine + fabric + NICs + connected QP pairs. The scoreboard entry point.

Typical use (see docs/model.md)::

    w = World(seed=7, planes=1, paths_per_plane=8)
    a, b = w.add_host("a"), w.add_host("b")
    conn = w.connect("a", "b", transport="mrc", cfg=QpConfig(), evs=explicit_evs(range(8)))
    conn.requester.post_write(wr_id=1, remote_va=conn.mr.va, rkey=conn.rkey, length=65536, imm=7)
    w.run_until_idle()
    conn.requester.send_cq, conn.responder.recv_cq, conn.requester.retx_log, w.ev_events
"""

from __future__ import annotations

from dataclasses import dataclass

from ..fabric import Engine, Fabric
from .cc import NsccParams
from .ev import EvTable, EvTransition, generated_evs
from .nic import Nic
from .qp import INIT, RTR, RTS, QpConfig


@dataclass
class Connection:
    requester: object
    responder: object
    rkey: int
    mr: object
    src: str
    dst: str
    transport: str


class World:
    def __init__(self, seed: int = 1, **fabric_kw) -> None:
        self.seed = seed
        self.engine = Engine()
        self.fabric = Fabric(self.engine, seed=seed, **fabric_kw)
        self.nics: dict[str, Nic] = {}
        self.connections: list[Connection] = []
        self.ev_events: list[EvTransition] = []
        self._next_qpn = 0x100
        self._next_rkey = 0x1000
        self._next_va = 0x10_0000_0000

    def add_host(self, name: str) -> Nic:
        host = self.fabric.add_host(name)
        nic = Nic(host, self.engine, self.fabric)
        nic.completion_hooks.append(self._on_completion)
        nic.error_hooks.append(lambda qp: self._check_idle())
        self.nics[name] = nic
        return nic

    def connect(self, src: str, dst: str, *, transport: str = "mrc",
                cfg: QpConfig | None = None, evs: list[tuple[int, int]] | None = None,
                cc: NsccParams | None = None, mr_length: int = 1 << 40,
                backed: bool = False) -> Connection:
        """A requester QP on ``src`` and a responder QP on ``dst``, both in RTS,
        and a memory region on ``dst`` for the writes."""
        cfg = cfg or QpConfig()
        planes = self.fabric.planes
        if evs is None:
            evs = generated_evs(init=0xC000, min_ev=0xC000, max_ev=0xFFFF, count=8 * planes,
                                planes=planes)
        s_nic, d_nic = self.nics[src], self.nics[dst]
        sq, rq = self._next_qpn, self._next_qpn + 1
        self._next_qpn += 2

        def table():
            return EvTable(evs, planes, min_active=cfg.ev_min_active,
                           bad_threshold=cfg.ev_bad_threshold,
                           on_event=self.ev_events.append)

        req = s_nic.create_qp(sq, transport, cfg, table(), cc)
        resp = d_nic.create_qp(rq, transport, cfg, table(), cc)
        for qp, peer, dqpn in ((req, d_nic.host, rq), (resp, s_nic.host, sq)):
            qp.modify(INIT)
            qp.modify(RTR, peer=peer, dqpn=dqpn)
            qp.modify(RTS)
        rkey = self._next_rkey
        self._next_rkey += 1
        mr = d_nic.register_mr(rkey, self._next_va, mr_length, backed)
        self._next_va += mr_length + (1 << 20)
        conn = Connection(req, resp, rkey, mr, src, dst, transport)
        self.connections.append(conn)
        return conn

    # -- running ------------------------------------------------------------------
    def _on_completion(self, qp, completion, wr) -> None:
        if wr is not None:
            self._check_idle()

    def _check_idle(self) -> None:
        if self._stop_when_idle and all(c.requester.idle() for c in self.connections):
            self.engine.stop()

    _stop_when_idle = False

    def run(self, until: float | None = None, progress=None) -> None:
        self.engine.run(until=until, progress=progress)

    def run_until_idle(self, max_time_ns: float = 1e12, progress=None) -> bool:
        """Run until every requester has no work left (or is in ERROR). True if so."""
        self._stop_when_idle = True
        try:
            if not all(c.requester.idle() for c in self.connections):
                self.engine.run(until=max_time_ns, progress=progress)
        finally:
            self._stop_when_idle = False
        return all(c.requester.idle() for c in self.connections)
