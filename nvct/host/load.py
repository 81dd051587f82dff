"""The host's inventory for a config: from the on-disk cache when still valid."""

from __future__ import annotations

import os
from pathlib import Path

from nvct.base import fastjson
from nvct.config import Config
from nvct.host.fingerprint import inventory_fingerprint
from nvct.host.inventory import Inventory
from nvct.store import cache


def load_inventory(
    config: Config, *, use_cache: bool = True, fingerprint: str | None = None
) -> Inventory:
    """The driver inventory for the config's roots; ``fingerprint``: their
    ``inventory_fingerprint`` when the caller has it already.

    Raises:
        DiscoveryError: the driver cannot be found or NVML fails.
    """
    key = ""
    cache_dir = Path(config.cache_dir) if config.cache_dir else None
    if use_cache and cache_dir is not None:
        key = fingerprint or inventory_fingerprint(
            config.driver_root, config.dev_root, config.proc_root
        )
        cached = read_inventory(cache_dir, key)
        if cached is not None:
            return cached
    from nvct.host.discover import discover_inventory  # heavy: ELF + NVML

    inventory = discover_inventory(config.driver_root, config.dev_root, config.proc_root)
    if key and cache_dir is not None:
        write_inventory(cache_dir, key, inventory)
    return inventory


def read_inventory(cache_dir: str | os.PathLike[str], key: str) -> Inventory | None:
    """The cached inventory for ``key``, or None (absent, unreadable or another key)."""
    data = cache.read_json(os.path.join(cache_dir, f"inventory-{key}.json"))
    try:
        if data is None or data.get("key") != key:
            return None
        return Inventory.from_dict(data["inventory"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def write_inventory(cache_dir: str | os.PathLike[str], key: str, inventory: Inventory) -> None:
    """Store an inventory; errors are ignored (the cache is an optimisation)."""
    payload = fastjson.dumps({"key": key, "inventory": inventory.to_dict()}).encode()
    cache.write_file(cache_dir, f"inventory-{key}.json", payload)
    # Older fingerprints of the same roots are dead weight; drop all but this one.
    try:
        for name in os.listdir(cache_dir):
            if (
                name.startswith("inventory-")
                and name != f"inventory-{key}.json"
                and cache.older_than(os.path.join(cache_dir, name), 3600)
            ):
                os.unlink(os.path.join(cache_dir, name))
    except OSError:
        pass
