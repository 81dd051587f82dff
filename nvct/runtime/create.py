"""The shim's ``create``: plan the container's GPUs and prepare its bundle before runc runs.

Everything a GPU container needs is either written into its spec, for the runtime to do, or
done to its rootfs here, before the runtime starts; no hook runs during the container's
start, so a GPU container costs one Python process (this one):

- ``linux.devices`` and device-cgroup allow rules for the device nodes;
- read-only bind ``mounts`` for the driver's libraries, binaries, IPC sockets and firmware
  (the runtime resolves each destination inside the rootfs, as it does for any volume);
- in the rootfs: the SONAME symlinks, and ``/etc/ld.so.cache``: the image's own cache with
  the driver's entries added, in the order ldconfig writes them (``nvct.base.ldcache_format``),
  when that is exactly what ldconfig would make; otherwise rebuilt by the host's ldconfig,
  run chrooted in a private mount namespace where the driver libraries are bind-mounted for
  it alone (``nvct.container.ldconfig``).

When ldconfig had to run and the rootfs is a fresh overlay (see ``nvct.container.overlay``), the
ld.so.cache it made for the same work order over the same image layers is reused: later
containers of that image need no ldconfig run.

The first container of a kind is planned in full (config validation, inventory, request,
requirements, plan); the resulting work order is cached under a key of every input (see
``nvct.plan.order_key``) and revalidated against the driver's fingerprint, so later
identical containers are prepared with the stdlib alone.
"""

from __future__ import annotations

import os
import sys
import time

from nvct.base.defaults import NATIVE_ENV, config_path, native_request
from nvct.base.digest import sha256
from nvct.base.ldcache_format import MAX_SIZE
from nvct.base.log import EventLog
from nvct.base.oci import HOOK_MARK, load_spec, rootfs_path, write_spec
from nvct.container.rootfs import Rootfs, fd_path
from nvct.container.stage import stage_rootfs
from nvct.plan.cached import cached_entry, read_config
from nvct.plan.spec_edits import add_cdi_edits, edit_spec, remove_gpu_hooks
from nvct.runtime.args import RuncArgs
from nvct.store import cache

DEFAULT_HOOK_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.order import CacheEntry, WorkOrder


def prepare_bundle(args: RuncArgs, config_file: str | None, log: EventLog) -> tuple[str, ...]:
    """Prepare ``<bundle>`` for the GPUs its config.json asks for; return the low-level runtimes.

    Raises:
        NvctError: the container must not start (unknown device, failed requirement, ...).
    """
    t0 = time.perf_counter()
    # The native launcher's code id: it asks for a native entry (and runc must not see it).
    native, declined = native_request(os.environ.pop(NATIVE_ENV, None))
    bundle = args.bundle or os.getcwd()
    log.bind(container_id=args.container_id, bundle=bundle)
    spec = load_spec(bundle)
    path, required = config_path(config_file)
    raw = read_config(path, required)
    # The O_NOFOLLOW walk, not openat2: no ctypes to load for a cached create (see Rootfs).
    with Rootfs(rootfs_path(spec, bundle), openat2=False) as rootfs:
        debian = rootfs.exists("/etc/debian_version")
        entry, cached, cache_dir, key = cached_entry(spec, path, raw, config_file, debian)
        # The launcher's key of this spec, taken before any edit (CDI variables replace some).
        nkey = (
            _native_key(native, path, raw, debian, spec) if native and cache_dir and key else None
        )
        log.configure(*entry["log"])
        for line in entry.get("ignored", ()):
            log.info("nvidia_input_ignored", why=line)
        order = entry["order"]
        if order is None:
            # A --gpus hook on a container that asks for nothing would only fail later.
            if remove_gpu_hooks(spec):
                write_spec(bundle, spec)
            log.debug("passthrough_create", decisions=entry.get("decisions", []), cached=cached)
            if nkey and cache_dir:
                _native_entry(nkey, entry, cached, cache_dir, [], "off")
            return tuple(entry["runtimes"])
        planned = time.perf_counter()
        earlier = _EarlierLdCache(rootfs, cache_dir, key, entry)
        staged = stage_rootfs(rootfs, order, bind_mounts=False, reused=earlier.read)
        staged_at = time.perf_counter()
        # The spec is edited while ldconfig runs; the container starts only if both succeed.
        try:
            mounts = [*order["mounts"], *staged.binary_binds]
            create_hooks = _create_hooks(order)
            edit_spec(spec, order["devices"], mounts, create_hooks)
            add_cdi_edits(spec, order)
            write_spec(bundle, spec)
        except BaseException:
            if staged.ldconfig is not None:  # never left running over a refused container
                staged.ldconfig.kill()
            raise
        edited = time.perf_counter()
        if staged.ldconfig is not None:
            staged.ldconfig.wait()
            if cache_dir and earlier.key:
                _remember_ld_cache(rootfs, cache_dir, earlier.key)
        if nkey and cache_dir:
            _native_entry(nkey, entry, cached, cache_dir, create_hooks, staged.cuda_compat)
    done = time.perf_counter()
    log.info(
        "container_prepared",
        devices=[d[0] for d in order["devices"]],
        gpus=entry["gpus"],
        mounts=len(order["mounts"]) + len(staged.binary_binds),
        symlinks=len(order["symlinks"]),
        binary_links=staged.binary_links,
        cached=cached,
        ld_cache=staged.ld_cache,
        cuda_compat=staged.cuda_compat,
        **({"native_declined": declined} if declined else {}),
        phases_ms={
            "plan": _ms(planned - t0),
            "rootfs": _ms(staged_at - planned),  # links; the ld.so.cache, or ldconfig's start
            "spec": _ms(edited - staged_at),
            "ldconfig": _ms(done - edited),  # what is left of it to wait for
        },
        total_ms=_ms(done - t0),
    )
    return tuple(entry["runtimes"])


def _native_key(
    code: str, config_path: str, raw: bytes, debian: bool, spec: dict[str, Any]
) -> bytes | None:
    """The launcher's key of this create's spec (``nvct.plan.native_entry.native_key``)."""
    from nvct.plan.native_entry import native_key

    try:
        return native_key(code, config_path, raw, debian, spec)
    except Exception:  # the entry is an optimisation: a create never fails for it
        return None


def _native_entry(
    native: bytes,
    entry: CacheEntry,
    cached: bool,
    cache_dir: str,
    create_hooks: list[dict[str, Any]],
    why_compat: str,
) -> None:
    """Write the native entry of this kind of create (``nvct.plan.native_entry.save_entry``)."""
    from nvct.plan.native_entry import save_entry

    save_entry(native, entry, cached, cache_dir, create_hooks, why_compat)


def _ld_cache_key(rootfs: Rootfs, cache_dir: str | None, key: str, entry: CacheEntry) -> str | None:
    """The key of the ld.so.cache that ldconfig makes for this work order over this image:
    its layers (a fresh overlay only, see ``nvct.container.overlay``), the work order (config bytes,
    request, nvct), the driver and the ldconfig binary. None when it cannot be reused."""
    if not cache_dir or not key:
        return None
    # Only here, where the image's cache could not be merged: a common create skips its load.
    from nvct.container.overlay import fresh_overlay_identity

    identity = fresh_overlay_identity(os.readlink(fd_path(rootfs.fd)))
    if identity is None:
        return None
    order = entry["order"]
    if order is None:
        return None
    try:
        st = os.stat(order["ldconfig"])
    except OSError:
        return None
    tool = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    parts = (identity, key, entry["fingerprint"], tool)
    return sha256("\0".join(parts).encode()).hexdigest()[:40]


class _EarlierLdCache:
    """What ldconfig made before for this work order over this image: looked up only when
    the image's own cache cannot simply be merged (``choose_ld_cache``); ``key`` is then
    where what ldconfig makes now is kept (None: it cannot be reused)."""

    __slots__ = ("cache_dir", "entry", "key", "order_key", "rootfs")

    def __init__(self, rootfs: Rootfs, cache_dir: str | None, key: str, entry: CacheEntry) -> None:
        self.rootfs, self.cache_dir, self.order_key, self.entry = rootfs, cache_dir, key, entry
        self.key: str | None = None

    def read(self) -> bytes | None:
        self.key = _ld_cache_key(self.rootfs, self.cache_dir, self.order_key, self.entry)
        if not self.cache_dir or not self.key:
            return None
        return cache.read_ld_cache(self.cache_dir, self.key)


def _remember_ld_cache(rootfs: Rootfs, cache_dir: str, reuse: str) -> None:
    """Keep the ld.so.cache ldconfig just wrote, for the next container of this image."""
    try:
        data = rootfs.read_file("/etc/ld.so.cache", MAX_SIZE + 1)
    except OSError:
        return
    cache.write_ld_cache(cache_dir, reuse, data)


def _create_hooks(order: WorkOrder) -> list[dict[str, Any]]:
    """The createContainer hook that covers /proc/driver/nvidia (``nvct-hook procfs``), run as
    ``nvct.engines.hooksd`` runs nvct's hook: this interpreter, isolated (``-IS``: runc runs
    createContainer hooks in the rootfs, which the image's author controls), told where nvct
    is, with only PATH in its environment."""
    if order["proc_driver"] is None or not order.get("proc_driver_in_runtime"):
        return []
    from nvct.base._site import nvct_home

    proc_root, entries = order["proc_driver"]
    code = (
        f"import sys; sys.path.insert(0, {nvct_home()!r}); "
        f"from {HOOK_MARK}.__main__ import main; sys.exit(main())"
    )
    args = [sys.executable, "-IS", "-c", code, "procfs", proc_root, *entries]
    return [{"path": sys.executable, "args": args, "env": [DEFAULT_HOOK_PATH]}]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
