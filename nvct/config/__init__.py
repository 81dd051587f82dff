"""nvct's own configuration: ``/etc/nvct/config.toml``.

Defaults live here; the file only overrides. config.toml is a root table of declared sections
(``nvct.config.declare``): its top-level keys are declared on ``Config`` below, its tables in
``nvct.config.container`` (the container path's) and ``nvct.config.kubernetes`` (the Kubernetes
wing's), each key once. The file is validated against ``config_schema()`` (derived from those
declarations) with jsonschema, and unknown keys are errors, so a typo never silently falls back
to a default.
Validation results are remembered per file content (see ``nvct.store.cache``) so the hook's hot
path does not pay jsonschema's import on every container start.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import Any

from nvct.base.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from nvct.base.defaults import DEFAULT_CACHE_DIR, ENV_VAR, config_path
from nvct.config.container import CAPABILITIES, Cdi, Inject, Log, RequestRules, Runtime
from nvct.config.declare import (
    Table,
    declared,
    from_toml,
    key,
    schema_of,
    section,
    table,
    with_values,
)
from nvct.config.kubernetes import DevicePlugin, Exporter

__all__ = [
    "CAPABILITIES",
    "Config",
    "config_schema",
    "load_config",
    "parse_config",
    "validate_config_data",
    "with_settings",
    "with_table",
]

_ABSPATH = {"type": "string", "pattern": "^/"}


@section
class Config(Table):
    """Effective configuration (defaults overridden by the file and command-line flags): the
    top-level keys of config.toml, then its tables."""

    driver_root: Path = key(
        Path("/"), _ABSPATH, load=Path, flag="Root of the NVIDIA driver files.", path="dir",
        absolute=True,
    )  # fmt: skip
    dev_root: Path = key(
        Path("/"), _ABSPATH, load=Path, flag="Directory holding dev/nvidia*.", path="dir",
        absolute=True,
    )  # fmt: skip
    proc_root: Path = key(
        Path("/proc"), _ABSPATH, load=Path, flag="procfs to read driver facts from.",
        path="dir", absolute=True,
    )  # fmt: skip
    ldconfig: Path = key(Path("/sbin/ldconfig"), _ABSPATH, load=Path)
    cache_dir: str = key(DEFAULT_CACHE_DIR, {"type": "string"})
    runtime: Runtime = table(Runtime)
    request: RequestRules = table(RequestRules)
    inject: Inject = table(Inject)
    device_plugin: DevicePlugin = table(DevicePlugin)
    exporter: Exporter = table(Exporter)
    cdi: Cdi = table(Cdi)
    log: Log = table(Log)
    source: str = field(default="(defaults)", compare=False)  # not a key: where it was read


# The declared tables: TOML name -> (Config's field, its dataclass).
SECTIONS: dict[str, tuple[str, type]] = {
    name: (attr, decl.table) for attr, name, decl in declared(Config) if decl.table is not None
}


@functools.cache
def config_schema() -> dict[str, Any]:
    """The JSON schema of config.toml, built when first asked for (validation, doctor, tests):
    the hook's hot path loads a config it validated before and never needs it."""
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "nvct config.toml",
        **schema_of(Config),
    }


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
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ConfigError(
            f"{source}: invalid TOML: arrays or tables nested too deeply", hint="fix the syntax"
        ) from None
    cache_dir = data.get("cache-dir")
    cache_path = Path(cache_dir if isinstance(cache_dir, str) and cache_dir else DEFAULT_CACHE_DIR)
    if not (use_cache and cache.config_validated(cache_path, raw)):
        validate_config_data(data, source=source)
        if use_cache:
            cache.remember_config(cache_path, raw)
    return from_toml(Config, data, source=source)


def with_table(config: Config, section: str, table: Mapping[str, Any], *, source: str) -> Config:
    """``config`` with the keys of ``table`` set in ``[section]``, validated as a config file's.

    Raises:
        ConfigError: ``table`` is not valid there (the message names ``source`` and the key).
    """
    data = {section: dict(table)}
    validate_config_data(data, source=source)
    return from_toml(Config, data, config)


def with_settings(config: Config, section: str, **values: Any) -> Config:
    """``config`` with keys of the declared table ``section`` (``"device-plugin"``; ``""``: the
    top-level keys) set by their field names, a nested table's included (``mps_root``): for
    values typed already (flags).

    Raises:
        KeyError: ``section`` is not a declared table, or has no such key.
    """
    if not section:
        unknown = set(values) - {attr for attr, _, d in declared(Config) if d.table is None}
        if unknown:
            raise KeyError(", ".join(sorted(unknown)))
        return replace(config, **values)
    attr, _ = SECTIONS[section]
    return replace(config, **{attr: with_values(getattr(config, attr), values)})


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
    if "description" in schema:
        return str(schema["description"])
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
