"""The native prestart hook (hook.c) and the shim daemon's prestart: the work done in a worker,
its failures failing the hook, and every doubt sending the hook to the Python hook with the
OCI state it read. The real containers (mounts, cgroups, hostile rootfs and environment) are
in integration/ (HOOK_PATHS)."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from integration.harness.skips import need_cc, require
from nvct.runtime.launch import tables
from nvct.runtime.launch.build import build_native, hook_command
from tests.random_json import RandomJson
from tests.runtime.test_shim_daemon import daemon, gpu_bundle, gpu_config, tools  # noqa: F401

# A runtime as runc is one for its hooks: the parent of the container's process (here a
# `sleep` in a mount namespace of its own) and of the hook, which it runs with the OCI state
# on stdin. It prints what the hook did. argv: hook, bundle, whose pid the state names
# (child | not-child | gone).
RUNTIME = """
import json, os, subprocess, sys
hook, bundle, whose = sys.argv[1:4]
child = subprocess.Popen(["unshare", "-m", "sleep", "60"])
gone = subprocess.Popen(["true"])
gone.wait()
pid = {"child": child.pid, "not-child": os.getppid(), "gone": gone.pid}[whose]
state = {"ociVersion": "1.0.2", "id": "c1", "status": "created", "pid": pid, "bundle": bundle}
done = subprocess.run([hook, "prestart"], input=json.dumps(state).encode(), capture_output=True)
child.kill()
child.wait()
print(json.dumps({"rc": done.returncode, "out": done.stdout.decode(), "err": done.stderr.decode()}))
"""


def fake_python(tmp_path: Path) -> Path:
    """The hook's Python fallback, standing in: its argv, then the stdin it was given."""
    fake = tmp_path / "fakepy-hook"
    fake.write_text('#!/bin/sh\necho "FAKEPY $*"\ncat\n')
    fake.chmod(0o755)
    return fake


def native_hook(tmp_path: Path, python: str, sock: Path | str) -> Path:
    require(need_cc())
    out = tmp_path / "nvidia-container-runtime-hook"
    build_native(out, python, socket=str(sock), hook=True)
    return out


def start(hook: Path, bundle: Path, config: Path, whose: str = "child") -> dict[str, object]:
    """Run ``hook`` as a runtime runs a prestart hook; its exit status, stdout and stderr."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1): the container's mount namespace")
    env = {"PATH": "/usr/bin:/bin", "NVCT_CONFIG": str(config)}
    done = subprocess.run(
        [sys.executable, "-c", RUNTIME, str(hook), str(bundle), whose],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def plain_bundle(tmp_path: Path, env: tuple[str, ...] = ("NVIDIA_VISIBLE_DEVICES=void",)) -> Path:
    """A container whose request is ``void``: the hook's work ends after the plan. (With no
    NVIDIA variable at all, ``env=()``, the native hook ends before asking anyone.)"""
    b = gpu_bundle(tmp_path)
    spec = json.loads((b / "config.json").read_text())
    spec["process"]["env"] = ["PATH=/bin", *env]
    (b / "config.json").write_text(json.dumps(spec))
    return b


def test_daemon_does_the_hooks_work(daemon, h100x4, tmp_path) -> None:  # noqa: F811
    cfg = gpu_config(h100x4, tmp_path, tools(tmp_path))
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), daemon.socket_path)
    done = start(hook, plain_bundle(tmp_path), cfg)
    assert done == {"rc": 0, "out": "", "err": ""}  # the fallback never ran


def test_a_failure_in_the_worker_fails_the_hook_as_the_python_hook_would(
    daemon,  # noqa: F811
    h100x4,
    tmp_path,
) -> None:
    cfg = gpu_config(h100x4, tmp_path, tools(tmp_path))
    served = native_hook(tmp_path, str(fake_python(tmp_path)), daemon.socket_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    python = native_hook(alone, hook_command(), "")  # the real Python hook, no daemon
    results = [
        start(hook, gpu_bundle(tmp_path / hook.parent.name, "7"), cfg) for hook in (served, python)
    ]
    assert results[0] == results[1]  # 4 GPUs: no GPU 7, the same refusal either way
    assert results[0]["rc"] != 0 and results[0]["out"] == ""
    err = str(results[0]["err"])
    assert err.startswith("nvct-hook: error: ") and "7" in err and err.count("\n") == 1


@pytest.mark.parametrize("whose", ["not-child", "gone"])
def test_daemon_declines_a_process_it_cannot_pin(daemon, h100x4, tmp_path, whose) -> None:  # noqa: F811
    """A state naming a process that is not the runtime's child, or no process: the Python
    hook runs with the same state on its stdin (and judges it)."""
    cfg = gpu_config(h100x4, tmp_path, tools(tmp_path))
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), daemon.socket_path)
    b = plain_bundle(tmp_path)
    done = start(hook, b, cfg, whose)
    assert done["rc"] == 0, done
    out = str(done["out"])
    assert out.startswith("FAKEPY prestart\n")
    assert json.loads(out.split("\n", 1)[1])["bundle"] == str(b)


def test_no_daemon_runs_the_python_hook_with_the_state(tmp_path) -> None:
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), tmp_path / "absent.sock")
    state = b'{"pid": 5, "bundle": "/b"}'
    done = subprocess.run([str(hook), "prestart"], input=state, capture_output=True, check=False)
    assert done.stdout == b"FAKEPY prestart\n" + state
    other = subprocess.run([str(hook), "poststop"], input=b"", capture_output=True, check=False)
    assert other.stdout == b"FAKEPY poststop\n"  # every other stage: the Python hook


def test_the_state_is_read_whole_up_to_its_bound(tmp_path) -> None:
    """States across the read buffer's growth reach the Python hook byte for byte; one of
    1 MiB or more is refused in one line, and nothing runs."""
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), tmp_path / "absent.sock")
    for size in (65535, 65536, 65537, 300_000, (1 << 20) - 1):
        state = b'{"pid": 5, "bundle": "/b", "x": "' + b"a" * (size - 35) + b'"}'
        assert len(state) == size
        done = subprocess.run(
            [str(hook), "prestart"], input=state, capture_output=True, check=False
        )
        assert done.stdout == b"FAKEPY prestart\n" + state, size
    big = subprocess.run(
        [str(hook), "prestart"], input=b" " * (1 << 20), capture_output=True, check=False
    )
    assert (big.returncode, big.stdout) == (1, b"")
    assert big.stderr.decode().strip() == (
        "nvct-hook: error: OCI state on stdin is larger than 1048576 bytes "
        "(fix: check the runtime that runs nvct-hook)"
    )


# --- A container that asks for no GPU ends in the native hook (podman's hooks.d runs the hook
# for every container): its state's bundle, read by hook.c's own JSON scanner ----------------


def ends_at_once(hook: Path, state: str | bytes) -> bool:
    """Whether ``hook`` ended with status 0 and asked nobody (no daemon answers on its socket:
    going on would have run the Python fallback, which prints FAKEPY)."""
    data = state.encode() if isinstance(state, str) else state
    done = subprocess.run([str(hook), "prestart"], input=data, capture_output=True, check=False)
    if done.stdout.startswith(b"FAKEPY prestart\n"):
        assert done.stdout.split(b"\n", 1)[1] == data  # the state, whole
        return False
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    return True


@pytest.fixture
def bundles(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the hook, a bundle that asks for nothing, a bundle that asks for GPU 0)."""
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), tmp_path / "absent.sock")
    return hook, plain_bundle(tmp_path / "plain", env=()), gpu_bundle(tmp_path / "gpu", "0")


def test_a_container_asking_for_no_gpu_ends_in_the_native_hook(bundles, tmp_path) -> None:
    """runc's state as it writes it, its annotations included: a bundle without any request
    marker ends at once; one with any marker of the shim's request inputs goes on."""
    hook, plain, gpu = bundles
    state = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 5}
    annotations = {"annotations": {"io.podman.annotations.autoremove": "FALSE", "n": "1"}}
    assert ends_at_once(hook, json.dumps({**state, "bundle": str(plain), **annotations}))
    assert not ends_at_once(hook, json.dumps({**state, "bundle": str(gpu), **annotations}))
    for marker in tables.request_markers():
        spec = json.loads((plain / "config.json").read_text())
        spec["process"]["env"].append(f"X={marker}")
        marked = tmp_path / "marked" / marker.replace("/", "_")
        marked.mkdir(parents=True)
        (marked / "config.json").write_text(json.dumps(spec))
        assert not ends_at_once(hook, json.dumps({**state, "bundle": str(marked)})), marker


def test_a_void_request_done_natively_logs_what_the_python_hook_logged(h100x4, tmp_path) -> None:
    """NVIDIA_VISIBLE_DEVICES=void: the first such container goes to the Python hook, which
    logs its plan's events and writes the native entry; the next ends in the native hook,
    which logs the same events from that entry (only who did it differs)."""
    cfg = gpu_config(h100x4, tmp_path, tools(tmp_path))
    cfg.write_text(cfg.read_text().replace("[log]\n", '[log]\nlevel = "debug"\n'))
    hook = native_hook(tmp_path, hook_command(), "")  # the real Python hook, no daemon
    log = tmp_path / "nvct.log"
    seen = []
    for i in range(2):
        lines = log.read_text().splitlines() if log.exists() else []
        assert start(hook, plain_bundle(tmp_path / f"void{i}"), cfg)["rc"] == 0
        seen.append([json.loads(ln) for ln in log.read_text().splitlines()[len(lines) :]])
    python, native = seen
    assert {e["via"] for e in python} == {"hook"} and {e["via"] for e in native} == {"native"}
    assert [(e["level"], e["event"]) for e in native] == [(e["level"], e["event"]) for e in python]
    assert ("debug", "no_gpu_requested") in [(e["level"], e["event"]) for e in native]


def test_the_native_hook_reads_the_bundle_as_json_does(bundles) -> None:
    """Every spelling JSON allows for the same state (escapes, spacing, key order) is read as
    Python's json reads it; a "bundle" nested in an annotation is not the state's."""
    hook, plain, gpu = bundles
    escaped = "".join(f"\\u{ord(c):04x}" if c.isalpha() else c for c in str(plain))
    spellings = [
        json.dumps({"bundle": str(plain)}, indent=2),
        json.dumps({"pid": -1.5e3, "ok": [True, None, {"a": []}], "bundle": str(plain)}),
        '{"bundle":"' + str(plain).replace("/", "\\/") + '"}',
        '{"bundle":"' + escaped + '"}',
        '{"bundl\\u0065": "' + str(plain) + '"}',
    ]
    for text in spellings:
        assert json.loads(text)["bundle"] == str(plain), text
        assert ends_at_once(hook, text), text
    # the state's own bundle asks for a GPU: whatever else names the plain one must not count
    nested = {"bundle": str(gpu), "annotations": {"bundle": str(plain)}}
    assert not ends_at_once(hook, json.dumps(nested))
    assert not ends_at_once(hook, json.dumps({"annotations": {"bundle": str(plain)}}))
    assert not ends_at_once(hook, json.dumps({"id": "bundle", "x": str(plain)}))


def test_the_native_hook_agrees_with_json_on_random_states(bundles) -> None:
    """Random states as runtimes could write them (any key order, nested annotations, text
    from every Unicode plane, escaped or raw UTF-8, any spacing): the hook ends at once
    exactly when the state's own bundle is the one that asks for nothing."""
    hook, plain, gpu = bundles
    rng = random.Random(31)  # noqa: S311 - a repeatable test, not a secret
    draw = RandomJson(rng, ["bundle"], [str(plain), str(gpu)])
    text, value = draw.text, draw.value

    for _ in range(150):
        own = rng.choice([plain, gpu])
        state = {text(): value(0) for _ in range(rng.randrange(4))}
        state.pop("bundle", None)
        items = [*state.items(), ("bundle", str(own))]
        rng.shuffle(items)
        spaced = rng.choice([None, 1]), rng.choice([(",", ":"), (", ", ": ")])
        data = json.dumps(
            dict(items), ensure_ascii=rng.random() < 0.5, indent=spaced[0], separators=spaced[1]
        )
        assert ends_at_once(hook, data) == (own == plain), data


@pytest.mark.parametrize(
    "text",
    [
        '{"bundle": "PLAIN", "bundle": "GPU"}',  # json.loads takes the last: refused outright
        '{"bundle": "PLAIN"',
        '{"bundle": "PLAIN"} trailing',
        '{"bundle": "PLAIN",}',
        '["bundle", "PLAIN"]',
        '{"bundle": "PLAIN", "x": tru}',
        '{"bundle": "PLAIN", "x": "\\x41"}',
        '{"bundle": "PLAIN\\u0000/x"}',
        '{"bundle": "PLAIN\\ud800"}',
        '{"bundle": "PLAIN", "x": ' + "[" * 70 + "]" * 70 + "}",
        '{"bundle": "relative/path"}',
        '{"bundle": 7}',
    ],
    ids=[
        "duplicate", "unclosed", "trailing", "comma", "array", "literal", "escape", "nul",
        "lone-surrogate", "deep", "relative", "number",
    ],
)  # fmt: skip
def test_a_state_the_scanner_does_not_accept_goes_on_as_before(bundles, text) -> None:
    """Anything hook.c's scanner does not take whole goes on to whoever judged it before (the
    daemon, else the Python hook), with the state unchanged: never an early end."""
    hook, plain, gpu = bundles
    assert not ends_at_once(hook, text.replace("PLAIN", str(plain)).replace("GPU", str(gpu)))


@pytest.mark.parametrize(
    "reply", [b"", b"exit x\n", b"exec /bin/true\n"], ids=["none", "garbage", "exec"]
)
def test_hook_fails_closed_on_anything_but_an_exit_status(tmp_path, reply) -> None:
    sock = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.listen()

    def answer() -> None:  # a worker that read the whole request, then died or babbled
        conn, _ = server.accept()
        while conn.recv(1 << 16):
            pass
        conn.sendall(reply)
        conn.close()

    thread = threading.Thread(target=answer)
    thread.start()
    hook = native_hook(tmp_path, str(fake_python(tmp_path)), sock)
    done = subprocess.run(
        [str(hook), "prestart"], input='{"pid": 5}', capture_output=True, text=True, check=False
    )
    thread.join()
    server.close()
    assert done.returncode == 1 and done.stdout == ""  # the Python hook did not run
    assert done.stderr.startswith(f"nvct-hook: error: the nvct shim daemon on {sock} ")
    assert done.stderr.count("\n") == 1 and "(fix: " in done.stderr


SIBLING = """
import os, subprocess, sys
child = subprocess.Popen([*sys.argv[2:], "sleep", "60"])
hook = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(child.pid)])
rc = hook.wait()
child.kill()
sys.exit(rc)
"""


def test_pinned_reads_the_process_while_it_is_alive(tmp_path) -> None:
    """The child of our parent (a sibling, as the container is the hook's) in a mount
    namespace of its own is pinned: its cgroup lines and mount namespace. The hook itself, a
    process in the host's mount namespace, or none at all, is refused."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    check = (
        "import os, sys\n"
        "from nvct.hook.pinned import Pinned\n"
        "p = Pinned(int(sys.argv[1]), os.getpid())\n"
        "assert p.cgroup_lines == open(f'/proc/{sys.argv[1]}/cgroup').read().splitlines()\n"
        "assert os.fstat(p.mnt_fd).st_ino == os.stat(f'/proc/{sys.argv[1]}/ns/mnt').st_ino\n"
        "p.close()\n"
    )
    subprocess.run([sys.executable, "-c", SIBLING, check, "unshare", "-m"], check=True, timeout=30)
    refused = check.replace("p = Pinned", "from nvct.hook.pinned import NotPinned\ntry: Pinned")
    refused = refused.split("\nassert")[0] + "\nexcept NotPinned as e: print(e)\n"
    done = subprocess.run(
        [sys.executable, "-c", SIBLING, refused], capture_output=True, text=True, check=True
    )
    assert "shares the host's mount namespace" in done.stdout, done.stderr
    # in a fresh interpreter: pytest's own process may hold threads of earlier tests, and a
    # worker that is not single-threaded is refused before anything else
    refusals = (
        "import os\n"
        "from nvct.hook.pinned import NotPinned, Pinned\n"
        "for pid in (os.getpid(), os.getppid(), 2**22 + 1):  # 2**22 + 1: beyond pid_max\n"
        "    try:\n"
        "        Pinned(pid, os.getpid())\n"
        "    except NotPinned as e:\n"
        "        print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", refusals], capture_output=True, text=True, check=True, timeout=30
    )
    said = done.stdout.splitlines()
    assert len(said) == 3, done.stdout + done.stderr
    assert "the hook itself" in said[0] and "not a child" in said[1] and "cannot pin" in said[2]


def test_a_prestart_in_a_worker_imports_nothing(h100x4, tmp_path) -> None:
    """What the daemon preloads is all the hook's prestart needs: a worker planning a known
    kind of container (the cached work order) imports no module, a first one no nvct module,
    and the modules of the rest of its work (cgroup, namespace, rootfs) are loaded already."""
    cfg = gpu_config(h100x4, tmp_path, tools(tmp_path))
    first, second = gpu_bundle(tmp_path / "a"), gpu_bundle(tmp_path / "b")
    code = f"""
import json, os, sys
os.environ["NVCT_CONFIG"] = {str(cfg)!r}
from nvct.runtime.launch.daemon import preload
preload()
from nvct.base.log import EventLog
from nvct.hook.__main__ import _plan_here
for bundle in ({str(first)!r}, {str(second)!r}):
    before = set(sys.modules)
    spec = json.load(open(os.path.join(bundle, "config.json")))
    planned = _plan_here(spec, os.path.join(bundle, "rootfs"), EventLog("nvct-hook", ""))
    order = planned.entry["order"]
    assert order is not None and order["devices"], order
    print(" ".join(sorted(set(sys.modules) - before)))
work = ("nvct.container.apply", "nvct.container.cgroup", "nvct.container.cgroup_v2",
        "nvct.container.procfs", "nvct.container.stage", "nvct.hook.pinned")
print(" ".join(m for m in work if m not in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    miss, hit, missing = done.stdout.split("\n")[:3]
    assert not [m for m in miss.split() if m.startswith("nvct")], miss
    assert hit == ""
    assert missing == ""
