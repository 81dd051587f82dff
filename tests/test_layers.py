"""The import graph follows the stages: helpers <- store <- container, config <- host <- the
CDI library, request <- plan <- frontends, and no frontend imports another.

Read from the source (every ``import``: lazy ones inside functions and type-only ones under
``if TYPE_CHECKING:`` included), so a violation fails here before it becomes a cycle. The work
order's types are a contract below all stages (``nvct.base.order``), so none needs naming upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nvct"

# Each unit (a top-level package or module of nvct) and the units it may import.
LIBRARY = {
    "_version": set(),
    "base": {"_version", "nvct"},
    "store": {"base", "_version"},
    "container": {"base", "store"},
    "config": {"base", "store"},
    "host": {"base", "store", "config", "_version"},
    "cdi": {"base", "host"},
    "request": {"base", "config", "cdi"},
    "plan": {"base", "store", "container", "config", "host", "request", "cdi"},
    "podresources": {"base"},
}
FRONTENDS = {"runtime", "hook", "cli", "doctor", "engines", "deviceplugin", "exporter"}
# Frontends another one may call: the CLI is the command line of the doctor, the engine
# configuration and the exporter; doctor asks the device plugin over its gRPC API and applies its
# advertising rule (only those: see below).
SERVES = {
    "cli": {"doctor", "engines", "exporter", "deviceplugin"},
    "doctor": {"deviceplugin"},
}
# What doctor may import of the device plugin: its API, its advertising rule and its rule for the
# node's leak guard; never its server, health or allocation internals.
DOCTOR_READS = {"nvct.deviceplugin.api", "nvct.deviceplugin.devices", "nvct.deviceplugin.guard"}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nvct"


def _imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nvct"):
            if node.module == "nvct":
                found.extend((node.lineno, f"nvct.{a.name}") for a in node.names)
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("nvct"))
    return found


def _edges() -> list[tuple[str, str, str]]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        source = _unit(".".join(rel.with_suffix("").parts))
        for line, module in _imports(path):
            target = _unit(module)
            if target != source:
                edges.append((f"{rel}:{line}", source, target))
    return edges


def test_every_unit_is_placed() -> None:
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    units -= {"__init__", "__pycache__", "py"}
    assert units <= set(LIBRARY) | FRONTENDS, units - set(LIBRARY) - FRONTENDS


def test_no_upward_import_from_the_library() -> None:
    wrong = [
        f"{where}: {source} imports {target}"
        for where, source, target in _edges()
        if source in LIBRARY and target not in LIBRARY[source]
    ]
    assert wrong == []


def test_no_frontend_imports_another() -> None:
    wrong = [
        f"{where}: {source} imports {target}"
        for where, source, target in _edges()
        if source in FRONTENDS and target in FRONTENDS and target not in SERVES.get(source, set())
    ]
    assert wrong == []


@pytest.mark.parametrize("unit", sorted(set(LIBRARY) - {"_version"}))
def test_the_rule_is_not_vacuous(unit: str) -> None:
    """Every library unit is imported somewhere (the graph was read)."""
    assert any(target == unit for _, _, target in _edges())


def test_doctor_reads_only_the_plugins_api_and_advertising_rule() -> None:
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in sorted((PACKAGE / "doctor").rglob("*.py"))
        for line, module in _imports(path)
        if module.startswith("nvct.deviceplugin")
        and not any(module == m or module.startswith(f"{m}.") for m in DOCTOR_READS)
    ]
    assert wrong == []
