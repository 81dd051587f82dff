"""``nvct-hook prestart``: the OCI prestart hook (also installed as nvidia-container-runtime-hook).

It serves containers that nvct-runtime did not prepare: ``docker run --gpus`` on plain runc,
podman's hooks.d. It reads the config, the inventory (cached) and builds the plan itself,
creates the device nodes and grants them in the device cgroup (which the shim would
otherwise have put in the spec), then applies the work order inside the container's mount
namespace. Any failure exits 1 with one line on stderr, which the runtime reports, and the
container does not start.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.log import EventLog
    from nvct.base.oci import State
    from nvct.base.order import CacheEntry, DeviceRow, WorkOrder
    from nvct.container.stage import Staged
    from nvct.hook.pinned import Pinned


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the hook stage; only ``prestart`` does work."""
    args = sys.argv[1:] if argv is None else argv
    stage = next((a for a in args if not a.startswith("-")), "")
    if stage in ("poststart", "poststop"):
        return 0
    if stage == "procfs":
        return procfs(args[args.index("procfs") + 1 :])
    if stage != "prestart":
        sys.stderr.write(
            "usage: nvct-hook prestart | procfs PROC_ROOT [ENTRY...]"
            "  (reads the OCI state on stdin)\n"
        )
        return 2
    return prestart()


def procfs(args: list[str]) -> int:
    """createContainer hook (nvct-runtime writes it): cover the container's /proc/driver/nvidia.

    The runtime runs it in the container's mount namespace before the root is pivoted to, so
    it needs no namespace of its own; arguments: the proc root, then the entries of
    ``/proc/driver/nvidia`` to show (``gpus/<bus id>``, ...).
    """
    from nvct.base.errors import NvctError, SpecError
    from nvct.base.oci import load_spec, parse_state, rootfs_path
    from nvct.container.procfs import stage_proc_driver
    from nvct.container.rootfs import Rootfs

    try:
        if not args:
            raise SpecError("nvct-hook procfs needs the proc root as its first argument")
        state = parse_state(sys.stdin.buffer.read())
        spec = load_spec(state.bundle)
        with Rootfs(str(rootfs_path(spec, state.bundle))) as rootfs:
            stage_proc_driver(rootfs, args[0], args[1:])
    except NvctError as err:
        sys.stderr.write(f"nvct-hook: {err.one_line()}\n")
        return err.exit_code
    return 0


def prestart(
    raw_state: bytes | None = None, pinned: Pinned | None = None, native: str | None = None
) -> int:
    """Carry out the container's work order; exit status 0 on success.

    ``raw_state`` is the OCI state (default: stdin); ``pinned``, the container's process as a
    shim daemon's worker pinned it for the native hook (default: found from the state's pid);
    ``native``, the native hook's code id when it asks for a native entry of this kind of
    container, and after a space why it did not do the work itself (default: its
    ``NATIVE_ENV``, which the native hook sets before it runs this).
    """
    from nvct.base.defaults import NATIVE_ENV, native_request
    from nvct.base.errors import NvctError
    from nvct.base.log import EventLog

    if native is None:
        native = os.environ.pop(NATIVE_ENV, None)
    code, declined = native_request(native)

    log = EventLog("nvct-hook", "")
    log.bind(via="daemon" if pinned else "hook")  # who did the work: every event says
    try:
        raw = sys.stdin.buffer.read() if raw_state is None else raw_state
        return _prestart(log, raw, pinned, code, declined)
    except NvctError as err:
        log.fail("hook_failed", err.one_line())
        return err.exit_code
    except Exception as err:  # fail closed with one line, never a traceback
        log.fail("hook_crashed", f"internal error: {type(err).__name__}: {err}")
        return 1
    finally:
        log.flush()


def _prestart(
    log: EventLog, raw: bytes, pinned: Pinned | None, native: str | None, declined: str
) -> int:
    from nvct.base.oci import load_spec, parse_state, rootfs_path

    t0 = time.perf_counter()
    state = parse_state(raw)
    log.bind(container_id=state.container_id, bundle=str(state.bundle))
    spec = load_spec(state.bundle)
    root = str(rootfs_path(spec, state.bundle))
    planned_here = _plan_here(spec, root, log)
    order = planned_here.entry["order"]
    if order is None:
        planned_here.write_native(native, spec, "off")
        return 0
    planned = time.perf_counter()
    in_spec = {
        (d.get("path"), d.get("major"), d.get("minor"))
        for d in (spec.get("linux") or {}).get("devices") or ()
        if isinstance(d, dict)
    }
    missing = [d for d in order["devices"] if (d[0], d[1], d[2]) not in in_spec]
    stats, created, applied_at = _apply(state, root, order, missing, pinned)
    planned_here.write_native(native, spec, stats.cuda_compat)
    log.info(
        "container_configured",
        devices=[d[0] for d in order["devices"]],
        gpus=order.get("gpus", []),
        capabilities=order.get("capabilities", []),
        nodes_created_by_hook=created,
        mounts=stats.mounts,
        symlinks=stats.symlinks,
        symlinks_kept_from_image=stats.skipped_symlinks,
        binary_links=stats.binary_links,
        ld_cache=stats.ld_cache,
        cuda_compat=stats.cuda_compat,
        **({"native_declined": declined} if declined else {}),
        phases_ms={
            "plan": round((planned - t0) * 1000, 2),
            "prepare": round((applied_at[0] - planned) * 1000, 2),
            **stats.phases_ms,
        },
        total_ms=round((time.perf_counter() - t0) * 1000, 2),
    )
    return 0


def _apply(
    state: State, root: str, order: WorkOrder, missing: list[DeviceRow], pinned: Pinned | None
) -> tuple[Staged, int, tuple[float, float]]:
    from nvct.container.apply import create_device_nodes, enter_mount_namespace
    from nvct.container.cgroup import grant_devices
    from nvct.container.procfs import stage_proc_driver
    from nvct.container.rootfs import Rootfs
    from nvct.container.stage import stage_rootfs

    start = time.perf_counter()
    if pinned is None:
        grant_devices(state.pid, missing)  # host namespace: the cgroup fs as the host sees it
        granted = time.perf_counter()
        enter_mount_namespace(state.pid)
    else:  # what was read of the process while it was pinned, never its pid again
        grant_devices(state.pid, missing, cgroup_lines=pinned.cgroup_lines)
        granted = time.perf_counter()
        pinned.enter_mount_namespace()
    entered = time.perf_counter()
    with Rootfs(root) as rootfs:
        created = create_device_nodes(rootfs, missing)
        made = time.perf_counter()
        staged = stage_rootfs(rootfs, order, bind_mounts=True)
        # Where the rest of the hook's time goes, beside stage_rootfs's own phases.
        staged.phases_ms.update(
            cgroup=round((granted - start) * 1000, 2),
            enter=round((entered - granted) * 1000, 2),
            nodes=round((made - entered) * 1000, 2),
        )
        if order["proc_driver"] is not None:
            try:
                stage_proc_driver(rootfs, *order["proc_driver"])
            except BaseException:
                if staged.ldconfig is not None:  # never left running over a failed hook
                    staged.ldconfig.kill()
                raise
        if staged.ldconfig is not None:
            waited = time.perf_counter()
            staged.ldconfig.wait()
            staged.lap("ldconfig", waited)
    return staged, created, (start, time.perf_counter())


class _Planned:
    """A container's cache entry as the hook found or planned it, and what its native entry
    needs."""

    __slots__ = ("cache_dir", "cached", "debian", "entry", "path", "raw")

    def __init__(
        self, entry: CacheEntry, cached: bool, cache_dir: str | None, path: str, raw: bytes,
        debian: bool,
    ) -> None:  # fmt: skip
        self.entry, self.cached, self.cache_dir = entry, cached, cache_dir
        self.path, self.raw, self.debian = path, raw, debian

    def write_native(self, native: str | None, spec: dict[str, Any], why_compat: str) -> None:
        """Write the native hook's entry of this kind of container (``native_entry``, HOOK),
        when the native hook asked for one; never fails the hook (an optimisation)."""
        if not native or not self.cache_dir:
            return
        try:
            from nvct.plan.native_entry import HOOK, native_key, save_entry

            key = native_key(native, self.path, self.raw, self.debian, spec, HOOK)
        except Exception:  # the next container of this kind is Python's again
            return
        if key is not None:
            save_entry(key, self.entry, self.cached, self.cache_dir, [], why_compat, HOOK)


def _plan_here(spec: dict[str, Any], root: str, log: EventLog) -> _Planned:
    """The cache entry when no shim planned this container (``docker --gpus``): the cached one
    of an identical earlier container, else a full planning pass (cached for the next)."""
    from nvct.base.defaults import config_path
    from nvct.plan.cached import cached_entry, read_config

    path, required = config_path()
    raw = read_config(path, required)
    debian = _debian(root)
    entry, cached, cache_dir, _ = cached_entry(spec, path, raw, None, debian, hook=True)
    log.configure(*entry["log"])
    for line in entry.get("ignored", ()):
        log.info("nvidia_input_ignored", why=line)
    if entry["order"] is None:
        log.debug("no_gpu_requested", decisions=entry.get("decisions", []), cached=cached)
    return _Planned(entry, cached, cache_dir, path, raw, debian)


def _debian(root: str) -> bool:
    """Whether the image is Debian-like (the order key's layout; ``RootfsLayout.debian``),
    read without the planner's modules: a cached order needs none of them."""
    from nvct.container.rootfs import Rootfs

    with Rootfs(root) as rootfs:
        return rootfs.exists("/etc/debian_version")


if __name__ == "__main__":
    sys.exit(main())
