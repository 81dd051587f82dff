"""The native entry of a cached create: a kind of container the shim has prepared, written so
that nvct-runtime's launcher prepares the next one of that kind itself, with no interpreter
(``nvct/runtime/launch/native.h`` reads it; its top comment says when it hands a create back).

The launcher asks for one by putting its code id in ``NATIVE_ENV``; the shim (in a daemon
worker or started by the launcher) writes it under ``<cache-dir>/native/`` after a create it
prepared from a work order (planned, or made from CDI devices; from a cached order only where
the entry is missing or was written with another driver or CDI stamp than now's:
``save_entry``), when the order has nothing the native create does not do (additional groups)
and the spec nothing it leaves to the shim (a device-list mount, an annotation key it cannot
read). The entry holds:

- the key, byte for byte what the launcher builds from the same inputs (``native_key``): the
  file's name is its CRC-32, and the launcher compares the whole key, so two keys that share a
  name only miss;
- the driver's fingerprint as its parts (``fingerprint_parts``), and for a CDI order the CDI
  specs' stamp as its parts (``cdi_stamp_parts``), which the launcher takes again and
  compares, so a changed driver or spec is planned again by the shim;
- what ``edit_spec`` adds to config.json, as JSON text, and what ``stage_rootfs`` makes in the
  rootfs, as NUL-separated fields.

Format: ``nvct-native 1\\n`` then ``<name> <length>\\n<bytes>\\n`` per field.
"""

from __future__ import annotations

import binascii
import os
import time

from nvct.base import fastjson
from nvct.base.atomic import write_atomic
from nvct.base.digest import sha256
from nvct.host.fingerprint import cdi_stamp_parts, fingerprint_of_parts, fingerprint_parts
from nvct.plan.spec_edits import allow_rule, bind_mount, device_entry, same_hook
from nvct.request.inputs import CDI_ANNOTATION_PREFIX, DEVICE_MOUNT_DIR

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from typing import Any

    from nvct.base.order import CacheEntry, MountRow

MAGIC = b"nvct-native 1\n"
KEY_MAGIC = b"nvct-native-key 1"
NATIVE_DIR = "native"
KEY_PREFIXES = ("NVIDIA_", "DOCKER_RESOURCE_")
MAX_ANNOTATION_KEY = 256  # native.h's MAX_ENV_NAME: a longer key it does not read
# Whose entry: the launcher's create, or the prestart hook's (its orders never come from CDI
# specs, and it mounts, makes nodes and grants the cgroup itself: nativehook.h).
CREATE = "create"
HOOK = "hook"


def native_key(
    code: str, config_path: str, raw: bytes, debian: bool, spec: Any, kind: str = CREATE
) -> bytes | None:
    """The key nvct-runtime's launcher (``kind`` CREATE) or nvct-hook (HOOK) builds for ``spec``
    (native.h ``build_key``); None where it hands the work on before it looks for an entry."""
    process = spec.get("process", {})
    if not isinstance(process, dict):
        return None
    chosen: dict[bytes, bytes] = {}
    env = process.get("env")
    if env is not None:
        if not isinstance(env, list):
            return None
        for item in env:
            if not isinstance(item, str) or "\0" in item:
                return None  # the launcher's scanner takes no escaped NUL
            name, sep, _ = item.partition("=")
            if sep and (name.startswith(KEY_PREFIXES) or name == "CUDA_VERSION"):
                try:
                    chosen[name.encode()] = item.encode()  # a later one wins
                except UnicodeEncodeError:
                    return None
    privileged = _privileged(process.get("capabilities"))
    cdi = _cdi_annotations(spec.get("annotations"))
    if privileged is None or cdi is None or not _launcher_reads(spec):
        return None
    parts = [KEY_MAGIC, code.encode(), kind.encode(), config_path.encode()]
    parts.append(b"debian" if debian else b"plain")
    parts.append(b"privileged" if privileged else b"unprivileged")
    variables = b"".join(b"%d:%s" % (len(chosen[k]), chosen[k]) for k in sorted(chosen))
    annotations = b"".join(b"%d:%s" % (len(cdi[k]), cdi[k]) for k in sorted(cdi))
    return b"\0".join([*parts, variables, annotations, raw])


def _cdi_annotations(annotations: Any) -> dict[bytes, bytes] | None:
    """The ``cdi.k8s.io/`` annotations with string values as the launcher keys them
    (``key=value`` by key); None where it hands the create over (a key it cannot read)."""
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        return None
    found: dict[bytes, bytes] = {}
    for key, value in annotations.items():
        try:
            name = key.encode()
            text = value.encode() if isinstance(value, str) else b""
        except UnicodeEncodeError:
            return None
        if not name or len(name) >= MAX_ANNOTATION_KEY or b"\0" in name:
            return None
        if key.startswith(CDI_ANNOTATION_PREFIX) and isinstance(value, str):
            if b"\0" in text:
                return None
            found[name] = name + b"=" + text
    return found


def _privileged(caps: Any) -> bool | None:
    if caps is None:
        return False
    if not isinstance(caps, dict):
        return None  # a list of capabilities: the shim reads that spelling
    bounding = caps.get("bounding")
    if bounding is None:
        return False
    if not isinstance(bounding, list) or not all(isinstance(c, str) for c in bounding):
        return None
    return "CAP_SYS_ADMIN" in bounding


def _launcher_reads(spec: dict[str, Any]) -> bool:
    """Whether the launcher looks for an entry for this spec at all (no device-list mount)."""
    for mount in spec.get("mounts") or ():
        dst = mount.get("destination") if isinstance(mount, dict) else None
        if isinstance(dst, str) and dst.startswith(DEVICE_MOUNT_DIR):
            return False
    return True


def entry_path(cache_dir: str, key: bytes) -> str:
    """Where the entry of ``key`` lives (native.h ``find_entry``): named by the key's CRC-32
    (``binascii`` is built into the interpreter, ~1 µs), which only spreads the entries; the
    launcher compares the whole key."""
    return os.path.join(cache_dir, NATIVE_DIR, f"{binascii.crc32(key):08x}")


def write_native_entry(
    path: str,
    key: bytes,
    entry: CacheEntry,
    stamps: tuple[bytes, bytes, bytes],
    create_hooks: list[dict[str, Any]],
    why_compat: str,
    kind: str = CREATE,
) -> bool:
    """Write the entry of a create (or a prestart hook's work, ``kind`` HOOK) prepared from
    ``entry``, with ``stamps`` (``_stamps(entry)``); False when the launcher could not do its
    work (groups to add) or the entry could not be written."""
    order = entry["order"]
    if order is not None and order.get("additional_gids"):
        return False
    stamp, cdi_dirs, cdi_stamp = stamps
    fields: dict[str, bytes] = {
        "key": key,
        "stamp": stamp,
        "roots": _joined(entry["roots"]),
        "runtimes": _joined(entry["runtimes"]),
        "log": _joined(list(entry["log"])),
    }
    fields.update(_order_fields(order, create_hooks) if order is not None else _PASSTHROUGH)
    fields["cdi-dirs"] = cdi_dirs
    fields["cdi-stamp"] = cdi_stamp
    fields["events"] = _events(entry, why_compat, kind)
    data = bytearray(MAGIC)
    for name, value in fields.items():
        data += b"%s %d\n%s\n" % (name.encode(), len(value), value)
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write_atomic(path, bytes(data), 0o644, durable=False)
    except OSError:
        return False  # a cache is an optimisation
    sweep(os.path.dirname(path), key.split(b"\0", 2)[1])
    return True


def _stamps(entry: CacheEntry) -> tuple[bytes, bytes, bytes] | None:
    """The entry's ``stamp``, ``cdi-dirs`` and ``cdi-stamp`` fields as the host is now (the
    driver's fingerprint parts, the CDI specs' stamp parts, which the launcher takes again);
    None when the driver or the CDI specs changed since ``entry``'s order was planned."""
    driver, dev, proc = entry["roots"]
    parts = fingerprint_parts(driver, dev, proc)
    if fingerprint_of_parts(driver, dev, proc, parts) != entry["fingerprint"]:
        return None
    cdi_dirs: list[str] = []
    cdi_parts: list[str] = []
    if entry.get("cdi"):
        cdi_dirs, stamp = entry["cdi"]
        cdi_parts = cdi_stamp_parts(cdi_dirs)
        if sha256("\0".join(cdi_parts).encode()).hexdigest()[:32] != stamp:
            return None
    return _joined(parts), _joined(cdi_dirs), _joined(cdi_parts)


def save_entry(
    key: bytes,
    entry: CacheEntry,
    cached: bool,
    cache_dir: str,
    hooks: list[dict[str, Any]],
    why_compat: str,
    kind: str = CREATE,
) -> None:
    """Write the native entry of ``key`` when its order was planned now, or the entry there
    is missing or not of the driver and CDI specs of now (``_written``: one read of the
    entry, a few KB); never raises: the entry is an optimisation, and the next container of
    this kind is then Python's again."""
    try:
        where = entry_path(cache_dir, key)
        stamps = _stamps(entry)
        if stamps is None:
            return  # planned with another driver or specs: the next create plans again
        if cached and _written(where, stamps):
            return
        compat = entry["order"].get("cuda_compat") if entry["order"] is not None else None
        if compat:
            from nvct.container.cuda_compat import choose_compat

            # The native programs work only where the image has no compat directory: that
            # reason, whatever this image had.
            why_compat = choose_compat([], compat[0], compat[1])[1]
        write_native_entry(where, key, entry, stamps, hooks, why_compat, kind)
    except Exception:
        return


def _written(path: str, stamps: tuple[bytes, bytes, bytes]) -> bool:
    """Whether the entry at ``path`` was written with ``stamps``' driver fingerprint and CDI
    stamp. A cached order does not say so: another order of this kind (a path that writes no
    entry, or the driver changed and changed back) may have been planned since the entry was
    written, so the order is valid while the entry, of another driver, is not; the launcher
    then hands every create of that kind over ("the driver changed") until it is written
    anew."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    fields = _read_fields(data, (b"stamp", b"cdi-stamp"))
    return (fields.get(b"stamp"), fields.get(b"cdi-stamp")) == (stamps[0], stamps[2])


def _read_fields(data: bytes, wanted: tuple[bytes, ...]) -> dict[bytes, bytes]:
    """The ``wanted`` fields of an entry's bytes (``<name> <length>\\n<bytes>\\n`` each after
    MAGIC); what cannot be read is left out."""
    found: dict[bytes, bytes] = {}
    at = len(MAGIC) if data.startswith(MAGIC) else len(data)
    while at < len(data) and len(found) < len(wanted):
        line_end = data.find(b"\n", at)
        name, _, length = data[at:line_end].partition(b" ")
        if line_end < 0 or not length.isdigit():
            break
        start = line_end + 1
        at = start + int(length) + 1
        if name in wanted:
            found[name] = data[start : at - 1]
    return found


STALE_S = 3600


def sweep(directory: str, code: bytes) -> int:
    """Remove the entries of other launchers' code (an upgrade's leftovers: no launcher that
    could read them is installed) once they are an hour old; how many went. Run when an entry
    is written, that is once per kind of container and driver, never on a create's hot path."""
    head = len(MAGIC) + 32  # "key <length>\n": the key's first fields come after it
    prefix = KEY_MAGIC + b"\0"
    gone = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    now = time.time()
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as f:
                start = f.read(head + len(prefix) + 64)
                age = now - os.fstat(f.fileno()).st_mtime
        except OSError:
            continue
        key = start[start.find(b"\n", len(MAGIC)) + 1 :] if start.startswith(MAGIC) else b""
        if key.startswith(prefix) and key[len(prefix) :].split(b"\0", 1)[0] == code:
            continue
        if age > STALE_S:  # another launcher's, or not an entry at all
            try:
                os.unlink(path)
                gone += 1
            except OSError:
                continue
    return gone


_ORDER_FIELDS = (
    "binds", "nodes", "proc", "mounts", "mount-dsts", "devices", "device-paths", "rules",
    "majors", "hooks", "symlinks", "binlinks", "libdirs", "ld-conf", "ld-cache", "compat",
    "env", "env-names", "cdi-hooks",
)  # fmt: skip
_PASSTHROUGH = dict.fromkeys(_ORDER_FIELDS, b"")


def _joined(items: list[str]) -> bytes:
    return "\0".join(items).encode()


def _elements(items: list[Any]) -> bytes:
    return ",".join(fastjson.dumps(i) for i in items).encode()


def _order_fields(order: Any, create_hooks: list[dict[str, Any]]) -> dict[str, bytes]:
    """What ``edit_spec`` and ``stage_rootfs`` do for ``order``, as the launcher takes it."""
    mounts: list[MountRow] = []
    seen: set[tuple[str, str]] = set()
    for source, target, options in order["mounts"]:
        if (source, target) not in seen:
            seen.add((source, target))
            mounts.append((source, target, options))
    devices: dict[str, dict[str, Any]] = {}
    rules: dict[tuple[int, int], dict[str, Any]] = {}
    for path, major, minor, mode in order["devices"]:
        devices.setdefault(path, device_entry(path, major, minor, mode))
        rules.setdefault((major, minor), allow_rule(major, minor))
    binlinks = order.get("binlinks", ())
    libdirs = order.get("libdirs", ())
    proc = order.get("proc_driver")
    return {
        # The hook's own work (nativehook.h): the mounts it makes, the nodes, /proc/driver.
        "binds": _joined([x for s, t, o in mounts for x in (s, t, ",".join(o))]),
        "nodes": _joined(
            [x for p, ma, mi, mo in order["devices"] for x in (p, str(ma), str(mi), str(mo))]
        ),
        "proc": _joined([proc[0], *proc[1]]) if proc else b"",
        "mounts": _elements([bind_mount(s, t, o) for s, t, o in mounts]),
        "mount-dsts": _joined([t for _, t, _ in mounts] + [b[0] for b in binlinks]),
        "devices": _elements(list(devices.values())),
        "device-paths": _joined(list(devices)),
        "rules": _elements(list(rules.values())),
        "majors": _joined(sorted({str(major) for major, _ in rules})),
        "hooks": _elements(create_hooks),
        "symlinks": _joined([x for row in order["symlinks"] for x in row]),
        "binlinks": _joined(
            [
                x
                for path, target, source, options in binlinks
                for x in (path, target, fastjson.dumps(bind_mount(source, path, options)))
            ]
        ),
        "libdirs": _joined(
            [
                x
                for host, _target, files, links, _copies in libdirs
                for x in (host, "/".join([f[1] for f in files] + [k[0] for k in links]))
            ]
        ),
        "ld-conf": _joined([d[1] for d in libdirs]),
        "ld-cache": fastjson.dumps(order["ld_cache"]).encode() if order["ldconfig_dirs"] else b"",
        "compat": b"1" if order.get("cuda_compat") else b"",
        "env": _elements(list(order.get("env") or ())),
        "env-names": _joined([e.partition("=")[0] for e in order.get("env") or ()]),
        "cdi-hooks": _cdi_hooks(order.get("hooks") or ()),
    }


def _cdi_hooks(hooks: Any) -> bytes:
    """A CDI order's OCI hooks as ``stage\\0hook,hook...`` per stage, each hook once
    (``add_cdi_edits``: one already there is not added again)."""
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for stage, hook in hooks:
        present = by_stage.setdefault(stage, [])
        if not any(same_hook(hook, h) for h in present):
            present.append(hook)
    return _joined([x for stage, hs in by_stage.items() for x in (stage, _elements(hs).decode())])


def _events(entry: CacheEntry, why_compat: str, kind: str) -> bytes:
    """The log events of a create (or a hook's work) from this entry, as ``prepare_bundle``
    (the hook's ``_prestart``) logs them: level, name, then the fields after the context (the
    launcher or the hook adds what depends on the image: mounts, binary links, the
    ld.so.cache, the nodes made, and the time it took)."""
    items: list[str] = []
    for line in entry.get("ignored", ()):
        items += ["info", "nvidia_input_ignored", '"why":' + fastjson.dumps(line)]
    order = entry["order"]
    if order is None:
        fields: dict[str, Any] = {"decisions": entry.get("decisions", []), "cached": True}
        event = "passthrough_create" if kind == CREATE else "no_gpu_requested"
        return _joined([*items, "debug", event, fastjson.dumps(fields)[1:-1]])
    fields = {"devices": [d[0] for d in order["devices"]], "gpus": entry.get("gpus", [])}
    if kind == HOOK:  # as the hook's container_configured names them
        fields.update(gpus=order.get("gpus", []), capabilities=order.get("capabilities", []))
    fields.update(symlinks=len(order["symlinks"]), cached=True, cuda_compat=why_compat)
    event = "container_prepared" if kind == CREATE else "container_configured"
    return _joined([*items, "info", event, fastjson.dumps(fields)[1:-1]])
