"""The package version (a leaf, so every layer may record it without importing the root package)."""

__version__ = "0.1.0"
