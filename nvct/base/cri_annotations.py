"""Which CRI annotations containerd's CRI plugin passes into a container's OCI spec.

containerd copies a container's CRI annotations into the spec only when a pattern of the
runtime handler's ``container_annotations`` matches, and the pod's (sandbox) annotations into
every container of the pod when one of ``pod_annotations`` matches. It matches with Go's
``path.Match``: ``*`` and ``?`` never cross a ``/``. So the device plugin's
``cdi.k8s.io/<key>`` answers need ``cdi.k8s.io/*`` in ``container_annotations``; the same
pattern in ``pod_annotations`` would let any pod name GPUs itself, past the scheduler.

Here, below every frontend: ``configure`` writes the lists and doctor judges them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CDI_PREFIX = "cdi.k8s.io/"
CDI_PATTERN = CDI_PREFIX + "*"
# What a pattern is tried against: the device plugin's key, and any other name a pod could pick.
_CDI_PROBES = (CDI_PREFIX + "nvct-device-plugin_gpu", CDI_PREFIX + "a")


def _regex(pattern: str) -> re.Pattern[str] | None:
    """Go's path.Match as a regex; None for a malformed pattern (containerd skips it)."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            i += 1
            if i == len(pattern):
                return None
            out.append(re.escape(pattern[i]))
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                return None
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error:
        return None


def passes(patterns: Iterable[object], key: str) -> bool:
    """Whether containerd passes annotation ``key`` through a handler's ``patterns``."""
    for pattern in patterns:
        if isinstance(pattern, str):
            regex = _regex(pattern)
            if regex is not None and regex.match(key):
                return True
    return False


def cdi_patterns(patterns: Iterable[object]) -> list[str]:
    """The patterns that let some ``cdi.k8s.io/`` annotation through."""
    return [p for p in patterns if isinstance(p, str) and any(passes([p], k) for k in _CDI_PROBES)]
