"""Golden model of the MRC transport (and the go-back-N / oblivious-spray baselines).

See docs/model.md for the API; ``sim.model.world.World`` wires hosts, NICs and
QPs onto a ``sim.fabric.Fabric``.
"""

from .cc import Nscc, NsccParams
from .ev import ASSUMED_BAD, DENIED, GOOD, EvTable, EvTransition, explicit_evs, generated_evs
from .nic import Nic
from .packet import Packet, psn_add, psn_diff
from .qp import (
    ERROR,
    INIT,
    RESET,
    RETRY_EXC_ERR,
    RTR,
    RTS,
    SUCCESS,
    WR_FLUSH_ERR,
    Completion,
    MrcQp,
    QpConfig,
)
from .world import World

__all__ = [
    "ASSUMED_BAD", "DENIED", "ERROR", "GOOD", "INIT", "RESET", "RETRY_EXC_ERR", "RTR", "RTS",
    "SUCCESS", "WR_FLUSH_ERR", "Completion", "EvTable", "EvTransition", "MrcQp", "Nic",
    "Nscc", "NsccParams", "Packet", "QpConfig", "World", "explicit_evs", "generated_evs",
    "psn_add", "psn_diff",
]
