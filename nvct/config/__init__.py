"""nvct's own configuration: ``/etc/nvct/config.toml``.

Defaults live here; the file only overrides. The Kubernetes tables are declared as typed
sections, each key once (``nvct.config.kubernetes``, by ``nvct.config.declare``); the others
are still fields of ``Config`` beside the hand-written schema below. The file is validated
against ``config_schema()`` with jsonschema, and unknown keys are errors, so a typo never
silently falls back to a default.
Validation results are remembered per file content (see ``nvct.store.cache``) so the hook's hot
path does not pay jsonschema's import on every container start.
"""

from __future__ import annotations

import functools
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

from nvct.base.defaults import CDI_SPEC_DIRS, DEFAULT_CACHE_DIR, ENV_VAR, config_path
from nvct.config.declare import Table, from_toml, schema_of, with_values
from nvct.config.kubernetes import DevicePlugin, Exporter

CAPABILITIES = ("utility", "compute", "video", "graphics", "display", "ngx", "compat32")
LOG_LEVELS = ("debug", "info", "warning", "error")
LIBRARY_MOUNTS = ("directory", "files")
PROC_DRIVER_MODES = ("hook", "always", "off")
CUDA_COMPAT = ("ldconfig", "off")
# The declared tables: TOML name -> (Config's field, its dataclass).
SECTIONS: dict[str, tuple[str, type]] = {
    "device-plugin": ("device_plugin", DevicePlugin),
    "exporter": ("exporter", Exporter),
}


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
            **{name: schema_of(cls) for name, (_, cls) in SECTIONS.items()},
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


@functools.cache
def config_schema() -> dict[str, Any]:
    """The JSON schema of config.toml, built when first asked for (validation, doctor, tests):
    the hook's hot path loads a config it validated before and never needs it."""
    return _schema()


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Config(Table):  # equality, hash and repr by its fields (Table): less import time
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
    cdi_spec_dirs: tuple[str, ...] = CDI_SPEC_DIRS
    device_plugin: DevicePlugin = field(default_factory=DevicePlugin)
    exporter: Exporter = field(default_factory=Exporter)
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
    ("log", "file"): "log_file",
    ("log", "level"): "log_level",
}
_PATH_FIELDS = {"driver_root", "dev_root", "proc_root", "ldconfig"}


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
        ConfigError: not UTF-8, not TOML, or not valid against the schema.
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
    return Config(source=source, **_values(data, None))


def with_table(config: Config, section: str, table: Mapping[str, Any], *, source: str) -> Config:
    """``config`` with the keys of ``table`` set in ``[section]``, validated as a config file's.

    Raises:
        ConfigError: ``table`` is not valid there (the message names ``source`` and the key).
    """
    data = {section: dict(table)}
    validate_config_data(data, source=source)
    return replace(config, **_values(data, config))


def with_settings(config: Config, section: str, **values: Any) -> Config:
    """``config`` with keys of the declared table ``section`` (``"device-plugin"``) set by their
    field names, a nested table's included (``mps_root``): for values typed already (flags).

    Raises:
        KeyError: ``section`` is not a declared table, or has no such key.
    """
    attr, _ = SECTIONS[section]
    return replace(config, **{attr: with_values(getattr(config, attr), values)})


def _values(data: dict[str, Any], base: Config | None) -> dict[str, Any]:
    """The ``Config`` fields a validated config document sets (over ``base``'s tables)."""
    values: dict[str, Any] = {}
    for name, (attr, cls) in SECTIONS.items():
        if name in data:
            values[attr] = from_toml(cls, data[name], getattr(base, attr, None))
    for keys, attr in _KEYMAP.items():
        node: Any = data
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            if attr in _PATH_FIELDS:
                node = Path(node)
            elif isinstance(node, list):
                node = tuple(node)
            values[attr] = node
    if "all" in values.get("default_capabilities", ()):
        values["default_capabilities"] = CAPABILITIES
    return values


def validate_config_data(data: dict[str, Any], *, source: str) -> None:
    """Validate parsed TOML against the schema; the first error names the file and key."""
    import jsonschema  # 50 ms import, kept off the hot path

    validator = jsonschema.Draft7Validator(config_schema())
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
