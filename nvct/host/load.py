"""The host's inventory for a config: from the on-disk cache when still valid."""

from __future__ import annotations

from pathlib import Path

from nvct.config import Config
from nvct.host.inventory import Inventory
from nvct.store import cache


def load_inventory(
    config: Config, *, use_cache: bool = True, fingerprint: str | None = None
) -> Inventory:
    """The driver inventory for the config's roots; ``fingerprint``: their
    ``cache.inventory_fingerprint`` when the caller has it already.

    Raises:
        DiscoveryError: the driver cannot be found or NVML fails.
    """
    key = ""
    cache_dir = Path(config.cache_dir) if config.cache_dir else None
    if use_cache and cache_dir is not None:
        key = fingerprint or cache.inventory_fingerprint(
            config.driver_root, config.dev_root, config.proc_root
        )
        cached = cache.read_inventory(cache_dir, key)
        if cached is not None:
            return cached
    from nvct.host.discover import discover_inventory  # heavy: ELF + NVML

    inventory = discover_inventory(config.driver_root, config.dev_root, config.proc_root)
    if key and cache_dir is not None:
        cache.write_inventory(cache_dir, key, inventory)
    return inventory
