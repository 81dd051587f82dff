"""Whether a pod may run on a node by its scheduling rules, as the scheduler's filters decide
(NodeName/NodeAffinity/TaintToleration): spec.nodeSelector, the required node affinity and the
node's NoSchedule/NoExecute taints against the pod's tolerations. Test-only: it reads the
rendered manifests, it schedules nothing. Its own tests: test_scheduling.py."""

from __future__ import annotations

from typing import Any


def _expression_holds(expression: dict[str, Any], values: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    wanted = expression.get("values", [])
    if operator == "In":
        return key in values and values[key] in wanted
    if operator == "NotIn":
        return key not in values or values[key] not in wanted
    if operator == "Exists":
        return key in values
    if operator == "DoesNotExist":
        return key not in values
    if operator in ("Gt", "Lt"):
        if key not in values:
            return False
        (bound,) = wanted
        have, limit = int(values[key]), int(bound)
        return have > limit if operator == "Gt" else have < limit
    raise ValueError(f"unknown node selector operator {operator!r}")


def _term_holds(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """Every expression of a term holds; an empty term matches no node (as the API says)."""
    labels = node["metadata"].get("labels", {})
    fields = {"metadata.name": node["metadata"]["name"]}
    expressions = term.get("matchExpressions", [])
    field_expressions = term.get("matchFields", [])
    if not expressions and not field_expressions:
        return False
    return all(_expression_holds(e, labels) for e in expressions) and all(
        _expression_holds(e, fields) for e in field_expressions
    )


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator", "Equal")
    if not toleration.get("key"):  # an empty key with Exists tolerates every taint
        return operator == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return operator == "Exists" or toleration.get("value", "") == taint.get("value", "")


def refusals(pod: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """Why the pod spec ``pod`` cannot run on ``node`` (empty: it can)."""
    labels = node["metadata"].get("labels", {})
    why = [
        f"nodeSelector {key}={value}"
        for key, value in pod.get("nodeSelector", {}).items()
        if labels.get(key) != value
    ]
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required is not None and not any(
        _term_holds(t, node) for t in required["nodeSelectorTerms"]
    ):
        why.append("required node affinity: no term matches")
    for taint in node.get("spec", {}).get("taints", []):
        if taint["effect"] == "PreferNoSchedule":
            continue
        if not any(_tolerates(t, taint) for t in pod.get("tolerations", [])):
            why.append(f"taint {taint['key']}:{taint['effect']} not tolerated")
    return why
