"""The container path's tables: ``[runtime]``, ``[request]``, ``[inject]``, ``[cdi]`` and
``[log]``, each key declared once (``nvct.config.declare``). config.toml's top-level keys and
the tables together are ``nvct.config.Config``.

A new setting is one ``key()`` line here (plus its use): the schema, the loader and the shipped
file's check (``tests/config/test_config.py``) follow from it.
"""

from __future__ import annotations

from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.config.declare import Table, key, section

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

CAPABILITIES = ("utility", "compute", "video", "graphics", "display", "ngx", "compat32")
LOG_LEVELS = ("debug", "info", "warning", "error")
LIBRARY_MOUNTS = ("directory", "directory-copies", "files")
BINARIES = ("links", "mounts")
PROC_DRIVER_MODES = ("hook", "always", "off")
CUDA_COMPAT = ("ldconfig", "off")

_BOOLEAN = {"type": "boolean"}
_ABSPATHS = {"type": "array", "items": {"type": "string", "pattern": "^/"}}


def _capabilities(names: Sequence[str]) -> tuple[str, ...]:
    """``default-capabilities`` as a tuple, "all" spelt out."""
    return CAPABILITIES if "all" in names else tuple(names)


@section
class Runtime(Table):
    """``[runtime]``: what nvct-runtime runs after it prepared a container."""

    # first found wins (names are looked up in PATH)
    low_level: tuple[str, ...] = key(
        ("runc", "crun"),
        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
    )
    hook_path: str = key("", {"type": "string"})  # deprecated: doctor still checks it when set


@section
class RequestRules(Table):
    """``[request]``: what a container may ask GPUs with (``nvct.request``)."""

    default_capabilities: tuple[str, ...] = key(
        ("utility", "compute"),
        {"type": "array", "items": {"enum": [*CAPABILITIES, "all"]}},
        load=_capabilities,
    )
    accept_envvar_when_unprivileged: bool = key(True, _BOOLEAN)
    accept_volume_mounts: bool = key(False, _BOOLEAN)
    only_allocated_gpus: bool = key(False, _BOOLEAN)
    disable_require: bool = key(False, _BOOLEAN)
    # Swarm puts a service's generic resources in DOCKER_RESOURCE_<KIND> (the kind upper-cased,
    # dashes kept: Docker's own example is NVIDIA-GPU), and sets no other variable: the
    # launchers and the native hook look for that prefix (GPU_ENV) before any Python runs, so
    # a name without it would be read by the shim and never reach it.
    swarm_resources: tuple[str, ...] = key(
        (),
        {
            "type": "array",
            "items": {
                "type": "string",
                "pattern": "^DOCKER_RESOURCE_[^=\\s]+$",
                "description": "a Swarm resource variable, DOCKER_RESOURCE_<KIND> such as "
                "DOCKER_RESOURCE_GPU or DOCKER_RESOURCE_NVIDIA-GPU (Swarm sets no other)",
            },
        },
        name="swarm-resource",  # NVIDIA's name; a list of resources
    )


@section
class Inject(Table):
    """``[inject]``: what a GPU container gets besides its devices and the driver's files."""

    persistenced: bool = key(True, _BOOLEAN)
    fabricmanager: bool = key(True, _BOOLEAN)
    mps: bool = key(True, _BOOLEAN)
    gsp_firmware: bool = key(True, _BOOLEAN)
    proc_driver: str = key("hook", {"enum": list(PROC_DRIVER_MODES)})
    cuda_compat: str = key("ldconfig", {"enum": list(CUDA_COMPAT)})
    library_mounts: str = key("directory", {"enum": list(LIBRARY_MOUNTS)})
    binaries: str = key("links", {"enum": list(BINARIES)})


@section
class Cdi(Table):
    """``[cdi]``: where nvct-runtime looks up the CDI devices a container names."""

    spec_dirs: tuple[str, ...] = key(CDI_SPEC_DIRS, _ABSPATHS)


@section
class Log(Table):
    """``[log]``: nvct-runtime's and nvct-hook's JSON lines."""

    file: str = key("/var/log/nvct.log", {"type": "string"})
    level: str = key("info", {"enum": list(LOG_LEVELS)})
