"""On-disk caches that keep discovery and validation off the container-start hot path.

- The driver ``Inventory`` (ELF scans + NVML answers, 100+ ms) is cached as JSON keyed by
  a fingerprint of everything it was derived from: the driver root's ld.so.cache identity,
  the NVIDIA device nodes under the dev root, the MIG capability tree and driver version in
  procfs, and the IPC endpoints. Any change gives a new key, hence a fresh discovery.
- A config.toml whose exact bytes already passed jsonschema validation is remembered by
  content hash, so jsonschema (~50 ms to import) is loaded only when the file changes.

Writes are atomic (temp file + rename), so concurrent hooks never read a torn file; a
cache that cannot be read or written is simply bypassed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nvct._version import __version__
from nvct.components import IPC_FABRICMANAGER, IPC_MPS_DIR, IPC_PERSISTENCED
from nvct.inventory import Inventory


def inventory_fingerprint(driver_root: Path, dev_root: Path, proc_root: Path) -> str:
    """A hash of the host facts the inventory depends on (cheap: stats and listdirs)."""
    parts: list[str] = [__version__, str(driver_root), str(dev_root), str(proc_root)]
    parts.append(_stat_id(driver_root / "etc/ld.so.cache"))
    for rel in (IPC_PERSISTENCED, IPC_FABRICMANAGER, IPC_MPS_DIR):
        parts.append(_stat_id(driver_root / rel.lstrip("/"), inode=False))
    for directory in (dev_root / "dev", dev_root / "dev/nvidia-caps"):
        parts.extend(_nodes(directory))
    try:
        parts.append((proc_root / "driver/nvidia/version").read_text())
    except OSError:
        parts.append("-")
    caps = proc_root / "driver/nvidia/capabilities"
    parts.extend(sorted(str(p.relative_to(caps)) for p in caps.glob("gpu*/mig/gi*/ci*")))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def read_inventory(cache_dir: Path, key: str) -> Inventory | None:
    """The cached inventory for ``key``, or None (absent, unreadable or another key)."""
    try:
        data = json.loads((cache_dir / f"inventory-{key}.json").read_bytes())
        if data.get("key") != key:
            return None
        return Inventory.from_dict(data["inventory"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_inventory(cache_dir: Path, key: str, inventory: Inventory) -> None:
    """Store an inventory; errors are ignored (the cache is an optimisation)."""
    payload = json.dumps({"key": key, "inventory": inventory.to_dict()}).encode()
    _atomic_write(cache_dir, f"inventory-{key}.json", payload)
    # Older fingerprints of the same roots are dead weight; drop all but this one.
    try:
        for old in cache_dir.glob("inventory-*.json"):
            if old.name != f"inventory-{key}.json" and _older_than(old, 3600):
                old.unlink(missing_ok=True)
    except OSError:
        pass


def config_validated(cache_dir: Path, raw: bytes) -> bool:
    """True when these exact config bytes passed validation before."""
    return (cache_dir / f"config-{_digest(raw)}.ok").exists()


def remember_config(cache_dir: Path, raw: bytes) -> None:
    """Record that these config bytes are valid."""
    _atomic_write(cache_dir, f"config-{_digest(raw)}.ok", b"")


def _digest(raw: bytes) -> str:
    return hashlib.sha256(__version__.encode() + b"\0" + raw).hexdigest()[:32]


def _atomic_write(directory: Path, name: str, payload: bytes) -> None:
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = directory / f".{name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, directory / name)
    except OSError:
        return


def _stat_id(path: Path, *, inode: bool = True) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path.name}:-"
    ident = f"{path.name}:{st.st_mode:o}:{st.st_size}:{st.st_mtime_ns}"
    return ident + (f":{st.st_ino}" if inode else "")


def _nodes(directory: Path) -> list[str]:
    try:
        entries = os.scandir(directory)
    except OSError:
        return [f"{directory.name}:-"]
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


def _older_than(path: Path, seconds: int) -> bool:
    import time

    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False
