"""Discrete-event multipath fabric: engine, links, planes and paths, faults."""

from .engine import Engine
from .topology import Fabric, Host, Link, LinkFaults

__all__ = ["Engine", "Fabric", "Host", "Link", "LinkFaults"]
