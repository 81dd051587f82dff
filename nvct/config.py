"""nvct's own configuration: ``/etc/nvct/config.toml``.

Defaults live here; the file only overrides. The file is validated against ``SCHEMA`` with
jsonschema, and unknown keys are errors, so a typo never silently falls back to a default.
Validation results are remembered per file content (see ``nvct.store.cache``) so the hook's hot
path does not pay jsonschema's import on every container start.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nvct.base.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from nvct.base.defaults import DEFAULT_CACHE_DIR, DEFAULT_PLUGIN_DIR, ENV_VAR, config_path

CAPABILITIES = ("utility", "compute", "video", "graphics", "display", "ngx", "compat32")
LOG_LEVELS = ("debug", "info", "warning", "error")
LIBRARY_MOUNTS = ("directory", "files")
PROC_DRIVER_MODES = ("hook", "always", "off")
CUDA_COMPAT = ("ldconfig", "off")
SHARING_STRATEGIES = ("time-slicing", "mps")
REPLICAS_OF_ONE_GPU = ("error", "warn")
# How MIG devices are advertised (nvct.node.devices): not, as nvidia.com/gpu, or per profile.
MIG_STRATEGIES = ("none", "single", "mixed")


def _schema() -> dict[str, Any]:
    string = {"type": "string", "minLength": 1}
    abspath = {"type": "string", "pattern": "^/"}
    boolean = {"type": "boolean"}

    def section(props: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "properties": props}

    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "nvct config.toml",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "driver-root": abspath,
            "dev-root": abspath,
            "proc-root": abspath,
            "ldconfig": abspath,
            "cache-dir": {"type": "string"},
            "runtime": section(
                {
                    "low-level": {"type": "array", "items": string, "minItems": 1},
                    "hook-path": {"type": "string"},
                }
            ),
            "request": section(
                {
                    "default-capabilities": {
                        "type": "array",
                        "items": {"enum": [*CAPABILITIES, "all"]},
                    },
                    "accept-envvar-when-unprivileged": boolean,
                    "accept-volume-mounts": boolean,
                    "only-allocated-gpus": boolean,
                    "disable-require": boolean,
                    "swarm-resource": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    },
                }
            ),
            "inject": section(
                {
                    "persistenced": boolean,
                    "fabricmanager": boolean,
                    "mps": boolean,
                    "gsp-firmware": boolean,
                    "proc-driver": {"enum": list(PROC_DRIVER_MODES)},
                    "cuda-compat": {"enum": list(CUDA_COMPAT)},
                    "library-mounts": {"enum": list(LIBRARY_MOUNTS)},
                }
            ),
            "device-plugin": section(
                {
                    "mig-strategy": {"enum": list(MIG_STRATEGIES)},
                    "device-id-strategy": {"enum": ["uuid", "index"]},
                    "device-list-strategy": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "enum": ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
                        },
                    },
                    "plugin-dir": abspath,
                    "cdi-spec-dir": abspath,
                    "host-driver-root": {"type": "string", "pattern": "^(/.*)?$"},
                    "runtime-config": {"type": "string", "pattern": "^(/.*)?$"},
                    "sysfs-root": abspath,
                    "fail-on-init-error": boolean,
                    "quiet-period": {"type": "number", "minimum": 0},
                    "ignored-xids": {"type": "array", "items": {"type": "integer"}},
                    "sharing": section(
                        {
                            "rename-by-default": boolean,
                            "fail-requests-greater-than-one": boolean,
                            "replicas-of-one-gpu": {"enum": list(REPLICAS_OF_ONE_GPU)},
                            "mps-root": abspath,
                            "gpus": {"type": "array", "items": _sharing_rule()},
                        }
                    ),
                }
            ),
            "exporter": section(
                {
                    "address": {"type": "string"},
                    "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                    "interval": {"type": "number", "minimum": 0.1},
                    "kubernetes": boolean,
                    "pod-resources-socket": abspath,
                    "extra-resources": {"type": "array", "items": string},
                    "hostname": {"type": "string"},
                }
            ),
            "cdi": section(
                {"spec-dirs": {"type": "array", "items": {"type": "string", "pattern": "^/"}}}
            ),
            "log": section(
                {
                    "file": {"type": "string"},
                    "level": {"enum": list(LOG_LEVELS)},
                }
            ),
        },
    }


def _sharing_rule() -> dict[str, Any]:
    """One ``[[device-plugin.sharing.gpus]]`` rule; what needs the GPUs is checked by
    ``nvct.node.sharing.plan_sharing``."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["devices", "replicas"],
        "properties": {
            "devices": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
            },
            "strategy": {"enum": list(SHARING_STRATEGIES)},
            "replicas": {"type": "integer", "minimum": 2},
            "rename": {"type": "boolean"},
            "resource": {
                "type": "string",
                "pattern": "^nvidia\\.com/[a-z0-9]([-a-z0-9_.]{0,50}[a-z0-9])?$",
            },
            "pinned-memory-mib": {"type": "integer", "minimum": 1},
            "active-thread-percentage": {"type": "integer", "minimum": 1, "maximum": 100},
        },
    }


SCHEMA: dict[str, Any] = _schema()


@dataclass(frozen=True, slots=True, kw_only=True)
class SharingRule:
    """One ``[[device-plugin.sharing.gpus]]`` entry: which GPUs, how they are shared."""

    devices: tuple[str, ...]  # "all", indices ("0", "1:0"), UUIDs or product names
    replicas: int
    strategy: str = "time-slicing"
    rename: bool | None = None  # None: rename-by-default
    resource: str | None = None  # a resource name of this rule's own (whole GPUs)
    pinned_memory_mib: int | None = None  # mps; None: the GPU's memory / replicas
    active_thread_percentage: int | None = None  # mps; None: 100 / replicas

    @classmethod
    def from_toml(cls, table: dict[str, Any]) -> SharingRule:
        """A validated TOML table as a rule."""
        return cls(
            devices=tuple(table["devices"]),
            replicas=table["replicas"],
            strategy=table.get("strategy", "time-slicing"),
            rename=table.get("rename"),
            resource=table.get("resource"),
            pinned_memory_mib=table.get("pinned-memory-mib"),
            active_thread_percentage=table.get("active-thread-percentage"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Effective configuration (defaults overridden by the file and command-line flags)."""

    driver_root: Path = Path("/")
    dev_root: Path = Path("/")
    proc_root: Path = Path("/proc")
    ldconfig: Path = Path("/sbin/ldconfig")
    cache_dir: str = DEFAULT_CACHE_DIR
    low_level_runtimes: tuple[str, ...] = ("runc", "crun")
    hook_path: str = ""
    default_capabilities: tuple[str, ...] = ("utility", "compute")
    accept_envvar_when_unprivileged: bool = True
    accept_volume_mounts: bool = False
    only_allocated_gpus: bool = False
    disable_require: bool = False
    swarm_resources: tuple[str, ...] = ()
    inject_persistenced: bool = True
    inject_fabricmanager: bool = True
    inject_mps: bool = True
    inject_gsp_firmware: bool = True
    inject_proc_driver: str = "hook"
    cuda_compat: str = "ldconfig"
    library_mounts: str = "directory"
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    dp_mig_strategy: str = "none"
    dp_device_id_strategy: str = "uuid"
    dp_device_list_strategy: tuple[str, ...] = ("cdi-cri",)
    dp_plugin_dir: str = DEFAULT_PLUGIN_DIR
    dp_cdi_spec_dir: str = "/var/run/cdi"
    dp_host_driver_root: str = ""
    dp_runtime_config: str = ""  # the node's nvct-runtime config as the plugin sees it
    dp_sysfs_root: str = "/sys"
    dp_fail_on_init_error: bool = True
    dp_quiet_period: float = 30.0
    dp_ignored_xids: tuple[int, ...] = (13, 31, 43, 45, 68, 109)
    ex_address: str = "0.0.0.0"  # noqa: S104 - a node exporter is scraped from the cluster
    ex_port: int = 9400
    ex_interval: float = 10.0
    ex_kubernetes: bool = True
    ex_pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    ex_extra_resources: tuple[str, ...] = ()
    ex_hostname: str = ""
    dp_sharing_rename: bool = False
    dp_sharing_fail_greater_than_one: bool = False
    dp_sharing_replicas_of_one_gpu: str = "error"
    dp_mps_root: str = "/run/nvct/mps"
    dp_sharing_gpus: tuple[SharingRule, ...] = ()
    log_file: str = "/var/log/nvct.log"
    log_level: str = "info"
    source: str = field(default="(defaults)", compare=False)


_KEYMAP: dict[tuple[str, ...], str] = {
    ("driver-root",): "driver_root",
    ("dev-root",): "dev_root",
    ("proc-root",): "proc_root",
    ("ldconfig",): "ldconfig",
    ("cache-dir",): "cache_dir",
    ("runtime", "low-level"): "low_level_runtimes",
    ("runtime", "hook-path"): "hook_path",
    ("request", "default-capabilities"): "default_capabilities",
    ("request", "accept-envvar-when-unprivileged"): "accept_envvar_when_unprivileged",
    ("request", "accept-volume-mounts"): "accept_volume_mounts",
    ("request", "only-allocated-gpus"): "only_allocated_gpus",
    ("request", "disable-require"): "disable_require",
    ("request", "swarm-resource"): "swarm_resources",
    ("inject", "persistenced"): "inject_persistenced",
    ("inject", "fabricmanager"): "inject_fabricmanager",
    ("inject", "mps"): "inject_mps",
    ("inject", "gsp-firmware"): "inject_gsp_firmware",
    ("inject", "proc-driver"): "inject_proc_driver",
    ("inject", "cuda-compat"): "cuda_compat",
    ("inject", "library-mounts"): "library_mounts",
    ("cdi", "spec-dirs"): "cdi_spec_dirs",
    ("device-plugin", "mig-strategy"): "dp_mig_strategy",
    ("device-plugin", "device-id-strategy"): "dp_device_id_strategy",
    ("device-plugin", "device-list-strategy"): "dp_device_list_strategy",
    ("device-plugin", "plugin-dir"): "dp_plugin_dir",
    ("device-plugin", "cdi-spec-dir"): "dp_cdi_spec_dir",
    ("device-plugin", "host-driver-root"): "dp_host_driver_root",
    ("device-plugin", "runtime-config"): "dp_runtime_config",
    ("device-plugin", "sysfs-root"): "dp_sysfs_root",
    ("device-plugin", "fail-on-init-error"): "dp_fail_on_init_error",
    ("device-plugin", "quiet-period"): "dp_quiet_period",
    ("device-plugin", "ignored-xids"): "dp_ignored_xids",
    ("exporter", "address"): "ex_address",
    ("exporter", "port"): "ex_port",
    ("exporter", "interval"): "ex_interval",
    ("exporter", "kubernetes"): "ex_kubernetes",
    ("exporter", "pod-resources-socket"): "ex_pod_resources_socket",
    ("exporter", "extra-resources"): "ex_extra_resources",
    ("exporter", "hostname"): "ex_hostname",
    ("device-plugin", "sharing", "rename-by-default"): "dp_sharing_rename",
    ("device-plugin", "sharing", "fail-requests-greater-than-one"): (
        "dp_sharing_fail_greater_than_one"
    ),
    ("device-plugin", "sharing", "replicas-of-one-gpu"): "dp_sharing_replicas_of_one_gpu",
    ("device-plugin", "sharing", "mps-root"): "dp_mps_root",
    ("device-plugin", "sharing", "gpus"): "dp_sharing_gpus",
    ("log", "file"): "log_file",
    ("log", "level"): "log_level",
}
_PATH_FIELDS = {"driver_root", "dev_root", "proc_root", "ldconfig"}


def setting_field(*key: str) -> str:
    """The ``Config`` field a config.toml key sets (``"device-plugin", "mig-strategy"``).

    Raises:
        KeyError: no such key.
    """
    return _KEYMAP[key]


def load_config(explicit: str | None = None, *, use_cache: bool = True) -> Config:
    """Load the effective config.

    Args:
        explicit: ``--config`` value; else ``$NVCT_CONFIG``; else ``/etc/nvct/config.toml``.
        use_cache: skip jsonschema when these exact bytes were validated before
            (``nvct.store.cache``); the hot path uses this, the CLI's ``doctor`` does not.

    Raises:
        ConfigError: the named file is missing, or any file is unreadable or invalid.
    """
    name, required = config_path(explicit)
    path = Path(name)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as err:
        if required:
            raise ConfigError(
                f"config file {path} does not exist",
                hint=f"create it (see config/config.toml) or unset {ENV_VAR} / --config",
            ) from err
        return Config()
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from err
    return parse_config(raw, source=str(path), use_cache=use_cache)


def parse_config(raw: bytes, *, source: str, use_cache: bool = False) -> Config:
    """Parse and validate config.toml bytes into a Config.

    Raises:
        ConfigError: not UTF-8, not TOML, or not valid against SCHEMA.
    """
    from nvct.store import cache  # avoids an import cycle

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text", hint="save the file as UTF-8") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: invalid TOML: {err}", hint="fix the syntax") from err
    cache_dir = data.get("cache-dir")
    cache_path = Path(cache_dir if isinstance(cache_dir, str) and cache_dir else DEFAULT_CACHE_DIR)
    if not (use_cache and cache.config_validated(cache_path, raw)):
        validate_config_data(data, source=source)
        if use_cache:
            cache.remember_config(cache_path, raw)
    return Config(source=source, **_values(data))


def with_table(config: Config, section: str, table: Mapping[str, Any], *, source: str) -> Config:
    """``config`` with the keys of ``table`` set in ``[section]``, validated as a config file's.

    Raises:
        ConfigError: ``table`` is not valid there (the message names ``source`` and the key).
    """
    data = {section: dict(table)}
    validate_config_data(data, source=source)
    return replace(config, **_values(data))


def _values(data: dict[str, Any]) -> dict[str, Any]:
    """The ``Config`` fields a validated config document sets."""
    values: dict[str, Any] = {}
    for keys, attr in _KEYMAP.items():
        node: Any = data
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            if attr in _PATH_FIELDS:
                node = Path(node)
            elif attr == "dp_sharing_gpus":
                node = tuple(SharingRule.from_toml(rule) for rule in node)
            elif isinstance(node, list):
                node = tuple(node)
            values[attr] = node
    if "all" in values.get("default_capabilities", ()):
        values["default_capabilities"] = CAPABILITIES
    return values


def validate_config_data(data: dict[str, Any], *, source: str) -> None:
    """Validate parsed TOML against SCHEMA; the first error names the file and key."""
    import jsonschema  # 50 ms import, kept off the hot path

    validator = jsonschema.Draft7Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return
    err = errors[0]
    key = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(allowed))
        where = f"[{key}] " if key else ""
        raise ConfigError(
            f"{source}: unknown key {where}{', '.join(map(repr, unknown))}",
            hint=f"allowed keys here: {', '.join(allowed)}",
        )
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        raise ConfigError(
            f"{source}: [{key}] misses {', '.join(map(repr, missing))}",
            hint=f"add {' and '.join(missing)} to that table",
        )
    allowed_desc = _describe(err.schema)
    raise ConfigError(
        f"{source}: key {key!r}: {err.message}",
        hint=f"expected {allowed_desc}" if allowed_desc else None,
    )


def _describe(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if schema.get("pattern") == "^/":
        return "an absolute path"
    if str(schema.get("pattern", "")).startswith("^nvidia"):
        return "a resource name such as nvidia.com/gpu.mps (lower case)"
    if schema.get("type") == "integer" and "minimum" in schema:
        top = f" and <= {schema['maximum']}" if "maximum" in schema else ""
        return f"an integer >= {schema['minimum']}{top}"
    if "type" in schema:
        kind = str(schema["type"])
        if kind == "array" and "items" in schema:
            return f"a list of {_describe(schema['items']) or 'items'}"
        return {"boolean": "true or false", "string": "a string", "array": "a list"}.get(kind, kind)
    return ""
