"""The NIC: QPs and memory regions of one host, and its transmit scheduler.

Transmit scheduling: one scheduler per plane (per port). When the port's
uplink is free it asks the QPs in round-robin order for their next data
packet for that plane (``qp.pull(plane)``) and puts it on the wire; it wakes
again when that packet has been serialised. So data never queues inside the
NIC, and every transmit decision (EV choice, retransmit or new) is taken at
the moment the packet leaves, as in the gateware. ACKs, NAKs and probes are
sent at once (``send_control``) and share the uplink queue.
"""

from __future__ import annotations

from .baseline import GbnQp
from .cc import NsccParams
from .ev import EvTable
from .packet import ACK, DATA, PROBE_REQ, PROBE_RESP, Packet
from .qp import ERROR, MrcQp, QpConfig

TRANSPORTS = ("mrc", "gbn", "spray")


class MemoryRegion:
    __slots__ = ("rkey", "va", "length", "buf", "pd")

    def __init__(self, rkey: int, va: int, length: int, backed: bool, pd: int = 0) -> None:
        self.rkey = rkey
        self.pd = pd
        self.va = va
        self.length = length
        self.buf = bytearray(length) if backed else None


class Nic:
    def __init__(self, host, engine, fabric) -> None:
        self.host = host
        self.engine = engine
        self.fabric = fabric
        host.nic = self
        self.planes = len(host.uplinks)
        self.qps: dict[int, object] = {}
        self._qp_list: list = []
        self._rr = [0] * self.planes
        self._wake_pending = [False] * self.planes
        self.mrs: dict[int, MemoryRegion] = {}
        self.completion_hooks: list = []  # callables(qp, completion, wr)
        self.error_hooks: list = []  # callables(qp)
        self.unknown_qp_drops = 0

    def register_mr(self, rkey: int, va: int, length: int, backed: bool = False,
                    pd: int = 0) -> MemoryRegion:
        mr = MemoryRegion(rkey, va, length, backed, pd)
        self.mrs[rkey] = mr
        return mr

    def create_qp(self, qpn: int, transport: str, cfg: QpConfig, evs: EvTable,
                  cc_params: NsccParams | None = None):
        if qpn in self.qps:
            raise ValueError(f"QPN {qpn} exists")
        if transport == "mrc":
            qp = MrcQp(self, qpn, cfg, evs, cc_params)
        elif transport in ("gbn", "spray"):
            qp = GbnQp(self, qpn, cfg, evs, cc_params, spray=transport == "spray")
        else:
            raise ValueError(f"transport must be one of {TRANSPORTS}")
        self.qps[qpn] = qp
        self._qp_list.append(qp)
        return qp

    # -- transmit ---------------------------------------------------------------
    def kick(self) -> None:
        for plane in range(self.planes):
            if not self._wake_pending[plane]:
                self._try_send(plane)

    def _wake(self, plane: int) -> None:
        self._wake_pending[plane] = False
        self._try_send(plane)

    def _try_send(self, plane: int) -> None:
        uplink = self.host.uplinks[plane]
        now = self.engine.now
        if uplink.busy_until > now:
            self._wake_pending[plane] = True
            self.engine.push(uplink.busy_until, self._wake, plane)
            return
        pkt = self._pull_next(plane)
        if pkt is None:
            return
        self.fabric.send(pkt)
        # wake when the port is free, unless no QP could send then anyway (window
        # full): the next ACK kicks the scheduler
        if self._may_send():
            self._wake_pending[plane] = True
            self.engine.push(max(uplink.busy_until, now), self._wake, plane)

    def _pull_next(self, plane: int) -> Packet | None:
        """The next data packet for ``plane`` from the QPs in round-robin order, the
        turn moving past the QP that gave it; None if none has one."""
        qps = self._qp_list
        n = len(qps)
        start = self._rr[plane]
        for i in range(n):
            pkt = qps[(start + i) % n].pull(plane)
            if pkt is not None:
                self._rr[plane] = (start + i + 1) % n
                return pkt
        return None

    def _may_send(self) -> bool:
        """Whether any QP might send now (``can_send``). A loop, not ``any()`` over a
        generator: this runs for every packet."""
        for q in self._qp_list:
            if q.can_send():
                return True
        return False

    def send_control(self, pkt: Packet) -> None:
        self.fabric.send(pkt)

    # -- receive ---------------------------------------------------------------
    def receive(self, pkt: Packet) -> None:
        qp = self.qps.get(pkt.dqpn)
        if qp is None:
            self.unknown_qp_drops += 1
            return
        kind = pkt.kind
        if kind == DATA:
            qp.on_data(pkt)
        elif kind == ACK:
            qp.on_ack(pkt)
        elif kind == PROBE_REQ:
            qp.on_probe_req(pkt)
        elif kind == PROBE_RESP:
            qp.on_probe_resp(pkt)

    # -- notifications -----------------------------------------------------------
    def on_completion(self, qp, completion, wr) -> None:
        for hook in self.completion_hooks:
            hook(qp, completion, wr)

    def on_qp_error(self, qp) -> None:
        assert qp.state == ERROR
        for hook in self.error_hooks:
            hook(qp)
