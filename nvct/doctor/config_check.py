"""nvct's own config file: read and validated in full (jsonschema, no validation cache)."""

from __future__ import annotations

from typing import Any

from nvct.base.defaults import config_path
from nvct.base.errors import ConfigError
from nvct.config import Config, load_config
from nvct.config.flags import with_flags
from nvct.doctor.result import CheckResult, failed, passed

NAME = "config"


def check_config(config_file: str | None, flags: dict[str, Any]) -> tuple[Config, CheckResult]:
    """The effective config and whether its file is valid (``flags``: the top-level keys', as
    ``nvct.config.flags.with_flags`` takes them).

    On an invalid file the other checks still run, on the defaults plus ``flags``.
    """
    path, _required = config_path(config_file)
    try:
        config = load_config(config_file, use_cache=False)
    except ConfigError as err:
        fix = err.hint or "fix the file"
        return (
            with_flags(Config(), "", flags),
            failed(NAME, err.message, f"{fix}; then check it again with nvct-cli doctor"),
        )
    config = with_flags(config, "", flags)
    if config.source == "(defaults)":
        return config, passed(NAME, f"no config file at {path}: using the defaults")
    return config, passed(NAME, f"{config.source} is valid")
