"""How a config.toml table is declared: one frozen dataclass per table, each key once.

A table is a class made by ``@section`` on ``Table``; a key is a field made by ``key()``: its
type is the field's annotation, its default the field's default, its constraint a JSON-schema
fragment. Everything else is derived from these declarations, never written beside them: the
table's JSON schema (``schema_of``), how a validated TOML table becomes the dataclass
(``from_toml``), the keys the device plugin's status file records (``recorded``) and the
command-line flags a frontend offers (``nvct.config.flags``). A nested table is a field made by
``table()``; config.toml itself is the root table (``nvct.config.Config``).

Stdlib only and no typing import at run time: the hook and the shim load the config on every
container start, and declaring a table must stay cheap (see ``section``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    T = TypeVar("T")

_META = "nvct.key"


class Key:
    """What a field declares besides its type and default. A plain class, not a dataclass:
    making a dataclass costs ~1 ms at import, and the hook imports the config."""

    __slots__ = ("absolute", "flag", "items", "load", "name", "path", "recorded", "schema", "table")

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
        load: Callable[[Any], Any] | None = None,
    ) -> None:
        self.schema = schema  # its JSON-schema constraint
        self.name = name  # its TOML name; "": the field's, "-" for "_"
        self.flag = flag  # a frontend's flag help; "": no flag
        self.path = path  # a flag's path kind: "dir", "file" or "" (not a path)
        self.absolute = absolute  # a flag's path is made absolute (containers mount from it)
        self.recorded = recorded  # nvct-device-plugin's status file records it
        self.table = table  # a nested table's dataclass
        self.items = items  # an array of tables: each one's dataclass
        self.load = load  # the field's value of a valid TOML (or flag) value; None: as is


class Table:
    """What ``@section`` leaves out of a declared table's dataclass, written once here instead
    of generated per class: a keyword-only ``__init__``, frozen attributes, and equality, hash
    and repr by its fields. The generated ones cost ~0.7 ms of import apiece table (each is
    compiled from source), and the hook and the shim import every table on each container
    start."""

    __slots__ = ()

    if not TYPE_CHECKING:  # mypy sees the frozen dataclass ``section`` declares

        def __init__(self, **values: Any) -> None:
            cls = type(self)
            init = _INIT.get(cls) or _init_of(cls)
            defaults, factories, required, names = init
            if not names.issuperset(values):
                unknown = ", ".join(sorted(set(values) - names))
                raise TypeError(f"{cls.__name__}() got unexpected keyword arguments: {unknown}")
            if not required.issubset(values):
                missing = ", ".join(sorted(required - set(values)))
                raise TypeError(f"{cls.__name__}() missing keyword arguments: {missing}")
            own = self.__dict__  # past the frozen __setattr__, as a dataclass's __init__ goes
            own.update(defaults)
            for name, factory in factories:
                if name not in values:
                    own[name] = factory()
            own.update(values)

        def __setattr__(self, name: str, value: Any) -> None:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self, name: str) -> None:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

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


# Per table: (defaults, (field, default factory)..., required fields, all fields), for __init__.
_INIT: dict[
    type, tuple[dict[str, Any], tuple[tuple[str, Any], ...], frozenset[str], frozenset[str]]
]
_INIT = {}


def _init_of(cls: type) -> tuple[Any, ...]:
    # One pass over the fields (dataclasses.fields() filters out ClassVars, which no table has,
    # and copies): the first load of a config pays this per table, on the hook's path.
    missing = dataclasses.MISSING
    defaults = {}
    factories = []
    required = []
    for f in cls.__dataclass_fields__.values():  # type: ignore[attr-defined]
        if f.default is not missing:
            defaults[f.name] = f.default
        elif f.default_factory is not missing:
            factories.append((f.name, f.default_factory))
        else:
            required.append(f.name)
    names = frozenset(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    found = _INIT[cls] = (defaults, tuple(factories), frozenset(required), names)
    return found


if TYPE_CHECKING:  # to mypy a section is the frozen, keyword-only dataclass it behaves as

    @dataclass_transform(frozen_default=True, kw_only_default=True)
    def section(cls: type[T]) -> type[T]: ...

else:

    def section(cls: type[T]) -> type[T]:
        """A declared table: ``cls`` (a ``Table``) as a dataclass whose ``__init__``, frozen
        attributes, equality, hash and repr are ``Table``'s, none generated (a dataclass
        compiles each from source at import)."""
        if not issubclass(cls, Table):
            raise TypeError(f"@section {cls.__name__}: derive it from nvct.config.declare.Table")
        return dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=True)


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
            (f.name, decl.name or f.name.replace("_", "-"), decl)
            for f in cls.__dataclass_fields__.values()  # type: ignore[attr-defined]  # all fields
            if (decl := f.metadata.get(_META)) is not None
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


def from_toml(cls: type[T], data: Mapping[str, Any], base: T | None = None, **fixed: Any) -> T:
    """A validated TOML table as ``cls``: the keys it sets over ``base`` (default: the
    defaults), each through its declaration's ``load``; ``fixed``: fields that are not keys
    (``Config.source``)."""
    values: dict[str, Any] = fixed
    for attr, name, decl in declared(cls):
        if name not in data:
            continue
        value = data[name]
        if decl.table is not None:
            inner = getattr(base, attr) if base is not None else None
            value = from_toml(decl.table, value, inner)
        elif decl.items is not None:
            value = tuple(from_toml(decl.items, item) for item in value)
        elif decl.load is not None:
            value = decl.load(value)
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
