"""containerd's annotation pass-through patterns, matched as Go's path.Match does."""

from __future__ import annotations

import pytest

from nvct.base.cri_annotations import cdi_patterns, passes

KEY = "cdi.k8s.io/nvct-device-plugin_gpu"


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("cdi.k8s.io/*", True),
        ("cdi.k8s.io/nvct-device-plugin_?pu", True),
        ("*/*", True),
        ("cdi.k8s.io/[a-z]*", True),
        ("cdi.k8s.io/[^a-z]*", False),
        ("*", False),  # `*` never crosses a `/`
        ("cdi.k8s.io*", False),
        ("cdi.k8s.io/*/x", False),
        ("io.example/*", False),
        ("cdi.k8s.io/[", False),  # malformed: containerd skips it
    ],
)
def test_patterns_match_like_go_path_match(pattern: str, expected: bool) -> None:
    assert passes([pattern], KEY) is expected


def test_the_patterns_that_open_cdi_are_named() -> None:
    assert cdi_patterns(["io.example/*", "*/*", 3, "cdi.k8s.io/*"]) == ["*/*", "cdi.k8s.io/*"]
    assert cdi_patterns([]) == []
