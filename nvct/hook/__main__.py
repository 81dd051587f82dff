"""``nvct-hook prestart``: the OCI prestart hook (also installed as nvidia-container-runtime-hook).

Hot path: only the stdlib and nvct's own small modules are imported here; discovery
(pyelftools, pynvml) runs only when the inventory cache misses, jsonschema only when the
config file changed. Any failure exits 1 with one line on stderr, which the runtime
reports, and the container does not start.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvct.config import Config
    from nvct.log import EventLog


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the hook stage; only ``prestart`` does work."""
    args = sys.argv[1:] if argv is None else argv
    stage = next((a for a in args if not a.startswith("-")), "")
    if stage in ("poststart", "poststop"):
        return 0
    if stage != "prestart":
        sys.stderr.write("usage: nvct-hook prestart  (reads the OCI state on stdin)\n")
        return 2
    return prestart()


def prestart() -> int:
    """Build the container's plan and carry it out; exit status 0 on success."""
    from nvct.config import load_config
    from nvct.errors import NvctError
    from nvct.log import EventLog

    log = EventLog("nvct-hook", "")
    try:
        config = load_config()
        log = EventLog("nvct-hook", config.log_file, config.log_level)
        return _prestart(config, log)
    except NvctError as err:
        log.fail("hook_failed", err.one_line())
        return err.exit_code
    except Exception as err:
        log.fail("hook_crashed", f"internal error: {type(err).__name__}: {err}")
        return 1
    finally:
        log.flush()


def _prestart(config: Config, log: EventLog) -> int:
    from nvct.arch import host_arch
    from nvct.hook.apply import apply_plan, create_device_nodes, enter_mount_namespace
    from nvct.hook.cgroup import grant_devices
    from nvct.hook.rootfs import Rootfs
    from nvct.host import load_inventory
    from nvct.oci import load_spec, parse_state, rootfs_path
    from nvct.plan import RootfsLayout, build_plan
    from nvct.request import request_from_spec

    t0 = time.perf_counter()
    phases: dict[str, float] = {}

    def phase(name: str, start: float) -> float:
        now = time.perf_counter()
        phases[name] = round((now - start) * 1000, 2)
        return now

    state = parse_state(sys.stdin.buffer.read())
    log.bind(container_id=state.container_id, bundle=str(state.bundle))
    spec = load_spec(state.bundle)
    request = request_from_spec(spec, config)
    t = phase("request", t0)
    if not request.wants_gpu:
        log.debug("no_gpu_requested", decisions=list(request.decisions))
        return 0
    inventory = load_inventory(config)
    t = phase("inventory", t)
    root = rootfs_path(spec, state.bundle)
    with Rootfs(str(root)) as host_view:
        layout = RootfsLayout(debian=host_view.exists("/etc/debian_version"))
    plan = build_plan(request, inventory, config, host_arch(), layout)
    t = phase("plan", t)
    in_spec = {
        (d.get("path"), d.get("major"), d.get("minor"))
        for d in (spec.get("linux") or {}).get("devices") or ()
        if isinstance(d, dict)
    }
    missing = [
        d.node for d in plan.devices if (d.node.path, d.node.major, d.node.minor) not in in_spec
    ]
    grant_devices(state.pid, missing)
    enter_mount_namespace(state.pid)
    with Rootfs(str(root)) as rootfs:
        created = create_device_nodes(rootfs, missing)
        stats = apply_plan(plan, rootfs, str(config.ldconfig))
    phase("apply", t)
    log.info(
        "container_configured",
        devices=[d.node.path for d in plan.devices],
        gpus=[s.gpu.uuid if s.mig is None else s.mig.uuid for s in plan.selected],
        capabilities=sorted(request.capabilities),
        nodes_created_by_hook=created,
        mounts=stats.mounts,
        symlinks=stats.symlinks,
        symlinks_kept_from_image=stats.skipped_symlinks,
        phases_ms=phases,
        total_ms=round((time.perf_counter() - t0) * 1000, 2),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
