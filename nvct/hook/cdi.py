"""The createContainer hook of nvct's CDI specs: symlinks and the ld.so.cache in the container.

``nvct-cdi-hook [--ldconfig PATH] [--symlink TARGET::LINK]... [--ldconfig-dir
DIR]... [--ld-conf DIR]...`` with the OCI state on stdin. A createContainer hook runs in the
container's mount namespace after the spec's mounts are made and before pivot_root, so the
rootfs path of ``<bundle>/config.json`` (or the ``root`` field crun adds to the state) is the
container's root as seen from here. Every path is resolved inside it (``Rootfs``).

The ld.so.cache is made as nvct-runtime makes it: the entries ldconfig would add for the
spec's libraries (``CDI_LD_CACHE_ENV`` in the hook's environment, written by the spec's
planner) merged into the image's own cache, in ldconfig's order; the host's ldconfig, run
chrooted over ``--ldconfig-dir``, only where they cannot be (no entries, no cache in the
image, or one the merge cannot match ldconfig on: ``nvct.base.ldcache_format``). The
``--ld-conf`` directories (the driver's libraries bound as one directory) are listed in the
container's ``/etc/ld.so.conf.d``, as nvct-runtime lists them, so that an ldconfig the
container runs later keeps them.

Imports stay minimal (no ``json``, ``re``, ``dataclasses`` or ``pathlib``): this runs for
every CDI container start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from nvct.container.rootfs import Rootfs

USAGE = (
    "usage: nvct-cdi-hook [--ldconfig PATH] [--symlink TARGET::LINK]... "
    "[--ldconfig-dir DIR]... [--ld-conf DIR]...  (reads the OCI state on stdin)"
)


class HookArgs:
    """The hook's command line."""

    __slots__ = ("ld_conf", "ldconfig", "ldconfig_dirs", "symlinks")

    def __init__(self) -> None:
        self.ldconfig = "/sbin/ldconfig"
        self.symlinks: list[tuple[str, str]] = []  # (target, link)
        self.ldconfig_dirs: list[str] = []
        self.ld_conf: list[str] = []


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
        elif flag in ("--ldconfig-dir", "--ld-conf"):
            if not value.startswith("/") or "\n" in value:
                raise ValueError(f"{flag} wants an absolute path, got {value!r}")
            (args.ldconfig_dirs if flag == "--ldconfig-dir" else args.ld_conf).append(value)
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
    return rootfs_path(load_spec(bundle), bundle)


def run(args: HookArgs, state: dict[str, object]) -> None:
    """Create the symlinks, then the ld.so.cache, inside the container's root."""
    from nvct.container.links import create_symlinks
    from nvct.container.rootfs import Rootfs

    with Rootfs(container_root(state)) as rootfs:
        # Together: each directory is resolved once for all its links (46 of a full spec's).
        create_symlinks(rootfs, [(link, target) for target, link in args.symlinks])
        if args.ld_conf:
            from nvct.container.ld_conf import write_ld_conf_dirs

            write_ld_conf_dirs(rootfs, args.ld_conf)
        if not args.ldconfig_dirs:
            return
        merged = _merged_cache(rootfs)
        if merged is not None:
            from nvct.container.ld_cache import write_ld_cache

            write_ld_cache(rootfs, merged)
            return
        from nvct.container.ldconfig import run_ldconfig

        run_ldconfig(rootfs, args.ldconfig, tuple(args.ldconfig_dirs))


def _merged_cache(rootfs: Rootfs) -> bytes | None:
    """The image's ld.so.cache with the entries of ``CDI_LD_CACHE_ENV``; None: ldconfig must
    make it (no or unreadable entries, no cache in the image, or one the merge declines)."""
    from nvct.base.oci import CDI_LD_CACHE_ENV

    text = os.environ.get(CDI_LD_CACHE_ENV)
    if not text:
        return None  # a spec written before the entries were
    from nvct.base import fastjson
    from nvct.container.ld_cache import merged_image_cache

    try:
        rows = fastjson.loads(text)
        entries = [(str(s), str(p), int(f)) for s, p, f in rows] if isinstance(rows, list) else []
    except (ValueError, TypeError):
        entries = []
    if not entries:
        return None  # not what a spec's planner writes: ldconfig decides
    try:
        return merged_image_cache(rootfs, entries)
    except FileNotFoundError:
        return None  # ldconfig knows what else such an image holds


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 0 on success, 1 with one line on stderr otherwise."""
    os.chdir("/")
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as err:
        sys.stderr.write(f"nvct cdi hook: {err}\n{USAGE}\n")
        return 2
    from nvct.base import fastjson
    from nvct.base.errors import NvctError

    try:
        state = fastjson.loads(sys.stdin.buffer.read(1 << 20) or b"{}")
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
