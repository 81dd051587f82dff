"""How a config.toml table is declared: one frozen dataclass per table, each key once.

A key is a dataclass field made by ``key()``: its type is the field's annotation, its default
the field's default, its constraint a JSON-schema fragment. Everything else is derived from
these declarations, never written beside them: the table's JSON schema (``schema_of``), how a
validated TOML table becomes the dataclass (``from_toml``), the keys the device plugin's status
file records (``recorded``) and the command-line flags a frontend offers
(``nvct.config.flags``). A nested table is a field made by ``table()``.

Stdlib only and no typing import at run time: the hook loads the config on its hot path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

_META = "nvct.key"


class Key:
    """What a field declares besides its type and default. A plain class, not a dataclass:
    making a dataclass costs ~1 ms at import, and the hook imports the config."""

    __slots__ = ("absolute", "flag", "items", "name", "path", "recorded", "schema", "table")

    def __init__(
        self,
        schema: dict[str, Any],
        *,
        name: str = "",
        flag: str = "",
        path: str = "",
        absolute: bool = False,
        recorded: bool = False,
        table: type | None = None,
        items: type | None = None,
    ) -> None:
        self.schema = schema  # its JSON-schema constraint
        self.name = name  # its TOML name; "": the field's, "-" for "_"
        self.flag = flag  # a frontend's flag help; "": no flag
        self.path = path  # a flag's path kind: "dir", "file" or "" (not a path)
        self.absolute = absolute  # a flag's path is made absolute (containers mount from it)
        self.recorded = recorded  # nvct-device-plugin's status file records it
        self.table = table  # a nested table's dataclass
        self.items = items  # an array of tables: each one's dataclass


class Table:
    """Value semantics for a declared table's dataclass (``eq=False, repr=False``): equal, hashed
    and shown by its fields. Generated per class, ``__eq__``, ``__hash__`` and ``__repr__`` cost
    ~0.25 ms of import apiece table, and the hook imports the config."""

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        """The values compared (``field(compare=False)`` left out, as a dataclass does)."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return tuple(getattr(self, f.name) for f in fields if f.compare)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in fields if f.repr)
        return f"{type(self).__name__}({', '.join(shown)})"


def key(
    default: Any = dataclasses.MISSING,
    schema: dict[str, Any] | None = None,
    **declared: Any,
) -> Any:
    """A key of a table: ``default`` (none: the key is required), its JSON-schema
    ``schema`` and what else ``Key`` holds (``name``, ``flag``, ``recorded``, ``items``...)."""
    meta = {_META: Key(schema or {}, **declared)}
    return dataclasses.field(default=default, metadata=meta)


def table(cls: type, *, name: str = "") -> Any:
    """A nested table (``[device-plugin.sharing]``): its own declared dataclass."""
    meta = {_META: Key({}, name=name, table=cls)}
    return dataclasses.field(default_factory=cls, metadata=meta)


_DECLARED: dict[type, tuple[tuple[str, str, Key], ...]] = {}


def declared(cls: type) -> tuple[tuple[str, str, Key], ...]:
    """(field name, TOML name, declaration) of each key of ``cls``, in declaration order (read
    once per class: a config is loaded on the hook's hot path)."""
    found = _DECLARED.get(cls)
    if found is None:
        found = _DECLARED[cls] = tuple(
            (f.name, f.metadata[_META].name or f.name.replace("_", "-"), f.metadata[_META])
            for f in dataclasses.fields(cls)
            if _META in f.metadata
        )
    return found


def schema_of(cls: type) -> dict[str, Any]:
    """The JSON schema of one table: its keys, no others; required: those without default."""
    props: dict[str, Any] = {}
    required = []
    defaults = {f.name: f for f in dataclasses.fields(cls)}
    for attr, name, decl in declared(cls):
        if decl.table is not None:
            props[name] = schema_of(decl.table)
        elif decl.items is not None:
            props[name] = {**decl.schema, "type": "array", "items": schema_of(decl.items)}
        else:
            props[name] = decl.schema
        f = defaults[attr]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(name)
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if required:
        out["required"] = required
    out["properties"] = props
    return out


def from_toml(cls: type[T], data: Mapping[str, Any], base: T | None = None) -> T:
    """A validated TOML table as ``cls``: the keys it sets over ``base`` (default: the
    defaults)."""
    values: dict[str, Any] = {}
    for attr, name, decl in declared(cls):
        if name not in data:
            continue
        value = data[name]
        if decl.table is not None:
            inner = getattr(base, attr) if base is not None else None
            value = from_toml(decl.table, value, inner)
        elif decl.items is not None:
            value = tuple(from_toml(decl.items, item) for item in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[attr] = value
    if base is None:
        return cls(**values)
    return dataclasses.replace(base, **values)  # type: ignore[type-var]


def recorded(section: object) -> dict[str, Any]:
    """The keys of ``section`` its ``recorded`` declarations name, by TOML name, with values."""
    return {name: getattr(section, attr) for attr, name, d in declared(type(section)) if d.recorded}


def recorded_names(cls: type) -> tuple[str, ...]:
    """The TOML names of the keys ``cls`` records in the device plugin's status file."""
    return tuple(name for _, name, d in declared(cls) if d.recorded)


def with_values(section: T, values: Mapping[str, Any]) -> T:
    """``section`` with keys set by field name, a nested table's keys included (``mps_root``
    sets ``sharing.mps_root``: names are unique within a table and its nested ones).

    Raises:
        KeyError: a name no key of ``section`` has.
    """
    own: dict[str, Any] = {}
    left = dict(values)
    for attr, _, decl in declared(type(section)):
        if decl.table is not None:
            names = {a for a, _, _ in declared(decl.table)}
            inner = {k: left.pop(k) for k in list(left) if k in names}
            if inner:
                own[attr] = with_values(getattr(section, attr), inner)
        elif attr in left:
            own[attr] = left.pop(attr)
    if left:
        raise KeyError(", ".join(sorted(left)))
    return dataclasses.replace(section, **own)  # type: ignore[type-var]
