"""Discrete-event multipath fabric: engine, links, planes and paths, faults."""

from .engine import Engine
from .routing import ROUTINGS, SPINE_USID_BASE
from .topology import Fabric, Host, Link, LinkFaults

__all__ = ["Engine", "Fabric", "Host", "Link", "LinkFaults", "ROUTINGS", "SPINE_USID_BASE"]
