"""A gRPC channel to a node-local service over its Unix socket (the kubelet's pod-resources,
the runtime's CRI), for clients that must not fail to import where grpc is absent."""

from __future__ import annotations

import os
import stat
from typing import Any

# The kubelet's own limit for the answers of its APIs and of the runtime's (dcgm-exporter reads
# as much); gRPC's default 4 MiB would refuse a dense node's listing.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def open_channel(socket: str) -> tuple[Any, Any, str]:
    """(grpc, a channel to ``unix://socket``, "") or (None, None, why grpc cannot be imported):
    not installed (a source install without it), or the packages' grpcio built for another
    Python than this one; callers then have no service to ask, which they handle."""
    try:
        import grpc
    except ImportError as err:
        from nvct.kubeapi.grpc_deps import grpc_unimportable

        return None, None, grpc_unimportable(err)
    channel = grpc.insecure_channel(
        f"unix://{socket}", options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    )
    return grpc, channel, ""


def is_socket(path: str) -> bool:
    """Whether ``path`` is a Unix socket now."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
