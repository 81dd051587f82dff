"""The shim's ``create``: plan the container's GPUs and edit its bundle before runc sees it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nvct.arch import host_arch
from nvct.config import Config, load_config
from nvct.host import load_inventory
from nvct.log import EventLog
from nvct.oci import load_spec, write_spec
from nvct.plan import build_plan
from nvct.request import request_from_spec
from nvct.runtime.args import RuncArgs
from nvct.runtime.spec_edits import edit_spec, hook_entry, remove_gpu_hooks

HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def prepare_bundle(args: RuncArgs, config_file: str | None, log: EventLog) -> Config:
    """Edit ``<bundle>/config.json`` for the GPUs it asks for; raises NvctError on refusal."""
    config = load_config(config_file)
    log.path, log.threshold = config.log_file, log.threshold if config.log_level == "info" else 10
    bundle = Path(args.bundle or os.getcwd())
    log.bind(container_id=args.container_id, bundle=str(bundle))
    spec = load_spec(bundle)
    request = request_from_spec(spec, config)
    if not request.wants_gpu:
        # A --gpus hook on a container that asks for nothing would only fail later.
        if remove_gpu_hooks(spec):
            write_spec(bundle, spec)
        log.debug("passthrough_create", decisions=list(request.decisions))
        return config
    inventory = load_inventory(config)
    plan = build_plan(request, inventory, config, host_arch())
    env = [HOOK_PATH_ENV]
    if config.source != "(defaults)":
        env.append(f"NVCT_CONFIG={config.source}")
    edit_spec(spec, plan, hook_entry(sys.executable, config.hook_path, env))
    write_spec(bundle, spec)
    log.info(
        "spec_modified",
        devices=[d.node.path for d in plan.devices],
        gpus=[s.label for s in plan.selected],
        requirements_checked=len(plan.requirements),
    )
    return config
