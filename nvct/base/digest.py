"""SHA-256 for cache keys without ``hashlib``'s OpenSSL load (~3 ms per process).

CPython builds its own SHA-256 as ``_sha256`` (3.11) or ``_sha2`` (3.12+); hashlib is the
fallback. The digests are the same.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hashlib import sha256
else:
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - depends on the interpreter's version
        try:
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256

__all__ = ["sha256"]
