"""Style-preserving TOML edits shared by the containerd and CRI-O engines.

New tables are *appended* to the file's text as a block that starts with a marker comment,
so every existing byte (comments, indentation, ordering) stays where it was, and ``--undo``
can remove exactly that block again. Values inside tables that already exist are changed
with tomlkit, which keeps the surrounding layout.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.container import Container
from tomlkit.items import Table

from nvct.base.errors import EngineConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

BEGIN = "# nvct: begin (added by nvct-cli configure; `nvct-cli configure --undo` removes it)"
END = "# nvct: end"
_BLOCK = re.compile(r"\n?" + re.escape(BEGIN) + r"\n.*?" + re.escape(END) + r"\n", re.DOTALL)


def parse(text: str, path: Path) -> tomlkit.TOMLDocument:
    """Parse ``text`` with tomlkit (and tomllib, which is stricter).

    Raises:
        EngineConfigError: not valid TOML; the message names the line.
    """
    try:
        tomllib.loads(text)
        return tomlkit.parse(text)
    except tomllib.TOMLDecodeError as err:
        raise EngineConfigError(
            f"{path} is not valid TOML: {err}",
            hint="fix the file (the engine would refuse it too); it was not changed",
        ) from err
    except tomlkit.exceptions.ParseError as err:
        raise EngineConfigError(
            f"{path} is not valid TOML: {err}",
            hint="fix the file (the engine would refuse it too); it was not changed",
        ) from err
    except RecursionError:  # both parsers recurse per nested array or inline table
        raise EngineConfigError(
            f"{path} is not valid TOML: arrays or tables nested too deeply",
            hint="fix the file (the engine would refuse it too); it was not changed",
        ) from None


def plain(text: str) -> dict[str, Any]:
    """The document as plain dicts (tomllib)."""
    data: dict[str, Any] = tomllib.loads(text)
    return data


def lookup(data: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """``data[k1][k2]...`` or ``None`` when any level is missing or not a table."""
    node: Any = data
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def node(doc: tomlkit.TOMLDocument, keys: Sequence[str]) -> Any:
    """The tomlkit item at ``keys`` (``None`` if missing)."""
    item: Any = doc
    for key in keys:
        if not isinstance(item, (Container, Table, dict)) or key not in item:
            return None
        item = item[key]
    return item


def header(keys: Sequence[str]) -> str:
    """``[a."b.c".d]`` for a key path."""
    return "[" + ".".join(_key(k) for k in keys) + "]"


def _key(key: str) -> str:
    bare = key and all(c.isalnum() or c in "-_" for c in key) and key.isascii()
    return key if bare else tomlkit.string(key).as_string()


def render_table(keys: Sequence[str], values: Mapping[str, Any], indent: int = 0) -> str:
    """A table (and its sub-tables) as TOML text with full headers."""
    pad = " " * indent
    scalars = {k: v for k, v in values.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in values.items() if isinstance(v, Mapping)}
    lines = [pad + header(keys)]
    lines += [f"{pad}  {_key(k)} = {tomlkit.item(v).as_string()}" for k, v in scalars.items()]
    text = "\n".join(lines) + "\n"
    for k, v in tables.items():
        text += render_table([*keys, k], v, indent + 2)
    return text


def render_value(value: Any) -> str:
    """A TOML value as text."""
    text: str = tomlkit.item(value).as_string()
    return text


def append_block(text: str, body: str) -> str:
    """``text`` with ``body`` appended between nvct's begin/end marks (undo: ``remove_blocks``)."""
    base = text if not text or text.endswith("\n") else text + "\n"
    return f"{base}\n{BEGIN}\n{body}{END}\n"


def remove_blocks(text: str, needle: str) -> str:
    """``text`` without the blocks ``append_block`` added that contain ``needle``."""
    return _BLOCK.sub(lambda m: "" if needle in m.group(0) else m.group(0), text)


def delete(doc: tomlkit.TOMLDocument, keys: Sequence[str]) -> bool:
    """Remove the item at ``keys``; True if it was there."""
    parent = node(doc, keys[:-1]) if len(keys) > 1 else doc
    if parent is None or keys[-1] not in parent:
        return False
    del parent[keys[-1]]
    return True


SET_MARK = "# nvct: set by nvct-cli configure"
WAS_MARK = "# nvct: was: "


def set_key_line(text: str, table: Sequence[str], key: str, value: Any) -> str | None:
    """Set ``key`` in the explicit table ``table`` by editing lines, keeping the old line.

    The previous line is kept as a comment above the new one, so ``unset_key_lines`` restores
    it byte for byte. ``None`` when the table has no header line of its own in ``text``.
    """
    lines = text.splitlines(keepends=True)
    head = re.compile(r"^([ \t]*)" + re.escape(header(table)) + r"[ \t]*(#.*)?\r?\n?$")
    start = next((i for i, line in enumerate(lines) if head.match(line)), None)
    if start is None:
        return None
    match = head.match(lines[start])
    indent = (match.group(1) if match else "") + "  "
    new_line = f"{{indent}}{_key(key)} = {render_value(value)}  {SET_MARK}\n"
    assignment = re.compile(r"^([ \t]*)" + re.escape(_key(key)) + r"[ \t]*=")
    for i in range(start + 1, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        found = assignment.match(lines[i])
        if found:
            old = lines[i].rstrip("\r\n")
            indent = found.group(1)
            lines[i] = f"{indent}{WAS_MARK}{old.lstrip()}\n" + new_line.format(indent=indent)
            return "".join(lines)
    if not lines[start].endswith("\n"):
        lines[start] += "\n"
    lines.insert(start + 1, new_line.format(indent=indent))
    return "".join(lines)


def unset_key_lines(text: str, key: str) -> str:
    """Undo ``set_key_line`` for ``key``: restore the kept line, or drop the added one."""
    k = re.escape(_key(key))
    mark = re.escape(SET_MARK)
    text = re.sub(
        rf"(?m)^([ \t]*){re.escape(WAS_MARK)}(.*)\n[ \t]*{k}[ \t]*=.*{mark}\n",
        lambda m: f"{m.group(1)}{m.group(2)}\n",
        text,
    )
    return re.sub(rf"(?m)^[ \t]*{k}[ \t]*=.*{mark}\n", "", text)


def set_key_or_queue_table(
    text: str, blocks: list[str], table: tuple[str, ...], key: str, value: object
) -> str:
    """Set ``key`` in ``table`` in place when the table is written out in ``text``; otherwise
    queue a new ``[table]`` block carrying it (first in ``blocks``) and return ``text`` as is."""
    edited = set_key_line(text, table, key, value)
    if edited is not None:
        return edited
    blocks.insert(0, f"{header(table)}\n  {key} = {render_value(value)}\n")
    return text
