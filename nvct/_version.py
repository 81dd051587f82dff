"""nvct's version, static so offline package builds and hot paths need no metadata lookup."""

__version__ = "0.1.0"
