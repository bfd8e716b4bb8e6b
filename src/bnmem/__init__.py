"""bnmem: how normalization layers change memorization and membership-inference risk."""

__version__ = "0.1.0"

from bnmem.errors import BnmemError

__all__ = ["BnmemError", "__version__"]
