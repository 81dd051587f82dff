"""The Kubernetes wing's tables: ``[device-plugin]`` (with ``[device-plugin.sharing]`` and its
``[[device-plugin.sharing.gpus]]`` rules) and ``[exporter]``, each key declared once
(``nvct.config.declare``).

A new device-plugin setting is one ``key()`` line in ``DevicePlugin`` (plus its use): the schema,
the loader, the shipped file's check (``tests/config/test_config.py``), the flag (``flag=``) and the
status file's record (``recorded=True``) follow from it.
"""

from __future__ import annotations

from nvct.base.defaults import DEFAULT_PLUGIN_DIR
from nvct.config.declare import Table, key, section, table

# The tables are declared by @section: frozen dataclasses whose __init__, equality, hash and
# repr come from Table, none compiled at import (the hook and the shim import them).

# How MIG devices are advertised (nvct.node.devices): not, as nvidia.com/gpu, or per profile.
MIG_STRATEGIES = ("none", "single", "mixed")
ID_STRATEGIES = ("uuid", "index")  # what a container is told of its devices (allocate)
LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
SHARING_STRATEGIES = ("time-slicing", "mps")
REPLICAS_OF_ONE_GPU = ("error", "warn")

_ABSPATH = {"type": "string", "pattern": "^/"}
_ABSPATH_OR_EMPTY = {"type": "string", "pattern": "^(/.*)?$"}
_BOOLEAN = {"type": "boolean"}
_RESOURCE = {"type": "string", "pattern": "^nvidia\\.com/[a-z0-9]([-a-z0-9_.]{0,50}[a-z0-9])?$"}


@section
class SharingRule(Table):
    """One ``[[device-plugin.sharing.gpus]]`` entry: which GPUs, how they are shared (what
    needs the GPUs is checked by ``nvct.node.sharing.plan_sharing``)."""

    # "all", indices ("0", "1:0"), UUIDs, product names or a resource ("nvidia.com/gpu")
    devices: tuple[str, ...] = key(
        schema={"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
    )
    strategy: str = key("time-slicing", {"enum": list(SHARING_STRATEGIES)})
    replicas: int = key(schema={"type": "integer", "minimum": 2})
    rename: bool | None = key(None, _BOOLEAN)  # None: rename-by-default
    resource: str | None = key(None, _RESOURCE)  # a resource of this rule's own (whole GPUs)
    # mps; None: the GPU's memory / replicas
    pinned_memory_mib: int | None = key(None, {"type": "integer", "minimum": 1})
    # mps; None: 100 / replicas
    active_thread_percentage: int | None = key(
        None, {"type": "integer", "minimum": 1, "maximum": 100}
    )


@section
class Sharing(Table):
    """``[device-plugin.sharing]``: which GPUs are shared, and how the plugin answers for them."""

    rename_by_default: bool = key(False, _BOOLEAN)
    fail_requests_greater_than_one: bool = key(False, _BOOLEAN)
    replicas_of_one_gpu: str = key("error", {"enum": list(REPLICAS_OF_ONE_GPU)})
    mps_root: str = key(
        "/run/nvct/mps",
        _ABSPATH,
        flag="Where each MPS daemon's pipe, log and shm directories go.",
        path="dir",
        absolute=True,  # containers mount from it: never relative
    )
    gpus: tuple[SharingRule, ...] = key((), items=SharingRule)


@section
class DevicePlugin(Table):
    """``[device-plugin]``: nvct-device-plugin, and what ``nvct-cli labels`` and doctor take
    it to advertise."""

    mig_strategy: str = key(
        "none", {"enum": list(MIG_STRATEGIES)}, flag="How MIG devices are advertised.",
        recorded=True,
    )  # fmt: skip
    device_id_strategy: str = key(
        "uuid", {"enum": list(ID_STRATEGIES)}, flag="What a container is told of its devices.",
        recorded=True,
    )  # fmt: skip
    device_list_strategy: tuple[str, ...] = key(
        ("cdi-cri",),
        {"type": "array", "minItems": 1, "items": {"enum": list(LIST_STRATEGIES)}},
        flag="How an answer names the devices.",
        recorded=True,
    )
    plugin_dir: str = key(
        DEFAULT_PLUGIN_DIR, _ABSPATH, flag="The kubelet's device-plugins directory.", path="dir"
    )
    cdi_spec_dir: str = key(
        "/var/run/cdi", _ABSPATH, flag="Where the plugin's CDI spec goes.", path="dir",
        recorded=True,
    )  # fmt: skip
    host_driver_root: str = key("", _ABSPATH_OR_EMPTY, recorded=True)
    host_dev_root: str = key("", _ABSPATH_OR_EMPTY)  # "": host_driver_root (NVIDIA's default)
    runtime_config: str = key("", _ABSPATH_OR_EMPTY)  # the node's nvct-runtime config, seen here
    sysfs_root: str = key("/sys", _ABSPATH, flag="Where NUMA nodes are read.", path="dir")
    fail_on_init_error: bool = key(True, _BOOLEAN, flag="Exit 1 when NVML fails at start.")
    quiet_period: float = key(
        30.0, {"type": "number", "minimum": 0}, flag="Seconds an XID keeps a GPU Unhealthy.",
        recorded=True,
    )  # fmt: skip
    ignored_xids: tuple[int, ...] = key(
        (13, 31, 43, 45, 68, 109), {"type": "array", "items": {"type": "integer"}}, recorded=True
    )
    # false: no health watcher, every device stays Healthy (NVIDIA's DP_DISABLE_HEALTHCHECKS=all)
    health_checks: bool = key(True, _BOOLEAN, recorded=True)
    pass_device_specs: bool = key(
        False,
        _BOOLEAN,
        flag="Name the device nodes in Allocate's devices (the kubelet's CPU manager needs it).",
        recorded=True,
    )
    cdi_annotation_prefix: str = key(
        "cdi.k8s.io/",
        {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/$"},
        flag="The key prefix of the cdi-annotations answer.",
        recorded=True,
    )
    sharing: Sharing = table(Sharing)


@section
class Exporter(Table):
    """``[exporter]``: ``nvct-cli exporter``, GPU metrics with pod labels."""

    # a node exporter is scraped from the cluster
    address: str = key("0.0.0.0", {"type": "string"}, flag="Listen address.")  # noqa: S104
    port: int = key(
        9400, {"type": "integer", "minimum": 0, "maximum": 65535}, flag="Listen port (0: any)."
    )
    interval: float = key(
        10.0,
        {"type": "number", "minimum": 0.1},
        flag="Seconds between NVML samples; a scrape serves the latest sample.",
    )
    kubernetes: bool = key(
        True, _BOOLEAN, flag="Pod, namespace and container labels from the kubelet."
    )
    pod_resources_socket: str = key(
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        _ABSPATH,
        flag="The kubelet's pod-resources socket.",
        path="file",
    )
    extra_resources: tuple[str, ...] = key(
        (), {"type": "array", "items": {"type": "string", "minLength": 1}}
    )
    hostname: str = key(
        "", {"type": "string"}, flag="The Hostname label ('': $NODE_NAME, else the host name)."
    )
    # off by default, as dcgm-exporter's --kubernetes-virtual-gpus: it needs the host PID
    # namespace and the runtime's socket (README, Metrics)
    per_pod_usage: bool = key(
        False,
        _BOOLEAN,
        flag="On a shared GPU, each pod's own SM % and memory (its processes, through NVML and "
        "the runtime's CRI; needs the host PID namespace) in place of the GPU's.",
    )
    cri_socket: str = key(
        "/run/containerd/containerd.sock",
        _ABSPATH,
        flag="The container runtime's CRI socket (which pod a GPU process belongs to).",
        path="file",
    )
    xid_count_window: float = key(
        300.0,
        {"type": "number", "minimum": 1},
        flag="Seconds of XIDs DCGM_EXP_XID_ERRORS_COUNT counts (dcgm-exporter's "
        "--xid-count-window-size, in s).",
    )
