"""containerd: a runtime handler in the CRI plugin's config, edited in the root config file.

Why the root file and not a drop-in under ``conf.d``: containerd before 2.1 merges imported
files by replacing each *whole plugin table* by key. A drop-in holding only
``[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]`` therefore wipes the root
file's whole CRI section (measured with containerd 1.6.20: ``sandbox_image`` reverts to its
default and even the ``runc`` handler disappears). NVIDIA's tool avoids that by copying the
entire CRI section into its drop-in, which then silently shadows every later edit of the root
file: the drift its users report. Editing the root file keeps one source of truth; the edit
is an appended, marked block (``toml_edit``), so the file's comments and layout survive
byte for byte and ``--undo`` removes exactly that block.

The handler is written at the plugin path of the file's own ``version`` (1: ``plugins.cri``,
2: ``plugins."io.containerd.grpc.v1.cri"``, 3: ``plugins."io.containerd.cri.v1.runtime"``),
never at the one of a migrated ``config dump``. It copies the options of the default runtime's
handler (``SystemdCgroup`` ...), sets ``runtime_type = "io.containerd.runc.v2"`` and
``options.BinaryName``. A file that defines any runtime replaces containerd's built-in
runtime map, so when the default ``runc`` handler is not in the file it is added too.

The handler's ``container_annotations`` gets ``cdi.k8s.io/*``: containerd copies a container's
CRI annotations into the OCI spec only where that list matches, and without it the device
plugin's ``cdi-annotations`` answer never reaches nvct-runtime on a containerd without CDI of
its own (1.6, or 1.7 with ``enable_cdi`` off). ``pod_annotations`` is never widened (a pod's own
``cdi.k8s.io/`` annotation would then name GPUs past the scheduler): patterns of the copied
handler that let one through are left out of nvct's handler.

``--cdi`` sets ``enable_cdi = true`` and ``cdi_spec_dirs`` in the CRI plugin's table (CDI
arrived in containerd 1.7; an older one ignores the keys without a word, so it is refused by
name). Both are marked lines (or a marked block), so ``--undo`` takes exactly them away.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from nvct.base import cri_annotations
from nvct.base.defaults import CDI_SPEC_DIRS
from nvct.base.errors import EngineConfigError
from nvct.engines import (
    RUNTIME_BINARY,
    Edit,
    EngineOptions,
    flag_value,
    program_release,
    refuse_before,
    running_daemons,
    same_file,
)
from nvct.engines import toml_edit as te
from nvct.engines.files import FileChange

DEFAULT_CONFIG = Path("/etc/containerd/config.toml")
RUNC_V2 = "io.containerd.runc.v2"
CRI_PLUGIN = {
    1: ("plugins", "cri"),
    2: ("plugins", "io.containerd.grpc.v1.cri"),
    3: ("plugins", "io.containerd.cri.v1.runtime"),
}
CDI_SINCE = (1, 7)
CREATED = "# nvct: file created by nvct-cli configure --runtime containerd"


def config_version(data: dict[str, Any], empty: bool, installed: int | None) -> int:
    """The config schema version containerd will read the file with.

    An empty (or missing) file gets the version of the installed containerd (2 for 1.x, 3 for
    2.x); a non-empty file without ``version`` is version 1, as containerd reads it.
    """
    if empty:
        return installed or installed_version() or 2
    version = data.get("version", 1)
    if not isinstance(version, int) or version not in CRI_PLUGIN:
        raise EngineConfigError(
            f"unsupported containerd config version {version!r}",
            hint="nvct writes versions 1, 2 and 3 (containerd 1.x and 2.x)",
        )
    return version


def installed_version() -> int | None:
    """Config version of the installed containerd (2 for 1.x, 3 for 2.x), if it is installed."""
    release = program_release("containerd")
    if release is None:
        return None
    return 2 if release[0][0] < 2 else 3


def runtimes_path(version: int) -> tuple[str, ...]:
    """Key path of the runtime handlers table."""
    return (*CRI_PLUGIN[version], "containerd", "runtimes")


def _is_ours(handler: Any, opts: EngineOptions) -> bool:
    binary = te.lookup(handler, ("options", "BinaryName")) if isinstance(handler, dict) else None
    return isinstance(binary, str) and (
        binary.rsplit("/", 1)[-1] == RUNTIME_BINARY or binary == opts.runtime_path
    )


def edit(text: str | None, opts: EngineOptions) -> Edit:
    """The root config with nvct's runtime handler (or without it, for ``--undo``).

    Raises:
        EngineConfigError: not valid TOML, or an unsupported ``version``.
    """
    source = text or ""
    te.parse(source, opts.config_path)
    data = te.plain(source)
    version = config_version(data, not data, opts.containerd_version)
    if opts.undo:
        return _undo(source, version, opts)
    return _configure(source, data, version, opts)


def _configure(source: str, data: dict[str, Any], version: int, opts: EngineOptions) -> Edit:
    name = opts.runtime_name
    runtimes_keys = runtimes_path(version)
    containerd_keys = runtimes_keys[:-1]
    runtimes = te.lookup(data, runtimes_keys) or {}
    default_name = te.lookup(data, (*containerd_keys, "default_runtime_name")) or "runc"
    notes = [f"containerd config version {version}: handler at {te.header(runtimes_keys)[1:-1]}"]
    doc = te.parse(source, opts.config_path)
    blocks: list[str] = []

    if name in runtimes:
        handler = te.node(doc, (*runtimes_keys, name))
        if not _is_ours(runtimes[name], opts):
            notes.append(f"runtime {name!r} was configured with another binary: now nvct-runtime")
        if runtimes[name].get("runtime_type") != RUNC_V2:
            handler["runtime_type"] = RUNC_V2
        if "options" not in handler:
            handler["options"] = {"BinaryName": opts.runtime_path}
        elif handler["options"].get("BinaryName") != opts.runtime_path:
            handler["options"]["BinaryName"] = opts.runtime_path
        passed = runtimes[name].get("container_annotations") or []
        if not cri_annotations.cdi_patterns(passed):
            handler["container_annotations"] = [*passed, cri_annotations.CDI_PATTERN]
        if cri_annotations.cdi_patterns(runtimes[name].get("pod_annotations") or []):
            notes.append(_POD_ANNOTATIONS_NOTE.format(name=name))
    else:
        base_name = next(
            (n for n in (default_name, "runc", "crun") if n in runtimes and n != name), None
        )
        wanted: dict[str, Any] = copy.deepcopy(runtimes[base_name]) if base_name else {}
        if base_name:
            notes.append(f"options copied from runtime {base_name!r}")
        wanted["runtime_type"] = RUNC_V2
        notes.extend(_annotation_lists(wanted))
        options = wanted.pop("options", {})
        options["BinaryName"] = opts.runtime_path
        wanted["options"] = options
        if default_name not in runtimes and default_name == "runc" and name != "runc":
            # Defining any handler replaces containerd's built-in map: keep runc alive.
            runc = {"runtime_type": RUNC_V2, "options": {}}
            blocks.append(te.render_table((*runtimes_keys, "runc"), runc))
            notes.append("runtime 'runc' added: a file that defines runtimes replaces the defaults")
        blocks.append(te.render_table((*runtimes_keys, name), wanted))

    new = doc.as_string()
    if not source.strip():
        new = f"{CREATED}\nversion = {version}\n"
    if opts.set_as_default and default_name != name:
        new = te.set_key_or_queue_table(new, blocks, containerd_keys, "default_runtime_name", name)
    if opts.cdi:
        new = _enable_cdi(new, data, blocks, version, opts)
    if blocks:
        new = te.append_block(new, "".join(blocks))
    if new == source:
        return Edit(source, ())
    return Edit(new, tuple(notes))


_POD_ANNOTATIONS_NOTE = (
    "runtime {name!r}: its pod_annotations let cdi.k8s.io/ annotations through (any pod can "
    "then name GPUs itself): remove those patterns (`nvct-cli doctor` flags them)"
)


def _annotation_lists(handler: dict[str, Any]) -> list[str]:
    """Set a new handler's annotation lists: the device plugin's ``cdi.k8s.io/*`` for its
    containers, and none of it for pods; the notes that say what changed from the copy."""
    notes = []
    passed = list(handler.get("container_annotations") or [])
    if not cri_annotations.cdi_patterns(passed):
        passed.append(cri_annotations.CDI_PATTERN)
    handler["container_annotations"] = passed
    pod = list(handler.get("pod_annotations") or [])
    widened = cri_annotations.cdi_patterns(pod)
    if widened:
        handler["pod_annotations"] = [p for p in pod if p not in widened]
        notes.append(f"pod_annotations {widened} left out: a pod could name GPUs itself")
    return notes


def _enable_cdi(
    text: str, data: dict[str, Any], blocks: list[str], version: int, opts: EngineOptions
) -> str:
    """``text`` with CDI on in the CRI plugin: set in its table where the file writes it out,
    else a ``[cri]`` table queued first in ``blocks``."""
    cri = CRI_PLUGIN[version]
    wanted: dict[str, Any] = {
        "enable_cdi": True,
        "cdi_spec_dirs": list(opts.cdi_spec_dirs or CDI_SPEC_DIRS),
    }
    current = te.lookup(data, cri) or {}
    for key, value in wanted.items():
        if current.get(key) == value:
            continue
        edited = te.set_key_line(text, cri, key, value)
        if edited is None:
            body = "".join(f"  {k} = {te.render_value(v)}\n" for k, v in wanted.items())
            blocks.insert(0, f"{te.header(cri)}\n{body}")
            return text
        text = edited
    return text


def _undo(source: str, version: int, opts: EngineOptions) -> Edit:
    name = opts.runtime_name
    runtimes_keys = runtimes_path(version)
    containerd_keys = runtimes_keys[:-1]
    text = te.remove_blocks(source, te.header((*runtimes_keys, name)) + "\n")
    # nvct's CDI lines are marked, so they go whether or not --cdi is given again
    text = te.remove_blocks(text, "  enable_cdi = true\n")
    for key in ("enable_cdi", "cdi_spec_dirs"):
        text = te.unset_key_lines(text, key)
    if te.lookup(te.plain(text), (*containerd_keys, "default_runtime_name")) == name:
        text = te.unset_key_lines(text, "default_runtime_name")
    doc = te.parse(text, opts.config_path)
    data = te.plain(text)
    notes: list[str] = []
    handler = te.lookup(data, (*runtimes_keys, name))
    if handler is not None:
        if _is_ours(handler, opts):
            te.delete(doc, (*runtimes_keys, name))
        else:
            notes.append(f"runtime {name!r} does not run {RUNTIME_BINARY}: left alone")
    new = doc.as_string()
    if new.startswith(CREATED + "\n") and te.plain(new) in ({}, {"version": version}):
        return Edit(None, (*notes, "the file held nothing else: it is removed"))
    return Edit(new, tuple(notes))


def validate(change: FileChange, opts: EngineOptions) -> None:
    """Check the new file parses and yields the handler; with the real containerd when possible.

    Raises:
        EngineConfigError: the installed containerd refuses the new file but accepted the old,
            or ``--cdi`` is asked of a containerd older than 1.7.
    """
    if opts.cdi and not opts.undo:
        refuse_before(
            "containerd",
            CDI_SINCE,
            "enable_cdi",
            change.path,
            "upgrade containerd, or leave out --cdi: nvct-runtime resolves CDI names and "
            "cdi.k8s.io annotations itself",
        )
    if change.new is None:
        return
    te.parse(change.new, change.path)
    verdict = dump_config(change.new, change.path.parent)
    if verdict is None or verdict[0] == 0:
        return
    before = dump_config(change.old or "", change.path.parent)
    if before is not None and before[0] == 0:
        raise EngineConfigError(
            f"containerd rejects the new {change.path}: {verdict[1]}",
            hint="report this as an nvct bug; the file was not changed",
        )


def dump_config(text: str, directory: Path) -> tuple[int, str] | None:
    """``containerd --config <text> config dump``: (exit status, output); None: no containerd."""
    containerd = shutil.which("containerd")
    if containerd is None:
        return None
    with tempfile.TemporaryDirectory(prefix="nvct-containerd-") as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(text)
        try:
            done = subprocess.run(
                [containerd, "--config", str(path), "config", "dump"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
                cwd=directory if directory.is_dir() else None,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return 1, str(err)
    output = done.stdout if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]
    return done.returncode, output if isinstance(output, str) else " ".join(output)


def effective_handler(dump: str, name: str) -> dict[str, Any] | None:
    """The handler ``name`` in a ``config dump`` output (always the newest schema)."""
    data = te.plain(dump)
    for keys in (runtimes_path(3), runtimes_path(2), runtimes_path(1)):
        handler = te.lookup(data, (*keys, name))
        if isinstance(handler, dict):
            return handler
    return None


def next_step(opts: EngineOptions) -> str:
    """How to make containerd read the change."""
    return "systemctl restart containerd"


def checks(opts: EngineOptions) -> list[str]:
    """Warnings: the effective config lacks the handler, or no running containerd reads it."""
    warnings = []
    if opts.config_path.is_file():
        verdict = dump_config(opts.config_path.read_text(), opts.config_path.parent)
        if verdict is not None and verdict[0] == 0:
            handler = effective_handler(verdict[1], opts.runtime_name)
            binary = te.lookup(handler or {}, ("options", "BinaryName"))
            if not opts.undo and binary != opts.runtime_path:
                warnings.append(
                    f"`containerd config dump` does not show runtime {opts.runtime_name!r} with "
                    f"BinaryName {opts.runtime_path}: a file in `imports` replaces the CRI section"
                )
    daemons = running_daemons("containerd")
    readers = [
        pid
        for pid, argv in daemons
        if same_file(flag_value(argv, "--config", "-c") or DEFAULT_CONFIG, opts.config_path)
    ]
    if daemons and not readers:
        warnings.append(
            f"no running containerd reads {opts.config_path} "
            f"(running: {', '.join(str(pid) for pid, _ in daemons[:5])})"
        )
    return warnings
