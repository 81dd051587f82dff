"""Where nvct's config, cache and shim socket live by default; stdlib only (hot paths)."""

from __future__ import annotations

import os

DEFAULT_PATH = "/etc/nvct/config.toml"
ENV_VAR = "NVCT_CONFIG"
DEFAULT_CACHE_DIR = "/var/cache/nvct"
# Where ``cdi generate --library-mounts directory`` makes the directory its spec binds: state,
# not cache (a spec needs it for as long as it is used); the packages' refresh service's.
CDI_LIBRARY_DIR = "/var/lib/nvct/cdi"
# The native launcher's (or hook's) code id, in the environment of the create it hands to the
# shim: write the native entry of this kind of create (nvct.plan.native_entry) for the next one;
# after a space, why the native path did not do this one (``native_request``).
NATIVE_ENV = "NVCT_NATIVE_CREATE"
# Where the native launcher hands a GPU container's create to the shim daemon.
DEFAULT_SOCKET = "/run/nvct/shim.sock"
# The CDI spec directories, static then dynamic (the CDI project's DefaultSpecDirs): the config's
# default, what engines are told and where doctor and ``cdi list`` look. Here, not in nvct.cdi,
# because the config (below the CDI library) defaults to it.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# The kubelet's device-plugins directory: nvct-device-plugin's sockets and status file.
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def config_path(explicit: str | None = None) -> tuple[str, bool]:
    """The config file to read, and whether the user named it (then it must exist)."""
    if explicit:
        return explicit, True
    env = os.environ.get(ENV_VAR)
    if env:
        return env, True
    return DEFAULT_PATH, False


def native_request(value: str | None) -> tuple[str | None, str]:
    """``NATIVE_ENV``'s value as (the native program's code id or None, why it handed the work
    on: "" when it did not say)."""
    code, _, why = (value or "").partition(" ")
    return code or None, why
