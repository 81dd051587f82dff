"""nvct's own config file: read and validated in full (jsonschema, no validation cache)."""

from __future__ import annotations

import dataclasses
from typing import Any

from nvct.base.defaults import config_path
from nvct.base.errors import ConfigError
from nvct.config import Config, load_config
from nvct.doctor.result import CheckResult, failed, passed

NAME = "config"


def check_config(config_file: str | None, overrides: dict[str, Any]) -> tuple[Config, CheckResult]:
    """The effective config and whether its file is valid.

    On an invalid file the other checks still run, on the defaults plus ``overrides``.
    """
    path, _required = config_path(config_file)
    try:
        config = load_config(config_file, use_cache=False)
    except ConfigError as err:
        fix = err.hint or "fix the file"
        return (
            dataclasses.replace(Config(), **overrides),
            failed(NAME, err.message, f"{fix}; then check it again with nvct-cli doctor"),
        )
    config = dataclasses.replace(config, **overrides)
    if config.source == "(defaults)":
        return config, passed(NAME, f"no config file at {path}: using the defaults")
    return config, passed(NAME, f"{config.source} is valid")
