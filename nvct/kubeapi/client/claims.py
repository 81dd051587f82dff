"""Read one ResourceClaim as the API server returns it: what a DRA driver reads when the kubelet
asks it to prepare a claim it names only by reference.

``resource.k8s.io/v1`` (Kubernetes 1.34+) first, then ``v1beta2`` (1.33) and ``v1beta1``
(1.32): the fields a driver reads (``status.allocation.devices.results`` and ``.config``) are
the same in all three. A 404 moves on to the next version (the API server has no such
version, or no such claim); the version that answered is asked first from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nvct.kubeapi.client.access import ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError, describe

VERSIONS = ("v1", "v1beta2", "v1beta1")


def claim_reader(access: ClusterAccess) -> Callable[[str, str], Mapping[str, Any]]:
    """A function (namespace, name) -> the claim as a plain mapping; one client for all calls.

    Raises:
        KubeApiError: (from ``access.connect`` and from each call) the configuration is
            unusable, or the server refused or did not answer (404 named as such).
    """
    from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2

    client = access.connect()
    kinds: list[Any] = [
        resource_v1.ResourceClaim,
        resource_v1beta2.ResourceClaim,
        resource_v1beta1.ResourceClaim,
    ]

    def read(namespace: str, name: str) -> Mapping[str, Any]:
        for kind in list(kinds):
            try:
                claim: Any = client.get(kind, name, namespace=namespace)
            except Exception as err:  # lightkube's ApiError, httpx's transport errors
                found = describe(err, access.server(), access.token_file)
                if found.code == 404:
                    continue
                raise found from err
            if kinds[0] is not kind:  # this server's version: ask it first from now on
                kinds.remove(kind)
                kinds.insert(0, kind)
            out: Mapping[str, Any] = claim.to_dict()
            return out
        raise KubeApiError(
            f"ResourceClaim {namespace}/{name} does not exist (404 from resource.k8s.io "
            f"{', '.join(VERSIONS)})",
            hint="the claim was deleted; the kubelet stops asking once its pod is gone",
            code=404,
        )

    return read
