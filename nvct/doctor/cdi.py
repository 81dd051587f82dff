"""CDI specs for ``nvidia.com/gpu``: present, and generated for the running driver version.

The driver version a spec was generated for is read from the spec-level annotation
``nvct.driver-version`` or from the ``NVCT_CDI_DRIVER_VERSION=`` entry of its common
``containerEdits.env`` (what ``nvct-cli cdi generate`` writes); a spec for another version
has stale majors and library paths. A spec for the running version is compared with what
``nvct-cli cdi generate`` would write now (``DoctorContext.cdi_generate``: same kind, device
names and hook): a GPU gone, a changed device node, library or hook makes it stale too. A spec
that names only some of the GPUs (``--device-id``) is current while those devices match.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.cdi.specs import DRIVER_VERSION_ENV, load_spec_file, spec_env, spec_files
from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed, warned

NAME = "cdi-spec"
KIND = "nvidia.com/gpu"
VERSION_ANNOTATION = "nvct.driver-version"


@dataclass(frozen=True, slots=True)
class CdiSpec:
    """A CDI spec file of kind nvidia.com/gpu and the driver version it records."""

    path: Path
    driver_version: str | None
    library_root: str = ""  # where its library directory was made ("": a mount per file)
    missing: tuple[str, ...] = ()  # its library directories that do not exist
    hooks_missing: tuple[str, ...] = ()  # the hook programs it runs that are not executables
    capabilities: str = ""  # its --driver-capabilities ("": every capability)

    def regenerate(self) -> str:
        """The command that writes this spec anew, as it was generated."""
        command = f"nvct-cli cdi generate --output {self.path}"
        if self.library_root:
            command += f" --library-mounts directory --library-dir {self.library_root}"
        if self.capabilities:
            command += f" --driver-capabilities {self.capabilities}"
        return command


def recorded_version(data: dict[str, Any]) -> str | None:
    """The driver version a parsed spec records (annotation, else the common env entry)."""
    annotations = data.get("annotations")
    version = annotations.get(VERSION_ANNOTATION) if isinstance(annotations, dict) else None
    if version is None:
        version = spec_env(data, DRIVER_VERSION_ENV)
    return str(version) if version else None


def find_specs(dirs: tuple[Path, ...]) -> tuple[list[CdiSpec], list[str]]:
    """Specs of kind nvidia.com/gpu in ``dirs``, and the files that could not be read."""
    from nvct.plan.cdi_spec import CAPABILITIES_ENV, library_dir_mounts, library_root

    specs: list[CdiSpec] = []
    errors: list[str] = []
    for directory in dirs:
        try:
            files = spec_files(directory)
        except OSError:
            continue
        for path in files:
            try:
                data = load_spec_file(path)
            except ValueError as err:  # names the file and why
                errors.append(str(err).splitlines()[0][:240])
                continue
            if data.get("kind") == KIND:
                edits = data.get("containerEdits")
                edits = edits if isinstance(edits, dict) else {}
                root = library_root(edits)
                libdirs = library_dir_mounts(edits, root)
                missing = tuple(d for d in libdirs if not os.path.isdir(d))  # a cleaner took it
                hooks = _missing_hooks(edits)
                caps = spec_env(data, CAPABILITIES_ENV) or ""
                specs.append(CdiSpec(path, recorded_version(data), root, missing, hooks, caps))
    return specs, errors


def _missing_hooks(edits: dict[str, Any]) -> tuple[str, ...]:
    """The hook programs the spec's common edits run that are not executables here (a venv
    removed, nvct uninstalled): the engine fails every start that uses the spec."""
    paths = [h.get("path") for h in edits.get("hooks") or () if isinstance(h, dict)]
    return tuple(
        p for p in paths if isinstance(p, str) and not (os.path.isfile(p) and os.access(p, os.X_OK))
    )


def check_cdi(ctx: DoctorContext, driver_version: str | None) -> list[CheckResult]:
    """One result per nvidia.com/gpu spec (or one WARN when there is none)."""
    specs, errors = find_specs(ctx.cdi_dirs)
    dirs = ", ".join(map(str, ctx.cdi_dirs))
    regenerate = "nvct-cli cdi generate --output {}"
    results = [
        failed(NAME, f"unreadable CDI spec {e}", "fix or remove the file; podman refuses all specs")
        for e in errors
    ]
    if not specs:
        results.append(
            warned(
                NAME,
                f"no CDI spec for {KIND} in {dirs}: podman, rootless docker and "
                f"'--device {KIND}=...' need one",
                regenerate.format("/etc/cdi/nvidia.yaml"),
            )
        )
        return results
    for spec in specs:
        fix = spec.regenerate()
        if spec.driver_version is None:
            results.append(
                warned(
                    NAME,
                    f"{spec.path} records no driver version (not generated by nvct?): cannot "
                    "tell whether it matches the driver",
                    fix,
                )
            )
        elif driver_version is None:
            results.append(
                warned(
                    NAME,
                    f"{spec.path} is for driver {spec.driver_version}; the driver's "
                    "version is unknown (see nvml)",
                    fix,
                )
            )
        elif spec.driver_version != driver_version:
            results.append(
                failed(
                    NAME,
                    f"{spec.path} was generated for driver {spec.driver_version}, the driver is "
                    f"{driver_version}: containers would get stale device nodes and libraries",
                    fix,
                )
            )
        elif spec.hooks_missing:
            results.append(
                failed(
                    NAME,
                    f"{spec.path} runs the hook {spec.hooks_missing[0]}, which is not an "
                    "executable here: every container given its devices fails to start",
                    fix,
                )
            )
        elif spec.missing:
            more = f" (and {len(spec.missing) - 1} more)" if len(spec.missing) > 1 else ""
            results.append(
                failed(
                    NAME,
                    f"{spec.path} mounts {spec.missing[0]}{more}, which does not exist: every "
                    "container given its devices fails to start",
                    fix,
                )
            )
        else:
            drift = _drift(ctx, spec.path)
            if drift:
                results.append(
                    failed(
                        NAME,
                        f"{spec.path} is stale: {drift} (against what `nvct-cli cdi generate` "
                        "would write now)",
                        fix,
                    )
                )
            else:
                results.append(passed(NAME, f"{spec.path} is for driver {driver_version}"))
    return results


def _drift(ctx: DoctorContext, path: Path) -> str | None:
    """How the spec at ``path`` differs from what would be generated now (None: it does not,
    or nothing to compare with)."""
    if ctx.cdi_generate is None:
        return None
    try:
        on_disk = load_spec_file(path)
    except ValueError:  # read once already by find_specs; gone or changed since
        return None
    return drift_of(ctx, on_disk)


def drift_of(ctx: DoctorContext, on_disk: dict[str, Any]) -> str | None:
    """How a loaded spec differs from what ``nvct-cli cdi generate`` would write now (None:
    it does not, or nothing to compare with)."""
    expected = ctx.cdi_generate(on_disk) if ctx.cdi_generate is not None else None
    if expected is None:
        return None
    return spec_drift(on_disk, expected)


def spec_drift(on_disk: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """The first difference between a spec on disk and the one generated now, in words."""
    now = {d.get("name"): d.get("containerEdits") for d in expected.get("devices") or ()}
    disk = {
        d.get("name"): d.get("containerEdits")
        for d in on_disk.get("devices") or ()
        if isinstance(d, dict)
    }
    gone = [str(n) for n in disk if n not in now]
    if gone:
        return f"device(s) {', '.join(gone[:4])} no longer exist"
    changed = [str(n) for n, edits in disk.items() if n != "all" and edits != now[n]]
    if changed:
        return f"the edits of device(s) {', '.join(changed[:4])} changed"
    ours, theirs = on_disk.get("containerEdits") or {}, expected.get("containerEdits") or {}
    for key in sorted(set(ours) | set(theirs)):
        if ours.get(key) != theirs.get(key):
            return f"the common {key} changed"
    return None
