"""The shim's cached ``create``: reuse the work order of an identical earlier container.

A GPU container's plan is a pure function of: nvct's config file (bytes), the host driver
(the inventory fingerprint of ``nvct.cache``), the image layout (Debian multiarch or not),
and the container's GPU-related inputs (``NVIDIA_*`` and ``CUDA_VERSION`` variables, device
plugin mounts, whether CAP_SYS_ADMIN is in its bounding set). The shim keys the work order by
a hash of all of them, so starting the same kind of container again needs only the stdlib:
no config validation, request parsing or planning code is imported. Any change to an input
is a new key, hence a full planning pass (which also re-checks requirements).
"""

from __future__ import annotations

import hashlib
import os
import sys

from nvct._version import __version__
from nvct.defaults import DEFAULT_CACHE_DIR
from nvct.request_inputs import request_inputs

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def order_key(config_path: str, config_raw: bytes, debian: bool, spec: dict[str, Any]) -> str:
    """The cache key of a container's work order (the driver is checked by fingerprint)."""
    digest = hashlib.sha256()
    # The cached hook entry names this interpreter and this nvct: another install, another key.
    where = (sys.executable, os.path.dirname(os.path.abspath(__file__)))
    for part in (__version__, *where, config_path, str(debian), request_inputs(spec)):
        digest.update(part.encode() + b"\0")
    digest.update(config_raw)
    return digest.hexdigest()[:40]


def cache_dir_of(config_raw: bytes) -> str | None:
    """The config's ``cache-dir`` (tomllib only when the file mentions it), None if disabled."""
    if not any(line.lstrip().startswith(b"cache-dir") for line in config_raw.splitlines()):
        return DEFAULT_CACHE_DIR
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        value = tomllib.loads(config_raw.decode()).get("cache-dir", DEFAULT_CACHE_DIR)
    except ValueError:
        return None  # the full path reports the broken file
    return value if isinstance(value, str) and value else None
