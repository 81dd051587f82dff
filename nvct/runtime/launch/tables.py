"""What the launchers (launcher.c, launcher.sh) and the Python shim must agree on, taken from the
Python constants; ``nvct.runtime.launch.build`` writes them into each launcher it builds.

If a launcher's GPU markers fell behind the shim's request inputs, a GPU container would be
exec'd straight to runc without its GPUs; if its runc flags did, it would read the wrong bundle.
Generating them means no copy can drift.
"""

from __future__ import annotations

import posixpath

from nvct.base.oci import HOOK_MARK, REPLACED_HOOKS
from nvct.request.inputs import CDI_ANNOTATION_PREFIX, DEVICE_MOUNT_DIR, GPU_ENV
from nvct.runtime.args import BUNDLE_FLAGS, GLOBAL_VALUE_FLAGS, SUB_VALUE_FLAGS
from nvct.runtime.lowlevel import DEFAULT_DIRS, DEFAULT_RUNTIMES


def request_markers() -> tuple[str, ...]:
    """Strings one of which is in every config.json that may ask for a GPU (its request's
    inputs, ``nvct.request.inputs``); the native prestart hook ends at once on a spec with
    none, as the Python hook would after planning."""
    mount_dir = posixpath.basename(DEVICE_MOUNT_DIR.rstrip("/"))
    return (*GPU_ENV, mount_dir, CDI_ANNOTATION_PREFIX)


def gpu_markers() -> tuple[str, ...]:
    """The request markers, and the GPU hooks the shim replaces (a spec carrying one is the
    shim's to rewrite): a create whose spec has none is exec'd to runc directly."""
    return (*request_markers(), *replaced_hooks(), HOOK_MARK)


def global_value_flags() -> tuple[str, ...]:
    """runc's global flags that take a value (``--name`` form; runc also takes ``-name``)."""
    return tuple(f"--{name}" for name in sorted(GLOBAL_VALUE_FLAGS))


def bundle_flags() -> tuple[str, ...]:
    """The subcommand flags that name the bundle."""
    return tuple(f"--{name}" for name in sorted(BUNDLE_FLAGS))


def sub_value_flags() -> tuple[str, ...]:
    """The other subcommand flags that take a value."""
    return tuple(f"--{name}" for name in sorted(SUB_VALUE_FLAGS - BUNDLE_FLAGS))


def search_dirs() -> tuple[str, ...]:
    """Where a low-level runtime is looked for after ``$PATH``."""
    return DEFAULT_DIRS


def runtimes() -> tuple[str, ...]:
    """The low-level runtimes tried in order when the config names none."""
    return DEFAULT_RUNTIMES


def replaced_hooks() -> tuple[str, ...]:
    """The prestart hooks a create replaces (by program name): the native create leaves a spec
    holding one to the shim, which removes it."""
    return tuple(sorted(REPLACED_HOOKS))


def ipc_paths() -> tuple[str, ...]:
    """The driver's IPC endpoints the fingerprint stats, in its order
    (``nvct.host.fingerprint.fingerprint_parts``)."""
    from nvct.host.fingerprint import IPC_STATS

    return IPC_STATS
