"""Read one ResourceClaim (``resource.k8s.io/v1``) as the API server returns it: what a DRA
driver reads when the kubelet asks it to prepare a claim it names only by reference."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nvct.kubeapi.client.access import ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError, describe


def claim_reader(access: ClusterAccess) -> Callable[[str, str], Mapping[str, Any]]:
    """A function (namespace, name) -> the claim as a plain mapping; one client for all calls.

    Raises:
        KubeApiError: (from ``access.connect`` and from each call) the configuration is
            unusable, or the server refused or did not answer (404 named as such).
    """
    from lightkube.resources.resource_v1 import ResourceClaim

    client = access.connect()

    def read(namespace: str, name: str) -> Mapping[str, Any]:
        try:
            claim = client.get(ResourceClaim, name, namespace=namespace)
        except Exception as err:  # lightkube's ApiError, httpx's transport errors
            found = describe(err, access.server(), access.token_file)
            if found.code == 404:
                raise KubeApiError(
                    f"ResourceClaim {namespace}/{name} does not exist (404)",
                    hint="the claim was deleted; the kubelet stops asking once its pod is gone",
                    code=404,
                ) from err
            raise found from err
        out: Mapping[str, Any] = claim.to_dict()
        return out

    return read
