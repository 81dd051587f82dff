"""The shim daemon: prepares GPU containers' bundles for the native launcher, modules warm.

A fresh Python shim spends ~15 ms of a GPU container's start on the interpreter and its
imports before it does any work. This resident process imports all of that once; for each
create the native launcher (``launcher.c``) connects, and a worker forked ahead of time runs
the shim's ``decide`` exactly as the shim would: in the launcher's working directory, with
its environment, umask and stderr (passed over the socket). The worker answers with the
runtime to exec (or the exit status) and the launcher execs it itself, so runc runs as the
launcher's process, with the launcher's argv and file descriptors.

The native prestart hook (``hook.c``: ``docker run --gpus``, podman's hooks.d) asks the same
way: a worker pins the container's process (``nvct.hook.pinned``: a pidfd, its mount
namespace and cgroup read while it is alive, a child of the hook's runtime), then runs the
Python hook's prestart on it (the plan, the cgroup grant, the rootfs inside the container's
mount namespace; the worker is a single-threaded one-shot process) and answers with the
hook's exit status. It declines while it has done nothing (the state unreadable, the process
not pinned beyond doubt); the hook then runs the Python hook itself.

A spare worker that has waited a moment copies the daemon's heap it shares (``prefault``):
the copy-on-write faults a fresh worker took during its first create (~470, 1-2 ms of the
container's start) are taken before the request arrives, for ~15 MB per worker.

A worker declines (the launcher then runs the shim itself) when the caller is not root or
not this daemon's user, lives in another mount namespace or root directory (the bundle's
paths would name other files), or was built from other nvct code (see ``code_id``). It
declines only before it has touched anything: after that, any failure makes the launcher
fail closed.

``python -m nvct.runtime.launch.daemon [--socket PATH]`` (default ``/run/nvct/shim.sock``); the
socket is created mode 0600. SIGTERM or SIGINT stop it and remove the socket.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import signal
import socket
import stat
import struct
import sys
import traceback
from typing import Any

from nvct.base.defaults import DEFAULT_SOCKET, ENV_VAR, NATIVE_ENV
from nvct.runtime.launch.code_id import code_id
from nvct.runtime.launch.prefault import populate_writable
from nvct.runtime.launch.prefork import Pool

MAX_REQUEST = 4 << 20
REQUEST_TIMEOUT_S = 30
# What a request asks: the launcher's create, or the native hook's prestart.
KINDS = (b"create", b"prestart")


class Decline(Exception):
    """The launcher must run the shim itself; nothing has been done."""


# What the native hook's prestart (docker --gpus, podman's hooks.d) imports in a worker: the
# Python hook's modules (tests/architecture/test_hot_path.py keeps them lean) and the
# worker's own pinning of the container's process.
HOOK_PRELOAD = (
    "nvct.base.oci",
    "nvct.container.apply",
    "nvct.container.cgroup",
    "nvct.container.cgroup_v2",
    "nvct.container.procfs",
    "nvct.container.rootfs",
    "nvct.container.stage",
    "nvct.hook.__main__",
    "nvct.hook.pinned",
)
PRELOAD = (
    "nvct.host.arch",
    "nvct.config",
    "nvct.host.discover.devices",
    "nvct.host.discover.elf",
    "nvct.host.discover.files",
    "nvct.host.discover.libraries",
    "nvct.host.discover.nvml",
    "nvct.container.ldconfig",
    "nvct.container.links",
    "nvct.container.overlay",  # a create's rare branch: ldconfig's cache reused
    "nvct.plan.native_entry",  # the native launcher's entry, written after a create
    "nvct.plan.workorder",
    "nvct.host.load",
    "nvct.host.ldcache",
    "nvct.plan.build",
    "nvct.plan.compose",
    "nvct.plan.decide",
    "nvct.plan.libdirs",
    "nvct.request.parse",
    "nvct.runtime.__main__",
    "nvct.runtime.args",
    "nvct.runtime.create",
    "nvct.runtime.lowlevel",
    *HOOK_PRELOAD,
)


def preload() -> None:
    """Import what a create uses, cache hit or miss, so that no child imports anything."""
    from nvct.base._site import ensure_site_packages

    ensure_site_packages()
    for module in PRELOAD:
        importlib.import_module(module)


def _same(a: str, b: str) -> bool:
    sa, sb = os.stat(a), os.stat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_peer(conn: socket.socket) -> int:
    """Decline a caller that is not root or our user, or that sees another filesystem; the
    caller's pid."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid not in (0, os.geteuid()):
        raise Decline(f"caller uid {uid}")
    try:
        for ns in ("mnt", "user"):
            if not _same(f"/proc/{pid}/ns/{ns}", f"/proc/self/ns/{ns}"):
                raise Decline(f"caller in another {ns} namespace")
        if not _same(f"/proc/{pid}/root", "/"):
            raise Decline("caller has another root directory")
    except OSError as err:
        raise Decline(f"cannot inspect caller {pid}: {err.strerror}") from err
    return int(pid)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = conn.recv(min(size, 1 << 16))
        if not chunk:
            raise Decline("request cut short")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_request(conn: socket.socket, expected_code: str) -> tuple[int, dict[str, Any]]:
    """The caller's stderr descriptor and its request (see ``send_request`` in client.h)."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 4, 1)
    try:
        if len(data) < 4:
            data += _recv_exactly(conn, 4 - len(data))
        (size,) = struct.unpack("=I", data)
        if size > MAX_REQUEST:
            raise Decline(f"request of {size} bytes")
        fields = _recv_exactly(conn, size).split(b"\0")[:-1]
        if len(fds) != 1 or len(fields) < 7:
            raise Decline("malformed request")
        code, kind, payload, cwd, mask, exe, argc = fields[:7]
        if code != expected_code.encode():
            raise Decline("launcher built from other nvct code")
        if kind not in KINDS:
            raise Decline("unknown request")
        n = int(argc)
        env = {}
        for item in fields[7 + n :]:
            key, eq, value = item.partition(b"=")
            if eq:
                env[os.fsdecode(key)] = os.fsdecode(value)
        request = {
            "kind": kind.decode(),
            "payload": payload,
            "cwd": os.fsdecode(cwd),
            "umask": int(mask, 8),
            "exe": os.fsdecode(exe),
            "args": [os.fsdecode(a) for a in fields[7 : 7 + n]],
            "env": env,
        }
    except (Decline, ValueError):
        for fd in fds:
            os.close(fd)
        raise
    return fds[0], request


def serve_one(conn: socket.socket, expected_code: str) -> bytes:
    """Handle one launcher's create, or one native hook's prestart, in this (forked) process;
    the reply line to send."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    try:
        caller = check_peer(conn)
        stderr_fd, request = read_request(conn, expected_code)
    except (Decline, OSError, ValueError):
        return b"fallback\n"
    conn.settimeout(None)
    if request["kind"] == "prestart":
        return serve_prestart(caller, stderr_fd, request)
    return serve_create(stderr_fd, request)


def serve_create(stderr_fd: int, request: dict[str, Any]) -> bytes:
    """The shim's create for the launcher; the reply line."""
    from nvct.runtime.__main__ import decide

    # From here on the caller is committed: this process becomes the shim for it.
    os.dup2(stderr_fd, 2)
    os.close(stderr_fd)
    try:
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [request["exe"], *request["args"]]
        rc, runtime, _argv = decide(request["exe"], request["args"], via="daemon")
    except Exception:  # the shim itself would have died with this traceback
        traceback.print_exc()
        return b"exit 1\n"
    finally:
        sys.stderr.flush()
    if runtime is None:
        return f"exit {rc or 1}\n".encode()
    return b"exec " + os.fsencode(runtime) + b"\n"


def serve_prestart(caller: int, stderr_fd: int, request: dict[str, Any]) -> bytes:
    """The Python hook's prestart for the native hook, on the container's process pinned
    here; the reply line (``exit STATUS``), or ``fallback`` while nothing is done yet."""
    from nvct.base.errors import NvctError
    from nvct.base.oci import parse_state
    from nvct.hook.__main__ import prestart
    from nvct.hook.pinned import NotPinned, Pinned

    try:
        state = parse_state(request["payload"])
        pinned = Pinned(state.pid, caller)
    except (NvctError, NotPinned):  # the Python hook judges it afresh, and says why
        os.close(stderr_fd)
        return b"fallback\n"
    # Committed: from here on the hook's outcome is this worker's.
    os.dup2(stderr_fd, 2)
    os.close(stderr_fd)
    try:
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        # The hook's own environment is runc's (or the one its OCI entry names); of it only
        # nvct's config path matters here: nothing else may steer a root process.
        config = request["env"].get(ENV_VAR)
        os.environ.pop(ENV_VAR, None)
        if config:
            os.environ[ENV_VAR] = config
        # The native hook's code id, when it asks for its native entry of this container's kind.
        rc = prestart(request["payload"], pinned, request["env"].get(NATIVE_ENV, ""))
    except Exception:  # the hook itself would have died with this traceback
        traceback.print_exc()
        rc = 1
    finally:
        sys.stderr.flush()
        pinned.close()
    return f"exit {rc}\n".encode()


def handle(conn: socket.socket, code: str) -> None:
    """Serve one launcher (in a worker of its own) and answer it."""
    reply = serve_one(conn, code)
    with contextlib.suppress(OSError):  # the launcher is gone; nothing waits on it
        conn.sendall(reply)


def listen(path: str) -> socket.socket:
    """The daemon's socket at ``path``, mode 0600 from its first instant."""
    _claim(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(128)
    return listener


def _claim(path: str) -> None:
    """Make way for our socket: refuse if a daemon answers there, remove a stale socket."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SystemExit(
            f"nvct-runtime-daemon: error: {path} exists and is not a socket "
            "(fix: remove it or pass another --socket)"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nothing listens: a daemon that did not stop cleanly
        return
    finally:
        probe.close()
    raise SystemExit(
        f"nvct-runtime-daemon: error: a daemon already listens on {path} "
        "(fix: stop it first, or pass another --socket)"
    )


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry."""
    parser = argparse.ArgumentParser(prog="nvct-runtime-daemon")
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="where launchers connect")
    args = parser.parse_args(argv)
    preload()
    code = code_id()
    listener = listen(args.socket)
    inode = os.stat(args.socket).st_ino
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    gc.freeze()  # the workers share the preloaded heap instead of copying it on first GC
    pool = Pool(listener, lambda conn: handle(conn, code), idle=populate_writable)
    print(f"nvct-runtime-daemon: listening on {args.socket}", file=sys.stderr, flush=True)
    try:
        pool.serve_forever()
    finally:
        with contextlib.suppress(OSError):
            if os.stat(args.socket).st_ino == inode:
                os.unlink(args.socket)  # new connections fail now: launchers run the shim
        pool.close()
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
