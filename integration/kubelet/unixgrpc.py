"""The stand-ins' gRPC servers on a Unix socket, as the kubelet and the runtimes serve theirs:
a stale socket file replaced at start, the file removed at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc


def serve(socket: Path, register: Callable[[Any], None], workers: int = 4) -> Any:
    """A started server on ``socket`` with the services ``register`` adds to it."""
    socket.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    register(server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


def end(server: Any, socket: Path) -> None:
    """Stop ``server`` (None: not started) and remove its socket."""
    if server is not None:
        server.stop(grace=None).wait()
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
