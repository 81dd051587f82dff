"""A container's work order from the cache, or from a full planning pass stored there.

The shim's ``create`` and the prestart hook (``docker --gpus``, podman's hooks.d) start the
same kinds of containers again and again: the work order is a pure function of its inputs
(``nvct.plan.order_key``), so it is planned once and read back, revalidated against the
driver's fingerprint (and the CDI specs it came from). A cached read imports no config
validation, request parsing or planning code. The hook's entries are its own (``hook``: its
orders never come from CDI specs, which a prestart hook cannot add to the spec).
"""

from __future__ import annotations

from nvct.host.fingerprint import cdi_specs_stamp, inventory_fingerprint
from nvct.plan.order_key import cache_dir_of, order_key
from nvct.store import cache

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.order import CacheEntry


def read_config(path: str, required: bool) -> bytes:
    """The config file's bytes (empty when it is absent and not ``required``).

    Raises:
        ConfigError: it cannot be read, or is required and absent.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        if required:
            from nvct.base.errors import ConfigError

            raise ConfigError(
                f"config file {path} does not exist",
                hint="create it (see config/config.toml) or unset NVCT_CONFIG / --nvct-config",
            ) from None
        return b""
    except OSError as err:
        from nvct.base.errors import ConfigError

        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from err


def cached_entry(
    spec: dict[str, Any],
    path: str,
    raw: bytes,
    config_file: str | None,
    debian: bool,
    *,
    hook: bool = False,
) -> tuple[CacheEntry, bool, str | None, str]:
    """The cache entry for this container, planned on a miss; whether it was cached; the
    cache directory (None: caching is off) and the entry's key."""
    cache_dir = cache_dir_of(raw)
    key = order_key(path, raw, debian, spec, hook=hook) if cache_dir else ""
    if cache_dir and key:
        entry = cache.read_order(cache_dir, key)
        if entry is not None and _still_valid(entry):
            return entry, True, cache_dir, key
    entry = plan_entry(spec, config_file, debian, hook=hook)  # a miss, or the driver changed
    if cache_dir and key:
        cache.write_order(cache_dir, key, entry)
    return entry, False, cache_dir, key


def _still_valid(entry: CacheEntry) -> bool:
    """Whether a cached entry was made from the driver and CDI specs the host has now."""
    if inventory_fingerprint(*entry["roots"]) != entry["fingerprint"]:
        return False
    cdi = entry.get("cdi")
    return cdi is None or cdi_specs_stamp(cdi[0]) == cdi[1]


def plan_entry(
    spec: dict[str, Any], config_file: str | None, debian: bool, *, hook: bool = False
) -> CacheEntry:
    """The full planning pass (no cache); returns the cache entry for these inputs (``hook``:
    for a prestart hook, which cannot add CDI devices to the spec).

    Raises:
        NvctError: the container must not start (``nvct.plan.decide`` refused it).
    """
    from nvct.base._site import ensure_site_packages

    ensure_site_packages()
    from nvct.config import load_config
    from nvct.plan.decide import CdiOrdered, NoGpu, Refused, decide
    from nvct.plan.model import RootfsLayout
    from nvct.request.parse import request_from_spec

    config = load_config(config_file)
    roots = [str(config.driver_root), str(config.dev_root), str(config.proc_root)]
    entry: CacheEntry = {
        "roots": roots,
        "fingerprint": inventory_fingerprint(*roots),
        "runtimes": list(config.runtime.low_level),
        "log": (config.log.file, config.log.level),
        "order": None,
    }
    decision = decide(
        request_from_spec(spec, config),
        config,
        lambda: RootfsLayout(debian=debian),
        library_dirs="create",
        fingerprint=entry["fingerprint"],
        cdi=not hook,
    )
    if isinstance(decision, Refused):
        raise decision.error
    if isinstance(decision, NoGpu):
        return {**entry, "decisions": list(decision.request.decisions), "ignored": decision.ignored}
    if isinstance(decision, CdiOrdered):
        cdi = (decision.dirs, decision.stamp)
        return {**entry, "order": decision.order, "gpus": decision.order["gpus"], "cdi": cdi}
    return {
        **entry,
        "order": decision.planned.order,
        "gpus": [s.label for s in decision.planned.plan.selected],
        "ignored": decision.ignored,
    }
