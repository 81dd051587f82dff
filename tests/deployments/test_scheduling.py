"""The test-only scheduling matcher (scheduling.py) against the scheduler's rules, case by case."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deployments.scheduling import refusals


def node(labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints or []}}


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
    }


GPU = {"key": "gpu", "operator": "In", "values": ["true"]}
NOT_OFF = {"key": "deploy", "operator": "NotIn", "values": ["false"]}


@pytest.mark.parametrize(
    ("pod", "labels", "admitted"),
    [
        ({}, {}, True),
        ({"nodeSelector": {"gpu": "true"}}, {"gpu": "true"}, True),
        ({"nodeSelector": {"gpu": "true"}}, {"gpu": "false"}, False),
        ({"nodeSelector": {"gpu": "true"}}, {}, False),
        (affinity([GPU]), {"gpu": "true"}, True),
        (affinity([GPU]), {}, False),
        (affinity([NOT_OFF]), {}, True),  # NotIn holds where the label is absent
        (affinity([NOT_OFF]), {"deploy": "false"}, False),
        (affinity([GPU, NOT_OFF]), {"gpu": "true", "deploy": "false"}, False),  # AND in a term
        (affinity([GPU], [NOT_OFF]), {}, True),  # OR across terms
        (affinity([{"key": "gpu", "operator": "Exists"}]), {"gpu": ""}, True),
        (affinity([{"key": "gpu", "operator": "DoesNotExist"}]), {"gpu": ""}, False),
        (affinity([{"key": "n", "operator": "Gt", "values": ["3"]}]), {"n": "4"}, True),
        (affinity([{"key": "n", "operator": "Lt", "values": ["3"]}]), {"n": "4"}, False),
        (affinity([{"key": "n", "operator": "Gt", "values": ["3"]}]), {}, False),
        (affinity([]), {"gpu": "true"}, False),  # an empty term matches nothing
    ],
)
def test_node_selector_and_required_affinity(pod, labels, admitted) -> None:
    assert (refusals(pod, node(labels)) == []) is admitted


def test_match_fields_name_the_node() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    pod = {"affinity": {"nodeAffinity": required}}
    assert refusals(pod, node({})) == []
    term["matchFields"][0]["values"] = ["n2"]
    assert refusals(pod, node({})) == ["required node affinity: no term matches"]


TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "taint", "admitted"),
    [
        ([], TAINT, False),
        ([], {**TAINT, "effect": "PreferNoSchedule"}, True),  # only a preference
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], TAINT, True),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], TAINT, True),
        ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], TAINT, False),
        ([{"key": "nvidia.com/gpu", "value": "present"}], TAINT, True),  # Equal by default
        ([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "x"}], TAINT, False),
        ([{"key": "other", "operator": "Exists"}], TAINT, False),
        ([{"operator": "Exists"}], {**TAINT, "effect": "NoExecute"}, True),  # tolerates all
        ([{"operator": "Equal", "value": "present"}], TAINT, False),
    ],
)
def test_taints_against_tolerations(tolerations, taint, admitted) -> None:
    pod = {"tolerations": tolerations}
    assert (refusals(pod, node({}, [taint])) == []) is admitted
