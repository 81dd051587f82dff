"""Which NVML answers mean "never on this GPU", so a call is given up for good rather than
asked again every round."""

from __future__ import annotations

# NOT_SUPPORTED, FUNCTION_NOT_FOUND (an older driver) and ARGUMENT_VERSION_MISMATCH (a struct
# version the driver does not know)
NEVER = (3, 13, 25)


def never(err: BaseException) -> bool:
    """Whether an NVMLError says the call will never answer on this GPU."""
    return getattr(err, "value", None) in NEVER
