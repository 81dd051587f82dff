"""A node's root filesystem for the node installer's tests, without touching this machine's:
an overlay of ``/`` (writes land in a tmpfs upper layer) in a private mount namespace that a
holder process keeps alive, with /dev, /proc, /sys and /tmp bound in. Processes run in it
through ``enter()`` (nsenter into the namespace, chroot into the overlay): the installer with
``HOST=/``, and a containerd whose ``/usr/bin/nvct-runtime`` is the one the installer copied.
Its directories under /tmp are the machine's own, so the tests reach its sockets and logs.

The tests read and write the node's files through ``path()`` (``/proc/<holder>/root/...``).
Stopping the holder (by pid) ends the namespace, and with it every mount and file it held.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from integration.harness import HarnessError
from integration.harness.processes import terminate

# Run by ``unshare -m``: nothing mounted here is seen outside the namespace.
HOLDER = r"""
set -eu
mount --make-rprivate /
w=$1
mount -t tmpfs nvct-node "$w"
mkdir "$w/upper" "$w/work" "$w/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$w/upper,workdir=$w/work" "$w/root"
for d in dev proc sys tmp; do mount --rbind "/$d" "$w/root/$d"; done
echo ready >"$w/root/run/nvct-node-ready"
exec sleep 2147483647
"""


class NodeRoot:
    """The node; ``start()``, then ``stop()``. ``work`` must not be under /tmp (it would be
    bound into the node beside its own tmpfs)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.merged = work / "root"  # the node's / as the holder sees it
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise HarnessError("the node root is not started")
        return self._proc.pid

    def start(self) -> NodeRoot:
        self.work.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            ["unshare", "--mount", "sh", "-c", HOLDER, "node-root", str(self.work)],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not self.path("run/nvct-node-ready").exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                stderr = self._proc.stderr.read().decode() if self._proc.stderr else ""
                self.stop()
                raise HarnessError(f"the node root did not come up: {stderr.strip()}")
            time.sleep(0.05)
        return self

    def path(self, rel: str) -> Path:
        """The node's ``/rel``, as seen from outside its namespace."""
        return Path(f"/proc/{self.pid}/root") / str(self.merged).lstrip("/") / rel.lstrip("/")

    def enter(self) -> list[str]:
        """The argv prefix that runs a command on the node (its mounts, its root)."""
        return ["nsenter", "-t", str(self.pid), "-m", "--", "chroot", str(self.merged)]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc)
