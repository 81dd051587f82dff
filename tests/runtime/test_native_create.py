"""nvct-runtime's native create: the second container of a kind is prepared by the launcher
alone, exactly as the shim prepares it; and every case the launcher must leave to the shim."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integration.harness.skips import need_cc, require
from nvct.plan.native_entry import NATIVE_DIR, entry_path, native_key
from nvct.runtime.launch.build import build_native, default_command
from tests.random_json import RandomJson

HOST_CACHE = Path("/etc/ld.so.cache")
FIRST_OF_KIND = "the first container of its kind (no native entry for it yet)"


def runc_spec() -> dict[str, Any]:
    """A spec shaped as ``runc spec`` and the engines write one: mounts, a deny-all device rule
    and runc's default ones, capabilities by set."""
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/bin"],
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "runc",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore"],
        },
    }


class Node:
    """A native launcher whose shim is nvct's real Python shim (no daemon), a config of the
    simulated driver, and a fake ``runc`` that records its argv."""

    def __init__(self, sim: Any, tmp: Path) -> None:
        require(need_cc())
        self.tmp = tmp
        self.bindir = tmp / "bin"
        self.bindir.mkdir()
        runc = self.bindir / "runc"
        runc.write_text('#!/bin/sh\necho "RUNC $*"\n')
        runc.chmod(0o755)
        self.cache = tmp / "cache"
        self.log = tmp / "nvct.log"
        self.config = tmp / "config.toml"
        self.config.write_text(
            f'driver-root = "{sim.driver_root}"\ndev-root = "{sim.dev_root}"\n'
            f'proc-root = "{sim.proc_root}"\ncache-dir = "{self.cache}"\n'
            f'[log]\nfile = "{self.log}"\n'
            f'[runtime]\nlow-level = ["{runc}"]\n'
        )
        self.launcher = tmp / "nvct-runtime"
        build_native(self.launcher, default_command(), str(self.config), "")
        self.count = 0

    def bundle(self, env: list[str] | None = None, **changes: Any) -> Path:
        """A bundle from ``runc spec`` on a rootfs holding the host's ld.so.cache."""
        self.count += 1
        bundle = self.tmp / f"b{self.count}"
        (bundle / "rootfs/etc/ld.so.conf.d").mkdir(parents=True)
        if HOST_CACHE.is_file():
            shutil.copy(HOST_CACHE, bundle / "rootfs/etc/ld.so.cache")
        spec = runc_spec()
        spec["process"]["env"] = ["PATH=/bin", *(env or ["NVIDIA_VISIBLE_DEVICES=1"])]
        spec.update(changes)
        (bundle / "config.json").write_text(json.dumps(spec, indent=2))
        return bundle

    def create(self, bundle: Path) -> dict[str, Any]:
        """``create`` through the launcher; its last log event."""
        done = subprocess.run(
            [str(self.launcher), "create", "--bundle", str(bundle), f"c{self.count}"],
            capture_output=True,
            text=True,
            env={"PATH": f"{self.bindir}:/usr/bin:/bin"},
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"RUNC create --bundle {bundle} c{self.count}"
        return json.loads(self.log.read_text().splitlines()[-1])

    def run(self, bundle: Path) -> subprocess.CompletedProcess[str]:
        """``create`` through the launcher, whatever it answers."""
        return subprocess.run(
            [str(self.launcher), "create", "--bundle", str(bundle), "x"],
            capture_output=True,
            text=True,
            env={"PATH": f"{self.bindir}:/usr/bin:/bin"},
            timeout=60,
            check=False,
        )

    def entries(self) -> list[Path]:
        return sorted((self.cache / NATIVE_DIR).glob("*"))


@pytest.fixture
def node(h100x4, tmp_path) -> Node:
    return Node(h100x4, tmp_path)


def rootfs_view(bundle: Path) -> dict[str, Any]:
    """What a container sees of its rootfs: every link, and the files nvct writes."""
    root = bundle / "rootfs"
    view: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        rel = "/" + str(path.relative_to(root))
        if path.is_symlink():
            view[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            view[rel] = path.read_bytes()
    return view


def spec_of(bundle: Path) -> dict[str, Any]:
    return json.loads((bundle / "config.json").read_text())


def test_the_second_create_of_a_kind_is_native_and_the_same_as_the_shims(node) -> None:
    first = node.bundle()
    first_event = node.create(first)
    assert first_event["via"] == "shim"
    # Why the launcher did not: the shim logs the launcher's reason.
    assert first_event["native_declined"] == FIRST_OF_KIND
    assert len(node.entries()) == 1
    second = node.bundle()
    event = node.create(second)
    assert event["via"] == "native" and "native_declined" not in event
    assert event["event"] == "container_prepared" and event["gpus"] == ["GPU 1"]
    assert event["container_id"] == "c2" and event["bundle"] == str(second)
    # The shim again, for a third bundle, with the entry gone: what it would have done.
    for entry in node.entries():
        entry.unlink()
    third = node.bundle()
    shim_event = node.create(third)
    assert shim_event["via"] == "shim"
    # The same log line but for who wrote it and what only the shim measures.
    same = ("devices", "gpus", "mounts", "symlinks", "binary_links", "cached", "ld_cache")
    assert {k: event[k] for k in same} == {k: shim_event[k] for k in same}
    assert event["ld_cache"] == "merged" and event["cuda_compat"] == shim_event["cuda_compat"]
    assert spec_of(second) == spec_of(third)
    assert rootfs_view(second) == rootfs_view(third)
    assert rootfs_view(second)["/etc/ld.so.cache"] != HOST_CACHE.read_bytes()  # merged
    assert b"nvidia-driver" in rootfs_view(second)["/etc/ld.so.conf.d/000-nvidia-driver.conf"]
    spec = spec_of(second)
    assert "/dev/nvidia1" in [d["path"] for d in spec["linux"]["devices"]]
    assert "/dev/nvidia0" not in [d["path"] for d in spec["linux"]["devices"]]


def test_the_spec_keeps_what_nvct_does_not_own_byte_for_byte(node) -> None:
    node.create(node.bundle())
    bundle = node.bundle()
    before = (bundle / "config.json").read_text()
    node.create(bundle)
    after = (bundle / "config.json").read_text()
    # Insertions only: deleting what was added gives back the original text.
    spec = json.loads(after)
    assert spec["process"] == json.loads(before)["process"]
    assert after.startswith(before[: before.index('"mounts"')])


def test_a_changed_driver_is_planned_again_by_the_shim(node, h100x4) -> None:
    node.create(node.bundle())
    extra = Path(h100x4.dev_root) / "dev/nvidia-extra-test"
    extra.write_text("")
    try:
        event = node.create(node.bundle())
        assert event["via"] == "shim"
        assert event["native_declined"] == "the driver changed since its native entry was written"
        assert node.create(node.bundle())["via"] == "native"  # the new entry
    finally:
        extra.unlink()


NOT_MERGED = (
    "the image's ld.so.cache cannot be merged (none, not a regular file, or entries the merge "
    "cannot match: ldconfig runs)"
)
# What the shim logs as the launcher's reason (native_declined) for each case.
LEFT_TO_THE_SHIM = {
    "device-list mount": "config.json has a device-list mount",
    "cdi annotation": "",
    "gpu prestart hook": "config.json has a GPU prestart hook, which the shim removes",
    "one of our mounts already": "config.json has one of the entry's mounts already",
    "cuda compat directory": "the image has a CUDA compat directory (/usr/local/cuda/compat)",
    "no ld.so.cache": NOT_MERGED,
    # opened, it would block the create for good: the launcher's and the shim's alike
    "an ld.so.cache that is a FIFO": NOT_MERGED,
    "an empty linux object": "config.json has an empty object where nvct adds an array",
}


def test_an_entry_of_another_driver_is_written_anew_under_a_cached_order(node) -> None:
    """An entry whose stamp is another driver's (the driver changed and changed back, or
    another order of the same kind wrote it) while this kind's work order is still valid: the
    launcher hands over ("the driver changed"), and the shim, though its order is cached,
    writes the entry anew, so the next create is native again."""
    node.create(node.bundle())
    assert node.create(node.bundle())["via"] == "native"
    (entry,) = node.entries()
    data = entry.read_bytes()
    assert data.count(b"ld.so.cache:") == 1  # in the stamp: the driver root's cache
    entry.write_bytes(data.replace(b"ld.so.cache:", b"ld.so.cachX:"))
    back = node.create(node.bundle())
    assert back["via"] == "shim" and back["cached"] is True
    assert back["native_declined"] == "the driver changed since its native entry was written"
    assert entry.read_bytes() == data
    assert node.create(node.bundle())["via"] == "native"


@pytest.mark.parametrize("case", list(LEFT_TO_THE_SHIM))
def test_what_the_launcher_leaves_to_the_shim(node, case: str) -> None:
    node.create(node.bundle())
    bundle = node.bundle()
    spec = spec_of(bundle)
    if case == "device-list mount":
        spec["mounts"].append(
            {"destination": "/var/run/nvidia-container-devices/1", "source": "/dev/null"}
        )
    elif case == "cdi annotation":
        spec["annotations"] = {"cdi.k8s.io/x": "nvidia.com/gpu=1"}
    elif case == "gpu prestart hook":
        spec["hooks"] = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}
    elif case == "one of our mounts already":
        ours = spec_of(node.tmp / "b1")["mounts"][-1]
        spec["mounts"].append(ours)
    elif case == "cuda compat directory":
        (bundle / "rootfs/usr/local/cuda/compat").mkdir(parents=True)
    elif case == "no ld.so.cache":
        (bundle / "rootfs/etc/ld.so.cache").unlink()
    elif case == "an ld.so.cache that is a FIFO":
        (bundle / "rootfs/etc/ld.so.cache").unlink()
        os.mkfifo(bundle / "rootfs/etc/ld.so.cache")
    elif case == "an empty linux object":
        spec["linux"] = {}
    (bundle / "config.json").write_text(json.dumps(spec))
    if case == "cdi annotation":  # the shim resolves it: this node has no CDI spec to name
        done = node.run(bundle)
        assert done.returncode == 1 and "unknown CDI device 'nvidia.com/gpu=1'" in done.stderr
        return
    event = node.create(bundle)
    assert event["via"] == "shim"
    assert event["native_declined"] == LEFT_TO_THE_SHIM[case]
    if case == "gpu prestart hook":
        assert spec_of(bundle)["hooks"]["prestart"] == []


def test_an_emptied_library_directory_is_made_again_by_the_shim(node) -> None:
    node.create(node.bundle())
    libdir = next(p for p in (node.cache).rglob("libcuda.so.1") if p.parent.is_dir()).parent
    victim = next(libdir.glob("libnvidia-ml.so.*"))
    victim.unlink()
    assert node.create(node.bundle())["via"] == "shim"
    assert victim.exists()
    assert node.create(node.bundle())["via"] == "native"


@pytest.mark.parametrize("damage", ["group-writable", "truncated", "another key"])
def test_an_entry_that_is_not_the_shims_is_not_used(node, damage: str) -> None:
    node.create(node.bundle())
    entry = node.entries()[0]
    data = entry.read_bytes()
    if damage == "group-writable":
        entry.chmod(0o664)
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    else:  # same file name, another key: only a miss
        entry.write_bytes(data.replace(b"NVIDIA_VISIBLE_DEVICES=1", b"NVIDIA_VISIBLE_DEVICES=2"))
    assert node.create(node.bundle())["via"] == "shim"


def test_a_container_asking_for_no_gpu_is_passed_through_natively(node) -> None:
    text = node.config.read_text().replace("[log]\n", '[log]\nlevel = "debug"\n')
    node.config.write_text(text)
    assert node.create(node.bundle(["NVIDIA_VISIBLE_DEVICES=void"]))["via"] == "shim"
    bundle = node.bundle(["NVIDIA_VISIBLE_DEVICES=void"])
    before = (bundle / "config.json").read_bytes()
    event = node.create(bundle)
    assert event["via"] == "native" and event["event"] == "passthrough_create"
    assert event["level"] == "debug" and event["cached"] is True
    assert (bundle / "config.json").read_bytes() == before  # nothing to add: not rewritten


# Variables with values the shim accepts (a refused create writes no entry), and others.
VARIABLE = st.one_of(
    st.tuples(st.just("NVIDIA_VISIBLE_DEVICES"), st.sampled_from(["0", "1", "all", "0,1"])),
    st.tuples(
        st.just("NVIDIA_DRIVER_CAPABILITIES"), st.sampled_from(["compute", "compute,utility", ""])
    ),
    st.tuples(st.just("CUDA_VERSION"), st.sampled_from(["12.2", "11.8", ""])),
    st.tuples(
        st.sampled_from(["NVIDIA_X", "DOCKER_RESOURCE_Y", "OTHER"]),
        st.text(st.characters(codec="utf-8"), max_size=4),
    ),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.lists(VARIABLE, max_size=4),
    second=st.lists(VARIABLE, max_size=4),
    privileged=st.booleans(),
)
def test_the_launcher_finds_an_entry_exactly_when_the_shims_key_is_the_same(
    node, first, second, privileged
) -> None:
    """Random variable lists: the launcher uses the entry written for ``first`` for ``second``
    exactly when the shim's ``native_key`` of the two is the same."""
    shutil.rmtree(node.cache / NATIVE_DIR, ignore_errors=True)
    caps = {"bounding": ["CAP_SYS_ADMIN"] if privileged else ["CAP_CHOWN"]}
    env_a = ["NVIDIA_VISIBLE_DEVICES=0", *(f"{k}={v}" for k, v in first)]
    env_b = ["NVIDIA_VISIBLE_DEVICES=0", *(f"{k}={v}" for k, v in second)]
    a = node.bundle(env_a)
    node.create(a)
    b = node.bundle(env_b)
    spec_b = spec_of(b)
    spec_b["process"]["capabilities"] = caps
    (b / "config.json").write_text(json.dumps(spec_b))
    raw = node.config.read_bytes()
    spec_a = spec_of(a)
    key_a = native_key(CODE_ID, str(node.config), raw, False, spec_a)
    key_b = native_key(CODE_ID, str(node.config), raw, False, spec_b)
    written = bool(node.entries())
    via = node.create(b)["via"]
    assert (via == "native") == (written and key_a == key_b)


def _code_id() -> str:
    from nvct.runtime.launch.code_id import code_id

    return code_id()


CODE_ID = _code_id()


def test_the_entry_is_named_by_the_launchers_hash(node) -> None:
    bundle = node.bundle()
    node.create(bundle)
    spec = runc_spec()
    spec["process"]["env"] = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=1"]
    key = native_key(CODE_ID, str(node.config), node.config.read_bytes(), False, spec)
    assert key is not None
    assert node.entries() == [Path(entry_path(str(node.cache), key))]


def test_a_prestart_hook_of_the_engines_own_is_kept_and_the_create_is_native(node) -> None:
    """docker's own prestart hook (libnetwork's setkey) is no GPU hook: the spec keeps it."""
    node.create(node.bundle())
    setkey = {"path": "/proc/4242/exe", "args": ["libnetwork-setkey", "-exec-root=/run/docker"]}
    bundle = node.bundle(hooks={"prestart": [setkey]})
    event = node.create(bundle)
    assert event["via"] == "native"
    hooks = spec_of(bundle)["hooks"]
    assert hooks["prestart"] == [setkey]


def test_a_spec_that_is_not_utf8_is_left_to_the_shim_which_refuses_it(node) -> None:
    node.create(node.bundle())
    bundle = node.bundle()
    raw = (bundle / "config.json").read_bytes().replace(b'"PATH=/bin"', b'"PATH=/bin\xff"')
    (bundle / "config.json").write_bytes(raw)
    done = node.run(bundle)
    assert done.returncode == 1 and "config.json" in done.stderr, done.stderr
    assert (bundle / "config.json").read_bytes() == raw


def test_entries_of_another_launchers_code_are_swept_when_an_hour_old(node) -> None:
    node.create(node.bundle())
    ours = node.entries()[0]
    data = ours.read_bytes()
    old, young = ours.with_name("0000000000000001"), ours.with_name("0000000000000002")
    for path in (old, young):
        path.write_bytes(data.replace(CODE_ID.encode(), b"f" * len(CODE_ID)))
    hours_ago = ours.stat().st_mtime - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    os.utime(ours, (hours_ago, hours_ago))  # old, but this launcher's: kept
    node.create(node.bundle(["NVIDIA_VISIBLE_DEVICES=2"]))  # a new kind: an entry is written
    names = {p.name for p in node.entries()}
    assert old.name not in names
    assert {young.name, ours.name} <= names and len(names) == 3


def cdi_node(node: Node) -> Path:
    """The node's config with a CDI spec directory holding the spec ``nvct-cli cdi generate``
    writes for its driver; the spec's path."""
    spec_dir = node.tmp / "cdi"
    spec_dir.mkdir()
    node.config.write_text(node.config.read_text() + f'[cdi]\nspec-dirs = ["{spec_dir}"]\n')
    path = spec_dir / "nvidia.json"
    subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", "cdi", "generate", "-o", str(path)],
        env={**os.environ, "NVCT_CONFIG": str(node.config)},
        check=True,
        capture_output=True,
    )
    return path


def test_a_cdi_annotated_container_is_native_the_second_time_and_the_same(node) -> None:
    """A device plugin's CDI annotation (what containerd 1.6 and docker 20.10 get): the CDI
    order's variables, hooks, nodes and mounts, spliced natively as the shim edits them."""
    cdi_spec = cdi_node(node)
    annotations = {"cdi.k8s.io/nvct": "nvidia.com/gpu=1"}
    env = ["NVIDIA_VISIBLE_DEVICES=all", "OTHER=1"]  # a CUDA image's: the spec's replaces it
    assert node.create(node.bundle(env, annotations=annotations))["via"] == "shim"
    second = node.bundle(env, annotations=annotations)
    assert node.create(second)["via"] == "native"
    for entry in node.entries():
        entry.unlink()
    third = node.bundle(env, annotations=annotations)
    assert node.create(third)["via"] == "shim"
    assert spec_of(second) == spec_of(third)
    spec = spec_of(second)
    assert [h["path"] for h in spec["hooks"]["createContainer"]]  # the spec's nvct-cdi-hook
    assert "OTHER=1" in spec["process"]["env"]
    assert "/dev/nvidia1" in [d["path"] for d in spec["linux"]["devices"]]
    # Another annotation value is another kind; a changed spec file is resolved again.
    other = {"cdi.k8s.io/nvct": "nvidia.com/gpu=2"}
    assert node.create(node.bundle(env, annotations=other))["via"] == "shim"
    assert node.create(node.bundle(env, annotations=annotations))["via"] == "native"
    st = cdi_spec.stat()
    os.utime(cdi_spec, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert node.create(node.bundle(env, annotations=annotations))["via"] == "shim"
    assert node.create(node.bundle(env, annotations=annotations))["via"] == "native"


def random_spec(rng: random.Random) -> dict[str, Any]:
    """A ``runc spec`` shaped config.json of this kind (NVIDIA_VISIBLE_DEVICES=1, no CDI
    annotation, unprivileged) with what engines vary around it: other variables, mounts,
    device rules, hooks, annotations and members nvct does not know, present, empty or absent,
    with text from every Unicode plane."""
    draw = RandomJson(rng, ["mounts", "devices", "hooks"], ["/x", "rootfs"])
    spec = runc_spec()
    env = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=1"]
    env += [f"{draw.text() or 'V'}_X={draw.text()}" for _ in range(rng.randrange(4))]
    rng.shuffle(env)
    spec["process"]["env"] = env
    mounts = rng.choice(["absent", "empty", "some"])
    if mounts == "absent":
        del spec["mounts"]
    elif mounts == "empty":
        spec["mounts"] = []
    else:
        spec["mounts"].append(
            {"destination": f"/data/{draw.text()}", "type": "bind", "source": "/tmp",
             "options": ["rbind", "ro"]}
        )  # fmt: skip
    linux = spec["linux"]
    shape = rng.choice(["as is", "no resources", "no devices", "rules", "more"])
    if shape == "no resources":
        del linux["resources"]
    elif shape == "no devices":
        linux["resources"] = {"memory": {"limit": 1 << 30}}
    elif shape == "rules":
        linux["resources"]["devices"].append(
            {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
        )
        linux["devices"] = [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]
    else:
        linux["sysctl"] = {"net.ipv4.ip_forward": "1"}
        linux["seccomp"] = {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["x"]}]}
    hooks = rng.choice(["absent", "empty", "theirs"])
    if hooks == "empty":
        spec["hooks"] = {}
    elif hooks == "theirs":
        spec["hooks"] = {"prestart": [{"path": "/proc/4242/exe", "args": ["libnetwork-setkey"]}],
                         "poststop": [{"path": "/bin/true"}]}  # fmt: skip
    if rng.random() < 0.6:
        spec["annotations"] = {f"io.{draw.text()}": draw.text() for _ in range(rng.randrange(3))}
    for _ in range(rng.randrange(3)):
        spec[f"x-{draw.text()}"] = draw.value(1)
    return spec


def spec_text(rng: random.Random, spec: dict[str, Any]) -> str:
    """``spec`` as an engine could write it: any member order, indentation and escaping."""

    def shuffled(value: Any) -> Any:
        if isinstance(value, dict):
            items = [(k, shuffled(v)) for k, v in value.items()]
            rng.shuffle(items)
            return dict(items)
        return [shuffled(v) for v in value] if isinstance(value, list) else value

    return json.dumps(
        shuffled(spec),
        indent=rng.choice([None, 1, 2, "\t"]),
        separators=rng.choice([(",", ":"), (", ", ": ")]),
        ensure_ascii=rng.random() < 0.5,
    )


def test_native_creates_of_random_specs_are_the_shims(node) -> None:
    """Config.json files of one kind in every shape engines give them: each the launcher
    prepares alone gives the same config.json (as JSON) and rootfs as the shim gives the
    same bundle with no entry to read; the launcher prepares every one that has a ``mounts``
    array (every engine writes one; the shim adds the member where there is none)."""
    node.create(node.bundle())  # the kind's entry
    (entry,) = node.entries()
    rng = random.Random(83)  # noqa: S311 - a repeatable test, not a secret
    for _ in range(60):
        spec = random_spec(rng)
        text = spec_text(rng, spec)
        ours, theirs = node.bundle(), node.bundle()
        for bundle in (ours, theirs):
            (bundle / "config.json").write_text(text)
        via = node.create(ours)["via"]
        aside = entry.with_name(entry.name + ".aside")
        entry.rename(aside)
        try:
            assert node.create(theirs)["via"] == "shim"
        finally:
            entry.unlink(missing_ok=True)  # the shim's new one: the same
            aside.rename(entry)
        assert spec_of(ours) == spec_of(theirs), text
        assert rootfs_view(ours) == rootfs_view(theirs), text
        assert (via == "native") == ("mounts" in spec), text
