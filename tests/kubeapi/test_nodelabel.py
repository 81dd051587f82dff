"""``nvct-cli node-label``'s argument: kubectl's ``KEY=VALUE`` / ``KEY-``, checked against the
API's label rules before anything is sent (the command against a server: integration/
test_node_label.py)."""

from __future__ import annotations

import pytest

from nvct.kubeapi.client.errors import KubeApiError
from nvct.kubeapi.client.nodelabel import LabelChange, parse_change


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("nvct.io/runtime.ready=true", LabelChange("nvct.io/runtime.ready", "true")),
        ("nvct.io/runtime.ready-", LabelChange("nvct.io/runtime.ready", None)),
        ("plain=", LabelChange("plain", "")),  # an empty value is a value
        ("a-b_c.d=x-y", LabelChange("a-b_c.d", "x-y")),
    ],
)
def test_set_and_remove(text: str, change: LabelChange) -> None:
    assert parse_change(text) == change
    assert str(change) == text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("nvct.io/runtime.ready", "neither KEY=VALUE nor KEY-"),
        ("a b=c", "not a valid Kubernetes label key"),
        ("Bad.Prefix/x=1", "not a valid Kubernetes label key"),
        ("x" * 64 + "=1", "not a valid Kubernetes label key"),
        ("k=-x", "not a valid Kubernetes label value"),
        ("k=" + "v" * 64, "not a valid Kubernetes label value"),
    ],
)
def test_a_bad_change_names_what_is_wrong(text: str, said: str) -> None:
    with pytest.raises(KubeApiError, match=said) as err:
        parse_change(text)
    assert "(fix: " in err.value.one_line()
