"""nvct: inject NVIDIA GPUs into OCI containers."""

from nvct._version import __version__

__all__ = ["__version__"]
