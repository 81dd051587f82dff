"""Custom resources the stand-in API server can serve as a cluster with that CRD installed
does: the kind (``add_kind``) and a check of each write against the CRD's published schema
(``server.defaults``), so a client that writes a field the real server would refuse or prune
gets a 422 here too.

CRDs: ``crds/<plural>.<group>.yaml``, copied from their projects (the file names its source).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from integration.apiserver.rbac import Rule
from integration.apiserver.store import Kind

CRDS = Path(__file__).resolve().parent / "crds"
NODE_FEATURES = Kind("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature", namespaced=True)
# The labeller's Role (deployments/helm/nvct/templates/labeller-nodefeature.yaml): the tests of
# its writer run under it, and the chart's test checks the two are the same.
WRITER = (Rule("nfd.k8s-sigs.io", "nodefeatures", frozenset({"get", "create", "update"})),)


@functools.cache
def schema(kind: Kind) -> dict[str, Any]:
    """The CRD's openAPIV3Schema of ``kind``'s version, made strict: an object schema that
    lists its properties refuses others (the API server would prune them: a field the client
    meant to store and silently lost)."""
    crd = yaml.safe_load((CRDS / f"{kind.resource}.{kind.group}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == kind.version]
    strict = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(strict)
    # metadata is ObjectMeta, which the CRD leaves open: check what the server itself checks
    strict["properties"]["metadata"] = {"type": "object"}
    return strict


def problems(kind: Kind, obj: dict[str, Any]) -> list[str]:
    """Where ``obj`` breaks ``kind``'s CRD schema (empty: valid)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema(kind))
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(obj)
    ]


def validating(kind: Kind) -> Any:
    """A ``server.defaults`` hook refusing (422) a write of ``kind`` its schema refuses."""

    def check(written: Kind, obj: dict[str, Any]) -> None:
        if written == kind:
            found = problems(kind, obj)
            if found:
                raise ValueError("; ".join(found))

    return check
