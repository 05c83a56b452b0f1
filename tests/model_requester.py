"""The golden model's requester on its own, for tests that drive it ACK by ACK.

``requester(...)`` builds one ``MrcQp`` (sim/model/qp.py) in RTS on a stub NIC
that has no timers, no fabric and no host memory: the test pulls each packet
with ``qp.pull(0)`` and hands each ACK to ``qp.on_ack``, and reads what the
model decided from ``qp.retx_log`` (every retransmission, in order), the EV
table's ``qp.evs.events``, ``qp.una_psn`` and ``qp.send_cq`` (the WQEs
completed, in order).

With ``sack_threshold`` 0 the model detects SACK losses by RACK (here with a
zero reordering window); with ``sack_threshold`` n, by reliability's count rule
(``QpConfig.sack_threshold``: a hole with at least n SACKed PSNs above it is
lost, once per timeout round).
"""

from __future__ import annotations

from sim.model.ev import EvTable, explicit_evs
from sim.model.qp import INIT, RTR, RTS, MrcQp, QpConfig

__all__ = ["requester"]


class _Engine:
    """Time only moves when the test moves it (``now``); nothing is scheduled."""

    def __init__(self):
        self.now = 0.0

    def at(self, when, fn, arg=None):
        pass  # no model timers: the tests that use this have no timeouts

    def after(self, delay, fn, arg=None):
        pass


class _Nic:
    def __init__(self):
        self.engine = _Engine()
        self.host = "a"
        self.mrs = {}

    def kick(self):
        pass

    def send_control(self, pkt):
        pass

    def on_completion(self, qp, completion, wr):
        pass

    def on_qp_error(self, qp):
        pass


def requester(ev_values, *, ev_thr=2, min_active=1, qpn=0x10, dqpn=0x100, **cfg):
    """One model QP in RTS over the EVs ``ev_values`` (index = position), with
    ``QpConfig(**cfg)`` (MTU 1024, PSNs from 0, RACK with no reordering window
    and a timeout of 17 s unless given)."""
    cfg = QpConfig(**{"mtu": 1024, "rto_exp": 24, "reo_wnd_ns": 0.0, "start_psn": 0,
                      "ev_bad_threshold": ev_thr, "ev_min_active": min_active, **cfg})
    nic = _Nic()
    evs = EvTable(explicit_evs(list(ev_values)), 1, min_active=min_active,
                  bad_threshold=ev_thr)
    qp = MrcQp(nic, qpn, cfg, evs)
    qp.modify(INIT)
    qp.modify(RTR, peer="b", dqpn=dqpn)
    qp.modify(RTS)
    return qp
