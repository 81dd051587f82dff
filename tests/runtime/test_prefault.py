"""The shim daemon's workers take their copy-on-write faults while idle (``prefault``)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nvct.runtime.launch.prefault import populate_writable, writable_private

MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1 /usr/bin/python3.11
55d0c0f00000-55d0c0f40000 rw-p 00300000 fd:01 1 /usr/bin/python3.11
55d0c1000000-55d0c2000000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000100000 rw-s 00000000 00:01 7 /dev/zero (deleted)
7f0000200000-7f0000201000 r-xp 00000000 fd:01 2 /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00104000 r--p 00000000 00:00 0 [vvar]
7ffd00104000-7ffd00106000 r-xp 00000000 00:00 0 [vdso]
"""


def test_only_private_writable_mappings_are_populated() -> None:
    assert writable_private(MAPS) == [
        (0x55D0C0F00000, 0x40000),  # the interpreter's data
        (0x55D0C1000000, 0x1000000),  # the heap
        (0x7FFD00000000, 0x21000),  # the stack
    ]  # not the shared mapping, nor read-only or kernel-provided ones


def _child_write_faults(populate: bool) -> tuple[int, int]:
    """Write faults a forked child takes on 8 MiB it shares with this process, and the
    bytes ``populate_writable`` copied first."""
    shared = bytearray(os.urandom(1)) * (8 << 20)  # written here: private pages, then shared
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        copied = populate_writable() if populate else 0
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for i in range(0, len(shared), 4096):
            shared[i] = 1
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        os.write(w, f"{faults} {copied}".encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    faults, copied = (int(x) for x in os.read(r, 100).split())
    os.close(r)
    return faults, copied


def test_a_populated_fork_takes_no_faults_on_what_it_shares() -> None:
    faults, _ = _child_write_faults(populate=False)
    assert faults >= 1500  # 2048 pages: each first write copies one
    faults, copied = _child_write_faults(populate=True)
    if copied == 0:
        pytest.skip("the kernel lacks MADV_POPULATE_WRITE (Linux 5.14)")
    assert copied >= 8 << 20
    assert faults < 100


def test_an_idle_worker_runs_the_idle_work_once_and_still_serves(tmp_path: Path) -> None:
    sock, marks = tmp_path / "s.sock", tmp_path / "marks"
    script = textwrap.dedent(
        f"""
        import os, socket
        from nvct.runtime.launch.prefork import Pool
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind({str(sock)!r}); listener.listen(8)
        def idle():
            with open({str(marks)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
        def handle(conn):
            conn.sendall(str(os.getpid()).encode())
        Pool(listener, handle, spares=1, idle=idle, settle_s=0.05).serve_forever()
        """
    )
    pool = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    try:
        for _ in range(200):
            if marks.exists():
                break
            time.sleep(0.02)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(10)
        client.connect(str(sock))
        served_by = client.recv(64).decode()
        client.close()
        time.sleep(0.3)  # its replacement settles too
    finally:
        pool.terminate()
        pool.wait(timeout=10)
    pids = marks.read_text().split()
    assert pids[0] == served_by  # the worker that served had done its idle work first
    assert len(pids) == len(set(pids)) == 2  # once per worker: the replacement did it too


def test_workers_settle_under_steady_starts_and_settled_ones_serve(tmp_path: Path) -> None:
    """Connections every 0.75 x ``settle_s``: each wakes every idle worker, and a worker
    whose wait began again at each wake would never settle; counted from its fork, each
    has settled before its turn comes, and a settled one answers ahead of a fresh one."""
    sock = tmp_path / "s.sock"
    script = textwrap.dedent(
        f"""
        import os, socket
        from nvct.runtime.launch.prefork import Pool
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind({str(sock)!r}); listener.listen(8)
        settled = []
        def handle(conn):
            conn.sendall(f"{{os.getpid()}} {{len(settled)}}".encode())
        pool = Pool(listener, handle, spares=2, idle=lambda: settled.append(1), settle_s=0.4)
        pool.serve_forever()
        """
    )
    pool = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    answers = []
    try:
        time.sleep(0.8)  # the first two workers settle
        for _ in range(8):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            for _ in range(200):
                try:
                    client.connect(str(sock))
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    time.sleep(0.02)
            answers.append(client.recv(64).decode().split())
            client.close()
            time.sleep(0.3)
    finally:
        pool.terminate()
        pool.wait(timeout=10)
    assert len({pid for pid, _ in answers}) == 8  # one-shot workers
    assert [flag for _, flag in answers] == ["1"] * 8  # every one had settled
