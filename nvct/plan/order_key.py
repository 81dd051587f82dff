"""The key of a cached work order: reuse the work order of an identical earlier container.

A GPU container's plan is a pure function of: nvct's config file (bytes), the host driver
(the inventory fingerprint of ``nvct.store.cache``), the image layout (Debian multiarch or not),
and the container's GPU-related inputs (``NVIDIA_*`` and ``CUDA_VERSION`` variables, device
plugin mounts, whether CAP_SYS_ADMIN is in its bounding set). The shim keys the work order by
a hash of all of them, so starting the same kind of container again needs only the stdlib:
no config validation, request parsing or planning code is imported. Any change to an input
is a new key, hence a full planning pass (which also re-checks requirements).
"""

from __future__ import annotations

import os
import sys

from nvct._version import __version__
from nvct.base.defaults import DEFAULT_CACHE_DIR
from nvct.base.digest import sha256
from nvct.request.inputs import request_inputs
from nvct.store.cache import ORDER_VERSION

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any


def order_key(
    config_path: str, config_raw: bytes, debian: bool, spec: dict[str, Any], *, hook: bool = False
) -> str:
    """The cache key of a container's work order (the driver is checked by fingerprint);
    ``hook``: the prestart hook's, planned without CDI."""
    digest = sha256()
    # Another install (another interpreter, another copy of nvct's code) plans for itself.
    where = (sys.executable, os.path.dirname(os.path.abspath(__file__)))
    inputs = (config_path, str(debian), request_inputs(spec), "hook" if hook else "create")
    for part in (__version__, str(ORDER_VERSION), *where, *inputs):
        digest.update(part.encode() + b"\0")
    digest.update(config_raw)
    return digest.hexdigest()[:40]


def cache_dir_of(config_raw: bytes) -> str | None:
    """The config's ``cache-dir``; None when caching is disabled (or the file is broken).

    tomllib costs ~12 ms to import (it compiles regular expressions and loads typing), more
    than the rest of a cached ``create``. So the common forms are read directly: no
    ``cache-dir`` at all (only in comments), or one top-level ``cache-dir = "path"`` line
    with a plain basic or literal string. Anything else (quoted or dotted keys, escapes,
    multi-line strings, the name inside another value) goes to tomllib. A misreading could
    only pick the wrong cache directory, never a wrong work order: entries are keyed by the
    config file's exact bytes.
    """
    found: str | None = None
    in_table = False
    multiline = b'"""' in config_raw or b"'''" in config_raw
    for line in config_raw.splitlines():
        text = line.strip()
        if not text or text.startswith(b"#"):
            continue
        if b"cache-dir" not in text:
            in_table = in_table or text.startswith(b"[")
            continue
        value = None if in_table or found is not None or multiline else _plain_value(text)
        if value is None:
            return _toml_cache_dir(config_raw)
        found = value
    if found is None:
        return DEFAULT_CACHE_DIR
    return found or None


def _plain_value(text: bytes) -> str | None:
    """``x`` of a ``cache-dir = "x"`` line (a trailing comment allowed), else None."""
    rest = text[len(b"cache-dir") :].lstrip() if text.startswith(b"cache-dir") else b""
    if not rest.startswith(b"="):
        return None
    rest = rest[1:].lstrip()
    quote = rest[:1]
    end = rest.find(quote, 1) if quote in (b'"', b"'") else -1
    if end < 0:
        return None
    value, tail = rest[1:end], rest[end + 1 :].strip()
    if (quote == b'"' and b"\\" in value) or (tail and not tail.startswith(b"#")):
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _toml_cache_dir(config_raw: bytes) -> str | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        value = tomllib.loads(config_raw.decode()).get("cache-dir", DEFAULT_CACHE_DIR)
    except (ValueError, RecursionError):
        return None  # the full path reports the broken file
    return value if isinstance(value, str) and value else None
