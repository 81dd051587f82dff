"""On-disk caches that keep discovery and validation off the container-start hot path.

- The driver ``Inventory`` (ELF scans + NVML answers, 100+ ms) is kept here by
  ``nvct.host.load`` under the driver's fingerprint (``nvct.host.fingerprint``): any change
  of the driver gives a new key, hence a fresh discovery.
- The shim's per-container work orders (``nvct.plan.order_key``), revalidated against the
  same fingerprint, and the ``ld.so.cache`` ldconfig made for a work order over an image's
  layers (``nvct.container.overlay``), so later containers of that image need no ldconfig run.
- A config.toml whose exact bytes already passed jsonschema validation is remembered by
  content hash, so jsonschema (~50 ms to import) is loaded only when the file changes.

Writes are atomic (temp file + fsync + rename), so concurrent hooks never read a torn file;
a cache that cannot be read or written is simply bypassed. Paths are plain ``os.path``
strings: this module is imported on every GPU container start, and pathlib costs ~6 ms.
"""

from __future__ import annotations

import os

from nvct._version import __version__
from nvct.base import fastjson
from nvct.base.atomic import write_atomic
from nvct.base.digest import sha256
from nvct.base.ldcache_format import MAX_SIZE, NEW_MAGIC, OLD_MAGIC

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.order import CacheEntry

# The work order's format (``nvct.base.order``): part of every order key, so an nvct that writes
# another format never reads this one's orders.
ORDER_VERSION = 9


def read_order(cache_dir: str | os.PathLike[str], key: str) -> CacheEntry | None:
    """The shim's cache entry for exactly these inputs (see ``nvct.plan.order_key``)."""
    data = read_json(os.path.join(cache_dir, f"order-{key}.json"))
    # nvct's own file, written whole (atomically) from a CacheEntry: its key is the check.
    ours = isinstance(data, dict) and data.get("key") == key
    return data if ours else None


def write_order(cache_dir: str | os.PathLike[str], key: str, entry: CacheEntry) -> None:
    """Remember a cache entry; errors are ignored."""
    write_file(cache_dir, f"order-{key}.json", fastjson.dumps({**entry, "key": key}).encode())


# A glibc ld.so.cache starts with one of these (old format, or the new one alone).
LD_CACHE_MAGIC = (OLD_MAGIC, NEW_MAGIC)
LD_CACHES_KEPT = 256


def read_ld_cache(cache_dir: str | os.PathLike[str], key: str) -> bytes | None:
    """An ld.so.cache that ldconfig made before for ``key`` (see runtime.create), or None."""
    try:
        with open(os.path.join(cache_dir, f"ldcache-{key}"), "rb") as f:
            data = f.read(MAX_SIZE + 1)
    except OSError:
        return None
    return data if data.startswith(LD_CACHE_MAGIC) and len(data) <= MAX_SIZE else None


def write_ld_cache(cache_dir: str | os.PathLike[str], key: str, data: bytes) -> None:
    """Remember an ld.so.cache; the oldest beyond ``LD_CACHES_KEPT`` are dropped."""
    if not data.startswith(LD_CACHE_MAGIC) or len(data) > MAX_SIZE:
        return
    write_file(cache_dir, f"ldcache-{key}", data)
    names = listdir(os.fspath(cache_dir), "ldcache-")
    if len(names) <= LD_CACHES_KEPT:
        return
    paths = [os.path.join(cache_dir, n) for n in names]
    try:
        for path in sorted(paths, key=os.path.getmtime)[: len(paths) - LD_CACHES_KEPT]:
            os.unlink(path)
    except OSError:
        pass


def config_validated(cache_dir: str | os.PathLike[str], raw: bytes) -> bool:
    """True when these exact config bytes passed validation before."""
    return os.path.exists(os.path.join(cache_dir, f"config-{_digest(raw)}.ok"))


def remember_config(cache_dir: str | os.PathLike[str], raw: bytes) -> None:
    """Record that these config bytes are valid."""
    write_file(cache_dir, f"config-{_digest(raw)}.ok", b"")


def _digest(raw: bytes) -> str:
    return sha256(__version__.encode() + b"\0" + raw).hexdigest()[:32]


def read_json(path: str) -> Any:
    """A JSON file's value, or None (absent, unreadable, not JSON)."""
    try:
        with open(path, "rb") as f:
            return fastjson.loads(f.read())
    except (OSError, ValueError):
        return None


def write_file(directory: str | os.PathLike[str], name: str, payload: bytes) -> None:
    """Write ``directory/name`` atomically; errors are ignored (a cache is an optimisation)."""
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        write_atomic(os.path.join(directory, name), payload)
    except OSError:
        return


def listdir(path: str, prefix: str) -> list[str]:
    try:
        return [n for n in os.listdir(path) if n.startswith(prefix)]
    except OSError:
        return []


def older_than(path: str, seconds: int) -> bool:
    import time

    try:
        return time.time() - os.stat(path).st_mtime > seconds
    except OSError:
        return False
