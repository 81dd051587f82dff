"""A node's GPU labels as node-feature-discovery's ``NodeFeature`` object, as NVIDIA's GPU
feature discovery writes it with ``--use-node-feature-api``: ``nfd.k8s-sigs.io/v1alpha1``,
named ``nvidia-features-for-<node>`` in the labeller's namespace, labelled
``nfd.node.kubernetes.io/node-name: <node>`` (what nfd-master selects a node's objects by),
``spec.labels`` the labels and ``spec.features`` empty.

GFD's name is kept on purpose: in GFD's namespace a node moving from GFD to nvct has its one
object taken over (its labels replaced), not a second one beside it whose stale labels
nfd-master would merge with nvct's.

Written by get, then create or replace with the stored resourceVersion (a concurrent writer is a
409 and a new get); a round whose labels equal the stored ones writes nothing. The labels are
compared without ``nvidia.com/gfd.timestamp``, which changes every round: the stored timestamp
says when the labels last changed, and an unchanged node costs the API server one get a round.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nvct.kubeapi.client.errors import KubeApiError, describe

if TYPE_CHECKING:
    from lightkube import Client

GROUP, VERSION, KIND, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures"
CRD = f"{PLURAL}.{GROUP}"
NAME_PREFIX = "nvidia-features-for-"  # GFD's (internal/lm/output.go)
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"  # NFD's NodeFeatureObjNodeNameLabel
TIMESTAMP = "nvidia.com/gfd.timestamp"
# A 409 means another writer changed the object between our get and our write: get it again.
CONFLICT_RETRIES = 5


def object_name(node: str) -> str:
    return NAME_PREFIX + node


def node_feature(node: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The whole object for ``node`` (what a create sends)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": object_name(node),
            "namespace": namespace,
            "labels": {NODE_NAME_LABEL: node},
        },
        "spec": _spec(labels),
    }


def _spec(labels: Mapping[str, str]) -> dict[str, Any]:
    # NFD's NewFeatures(): the three sets present and empty, as GFD sends them
    return {
        "features": {"flags": {}, "attributes": {}, "instances": {}},
        "labels": dict(sorted(labels.items())),
    }


def _comparable(spec: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    labels = {k: v for k, v in (spec.get("labels") or {}).items() if k != TIMESTAMP}
    features = {k: v for k, v in (spec.get("features") or {}).items() if v}
    return labels, features


@functools.cache
def resource() -> Any:
    """lightkube's class for NodeFeature (a CRD: a generic resource)."""
    from lightkube.generic_resource import create_namespaced_resource

    return create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)


class NodeFeatureWriter:
    """Keeps ``node``'s NodeFeature object in ``namespace`` saying the labels ``publish`` is
    given, through ``client`` (nvct's API client)."""

    def __init__(
        self,
        client: Client,
        node: str,
        namespace: str,
        *,
        server: str = "",
        token_file: str | None = None,
    ) -> None:
        self.client, self.node, self.namespace = client, node, namespace
        self.server, self.token_file = server, token_file
        self.name = object_name(node)

    def publish(self, labels: Mapping[str, str]) -> str:
        """Write ``labels`` where they differ from the stored ones: ``created``, ``updated`` or
        ``unchanged``.

        Raises:
            KubeApiError: refused (403: RBAC or the admission policy; 404 from the create: the
                API server has no NodeFeature CRD) or unreachable, one line with the fix.
        """
        for _ in range(CONFLICT_RETRIES):
            stored = self._get()
            if stored is None:
                if self._write(node_feature(self.node, self.namespace, labels), create=True):
                    return "created"
                continue  # created by another writer since our get
            if self._says(stored, labels):
                return "unchanged"
            old = stored["metadata"]
            metadata: dict[str, Any] = {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": old.get("resourceVersion"),  # a newer one: 409
                "labels": {**(old.get("labels") or {}), NODE_NAME_LABEL: self.node},
            }
            for key in ("annotations", "ownerReferences"):  # others' metadata stays
                if old.get(key):
                    metadata[key] = old[key]
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": metadata,
                "spec": _spec(labels),
            }
            if self._write(body, create=False):
                return "updated"
        raise KubeApiError(
            f"NodeFeature {self.namespace}/{self.name} was changed by another writer "
            f"{CONFLICT_RETRIES} times in a row (409 Conflict)",
            hint="only this node's labeller may write it: stop the other writer (GFD?)",
            code=409,
        )

    def _says(self, stored: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        node = (stored.get("metadata", {}).get("labels") or {}).get(NODE_NAME_LABEL)
        return node == self.node and _comparable(stored.get("spec") or {}) == _comparable(
            _spec(labels)
        )

    def _get(self) -> dict[str, Any] | None:
        try:
            found = self.client.get(resource(), self.name, namespace=self.namespace)
        except Exception as err:  # lightkube's ApiError, httpx's transport errors
            failure = self._describe(err)
            if failure.code == 404:
                return None  # no such object, or no such resource: the create tells which
            raise failure from err
        out: dict[str, Any] = found.to_dict()
        return out

    def _write(self, body: dict[str, Any], *, create: bool) -> bool:
        """True when written; False on a 409 (get again)."""
        obj = resource().from_dict(body)
        try:
            if create:
                self.client.create(obj, namespace=self.namespace)
            else:
                self.client.replace(obj)  # the namespace is the object's
        except Exception as err:
            failure = self._describe(err)
            if failure.code == 409:
                return False
            if failure.code == 404 and create:
                raise self._no_crd() from err
            raise failure from err
        return True

    def _describe(self, err: BaseException) -> KubeApiError:
        failure = describe(err, self.server, self.token_file)
        if failure.code != 403:
            return failure
        return KubeApiError(
            failure.message,
            hint=f"grant the labeller's ServiceAccount get, create and update on {CRD} in "
            f"namespace {self.namespace} (the chart's Role nvct-labeller-nodefeatures), and "
            f"write only the object of its own node ({self.name})",
            code=403,
        )

    def _no_crd(self) -> KubeApiError:
        return KubeApiError(
            f"the Kubernetes API server at {self.server} has no {CRD} ({GROUP}/{VERSION}: "
            "404 on create): node-feature-discovery's NodeFeature CRD is not installed",
            hint="install node-feature-discovery with its CRDs (v0.14 or later), or write "
            "NFD's features.d file instead (chart: nfd.enableNodeFeatureApi=false; nvct-cli "
            "labels --output FILE without --use-node-feature-api)",
            code=404,
        )
