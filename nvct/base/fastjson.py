"""JSON for the per-container hot paths, straight from the stdlib's own C codec.

``import json`` costs ~10 ms on this VM class: ``json.decoder`` and ``json.scanner`` compile
regular expressions at import, which loads ``re``, ``enum`` and ``functools``. The C
accelerator ``_json`` that json itself uses for the real work needs none of that, so the
shim and the hook call it directly: the same parser and encoder, with json's defaults
(``ensure_ascii``, ``allow_nan``). Where ``_json`` is absent (other interpreters) this is
plain ``json``. ``tests/base/test_fastjson.py`` checks it against ``json`` on generated documents.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _DecoderContext:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


# typeshed types the context as a JSONDecoder; the C code reads only the attributes above.
_scan = _json.make_scanner(_DecoderContext()) if _json is not None else None  # type: ignore[arg-type]


def loads(data: bytes | str) -> Any:
    """Parse one JSON document (bytes are UTF-8).

    Raises:
        ValueError: not valid JSON (``json.JSONDecodeError`` for malformed content), or nested
            deeper than the interpreter's recursion limit.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except RecursionError:  # json's own would raise it too: a malformed document to callers
        raise ValueError("JSON nested too deeply") from None
    except Exception:
        # The C scanner builds its error from json.decoder, which is not loaded here (it
        # then fails with SystemError): json itself, imported only now, says what is wrong.
        import json

        return json.loads(text)
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: line 1 column {end + 1} (char {end})")
    return value


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON (``separators=(",", ":")``), ASCII-only like json's default.

    Raises:
        TypeError: a value is not serializable and ``default`` does not convert it.
    """
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(value, default=default, separators=(",", ":"))
    encode = _json.make_encoder(
        {}, default or _refuse, _json.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    return "".join(encode(value, 0))
