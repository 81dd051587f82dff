"""What a container asks for, read from its OCI spec and nvct's policy.

Pure: takes the env list, mount destinations and capabilities of a ``config.json``
(plus ``Config``) and returns a ``Request``. Semantics follow NVIDIA's toolkit so images
keep working: ``NVIDIA_VISIBLE_DEVICES``, ``NVIDIA_DRIVER_CAPABILITIES``,
``NVIDIA_REQUIRE_*``, ``NVIDIA_DISABLE_REQUIRE`` and legacy ``CUDA_VERSION`` images.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nvct.base.errors import RequestError, RequirementError
from nvct.cdi.names import is_qualified, looks_qualified
from nvct.config import CAPABILITIES, Config
from nvct.request.features import FEATURE_VARIABLES, NO_FEATURES, Features, parse_features
from nvct.request.ignored import ignored_inputs
from nvct.request.inputs import (
    DEVICE_MOUNT_DIR,
    cdi_annotations,
    env_map,
    is_privileged,
    mount_pairs,
)
from nvct.request.requirements import Requirement, parse_requirement

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
MAX_DEVICES = 1024
_TRUE = {"1", "t", "true", "yes", "y", "on"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A container's GPU request after policy.

    ``visible`` is ``void`` (no GPU handling at all), ``none`` (driver, no GPU), ``all``,
    ``list`` (then ``devices`` holds the tokens in order) or ``cdi`` (then ``devices`` holds
    fully-qualified CDI device names, resolved through the host's CDI specs).
    """

    visible: str
    devices: tuple[str, ...] = ()
    capabilities: frozenset[str] = frozenset()
    requirements: tuple[Requirement, ...] = ()
    source: str = ""
    decisions: tuple[str, ...] = ()
    # The NVIDIA inputs nvct left alone, each naming the input (also among ``decisions``):
    # logged on every start.
    ignored: tuple[str, ...] = ()
    features: Features = NO_FEATURES

    @property
    def wants_gpu(self) -> bool:
        """True when nvct must act on the container."""
        return self.visible != "void"


VOID = Request(visible="void", source="nothing asked")


def request_from_spec(spec: Mapping[str, Any], config: Config) -> Request:
    """The Request of an OCI runtime spec (``config.json`` as a dict)."""
    process = spec.get("process") or {}
    return parse_request(
        env_map(process.get("env") or ()),
        mounts=mount_pairs(spec),
        privileged=is_privileged(spec),
        annotations=cdi_annotations(spec),
        config=config,
    )


def operator_request(env: Mapping[str, str], config: Config) -> Request:
    """A request the node's operator makes (``nvct-cli list``, ``cdi generate``).

    The container-input policies (``only-allocated-gpus``, ``swarm-resource``,
    ``accept-envvar-when-unprivileged``) guard against what an image asks for; applied to
    the operator's own request they would describe, or write into a CDI spec, no GPU at all.

    Raises:
        RequestError: a capability is unknown or the device list is malformed.
        RequirementError: an ``NVIDIA_REQUIRE_*`` expression is malformed.
    """
    request = replace(
        config.request,
        only_allocated_gpus=False,
        swarm_resources=(),
        accept_envvar_when_unprivileged=True,
    )
    unguarded = replace(config, request=request)
    return parse_request(env, config=unguarded)


def parse_request(
    env: Mapping[str, str],
    *,
    mounts: Sequence[tuple[str, str]] = (),
    privileged: bool = True,
    annotations: Mapping[str, str] | None = None,
    config: Config,
) -> Request:
    """Apply the toolkit's env rules and nvct's policy; ``mounts`` are the container's
    ``(source, destination)`` pairs.

    Raises:
        RequestError: a capability is unknown or the device list is malformed.
        RequirementError: an ``NVIDIA_REQUIRE_*`` expression is malformed.
    """
    ignored = ignored_inputs(env, swarm_resources=config.request.swarm_resources)
    request = _parse(env, mounts, privileged, config, ignored, annotations or {})
    if not request.wants_gpu:  # features come with GPUs (or "none"), as in NVIDIA's toolkit
        ignored += [
            f"{name} ignored: the container asks for no GPU ({VISIBLE_DEVICES} unset or void)"
            for name in sorted(FEATURE_VARIABLES & env.keys())
            if env[name].strip()
        ]
    if not ignored:
        return request
    return replace(
        request,
        decisions=(*request.decisions, *ignored),
        ignored=(*request.ignored, *ignored),
    )


def _parse(
    env: Mapping[str, str],
    mounts: Sequence[tuple[str, str]],
    privileged: bool,
    config: Config,
    ignored: list[str],
    annotations: Mapping[str, str],
) -> Request:
    """The request; inputs it leaves alone are appended to ``ignored``."""
    decisions: list[str] = []
    # Set by the orchestrator from the device plugin's answer: they name the devices.
    names = [
        name
        for key, value in sorted(annotations.items())
        for name in _split_devices(value, f"annotation {key}")
    ]
    if names:
        if VISIBLE_DEVICES in env:
            decisions.append(f"{VISIBLE_DEVICES} ignored: CDI annotations name the devices")
        return _cdi_request(names, ", ".join(sorted(annotations)), decisions)
    legacy_image = "CUDA_VERSION" in env and "NVIDIA_REQUIRE_CUDA" not in env
    tokens: list[str] | None = None
    source = VISIBLE_DEVICES

    mount_tokens = _device_mounts(mounts, ignored)
    if mount_tokens and not (
        config.request.accept_volume_mounts or config.request.only_allocated_gpus
    ):
        ignored.append(
            f"{len(mount_tokens)} volume mount(s) under {DEVICE_MOUNT_DIR} ignored: "
            "request.accept-volume-mounts is false"
        )
    swarm = next((name for name in config.request.swarm_resources if name in env), None)
    if mount_tokens and (config.request.accept_volume_mounts or config.request.only_allocated_gpus):
        tokens = _split_devices(",".join(mount_tokens), DEVICE_MOUNT_DIR)
        source = "volume mounts under " + DEVICE_MOUNT_DIR
        decisions.append(f"devices taken from {len(mount_tokens)} volume mount(s)")
    elif config.request.only_allocated_gpus:
        # An image's NVIDIA_VISIBLE_DEVICES=all must not hand every GPU of a node to a pod
        # that asked the scheduler for none: only the device plugin's answers count.
        if VISIBLE_DEVICES in env or legacy_image or swarm is not None:
            decisions.append(
                f"{VISIBLE_DEVICES}/CUDA_VERSION ignored: request.only-allocated-gpus is on "
                "(GPUs come only from device plugin allocations: volume mounts, CDI)"
            )
        return Request(visible="void", source="policy", decisions=tuple(decisions))
    elif swarm is not None:
        # NVIDIA's swarm-resource: the first configured variable present replaces
        # NVIDIA_VISIBLE_DEVICES (which is then not read).
        tokens = _split_devices(env[swarm], swarm)
        source = swarm
        decisions.append(f"devices taken from the Swarm resource {swarm} (request.swarm-resource)")
        if VISIBLE_DEVICES in env:
            ignored.append(f"{VISIBLE_DEVICES} ignored: {swarm} (request.swarm-resource) wins")
    elif VISIBLE_DEVICES in env:
        if privileged or config.request.accept_envvar_when_unprivileged:
            tokens = _split_devices(env[VISIBLE_DEVICES], VISIBLE_DEVICES)
        else:
            decisions.append(
                f"{VISIBLE_DEVICES} ignored: the container is unprivileged and "
                "accept-envvar-when-unprivileged is false"
            )
            return Request(visible="void", source="policy", decisions=tuple(decisions))
    elif legacy_image:
        tokens = ["all"]
        source = "CUDA_VERSION (legacy image)"
        decisions.append("legacy CUDA image without NVIDIA_VISIBLE_DEVICES: all GPUs")

    if tokens is None:
        return VOID
    cdi = [t for t in tokens if looks_qualified(t)]
    if cdi and len(cdi) != len(tokens):
        raise RequestError(
            f"{source} mixes CDI device names and GPU ids "
            f"({', '.join(t[:40] for t in tokens[:4])})",
            hint="name every device as vendor/class=name (e.g. nvidia.com/gpu=0), or none",
        )
    if cdi:
        return _cdi_request(cdi, source, decisions)
    if not tokens or "void" in tokens:
        return Request(visible="void", source=source, decisions=tuple(decisions))
    visible, devices = "list", tuple(dict.fromkeys(tokens))
    for token in tokens:
        if token in ("all", "none"):
            visible, devices = token, ()
            break

    return Request(
        visible=visible,
        devices=devices,
        capabilities=_capabilities(env, legacy_image, config),
        requirements=_requirements(env, legacy_image, config, decisions),
        source=source,
        decisions=tuple(decisions),
        features=parse_features(
            env,
            privileged=privileged,
            env_accepted=privileged or config.request.accept_envvar_when_unprivileged,
            ignored=ignored,
        ),
    )


def _device_mounts(mounts: Sequence[tuple[str, str]], ignored: list[str]) -> list[str]:
    """The device tokens of the mounts under ``DEVICE_MOUNT_DIR`` whose source is /dev/null.

    What a device plugin's volume-mounts answer mounts there is /dev/null (NVIDIA's toolkit
    counts no other source): any pod can mount a directory of its own (an emptyDir) at
    ``/var/run/nvidia-container-devices/all``, and that must not be a GPU request.
    """
    tokens: list[str] = []
    other = 0
    for source, destination in mounts:
        token = destination[len(DEVICE_MOUNT_DIR) :].strip("/")
        if not destination.startswith(DEVICE_MOUNT_DIR) or not token:
            continue
        if _clean(source) == "/dev/null":
            tokens.append(token)
        else:
            other += 1
    if other:
        ignored.append(
            f"{other} volume mount(s) under {DEVICE_MOUNT_DIR} ignored: their source is not "
            "/dev/null (a device plugin's volume-mounts answer mounts /dev/null there)"
        )
    return tokens


def _clean(path: str) -> str:
    """``path`` as Go's filepath.Clean writes it (POSIX keeps a leading ``//``; Go does not)."""
    cleaned = posixpath.normpath(path) if path else ""
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def _cdi_request(names: list[str], source: str, decisions: list[str]) -> Request:
    bad = [n for n in names if not is_qualified(n)]
    if bad:
        raise RequestError(
            f"{bad[0][:80]!r} in {source} is not a fully-qualified CDI device name",
            hint="use vendor/class=name, e.g. nvidia.com/gpu=0 (see nvct-cli cdi list)",
        )
    decisions.append(f"CDI devices from {source}: {', '.join(names)}")
    decisions.append(
        "NVIDIA_DRIVER_CAPABILITIES and NVIDIA_REQUIRE_* do not apply to CDI devices: "
        "their CDI spec says what the container gets"
    )
    return Request(
        visible="cdi",
        devices=tuple(dict.fromkeys(names)),
        source=source,
        decisions=tuple(decisions),
    )


def _split_devices(value: str, source: str) -> list[str]:
    if not value.isprintable() or not value.isascii():
        raise RequestError(
            f"{source} contains non-printable or non-ASCII characters",
            hint="list GPU indices, GPU-/MIG- UUIDs, PCI bus ids, 'all', 'none' or 'void'",
        )
    tokens = [t.strip() for t in value.split(",") if t.strip()]
    if len(tokens) > MAX_DEVICES:
        raise RequestError(
            f"{source} lists {len(tokens)} devices",
            hint=f"list at most {MAX_DEVICES}, or use 'all'",
        )
    return tokens


def _capabilities(env: Mapping[str, str], legacy_image: bool, config: Config) -> frozenset[str]:
    raw = env.get(DRIVER_CAPABILITIES)
    if raw is None and legacy_image:
        return frozenset(CAPABILITIES)
    names = [c.strip() for c in (raw or "").split(",") if c.strip()]
    if not names:
        return frozenset(config.request.default_capabilities)
    if "all" in names:
        return frozenset(CAPABILITIES)
    unknown = [n for n in names if n not in CAPABILITIES]
    if unknown:
        shown = ", ".join(repr(u[:32]) for u in unknown[:5])
        raise RequestError(
            f"{DRIVER_CAPABILITIES} has unknown capability {shown}",
            hint=f"use 'all' or a comma list of {', '.join(CAPABILITIES)}",
        )
    return frozenset(names)


def _requirements(
    env: Mapping[str, str], legacy_image: bool, config: Config, decisions: list[str]
) -> tuple[Requirement, ...]:
    if config.request.disable_require or env.get(DISABLE_REQUIRE, "").strip().lower() in _TRUE:
        if any(k.startswith(REQUIRE_PREFIX) for k in env):
            decisions.append("requirements not checked: NVIDIA_DISABLE_REQUIRE / disable-require")
        return ()
    reqs = [
        parse_requirement(value, source=key)
        for key, value in sorted(env.items())
        if key.startswith(REQUIRE_PREFIX) and key != "NVIDIA_REQUIRE_JETPACK" and value.strip()
    ]
    if legacy_image:
        major_minor = ".".join(env["CUDA_VERSION"].split(".")[:2])
        try:
            reqs.append(parse_requirement(f"cuda>={major_minor}", source="CUDA_VERSION"))
        except RequirementError:  # an odd CUDA_VERSION must not block the image
            decisions.append(f"CUDA_VERSION {env['CUDA_VERSION'][:32]!r} is not a version")
    return tuple(reqs)
