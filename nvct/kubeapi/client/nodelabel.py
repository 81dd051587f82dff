"""Set or remove one label of one Node, touching nothing else of it: what nvct's node installer
does to say "this node's engine runs nvct's handlers" (README: Security model in the cluster).

The change is a JSON merge patch of ``metadata.labels`` alone, carrying the resourceVersion of
the Node as it was read: the decision "already so, nothing to write" is then never made on a
stale copy, and a write that crossed another one is a 409 Conflict, read again and retried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nvct.kubeapi.client.access import ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError, describe

# Writes that cross others (the kubelet's status, NFD, other controllers) before one lands;
# the API server's own patch loop gives up after 5 as well.
CONFLICT_RETRIES = 5
# The API's rules for a label: an optional DNS-subdomain prefix and a name of 63 characters.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")


@dataclass(frozen=True)
class LabelChange:
    """``key`` set to ``value``, or removed where ``value`` is None."""

    key: str
    value: str | None

    def __str__(self) -> str:
        return f"{self.key}-" if self.value is None else f"{self.key}={self.value}"


def parse_change(text: str) -> LabelChange:
    """``KEY=VALUE`` (set) or ``KEY-`` (remove), as ``kubectl label`` takes them.

    Raises:
        KubeApiError: the text is neither, or the key or value breaks the API's label rules.
    """
    key, sep, value = text.partition("=")
    remove = not sep and key.endswith("-")
    if remove:
        key = key[:-1]
    if not (sep or remove):
        raise KubeApiError(
            f"label change {text!r} is neither KEY=VALUE nor KEY-",
            hint="write e.g. nvct.io/runtime.ready=true to set it, nvct.io/runtime.ready- to "
            "remove it",
        )
    prefix = key.rpartition("/")[0]
    if not _KEY.fullmatch(key) or len(prefix) > 253:
        raise KubeApiError(
            f"label key {key!r} is not a valid Kubernetes label key",
            hint="an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_', '.'",
        )
    if sep and not _VALUE.fullmatch(value):
        raise KubeApiError(
            f"label value {value!r} of {key} is not a valid Kubernetes label value",
            hint="up to 63 letters, digits, '-', '_', '.', beginning and ending with a letter or "
            "digit",
        )
    return LabelChange(key, None if remove else value)


def change_node_label(access: ClusterAccess, node: str, change: LabelChange) -> bool:
    """Make ``node``'s label what ``change`` says; whether anything had to be written.

    Raises:
        KubeApiError: the configuration is unusable, the Node does not exist, the API server
            refused (RBAC or an admission policy: its message), or writes kept conflicting.
    """
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    client = access.connect()
    for _ in range(CONFLICT_RETRIES):
        try:
            found: Any = client.get(Node, node)
        except Exception as err:  # lightkube's ApiError, httpx's transport errors
            raise _refused(err, access, node, change) from err
        if (found.metadata.labels or {}).get(change.key) == change.value:
            return False
        patch = {
            "metadata": {
                "resourceVersion": found.metadata.resourceVersion,
                "labels": {change.key: change.value},  # None: merge patch's "delete"
            }
        }
        try:
            client.patch(Node, node, patch, patch_type=PatchType.MERGE)
        except Exception as err:
            refused = _refused(err, access, node, change)
            if refused.code == 409:
                continue  # another writer came between our read and our write
            raise refused from err
        return True
    raise KubeApiError(
        f"Node {node}: label {change} still conflicted with other writers after "
        f"{CONFLICT_RETRIES} tries",
        hint="run it again (the installer retries by itself)",
        code=409,
    )


def _refused(
    err: BaseException, access: ClusterAccess, node: str, change: LabelChange
) -> KubeApiError:
    found = describe(err, access.server(), access.token_file)
    if found.code == 404:
        return KubeApiError(
            f"Node {node} does not exist (404): label {change} not written",
            hint="NODE_NAME must be this pod's node (fieldRef spec.nodeName)",
            code=404,
        )
    return found
