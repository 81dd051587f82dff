"""The shim's ``create``: plan the container's GPUs and edit its bundle before runc sees it.

The first container of a kind is planned in full (config validation, inventory, request,
requirements, plan); the resulting spec edits are cached under a key of every input (see
``nvct.runtime.fastpath``) and revalidated against the driver's fingerprint, so later
identical containers are edited with the stdlib alone.
"""

from __future__ import annotations

import os
import sys

from nvct import cache
from nvct.defaults import config_path
from nvct.errors import ConfigError
from nvct.hook.rootfs import Rootfs
from nvct.log import EventLog
from nvct.oci import load_spec, rootfs_path, write_spec
from nvct.runtime.args import RuncArgs
from nvct.runtime.fastpath import cache_dir_of, order_key
from nvct.runtime.spec_edits import edit_spec, remove_gpu_hooks

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def prepare_bundle(args: RuncArgs, config_file: str | None, log: EventLog) -> tuple[str, ...]:
    """Edit ``<bundle>/config.json`` for the GPUs it asks for; return the low-level runtimes.

    Raises:
        NvctError: the container must not start (unknown device, failed requirement, ...).
    """
    bundle = args.bundle or os.getcwd()
    log.bind(container_id=args.container_id, bundle=bundle)
    spec = load_spec(bundle)
    path, required = config_path(config_file)
    raw = _read(path, required)
    with Rootfs(rootfs_path(spec, bundle)) as rootfs:
        debian = rootfs.exists("/etc/debian_version")
    cache_dir = cache_dir_of(raw)
    key = order_key(path, raw, debian, spec) if cache_dir else ""
    entry = cache.read_order(cache_dir, key) if cache_dir and key else None
    if entry is not None and cache.inventory_fingerprint(*entry["roots"]) != entry["fingerprint"]:
        entry = None  # the driver changed since: plan again
    cached = entry is not None
    if entry is None:
        entry = _plan(spec, config_file, debian)
        if cache_dir and key:
            cache.write_order(cache_dir, key, entry)
    log.configure(*entry["log"])
    if entry["hook"] is None:
        # A --gpus hook on a container that asks for nothing would only fail later.
        if remove_gpu_hooks(spec):
            write_spec(bundle, spec)
        log.debug("passthrough_create", decisions=entry.get("decisions", []), cached=cached)
        return tuple(entry["runtimes"])
    edit_spec(spec, entry["devices"], entry["hook"])
    write_spec(bundle, spec)
    log.info(
        "spec_modified", devices=[d[0] for d in entry["devices"]], gpus=entry["gpus"], cached=cached
    )
    return tuple(entry["runtimes"])


def _read(path: str, required: bool) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        if required:
            raise ConfigError(
                f"config file {path} does not exist",
                hint="create it (see config/config.toml) or unset NVCT_CONFIG / --nvct-config",
            ) from None
        return b""
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from err


def _plan(spec: dict[str, Any], config_file: str | None, debian: bool) -> dict[str, Any]:
    """The full planning pass; returns the cache entry for these inputs."""
    from nvct._site import ensure_site_packages

    ensure_site_packages()
    from nvct.arch import host_arch
    from nvct.config import load_config
    from nvct.hook import workorder
    from nvct.host import load_inventory
    from nvct.plan import RootfsLayout, build_plan
    from nvct.request import request_from_spec
    from nvct.runtime.spec_edits import hook_entry

    config = load_config(config_file)
    roots = [str(config.driver_root), str(config.dev_root), str(config.proc_root)]
    entry: dict[str, Any] = {
        "roots": roots,
        "fingerprint": cache.inventory_fingerprint(*roots),
        "runtimes": list(config.low_level_runtimes),
        "log": [config.log_file, config.log_level],
        "hook": None,
    }
    request = request_from_spec(spec, config)
    if not request.wants_gpu:
        return {**entry, "decisions": list(request.decisions)}
    inventory = load_inventory(config)
    plan = build_plan(request, inventory, config, host_arch(), RootfsLayout(debian=debian))
    order = workorder.from_plan(plan, config)
    env = [HOOK_PATH_ENV, f"{workorder.ENV_VAR}={workorder.encode(order)}"]
    if config.source != "(defaults)":
        env.append(f"NVCT_CONFIG={config.source}")
    return {
        **entry,
        "hook": hook_entry(sys.executable, config.hook_path, env),
        "devices": order["devices"],
        "gpus": [s.label for s in plan.selected],
    }
