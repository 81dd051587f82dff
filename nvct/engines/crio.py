"""CRI-O: a drop-in ``/etc/crio/crio.conf.d/99-nvct.toml`` with nvct's runtime handler.

CRI-O merges drop-ins key by key (unlike containerd < 2.1), so the drop-in holds only
``[crio.runtime.runtimes.<name>]`` (``runtime_path``, ``runtime_type = "oci"``) and, with
``--set-as-default``, ``crio.runtime.default_runtime``. An existing drop-in of that name is
edited like containerd's root file: nvct's part is a marked block that ``--undo`` removes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from nvct.engines import RUNTIME_BINARY, Edit, EngineOptions, running_daemons
from nvct.engines import toml_edit as te
from nvct.engines.files import FileChange

DEFAULT_CONFIG = Path("/etc/crio/crio.conf.d/99-nvct.toml")
RUNTIME_TABLE = ("crio", "runtime")
CREATED = "# nvct: file created by nvct-cli configure --runtime crio"


def backup_dir(opts: EngineOptions) -> Path:
    """Where the drop-in's previous content is kept: beside the drop-in directory, never in it
    (CRI-O applies every file of ``crio.conf.d`` in name order, ``99-nvct.toml.nvct-backup``
    after ``99-nvct.toml``: the old handler would win)."""
    folder = opts.config_path.parent
    return folder.with_name(folder.name + ".nvct-backup")


def edit(text: str | None, opts: EngineOptions) -> Edit:
    """The drop-in with (or, for ``--undo``, without) nvct's handler.

    Raises:
        EngineConfigError: the existing drop-in is not valid TOML.
    """
    source = text or ""
    doc = te.parse(source, opts.config_path)
    name = opts.runtime_name
    keys = (*RUNTIME_TABLE, "runtimes", name)
    if opts.undo:
        new = te.remove_blocks(source, te.header(keys) + "\n")
        if te.lookup(te.plain(new), (*RUNTIME_TABLE, "default_runtime")) == name:
            new = te.unset_key_lines(new, "default_runtime")
        handler = te.lookup(te.plain(new), keys)
        notes: tuple[str, ...] = ()
        if isinstance(handler, dict):
            path = handler.get("runtime_path")
            if isinstance(path, str) and path.rsplit("/", 1)[-1] == RUNTIME_BINARY:
                doc = te.parse(new, opts.config_path)
                te.delete(doc, keys)
                new = doc.as_string()
            else:
                notes = (f"runtime {name!r} does not run {RUNTIME_BINARY}: left alone",)
        if new.startswith(CREATED + "\n") and not te.plain(new):
            return Edit(None, (*notes, "the drop-in held nothing else: it is removed"))
        return Edit(new, notes)

    data = te.plain(source)
    wanted = {"runtime_path": opts.runtime_path, "runtime_type": "oci"}
    new = source if source.strip() else CREATED + "\n"
    blocks = []
    handler = te.lookup(data, keys)
    if isinstance(handler, dict):
        table = te.node(doc, keys)
        for key, value in wanted.items():
            if handler.get(key) != value:
                table[key] = value
        new = doc.as_string() if source.strip() else new
    else:
        blocks.append(te.render_table(keys, wanted))
    if opts.set_as_default and te.lookup(data, (*RUNTIME_TABLE, "default_runtime")) != name:
        new = te.set_key_or_queue_table(new, blocks, RUNTIME_TABLE, "default_runtime", name)
    if blocks:
        new = te.append_block(new, "".join(blocks))
    if new == source:
        return Edit(source)
    return Edit(new)


def validate(change: FileChange, opts: EngineOptions) -> None:
    """The new drop-in must parse (CRI-O itself is checked in ``checks`` when installed)."""
    if change.new is not None:
        te.parse(change.new, change.path)


def next_step(opts: EngineOptions) -> str:
    """How to make CRI-O read the change."""
    return "systemctl restart crio"


def checks(opts: EngineOptions) -> list[str]:
    """Warnings: CRI-O's effective config lacks the handler, or CRI-O is not running."""
    warnings = []
    crio = shutil.which("crio")
    if crio is not None and not opts.undo:
        try:
            done = subprocess.run(
                [crio, "config"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            header = te.header((*RUNTIME_TABLE, "runtimes", opts.runtime_name))
            if header not in done.stdout:
                warnings.append(f"`crio config` does not show {header}: check crio's config dir")
    if not running_daemons("crio"):
        warnings.append("no crio is running: the change applies when it starts")
    return warnings
