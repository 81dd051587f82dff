"""On-disk caches that keep discovery and validation off the container-start hot path.

- The driver ``Inventory`` (ELF scans + NVML answers, 100+ ms) is cached as JSON keyed by
  a fingerprint of everything it was derived from: the driver root's ld.so.cache identity,
  the NVIDIA device nodes under the dev root, the MIG capability tree and driver version in
  procfs, and the IPC endpoints. Any change gives a new key, hence a fresh discovery.
- The shim's per-container work orders (``nvct.runtime.order_key``), revalidated against the
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
from nvct.host.components import IPC_FABRICMANAGER, IPC_MPS_DIR, IPC_PERSISTENCED

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.host.inventory import Inventory


def inventory_fingerprint(
    driver_root: str | os.PathLike[str],
    dev_root: str | os.PathLike[str],
    proc_root: str | os.PathLike[str],
) -> str:
    """A hash of the host facts the inventory depends on (cheap: stats and listdirs)."""
    driver, dev, proc = os.fspath(driver_root), os.fspath(dev_root), os.fspath(proc_root)
    parts: list[str] = [__version__, driver, dev, proc]
    parts.append(_stat_id(os.path.join(driver, "etc/ld.so.cache")))
    for rel in (IPC_PERSISTENCED, IPC_FABRICMANAGER, IPC_MPS_DIR):
        parts.append(_stat_id(os.path.join(driver, rel.lstrip("/")), inode=False))
    for directory in (os.path.join(dev, "dev"), os.path.join(dev, "dev/nvidia-caps")):
        parts.extend(_nodes(directory))
    try:
        with open(os.path.join(proc, "driver/nvidia/version"), encoding="utf-8") as f:
            parts.append(f.read())
    except OSError:
        parts.append("-")
    parts.extend(_mig_instances(os.path.join(proc, "driver/nvidia/capabilities")))
    return sha256("\0".join(parts).encode()).hexdigest()[:32]


def read_inventory(cache_dir: str | os.PathLike[str], key: str) -> Inventory | None:
    """The cached inventory for ``key``, or None (absent, unreadable or another key)."""
    from nvct.host.inventory import Inventory

    data = _read_json(os.path.join(cache_dir, f"inventory-{key}.json"))
    try:
        if data is None or data.get("key") != key:
            return None
        return Inventory.from_dict(data["inventory"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def write_inventory(cache_dir: str | os.PathLike[str], key: str, inventory: Inventory) -> None:
    """Store an inventory; errors are ignored (the cache is an optimisation)."""
    payload = fastjson.dumps({"key": key, "inventory": inventory.to_dict()}).encode()
    _atomic_write(cache_dir, f"inventory-{key}.json", payload)
    # Older fingerprints of the same roots are dead weight; drop all but this one.
    try:
        for name in os.listdir(cache_dir):
            if (
                name.startswith("inventory-")
                and name != f"inventory-{key}.json"
                and _older_than(os.path.join(cache_dir, name), 3600)
            ):
                os.unlink(os.path.join(cache_dir, name))
    except OSError:
        pass


def read_order(cache_dir: str | os.PathLike[str], key: str) -> dict[str, Any] | None:
    """A work order the shim computed before for exactly these inputs (see runtime.fastpath)."""
    data = _read_json(os.path.join(cache_dir, f"order-{key}.json"))
    return data if isinstance(data, dict) and data.get("key") == key else None


def write_order(cache_dir: str | os.PathLike[str], key: str, order: dict[str, Any]) -> None:
    """Remember a work order; errors are ignored."""
    _atomic_write(cache_dir, f"order-{key}.json", fastjson.dumps({**order, "key": key}).encode())


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
    _atomic_write(cache_dir, f"ldcache-{key}", data)
    names = _listdir(os.fspath(cache_dir), "ldcache-")
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
    _atomic_write(cache_dir, f"config-{_digest(raw)}.ok", b"")


def _digest(raw: bytes) -> str:
    return sha256(__version__.encode() + b"\0" + raw).hexdigest()[:32]


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return fastjson.loads(f.read())
    except (OSError, ValueError):
        return None


def _atomic_write(directory: str | os.PathLike[str], name: str, payload: bytes) -> None:
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        write_atomic(os.path.join(directory, name), payload)
    except OSError:
        return


def _stat_id(path: str, *, inode: bool = True) -> str:
    name = os.path.basename(path)
    try:
        st = os.stat(path)
    except OSError:
        return f"{name}:-"
    ident = f"{name}:{st.st_mode:o}:{st.st_size}:{st.st_mtime_ns}"
    return ident + (f":{st.st_ino}" if inode else "")


def _nodes(directory: str) -> list[str]:
    try:
        entries = os.scandir(directory)
    except OSError:
        return [f"{os.path.basename(directory)}:-"]
    out = []
    with entries:
        for entry in entries:
            if entry.name.startswith("nvidia"):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.append(f"{entry.name}:{st.st_mode:o}:{st.st_rdev}")
    return sorted(out)


def _mig_instances(caps: str) -> list[str]:
    """``gpu<N>/mig/gi<G>/ci<C>`` entries: MIG reconfiguration changes the fingerprint."""
    out: list[str] = []
    for gpu in _listdir(caps, "gpu"):
        mig = os.path.join(caps, gpu, "mig")
        for gi in _listdir(mig, "gi"):
            out.extend(f"{gpu}/mig/{gi}/{ci}" for ci in _listdir(os.path.join(mig, gi), "ci"))
    return sorted(out)


def _listdir(path: str, prefix: str) -> list[str]:
    try:
        return [n for n in os.listdir(path) if n.startswith(prefix)]
    except OSError:
        return []


def _older_than(path: str, seconds: int) -> bool:
    import time

    try:
        return time.time() - os.stat(path).st_mtime > seconds
    except OSError:
        return False
