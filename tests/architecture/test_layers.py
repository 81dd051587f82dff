"""The import graph follows the stages: helpers <- store <- container, config <- host <- the
CDI library, request <- plan <- frontends; the Kubernetes wing's libraries (node <- host,
kubeapi <- base) below its frontends; and no frontend imports another.

Read from the source (every ``import``: lazy ones inside functions and type-only ones under
``if TYPE_CHECKING:`` included), so a violation fails here before it becomes a cycle. The work
order's types are a contract below all stages (``nvct.base.order``), so none needs naming upward.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nvct"

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
    # _version: a cached work order is keyed by the nvct that planned it (plan.order_key)
    "plan": {"base", "store", "container", "config", "host", "request", "cdi", "_version"},
    # What this node offers the kubelet (resources, IDs, labels, health policy, the plugin's
    # files): one answer for the device plugin, the labeller, the exporter and doctor.
    "node": {"base", "config", "host", "cdi"},
    # The kubelet's gRPC APIs (generated code, generator, pod-resources client) and the
    # Kubernetes API server's client.
    "kubeapi": {"base"},
}
FRONTENDS = {
    "runtime",
    "hook",
    "cli",
    "doctor",
    "engines",
    "deviceplugin",
    "exporter",
    "configmanager",
    "dra",
}
# Frontends another one may call: the CLI is the command line of the doctor, the engine
# configuration, the exporter and mps-control (the device plugin's package). Doctor reads the
# libraries (node, kubeapi) instead of the device plugin; the device plugin writes its CDI spec
# with the library's writer (plan) and names (cdi).
SERVES = {
    "cli": {"doctor", "engines", "exporter", "deviceplugin"},
    # The shim daemon's workers run the hook's prestart for the native hook (hook.c).
    "runtime": {"hook"},
}


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


def _absolute_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
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


def test_base_is_stdlib_only() -> None:
    """``base/`` holds helpers the hot path may import: the standard library only (structlog,
    lazily, for the log helper that configures it), never a code generator or grpc."""
    allowed = set(sys.stdlib_module_names) | {"nvct"}
    wrong = []
    for path in sorted((PACKAGE / "base").rglob("*.py")):
        for line, name in _absolute_imports(path):
            top = name.split(".")[0]
            private = top.startswith("_")  # the interpreter's C modules (_sha2, _json)
            if (
                not private
                and top not in allowed
                and not (path.name == "log.py" and top == "structlog")
            ):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name}")
    assert wrong == []


# The Kubernetes API client library: only nvct's client layer and the frontends that talk to
# the API server import it (never a library stage the runtime or hook load).
API_CLIENT_USERS = ("kubeapi/client/", "configmanager/", "dra/")


def test_only_the_api_client_and_its_users_import_lightkube() -> None:
    wrong, allowed = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, name in _absolute_imports(path):
            if name.split(".")[0] in ("lightkube", "httpx2", "msgspec"):
                where = allowed if rel.startswith(API_CLIENT_USERS) else wrong
                where.append(f"{rel}:{line}: {name}")
    assert wrong == []
    assert allowed  # not vacuous: the client's own imports were read
