"""``ModelFabric``: one event engine and one plane of paths shared by the
model NICs attached to it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw.protocol import MAX_PLANES
from sim.fabric import Engine
from sim.fabric import Fabric as PathFabric

if TYPE_CHECKING:
    from .nic import ModelNic


class ModelFabric:
    """The event engine and a ``sim.fabric`` fabric for ModelNics.

    A frame crosses the sender's uplink of its plane, the core link of its
    path (``routing``'s rule, sim/fabric/routing.py: EV mod ``num_paths``
    with explicit routing, a hash, or an SRv6 EV's first uSID) toward the
    receiver, and the receiver's downlink of the plane. Uplinks and downlinks
    run at ``gbps``, the core links at ``core_gbps`` (default ``gbps``); the
    whole propagation delay ``delay_ns`` sits on the core link, so it is per
    path. Switch queues are unlimited: no ECN marks, no trimming, no overflow.

    ``planes``: 1 (the default) carries every frame on one plane, whatever
    the NICs' ``num_planes`` (their planes are then nominal); more gives each
    NIC a port per plane, and each EV's packets leave on the plane its TX
    entry names (``ModelNic``), as NicCore's do; ``gbps`` is then a plane's.
    """

    def __init__(self, *, num_paths: int = 8, delay_ns: float = 400.0, gbps: float = 1.0,
                 seed: int = 1, routing: str = "explicit", planes: int = 1,
                 core_gbps: float | None = None):
        if not isinstance(num_paths, int) or num_paths < 1:
            raise ValueError(f"num_paths must be a positive integer, not {num_paths!r}")
        if delay_ns < 0 or gbps <= 0 or (core_gbps is not None and core_gbps <= 0):
            raise ValueError(f"need delay_ns >= 0, gbps > 0 and core_gbps > 0, not "
                             f"{delay_ns!r}, {gbps!r}, {core_gbps!r}")
        if not isinstance(planes, int) or not 1 <= planes <= MAX_PLANES:
            raise ValueError(f"planes must be in 1..{MAX_PLANES}, not {planes!r}")
        self.engine = Engine()
        self.planes = planes
        self.paths = PathFabric(self.engine, planes=planes, paths_per_plane=num_paths,
                                port_gbps=gbps, core_gbps=core_gbps or gbps, link_delay_ns=0.0,
                                queue_bytes=1 << 62, ecn_bytes=1 << 62, trim=False,
                                routing=routing, seed=seed)
        self.delay_ns = delay_ns
        self.nics: list[ModelNic] = []

    @property
    def now(self) -> float:
        return self.engine.now

    def attach(self, nic: ModelNic):
        host = self.paths.add_host(f"nic{len(self.nics)}")
        for link in self.paths.core.values():
            if link.name.endswith(f".to.{host.name}"):
                link.prop_ns = self.delay_ns
        self.nics.append(nic)
        return host

    def advance(self, ns: float) -> None:
        """Run the model for ``ns`` nanoseconds."""
        until = self.engine.now + ns
        self.engine.run(until=until)
        # Engine.run stops before the first later event without moving the clock
        if self.engine.now < until:
            self.engine.now = until

    def nic_of_address(self, v6: bool, address: int) -> ModelNic | None:
        """The NIC whose own address of that family is ``address``."""
        for nic in self.nics:
            if nic.own_address(v6) == address:
                return nic
        return None


# ---- the QP: golden-model MRC with the hardware's rules -----------------------------------
