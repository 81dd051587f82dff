"""The NVIDIA inputs of a container that nvct does not act on, each with the reason.

NVIDIA's toolkit reads a container's ``NVIDIA_*`` variables (and Swarm's ``DOCKER_RESOURCE_*``
when configured); an input nvct leaves alone must not be left alone silently, or the container
starts and fails later inside CUDA with nothing to say why. Each returned line names the input
and says why it had no effect; the request adds it to its decisions (``explain``) and the shim
and the hook log it on every start.
"""

from __future__ import annotations

from nvct.request.features import FEATURE_VARIABLES

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

SWARM_PREFIX = "DOCKER_RESOURCE_"

# The variables nvct reads (request.parse and request.features).
ACTED_ON = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_DISABLE_REQUIRE",
        *FEATURE_VARIABLES,
    }
)

# NVIDIA toolkit inputs nvct knows and does not implement, with what to do instead.
NOT_SUPPORTED = {
    "NVIDIA_REQUIRE_JETPACK": "Jetson's CSV mode (csv-mounts) is not supported by nvct",
}

# Variables of the toolkit's own processes, not of a container: they do nothing in an image.
_TOOLKIT_PROCESS_PREFIX = "NVIDIA_CTK_"
_TOOLKIT_PROCESS = frozenset({"NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT"})


def _is_image_metadata(name: str) -> bool:
    """NGC and CUDA images label themselves (NVIDIA_BUILD_ID, NVIDIA_PYTORCH_VERSION, ...)."""
    return name.endswith(("_VERSION", "_BUILD_ID")) or name in (
        "NVIDIA_PRODUCT_NAME",
        "NVIDIA_CUDA_END_OF_LIFE",
    )


def ignored_inputs(
    env: Mapping[str, str],
    *,
    acted_on: Collection[str] = (),
    swarm_resources: Collection[str] = (),
) -> list[str]:
    """One line per NVIDIA input in ``env`` that nvct does not act on (metadata: one line).

    ``acted_on``: further variables the caller reads (features enabled by config);
    ``swarm_resources``: the ``DOCKER_RESOURCE_*`` names the config takes devices from.
    """
    lines: list[str] = []
    metadata: list[str] = []
    for name in sorted(env):
        if name.startswith(SWARM_PREFIX):
            if name not in swarm_resources:
                lines.append(
                    f"{name} ignored: a Swarm generic resource nvct is not configured to read "
                    f"(set request.swarm-resource = [{name!r}] to take GPUs from it)"
                )
            continue
        if not name.startswith("NVIDIA_") or name in ACTED_ON or name in acted_on:
            continue
        if name.startswith("NVIDIA_REQUIRE_") and name not in NOT_SUPPORTED:
            continue  # requirements: parsed, checked or reported as disabled
        if name in NOT_SUPPORTED:
            lines.append(f"{name} ignored: {NOT_SUPPORTED[name]}")
        elif name.startswith(_TOOLKIT_PROCESS_PREFIX) or name in _TOOLKIT_PROCESS:
            lines.append(
                f"{name} ignored: it configures NVIDIA's toolkit processes, not a container "
                "(nvct's settings are in its config.toml)"
            )
        elif _is_image_metadata(name):
            metadata.append(name)
        else:
            lines.append(f"{name} ignored: not an NVIDIA container toolkit input nvct knows")
    if metadata:
        lines.append(f"image metadata, not toolkit inputs, not read: {', '.join(metadata)}")
    return lines
