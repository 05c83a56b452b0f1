"""NicCore: TX, RX and reliability joined behind the NIC boundary (docs/architecture.md),
with the self-describing CSR space. See docs/architecture.md and docs/registers.md."""

from .core import NicCore

__all__ = ["NicCore"]
