"""The feature variables of a request: MIG management, IMEX channels, GDS/MOFED/NVSWITCH/GDRCOPY.

As NVIDIA's toolkit reads them: ``NVIDIA_MIG_CONFIG_DEVICES`` and
``NVIDIA_MIG_MONITOR_DEVICES`` (``all`` or a GPU list) only from privileged containers (an
unprivileged one is refused, not started without them); ``NVIDIA_IMEX_CHANNELS`` (channel
numbers or ``all``) under the same policy as ``NVIDIA_VISIBLE_DEVICES``; ``NVIDIA_GDS``,
``NVIDIA_MOFED``, ``NVIDIA_NVSWITCH`` and ``NVIDIA_GDRCOPY`` when set to ``enabled``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvct.base.errors import RequestError

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Mapping

MIG_CONFIG = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR = "NVIDIA_MIG_MONITOR_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
# Variable -> the feature's name in plans and messages.
GATED = {
    "NVIDIA_GDS": "gds",
    "NVIDIA_MOFED": "mofed",
    "NVIDIA_NVSWITCH": "nvswitch",
    "NVIDIA_GDRCOPY": "gdrcopy",
}
FEATURE_VARIABLES = frozenset({MIG_CONFIG, MIG_MONITOR, IMEX_CHANNELS, *GATED})
MAX_IMEX_CHANNEL = (1 << 20) - 1


@dataclass(frozen=True, slots=True)
class Features:
    """What a container asks for beyond GPUs and capabilities (empty: nothing)."""

    mig_config: tuple[str, ...] = ()  # GPU tokens, or ("all",)
    mig_monitor: tuple[str, ...] = ()
    imex_channels: tuple[str, ...] = ()  # channel numbers, or ("all",)
    gated: frozenset[str] = frozenset()  # gds, mofed, nvswitch, gdrcopy


NO_FEATURES = Features()


def _tokens(value: str) -> tuple[str, ...]:
    tokens = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if any(t in ("none", "void") for t in tokens):
        return ()
    return ("all",) if "all" in tokens else tokens


def parse_features(
    env: Mapping[str, str], *, privileged: bool, env_accepted: bool, ignored: list[str]
) -> Features:
    """The container's features; what it asks for and cannot have is appended to ``ignored``.

    Raises:
        RequestError: MIG management from an unprivileged container, or a malformed channel.
    """
    mig: dict[str, tuple[str, ...]] = {}
    for name in (MIG_CONFIG, MIG_MONITOR):
        tokens = _tokens(env.get(name, ""))
        if tokens and not privileged:
            raise RequestError(
                f"{name} is set in an unprivileged container",
                hint="MIG management needs a privileged container (--privileged), as with "
                "NVIDIA's toolkit; or unset it",
            )
        mig[name] = tokens
    channels = _tokens(env.get(IMEX_CHANNELS, ""))
    if channels and not env_accepted:
        ignored.append(
            f"{IMEX_CHANNELS} ignored: the container is unprivileged and "
            "accept-envvar-when-unprivileged is false"
        )
        channels = ()
    for channel in channels:
        if channel != "all" and not (channel.isdigit() and int(channel) <= MAX_IMEX_CHANNEL):
            raise RequestError(
                f"{IMEX_CHANNELS} has {channel[:32]!r}, not a channel number",
                hint=f"list channel numbers (0-{MAX_IMEX_CHANNEL}) or 'all'",
            )
    gated = set()
    for name, feature in GATED.items():
        value = env.get(name, "").strip()
        if value == "enabled":
            gated.add(feature)
        elif value:
            ignored.append(f"{name}={value[:32]!r} ignored: only 'enabled' turns {feature} on")
    return Features(
        mig_config=mig[MIG_CONFIG],
        mig_monitor=mig[MIG_MONITOR],
        imex_channels=channels,
        gated=frozenset(gated),
    )
