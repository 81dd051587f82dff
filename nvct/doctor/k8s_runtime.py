"""The RuntimeClass ``nvidia``'s handler: a runtime named ``nvidia`` in containerd's CRI plugin
(config versions 1 to 3, the root file and its imports) or in CRI-O's ``crio.runtime.runtimes``
(crio.conf and its drop-ins), running an nvct-runtime that exists.

Where a handler is defined twice, the later file wins, as both engines merge them. Either
engine having a good handler passes: doctor cannot tell which one the kubelet talks to.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.doctor.context import DoctorContext
from nvct.doctor.crio import crio_files
from nvct.doctor.result import CheckResult, failed, passed
from nvct.doctor.tomlfiles import RUNTIME_BASENAME, load_toml, table_at, with_imports

NAME = "runtime-class"
HANDLER = "nvidia"  # deployments/runtimeclass.yaml's handler, the runtime `configure` names
CONFIGURE = "nvct-cli configure --runtime containerd (or --runtime crio), then restart it"


@dataclass(frozen=True, slots=True)
class Handler:
    """Where an engine defines the handler, and the program it runs (None: not named)."""

    engine: str
    file: Path
    table: str
    key: str
    program: str | None

    def where(self) -> str:
        """``file: [table] key = program``, as the engine's config spells it."""
        return f"{self.file}: [{self.table}] {self.key} = {self.program or '(unset)'}"


def _last(
    engine: str,
    files: Sequence[tuple[Path, dict[str, Any]]],
    tables: Sequence[tuple[str, ...]],
    key: str,
    options: bool,
) -> Handler | None:
    """The handler as the engine merges ``files`` (the last definition wins)."""
    found = None
    for file, data in files:
        for keys in tables:
            table = table_at(data, keys)
            if table is None:
                continue
            holder = table_at(table, ("options",)) if options else table
            program = (holder or {}).get(key)
            where = ".".join(keys) + (".options" if options else "")
            found = Handler(engine, file, where, key, program if isinstance(program, str) else None)
    return found


def containerd_handler(ctx: DoctorContext) -> tuple[Handler | None, bool]:
    """containerd's ``nvidia`` handler, and whether its config exists.

    Looked for under whichever plugin holds ``containerd.runtimes``: the CRI plugin is
    ``cri`` in config version 1, ``io.containerd.grpc.v1.cri`` in 2 (containerd 1.x) and
    ``io.containerd.cri.v1.runtime`` in 3 (2.x).
    """
    data, _ = load_toml(ctx.containerd_config)
    if data is None:
        return None, ctx.containerd_config.exists()
    loaded = with_imports(ctx.containerd_config, data)
    plugins = sorted({name for _, d in loaded for name in table_at(d, ("plugins",)) or {}})
    tables = [("plugins", name, "containerd", "runtimes", HANDLER) for name in plugins]
    return _last("containerd", loaded, tables, "BinaryName", True), True


def crio_handler(ctx: DoctorContext) -> tuple[Handler | None, bool]:
    """CRI-O's ``nvidia`` runtime, and whether any of its config files exists."""
    files = crio_files(ctx)
    loaded = [(f, load_toml(f)[0] or {}) for f in files]
    tables = [("crio", "runtime", "runtimes", HANDLER)]
    return _last("CRI-O", loaded, tables, "runtime_path", False), bool(files)


def _problem(ctx: DoctorContext, handler: Handler) -> str | None:
    """Why the handler does not run an existing nvct-runtime (None: it does)."""
    program = handler.program
    if program is None:
        default = "runc" if handler.key == "BinaryName" else f"{HANDLER} from PATH"
        return (
            f"{handler.engine}'s runtime {HANDLER} names no program ({handler.key} unset: "
            f"it runs {default})"
        )
    if posixpath.basename(program) != RUNTIME_BASENAME:
        return f"{handler.where()}: the handler runs {program}, not nvct-runtime"
    found = program if "/" in program else ctx.which(program)
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        return f"{handler.where()}: no executable {program} on this node"
    return None


def check_runtime_class(ctx: DoctorContext) -> CheckResult:
    """PASS naming the handler that runs nvct-runtime, else FAIL with why."""
    handlers = []
    exists = False
    for finder in (containerd_handler, crio_handler):
        handler, present = finder(ctx)
        exists = exists or present
        if handler is not None:
            handlers.append(handler)
    problems = []
    for handler in handlers:
        problem = _problem(ctx, handler)
        if problem is None:
            return passed(NAME, f"RuntimeClass {HANDLER}'s handler: {handler.where()}")
        problems.append(problem)
    if problems:
        return failed(NAME, "; ".join(problems), f"install nvct on the node, or {CONFIGURE}")
    if not exists:
        return failed(
            NAME,
            f"no containerd ({ctx.containerd_config}) or CRI-O ({ctx.crio_config}, "
            f"{ctx.crio_dropin_dir}) config: no runtime {HANDLER} for the RuntimeClass",
            f"{CONFIGURE}; or point doctor at the engine's config (--containerd-config, "
            "--crio-config)",
        )
    return failed(
        NAME,
        f"neither containerd nor CRI-O defines a runtime {HANDLER}: pods with "
        f"runtimeClassName: {HANDLER} fail to start (no runtime handler)",
        CONFIGURE,
    )
