"""Error types. Every message names the input at fault; `hint` says how to fix it."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import ClassVar


class NvctError(Exception):
    """Base of every error nvct reports to a user as one line."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and its fix on one line, as the hook and CLI print it."""
        text = " ".join(self.message.split())
        if self.hint:
            text += f" (fix: {' '.join(self.hint.split())})"
        return text

    def __str__(self) -> str:
        return self.one_line()


class ConfigError(NvctError):
    """nvct's own config.toml is unreadable or invalid."""


class RequestError(NvctError):
    """A container asked for something that cannot be granted (unknown device, capability)."""


class RequirementError(NvctError):
    """An NVIDIA_REQUIRE_* constraint is malformed or not satisfied by the host."""


class DiscoveryError(NvctError):
    """The host's driver could not be inventoried (missing NVML, bad ld.so.cache, ...)."""


class SpecError(NvctError):
    """An OCI bundle, config.json or state document is missing or malformed."""


class ApplyError(NvctError):
    """Carrying out a plan inside a container failed."""


class EngineConfigError(NvctError):
    """A container engine's config file cannot be changed safely."""
