"""OCI bundles as ``runc spec`` writes them, and running them under runc (or a runc-like shim).

``make_bundle`` starts from the spec of this host's ``runc spec`` (so the defaults are the ones
runc users get: namespaces including network, masked paths, a deny-all device rule) and changes
only what a non-interactive test needs.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from integration.harness import HarnessError, run_command

__all__ = [
    "DEFAULT_PATH",
    "BundleFactory",
    "make_bundle",
    "minimal_gpu_bundle",
    "run_runc",
    "runc_spec",
]

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class BundleFactory(Protocol):
    """The ``runc_bundle_factory`` fixture: a bundle on a private copy of the glibc rootfs
    (or on ``rootfs`` when given), under the test's tmp_path."""

    def __call__(
        self,
        args: Sequence[str],
        env: Sequence[str] = (),
        *,
        extra: Mapping[str, Any] | None = None,
        rootfs: Path | None = None,
    ) -> Path: ...


@functools.cache
def _runc_spec_text() -> str:
    runc = shutil.which("runc")
    if runc is None:
        raise HarnessError("needs runc: apt-get install runc")
    with tempfile.TemporaryDirectory(prefix="nvct-spec-") as scratch:
        run_command([runc, "spec"], cwd=Path(scratch))
        return (Path(scratch) / "config.json").read_text()


def runc_spec() -> dict[str, Any]:
    """A fresh copy of ``runc spec``'s config.json."""
    spec: dict[str, Any] = json.loads(_runc_spec_text())
    return spec


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge ``extra`` into ``base``: dicts recursively, anything else replaces."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _with_env(env: Sequence[str]) -> list[str]:
    merged: dict[str, str] = {}
    for entry in (DEFAULT_PATH, *env):
        merged[entry.partition("=")[0]] = entry
    return list(merged.values())


def make_bundle(
    bundle: Path,
    rootfs: Path,
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``bundle``/config.json for ``args`` run in ``rootfs``; return ``bundle``.

    From ``runc spec``: ``process.args`` = ``args``, ``process.env`` = default PATH plus ``env``
    (``KEY=value``, later wins), no terminal, ``root.path`` = absolute ``rootfs``, writable.
    ``extra`` is merged last (dicts recursively, other values replace), e.g.
    ``{"hooks": {"prestart": [...]}}`` or ``{"process": {"user": {"uid": 1000, "gid": 1000}}}``.
    """
    spec = runc_spec()
    spec["process"]["args"] = list(args)
    spec["process"]["env"] = _with_env(env)
    spec["process"]["terminal"] = False
    spec["root"] = {"path": str(rootfs.resolve()), "readonly": False}
    if extra:
        _merge(spec, extra)
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(spec, indent=2) + "\n")
    return bundle


def minimal_gpu_bundle(bundle: Path, devices: str = "1") -> Path:
    """The least bundle an nvct create prepares: ``sh`` in an empty ``rootfs`` (with /etc)
    asking for ``NVIDIA_VISIBLE_DEVICES=devices``, for a create whose runc is a fake."""
    (bundle / "rootfs/etc").mkdir(parents=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": ["PATH=/bin", f"NVIDIA_VISIBLE_DEVICES={devices}"], "args": ["sh"]},
        "root": {"path": "rootfs"},
        "mounts": [],
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def run_runc(
    bundle: Path,
    container_id: str,
    *,
    runtime: str | os.PathLike[str] = "runc",
    global_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``<runtime> [global_args] run --bundle B ID``, output captured, exit status not checked.

    ``runtime`` is runc or anything taking runc's argv (crun, ``nvct-runtime``); ``env`` replaces
    its environment. The container is always deleted afterwards (``delete -f`` through the same
    runtime, then through runc), so none is left even on timeout (``CommandFailed``).
    """
    runtime = os.fspath(runtime)
    try:
        return run_command(
            [runtime, *global_args, "run", "--bundle", str(bundle), container_id],
            env=env,
            timeout=timeout,
            check=False,
        )
    finally:
        run_command(
            [runtime, *global_args, "delete", "-f", container_id],
            env=env,
            timeout=30,
            check=False,
        )
        if Path(runtime).name != "runc" and shutil.which("runc"):
            run_command(
                ["runc", *global_args, "delete", "-f", container_id], timeout=30, check=False
            )
