"""NVIDIA's device-plugin settings as nvct's ``[device-plugin]``: its config file (``version:
v1``, YAML or JSON, NVIDIA's api/config/v1), its flags and its environment names.

Everything ends in one ``Mapped``: (NVIDIA key, nvct key, value) for what nvct honours, and
(NVIDIA key, value, why) for what it cannot, so a caller logs every one of those (never a silent
drop). NVIDIA's precedence is the caller's order: file, then environment, then flags, each
mapped here and applied over the last (``apply``).

Where NVIDIA itself ignores a setting (``resources``, a shared resource's ``devices`` and
non-default ``rename``: ``DisableResourceNamingInConfig``), nvct ignores it the same way, and
says so: the same file gives the same resources.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvct.base.errors import ConfigError
from nvct.config import Config, with_table
from nvct.config.kubernetes import ID_STRATEGIES, LIST_STRATEGIES, MIG_STRATEGIES

VERSION = "v1"
KUBELET_SOCKET = "kubelet.sock"  # nvct.node.files' name (the config sits below the node)
PREFIX = "nvidia.com"
NAME_MAX = 63  # NVIDIA's MaxResourceNameLength
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # a DNS subdomain, as NVIDIA checks
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go's strconv.ParseBool, as urfave/cli reads env
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}

# NVIDIA's flags (file key under ``flags``) -> their environment names, first set wins
# (cmd/nvidia-device-plugin/main.go), and how a value is read.
FLAG_ENV: dict[str, tuple[tuple[str, ...], str]] = {
    "migStrategy": (("MIG_STRATEGY",), "str"),
    "failOnInitError": (("FAIL_ON_INIT_ERROR",), "bool"),
    "mpsRoot": (("MPS_ROOT",), "str"),
    "nvidiaDriverRoot": (("NVIDIA_DRIVER_ROOT",), "str"),
    "nvidiaDevRoot": (("NVIDIA_DEV_ROOT",), "str"),
    "gdrcopyEnabled": (("GDRCOPY_ENABLED",), "bool"),
    "gdsEnabled": (("GDS_ENABLED",), "bool"),
    "mofedEnabled": (("MOFED_ENABLED",), "bool"),
    "deviceDiscoveryStrategy": (("DEVICE_DISCOVERY_STRATEGY",), "str"),
    "plugin.passDeviceSpecs": (("PASS_DEVICE_SPECS",), "bool"),
    "plugin.deviceListStrategy": (("DEVICE_LIST_STRATEGY",), "list"),
    "plugin.deviceIDStrategy": (("DEVICE_ID_STRATEGY",), "str"),
    "plugin.cdiAnnotationPrefix": (("CDI_ANNOTATION_PREFIX",), "str"),
    "plugin.nvidiaCTKPath": (("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"), "str"),
    "plugin.containerDriverRoot": (("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), "str"),
    "plugin.sharedDevicesAllocationPolicy": (("SHARED_DEVICES_ALLOCATION_POLICY",), "str"),
}
# Names NVIDIA's plugin (or the GPU operator for it) sets that have no file key; each one set is
# honoured by ``environment`` or named with why.
OTHER_ENV = (
    "KUBELET_SOCKET",
    "CONFIG_FILE",
    "CDI_FEATURE_FLAGS",
    "CDI_DISABLE_HOOKS",
    "IMEX_CHANNEL_IDS",
    "IMEX_REQUIRED",
    "DP_DISABLE_HEALTHCHECKS",
    "DP_ENABLE_HEALTHCHECKS",
    "DEV_ROOT_CTR_PATH",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "CDI_ENABLED",
    "IS_HOST_DRIVER",
)
_WHY_ENV = {
    "CDI_FEATURE_FLAGS": "nvct builds its CDI spec itself (nvct-cli cdi has no NVIDIA "
    "feature flags)",
    "CDI_DISABLE_HOOKS": "nvct's CDI spec runs only nvct-cdi-hook, which it needs",
    "IMEX_CHANNEL_IDS": "nvct's plugin injects no IMEX channel (nvct-runtime does, from "
    "NVIDIA_IMEX_CHANNELS)",
    "IMEX_REQUIRED": "nvct's plugin injects no IMEX channel",
    "NVIDIA_MIG_MONITOR_DEVICES": "not needed: the plugin reads NVML with the node's driver "
    "through driver-root",
    "CDI_ENABLED": "nvct writes its CDI spec whenever device-list-strategy names a cdi- form",
    "IS_HOST_DRIVER": "nvct finds the driver under driver-root either way",
}
_WHY_FLAG = {
    "gdrcopyEnabled": "nvct's plugin gives no GDRCopy device (/dev/gdrdrv) in Allocate",
    "gdsEnabled": "nvct's plugin gives no GPUDirect Storage devices (/dev/nvidia-fs*)",
    "mofedEnabled": "nvct's plugin gives no MOFED devices (/dev/infiniband)",
    "useNodeFeatureAPI": "a GFD setting: nvct-cli labels takes it as --use-node-feature-api "
    "or GFD_USE_NODE_FEATURE_API (chart: nfd.enableNodeFeatureApi)",
    "plugin.nvidiaCTKPath": "nvct's CDI spec runs nvct-cdi-hook ([runtime] hook-path), not "
    "nvidia-cdi-hook",
}


@dataclass(frozen=True, slots=True)
class Mapped:
    """NVIDIA settings as nvct's, and those nvct cannot honour."""

    source: str
    settings: tuple[tuple[str, str, Any], ...] = ()  # (NVIDIA key, nvct dotted key, value)
    unmapped: tuple[tuple[str, Any, str], ...] = ()  # (NVIDIA key, value, why)

    def table(self) -> dict[str, Any]:
        """The ``[device-plugin]`` table the settings make (TOML names, nested tables)."""
        out: dict[str, Any] = {}
        for _, key, value in self.settings:
            if not key.startswith("device-plugin."):
                continue
            _, *tables, name = key.split(".")
            node = out
            for table in tables:
                node = node.setdefault(table, {})
            node[name] = value
        return out

    def top(self) -> dict[str, str]:
        """The top-level keys the settings set (``driver-root``, ``dev-root``)."""
        return {k: v for _, k, v in self.settings if "." not in k}


def invalid(source: str, key: str, value: Any, fix: str) -> ConfigError:
    """One line naming NVIDIA's key, its value and the fix."""
    return ConfigError(f"{source}: {key} = {json.dumps(value)} is invalid", hint=fix)


def read_plugin_config(path: Path) -> Mapped:
    """NVIDIA's plugin config file as nvct's settings.

    Raises:
        ConfigError: unreadable, not YAML/JSON, another version, or a key with a value NVIDIA
            would refuse too (the message names the key and the fix).
    """
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(
            f"cannot read NVIDIA plugin config {path}: {err.strerror}",
            hint="name an existing file with --config-file / CONFIG_FILE",
        ) from err
    return parse_plugin_config(raw, source=str(path))


def parse_plugin_config(raw: bytes, *, source: str) -> Mapped:
    """``read_plugin_config`` on bytes already read.

    Raises:
        ConfigError: as ``read_plugin_config``.
    """
    import yaml  # only here: a YAML config file

    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        first = " ".join(str(err).split())
        raise ConfigError(
            f"{source}: not YAML or JSON: {first}", hint="fix the file's syntax"
        ) from err
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise invalid(source, "(the document)", doc, "write a mapping with version: v1")
    mapper = _Mapper(source)
    version = doc.get("version", VERSION)
    if version != VERSION:
        raise invalid(source, "version", version, "use version: v1")
    for key, value in doc.items():
        if key == "version":
            continue
        if key == "flags":
            mapper.flags(_mapping(source, "flags", value), "flags.")
        elif key == "sharing":
            mapper.sharing(_mapping(source, "sharing", value))
        elif key == "resources":
            if value:
                mapper.drop(
                    "resources",
                    value,
                    "NVIDIA's plugin ignores it too ('not yet "
                    "supported'); the resources keep their default names",
                )
        elif key == "imex":
            imex = _mapping(source, "imex", value)
            if imex.get("channelIDs") or imex.get("required"):
                mapper.drop("imex", imex, _WHY_ENV["IMEX_CHANNEL_IDS"])
        else:
            mapper.drop(key, value, "not a key of NVIDIA's version v1 config (ignored)")
    return mapper.result()


def environment(env: Mapping[str, str], *, ignored_xids: tuple[int, ...]) -> Mapped:
    """NVIDIA's environment names set in ``env`` as nvct's settings; ``ignored_xids`` is the
    list DP_DISABLE/ENABLE_HEALTHCHECKS change (the file's, or the default).

    Raises:
        ConfigError: a value NVIDIA's plugin would refuse (names the variable and the fix).
    """
    mapper = _Mapper("environment")
    flags: dict[str, Any] = {}
    shown: dict[str, str] = {}
    for key, (names, kind) in FLAG_ENV.items():
        name = next((n for n in names if n in env), None)
        if name is None:
            continue
        shown[key] = name
        value = env[name]
        if kind == "bool":
            if value not in _TRUE | _FALSE:
                raise invalid("environment", name, value, "use true or false")
            flags[key] = value in _TRUE
        elif kind == "list":
            flags[key] = [s.strip() for s in value.split(",") if s.strip()]
        else:
            flags[key] = value
    nested: dict[str, Any] = {}
    for key, value in flags.items():
        head, _, tail = key.partition(".")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[key] = value
    mapper.flags(nested, "", names=shown)
    mapper.health(env, ignored_xids)
    if env.get("KUBELET_SOCKET"):
        socket = _abspath(mapper, "KUBELET_SOCKET", env)
        if Path(socket).name != KUBELET_SOCKET:
            mapper.drop(
                "KUBELET_SOCKET",
                socket,
                f"the kubelet's socket is {KUBELET_SOCKET} in "
                "its device-plugins directory; nvct takes that directory",
            )
        mapper.set("KUBELET_SOCKET", "device-plugin.plugin-dir", str(Path(socket).parent))
    for name in OTHER_ENV:
        if name in env and name in _WHY_ENV:
            mapper.drop(name, env[name], _WHY_ENV[name])
    if "DEV_ROOT_CTR_PATH" in env:
        mapper.set("DEV_ROOT_CTR_PATH", "dev-root", _abspath(mapper, "DEV_ROOT_CTR_PATH", env))
    return mapper.result()


def apply(config: Config, mapped: Mapped) -> Config:
    """``config`` with ``mapped``'s settings over it.

    Raises:
        ConfigError: the result is not a valid nvct config (names the source and the key).
    """
    source = f"{mapped.source} (NVIDIA's settings)"
    table = mapped.table()
    if table:
        config = with_table(config, "device-plugin", table, source=source)
    top: dict[str, Any] = {k.replace("-", "_"): Path(v) for k, v in mapped.top().items()}
    return dataclasses.replace(config, **top) if top else config


def _mapping(source: str, key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(source, key, value, f"make {key} a mapping")
    return value


def _abspath(mapper: _Mapper, key: str, env: Mapping[str, Any]) -> str:
    value = env[key]
    if not isinstance(value, str) or not value.startswith("/"):
        raise invalid(mapper.source, key, value, "use an absolute path")
    return value


class _Mapper:
    """Collects (NVIDIA key, nvct key, value) and (NVIDIA key, value, why) for one source."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.settings: list[tuple[str, str, Any]] = []
        self.unmapped: list[tuple[str, Any, str]] = []

    def set(self, key: str, nvct: str, value: Any) -> None:
        self.settings.append((key, nvct, value))

    def drop(self, key: str, value: Any, why: str) -> None:
        self.unmapped.append((key, value, why))

    def result(self) -> Mapped:
        return Mapped(self.source, tuple(self.settings), tuple(self.unmapped))

    def _typed(self, key: str, value: Any, kind: type, fix: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise invalid(self.source, key, value, fix)
        return value

    def _choice(self, key: str, value: Any, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise invalid(self.source, key, value, f"use one of {', '.join(allowed)}")
        return str(value)

    def flags(
        self, flags: dict[str, Any], prefix: str, names: dict[str, str] | None = None
    ) -> None:
        """NVIDIA's ``flags`` (file keys; ``names``: the environment name each came from)."""
        plugin = _mapping(self.source, f"{prefix}plugin", flags.get("plugin"))
        items = [(k, v) for k, v in flags.items() if k not in ("plugin", "gfd")]
        items += [(f"plugin.{k}", v) for k, v in plugin.items()]
        if flags.get("gfd"):
            self.drop(f"{prefix}gfd", flags["gfd"], "GFD's settings: nvct-cli labels has its own")
        for key, value in items:
            shown = (names or {}).get(key, f"{prefix}{key}")
            if value is None:  # YAML's null: NVIDIA's default
                continue
            self._flag(key, shown, value)

    def _flag(self, key: str, shown: str, value: Any) -> None:
        dp = "device-plugin."
        if key == "migStrategy":
            self.set(shown, dp + "mig-strategy", self._choice(shown, value, MIG_STRATEGIES))
        elif key == "failOnInitError":
            self.set(shown, dp + "fail-on-init-error", self._bool(shown, value))
        elif key == "plugin.passDeviceSpecs":
            self.set(shown, dp + "pass-device-specs", self._bool(shown, value))
        elif key == "mpsRoot":
            if value != "":
                self.set(shown, dp + "sharing.mps-root", self._path(shown, value))
        elif key == "nvidiaDriverRoot":
            self.set(shown, dp + "host-driver-root", self._path(shown, value))
        elif key == "nvidiaDevRoot":
            if value != "":  # NVIDIA: empty means the driver root
                self.set(shown, dp + "host-dev-root", self._path(shown, value))
        elif key == "plugin.containerDriverRoot":
            self.set(shown, "driver-root", self._path(shown, value))
        elif key == "plugin.deviceListStrategy":
            listed = [value] if isinstance(value, str) else value
            if not isinstance(listed, list) or not listed:
                raise invalid(self.source, shown, value, "use a strategy or a list of them")
            for item in listed:
                self._choice(shown, item, LIST_STRATEGIES)
            self.set(shown, dp + "device-list-strategy", list(dict.fromkeys(listed)))
        elif key == "plugin.deviceIDStrategy":
            self.set(shown, dp + "device-id-strategy", self._choice(shown, value, ID_STRATEGIES))
        elif key == "plugin.cdiAnnotationPrefix":
            prefix = self._typed(shown, value, str, "use a prefix such as cdi.k8s.io/")
            self.set(shown, dp + "cdi-annotation-prefix", prefix)
        elif key == "deviceDiscoveryStrategy":
            choice = self._choice(shown, value, ("auto", "nvml", "tegra"))
            if choice == "tegra":
                self.drop(shown, value, "nvct discovers GPUs through NVML only (no Tegra/Jetson)")
        elif key == "plugin.sharedDevicesAllocationPolicy":
            policy = self._choice(shown, value, ("distributed", "packed"))
            if policy == "packed":
                self.drop(
                    shown,
                    value,
                    "nvct's preferred allocation spreads shared devices "
                    "over GPUs (NVIDIA's distributed), it has no packed policy",
                )
        elif key in ("gdrcopyEnabled", "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI"):
            if self._bool(shown, value):
                self.drop(shown, value, _WHY_FLAG[key])
        elif key in _WHY_FLAG:
            self.drop(shown, value, _WHY_FLAG[key])
        else:
            self.drop(shown, value, "not one of NVIDIA's plugin flags (ignored)")

    def _bool(self, key: str, value: Any) -> bool:
        return bool(self._typed(key, value, bool, "use true or false"))

    def _path(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.startswith("/"):
            raise invalid(self.source, key, value, "use an absolute path")
        return value

    def sharing(self, sharing: dict[str, Any]) -> None:
        """``sharing.timeSlicing`` / ``sharing.mps`` as nvct's per-GPU rules."""
        slicing = _mapping(self.source, "sharing.timeSlicing", sharing.get("timeSlicing"))
        mps = sharing.get("mps")
        for key in set(sharing) - {"timeSlicing", "mps"}:
            self.drop(f"sharing.{key}", sharing[key], "not a sharing strategy of NVIDIA's")
        if mps is not None:  # NVIDIA: MPS wins over time-slicing when both are given
            if slicing.get("resources"):
                self.drop(
                    "sharing.timeSlicing",
                    slicing,
                    "sharing.mps is set: NVIDIA's plugin uses MPS then, and so does nvct",
                )
            self._replicated("sharing.mps", _mapping(self.source, "sharing.mps", mps), "mps")
        elif slicing:
            self._replicated("sharing.timeSlicing", slicing, "time-slicing")

    def _replicated(self, where: str, spec: dict[str, Any], strategy: str) -> None:
        dp = "device-plugin.sharing."
        rename = spec.get("renameByDefault", False)
        self.set(
            f"{where}.renameByDefault",
            dp + "rename-by-default",
            self._bool(f"{where}.renameByDefault", rename),
        )
        fail = spec.get("failRequestsGreaterThanOne")
        if fail is not None:
            fail = self._bool(f"{where}.failRequestsGreaterThanOne", fail)
            if strategy == "mps" and not fail:
                self.drop(
                    f"{where}.failRequestsGreaterThanOne",
                    fail,
                    "nvct gives an MPS "
                    "replica one per container always (its limits are per client)",
                )
            else:
                self.set(
                    f"{where}.failRequestsGreaterThanOne",
                    dp + "fail-requests-greater-than-one",
                    fail,
                )
        for key in set(spec) - {"renameByDefault", "failRequestsGreaterThanOne", "resources"}:
            self.drop(f"{where}.{key}", spec[key], f"not a key of NVIDIA's {where} (ignored)")
        resources = spec.get("resources")
        if not isinstance(resources, list) or not resources:
            raise invalid(
                self.source,
                f"{where}.resources",
                resources,
                "list the resources to share, e.g. [{name: nvidia.com/gpu, replicas: 4}]",
            )
        rules = [
            self._rule(f"{where}.resources[{i}]", r, strategy, bool(rename))
            for i, r in enumerate(resources)
        ]
        self.set(f"{where}.resources", dp + "gpus", rules)

    def _rule(self, where: str, item: Any, strategy: str, rename: bool) -> dict[str, Any]:
        item = _mapping(self.source, where, item)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(
                self.source,
                f"{where}.name",
                name,
                "name the resource, e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb",
            )
        full = name if name.startswith(f"{PREFIX}/") else f"{PREFIX}/{name}"
        short = full.partition("/")[2]
        if len(full) > NAME_MAX or not _NAME.match(short):
            raise invalid(
                self.source,
                f"{where}.name",
                name,
                f"use a lower-case name of at most {NAME_MAX} characters with {PREFIX}/",
            )
        replicas = item.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
            raise invalid(self.source, f"{where}.replicas", replicas, "use an integer >= 2")
        devices = item.get("devices", "all")
        if devices != "all":
            self._devices(f"{where}.devices", devices)
            self.drop(
                f"{where}.devices",
                devices,
                "NVIDIA's plugin ignores it ('not yet "
                "supported') and shares every device of the resource; so does nvct (for "
                "per-GPU sharing write [[device-plugin.sharing.gpus]] devices)",
            )
        renamed = item.get("rename")
        if renamed not in (None, "") and renamed != (f"{full}.shared" if rename else ""):
            self.drop(
                f"{where}.rename",
                renamed,
                "NVIDIA's plugin ignores it ('not yet "
                "supported'); renameByDefault names the shared resource",
            )
        for key in set(item) - {"name", "replicas", "devices", "rename"}:
            self.drop(f"{where}.{key}", item[key], "not a key of a shared resource (ignored)")
        return {"devices": [full], "strategy": strategy, "replicas": replicas}

    def _devices(self, key: str, devices: Any) -> None:
        """Refuse what NVIDIA refuses: ``all``, a count > 0, or a list of indices/UUIDs."""
        if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
            return
        ok = re.compile(r"^(\d+|\d+:\d+|GPU-[-0-9a-fA-F]+|MIG-[-0-9a-zA-Z/]+)$")
        if isinstance(devices, list) and all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
            or (isinstance(d, str) and ok.match(d))
            for d in devices
        ):
            return
        raise invalid(
            self.source,
            key,
            devices,
            "use all, a count > 0, or a list of GPU indices, MIG indices (0:1) or UUIDs",
        )

    def health(self, env: Mapping[str, str], ignored: tuple[int, ...]) -> None:
        """DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS (NVIDIA's internal/rm/health.go):
        ``all`` or ``xids`` turns the checks off; numbers are XIDs ignored / not ignored."""
        disabled, off = self._xids(env, "DP_DISABLE_HEALTHCHECKS")
        enabled, on = self._xids(env, "DP_ENABLE_HEALTHCHECKS")
        if not ("DP_DISABLE_HEALTHCHECKS" in env or "DP_ENABLE_HEALTHCHECKS" in env):
            return
        dp = "device-plugin."
        if off and not on:
            self.set("DP_DISABLE_HEALTHCHECKS", dp + "health-checks", False)
            return
        kept = () if on else tuple(x for x in (*ignored, *disabled) if x not in enabled)
        self.set("DP_DISABLE_HEALTHCHECKS", dp + "ignored-xids", list(dict.fromkeys(kept)))

    def _xids(self, env: Mapping[str, str], name: str) -> tuple[list[int], bool]:
        out: list[int] = []
        for raw in env.get(name, "").lower().split(","):
            token = raw.strip()
            if token in ("all", "xids"):
                return [], True
            if not token:
                continue
            if not token.isdigit():
                self.drop(name, token, "not an XID number (NVIDIA's plugin skips it too)")
                continue
            out.append(int(token))
        return out, False
