"""The ``NVIDIA_REQUIRE_*`` constraint language.

``expr := term (' ' term)*`` (space = OR), ``term := pred (',' pred)*`` (comma = AND),
``pred := NAME OP VALUE`` with OP in ``= != < <= > >=``. Names: ``cuda`` (CUDA driver API
version), ``driver`` (driver version), ``arch`` (compute capability), ``brand`` (string,
``=``/``!=`` only, case-insensitive). Versions compare numerically dot by dot, trailing
zeros ignored. A fact the host cannot supply (no GPU selected for ``arch``) passes, as in
libnvidia-container. Unlike NVIDIA's Go port, an unknown name is an error, not a silent skip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvct.base.errors import RequirementError

NAMES = ("cuda", "driver", "arch", "brand")
OPERATORS = ("<=", ">=", "!=", "=", "<", ">")
_PRED_RE = re.compile(r"^([a-z]+)(<=|>=|!=|=|<|>)(.+)$")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*$")
_MAX_LEN = 4096


@dataclass(frozen=True, slots=True)
class Predicate:
    """One comparison, e.g. ``cuda>=12.4``."""

    name: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


@dataclass(frozen=True, slots=True)
class Requirement:
    """A parsed expression: any of ``alternatives`` (each: all of its predicates) must hold."""

    source: str  # the env var it came from
    expression: str
    alternatives: tuple[tuple[Predicate, ...], ...]


@dataclass(frozen=True, slots=True)
class Facts:
    """Host values a requirement is checked against (None: unknown, passes)."""

    cuda: str | None
    driver: str | None
    arch: str | None = None
    brand: str | None = None
    where: str = "host"  # "GPU 1" etc., for messages


def parse_requirement(expression: str, *, source: str) -> Requirement:
    """Parse one expression.

    Raises:
        RequirementError: the expression does not follow the grammar.
    """
    if len(expression) > _MAX_LEN:
        raise RequirementError(
            f"{source} is {len(expression)} characters long",
            hint=f"keep requirement expressions under {_MAX_LEN} characters",
        )
    alternatives = []
    for term in expression.split():
        preds = []
        for raw in term.split(","):
            if not raw:
                continue
            preds.append(_predicate(raw, source))
        if preds:
            alternatives.append(tuple(preds))
    return Requirement(source=source, expression=expression, alternatives=tuple(alternatives))


def _predicate(raw: str, source: str) -> Predicate:
    match = _PRED_RE.match(raw)
    shown = raw if raw.isprintable() and len(raw) <= 64 else repr(raw[:64])
    if match is None:
        raise RequirementError(
            f"{source}: cannot parse {shown!s}",
            hint="write NAME OP VALUE, e.g. cuda>=12.0 (names: cuda, driver, arch, brand)",
        )
    name, op, value = match.groups()
    if name not in NAMES:
        raise RequirementError(
            f"{source}: unknown name {name!r} in {shown}",
            hint="use one of cuda, driver, arch, brand",
        )
    if name == "brand":
        if op not in ("=", "!="):
            raise RequirementError(
                f"{source}: brand only supports = and != (got {shown})",
                hint="e.g. brand=tesla",
            )
    elif not _VERSION_RE.match(value):
        raise RequirementError(
            f"{source}: {name} needs a dotted version, got {value[:64]!r}",
            hint=f"e.g. {name}>=12.0",
        )
    return Predicate(name, op, value)


def version_key(version: str) -> tuple[int, ...]:
    """Numeric dot-wise key with trailing zeros dropped (12.0 == 12)."""
    parts = [int(p) for p in re.findall(r"[0-9]+", version)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def check_predicate(pred: Predicate, facts: Facts) -> bool | None:
    """True/False, or None when the host value is unknown (treated as passing)."""
    have = getattr(facts, pred.name)
    if have is None:
        return None
    if pred.name == "brand":
        equal = have.lower() == pred.value.lower()
        return equal if pred.op == "=" else not equal
    a, b = version_key(have), version_key(pred.value)
    return {
        "=": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[pred.op]


def evaluate(requirement: Requirement, facts: Facts) -> tuple[bool, str]:
    """Whether the requirement holds for these facts, with the comparisons made."""
    if not requirement.alternatives:
        return True, "empty expression"
    details = []
    for preds in requirement.alternatives:
        results = [(p, check_predicate(p, facts)) for p in preds]
        details.append(
            ", ".join(
                f"{p} ({p.name} is {getattr(facts, p.name) or 'unknown'}: "
                f"{'ok' if r is not False else 'fails'})"
                for p, r in results
            )
        )
        if all(r is not False for _, r in results):
            return True, details[-1]
    return False, " or ".join(details)
