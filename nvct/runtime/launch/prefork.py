"""A pool of pre-forked, one-shot workers on a listening socket.

Every connection is served by a process of its own (its working directory, environment,
umask and stderr become the caller's, and whatever it does cannot outlive the connection), but
that process was forked before the connection arrived: a fork of the daemon costs ~2 ms on
the container's start otherwise. ``spares`` workers wait; the one that accepts tells the
parent (a pid on a pipe), which forks its replacement while the request is being served.

A worker runs ``idle`` once (the daemon's: take its copy-on-write faults ahead, ``prefault``)
``settle_s`` after its fork if no connection took it first: not at once, so that a replacement
forked during a container's start does not compete with it for the CPU. A worker that has not
settled lets one that has take a connection first (both are woken by it).

Workers ignore SIGTERM and SIGINT, so a create in flight always finishes; idle workers leave
when the parent closes the stop pipe (also when the parent dies: the kernel closes it).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable

_PID = struct.Struct("=i")
# How long a worker that has not settled yields a connection to one that has.
UNSETTLED_DELAY_S = 0.001


class Pool:
    """Serve ``listener`` with one forked process per connection, ``spares`` forked ahead."""

    def __init__(
        self,
        listener: socket.socket,
        handle: Callable[[socket.socket], None],
        spares: int = 2,
        idle: Callable[[], object] | None = None,
        settle_s: float = 0.25,
    ) -> None:
        self.listener = listener
        self.handle = handle
        self.spares = spares
        self.idle_work = idle
        self.settle_s = settle_s
        self.idle: set[int] = set()
        self.busy: set[int] = set()
        self._accepted_r, self._accepted_w = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        listener.setblocking(False)

    def serve_forever(self) -> None:
        """Keep the spares forked and reap workers, until an exception (SIGTERM's SystemExit)."""
        while True:
            while len(self.idle) < self.spares:
                self._fork_worker()
            ready, _, _ = select.select([self._accepted_r], [], [], 1.0)
            if ready:
                data = os.read(self._accepted_r, _PID.size * 64)
                for (pid,) in _PID.iter_unpack(data[: len(data) - len(data) % _PID.size]):
                    if pid in self.idle:
                        self.idle.discard(pid)
                        self.busy.add(pid)
            self._reap(os.WNOHANG)

    def close(self) -> None:
        """Let idle workers go, wait for the busy ones to finish their request."""
        os.close(self._stop_w)
        self._reap(0)
        os.close(self._stop_r)
        os.close(self._accepted_r)
        os.close(self._accepted_w)

    def _reap(self, flags: int) -> None:
        while self.idle or self.busy:
            try:
                pid, _status = os.waitpid(-1, flags)
            except ChildProcessError:
                self.idle.clear()
                self.busy.clear()
                return
            if pid == 0:
                return
            self.idle.discard(pid)
            self.busy.discard(pid)

    def _fork_worker(self) -> None:
        try:
            pid = os.fork()
        except OSError as err:  # out of processes: serve with fewer spares, try again later
            print(f"nvct-runtime-daemon: cannot fork: {err.strerror}", file=sys.stderr)
            time.sleep(0.5)
            return
        if pid:
            self.idle.add(pid)
            return
        status = 1
        try:
            self._work()
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)

    def _work(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.close(self._stop_w)
        os.close(self._accepted_r)
        waiting = [self.listener.fileno(), self._stop_r]
        idle_work = self.idle_work
        # Settled once, counted from the fork: a wake that another worker answered does not
        # start the wait again (at a few starts a second none would ever settle otherwise).
        settled_at = time.monotonic() + self.settle_s
        while True:
            if idle_work is None:
                ready, _, _ = select.select(waiting, [], [])
            else:
                ready, _, _ = select.select(
                    waiting, [], [], max(0.0, settled_at - time.monotonic())
                )
                if not ready:
                    idle_work()
                    idle_work = None
                    continue
                if self._stop_r not in ready:
                    # Not settled yet: let a settled worker, woken by the same connection,
                    # take it first; this one takes it only if none is there.
                    time.sleep(UNSETTLED_DELAY_S)
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                if self._stop_r in ready:
                    return  # stopping, and nobody is left waiting in the queue
                continue  # another worker took it
            break
        os.write(self._accepted_w, _PID.pack(os.getpid()))
        os.close(self._accepted_w)
        self.listener.close()
        conn.setblocking(True)
        with conn:
            self.handle(conn)
