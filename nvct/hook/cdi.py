"""The createContainer hook of nvct's CDI specs: symlinks and ldconfig in the container.

``nvct-cdi-hook [--ldconfig PATH] [--symlink TARGET::LINK]... [--ldconfig-dir
DIR]...`` with the OCI state on stdin. A createContainer hook runs in the container's mount
namespace after the spec's mounts are made and before pivot_root, so the rootfs path of
``<bundle>/config.json`` (or the ``root`` field crun adds to the state) is the container's
root as seen from here. Every path is resolved inside it (``Rootfs``); ldconfig is the host's,
run chrooted. Imports stay minimal: this runs for every CDI container start.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

USAGE = (
    "usage: nvct-cdi-hook [--ldconfig PATH] [--symlink TARGET::LINK]... "
    "[--ldconfig-dir DIR]...  (reads the OCI state on stdin)"
)


@dataclass
class HookArgs:
    """The hook's command line."""

    ldconfig: str = "/sbin/ldconfig"
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (target, link)
    ldconfig_dirs: list[str] = field(default_factory=list)


def parse_args(argv: list[str]) -> HookArgs:
    """Parse the hook's arguments; raises ValueError with a message for the user."""
    args = HookArgs()
    it = iter(argv)
    for flag in it:
        value = next(it, None)
        if value is None:
            raise ValueError(f"{flag} needs a value")
        if flag == "--symlink":
            target, sep, link = value.partition("::")
            if not sep or not target or not link.startswith("/"):
                raise ValueError(f"--symlink wants TARGET::/ABS/LINK, got {value!r}")
            args.symlinks.append((target, link))
        elif flag == "--ldconfig-dir":
            if not value.startswith("/"):
                raise ValueError(f"--ldconfig-dir wants an absolute path, got {value!r}")
            args.ldconfig_dirs.append(value)
        elif flag == "--ldconfig":
            if not value.startswith("/"):
                raise ValueError(f"--ldconfig wants an absolute path, got {value!r}")
            args.ldconfig = value
        else:
            raise ValueError(f"unknown option {flag!r}")
    return args


def container_root(state: dict[str, object]) -> str:
    """The container's rootfs: the state's ``root`` (crun), else ``root.path`` of the bundle."""
    from nvct.base.errors import SpecError
    from nvct.base.oci import load_spec, rootfs_path

    root = state.get("root")
    bundle = state.get("bundle") or state.get("bundlePath")
    if not isinstance(bundle, str) or not bundle.startswith("/"):
        raise SpecError("OCI state on stdin has no absolute bundle path")
    if isinstance(root, str) and root:
        return root if root.startswith("/") else os.path.join(bundle, root)
    from pathlib import Path

    return str(rootfs_path(load_spec(Path(bundle)), Path(bundle)))


def run(args: HookArgs, state: dict[str, object]) -> None:
    """Create the symlinks, then run ldconfig, inside the container's root."""
    from nvct.container.ldconfig import run_ldconfig
    from nvct.container.links import create_symlink
    from nvct.container.rootfs import Rootfs

    with Rootfs(container_root(state)) as rootfs:
        for target, link in args.symlinks:
            create_symlink(rootfs, link, target)
        if args.ldconfig_dirs:
            run_ldconfig(rootfs, args.ldconfig, tuple(args.ldconfig_dirs))


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 0 on success, 1 with one line on stderr otherwise."""
    os.chdir("/")
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as err:
        sys.stderr.write(f"nvct cdi hook: {err}\n{USAGE}\n")
        return 2
    from nvct.base.errors import NvctError

    try:
        state = json.loads(sys.stdin.buffer.read(1 << 20) or b"{}")
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        sys.stderr.write(f"nvct cdi hook: OCI state on stdin is not JSON ({err})\n")
        return 1
    try:
        run(args, state)
    except NvctError as err:
        sys.stderr.write(f"nvct cdi hook: {err.one_line()}\n")
        return err.exit_code
    except OSError as err:
        sys.stderr.write(f"nvct cdi hook: {err}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
