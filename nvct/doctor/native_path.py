"""Which path recent GPU containers took, from nvct's own log: the native one (the launcher's
create or nvct-hook in C, no interpreter) or Python (a daemon worker, the Python shim or hook),
and the reasons the native programs gave for leaving a container to Python.

The first container of each kind always goes to Python, which writes the native entry for the
next ones; a kind that keeps going there has a reason of its own (a CUDA compat directory in
the image, a symlinked ld.so.cache, a spec the native scanner leaves alone...), which the
Python side logs as ``native_declined``. This check reads the log's tail only: it says what
happened, it does not predict.
"""

from __future__ import annotations

import json
import os
from collections import Counter

from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, passed, skipped, warned

NAME = "native-path"
# The events that end a GPU container's preparation, one per container and program.
EVENTS = ("container_prepared", "container_configured")
RECENT = 50  # the containers looked at
TAIL_BYTES = 512 << 10  # of the log: enough for RECENT containers among other lines
EXPECTED = (  # reasons every node meets now and then: not a kind stuck on the slow path
    "the first container of its kind",
    "the driver changed",
    "the CDI specs changed",
)
SHOWN_REASONS = 3


def tail_events(path: str) -> list[dict[str, object]]:
    """The JSON objects of the last TAIL_BYTES of ``path`` (a partial first line skipped).

    Raises:
        OSError: the log cannot be read.
    """
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - TAIL_BYTES))
        data = f.read()
    lines = data.splitlines()
    if size > TAIL_BYTES and lines:
        lines = lines[1:]
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def check_native_path(ctx: DoctorContext) -> CheckResult:
    """How many of the last GPU containers nvct prepared natively, and why the others not."""
    path = ctx.config.log.file
    try:
        events = tail_events(path)
    except FileNotFoundError:
        return skipped(NAME, f"no log at {path} yet: no GPU container has started through nvct")
    except OSError as err:
        return skipped(NAME, f"cannot read {path}: {err.strerror}")
    done = [e for e in events if e.get("event") in EVENTS][-RECENT:]
    if not done:
        return skipped(NAME, f"no GPU container in the tail of {path} yet")
    native = sum(1 for e in done if e.get("via") == "native")
    reasons = Counter(
        str(e.get("native_declined") or "not said (an older nvct, or a fixed-path hook)")
        for e in done
        if e.get("via") != "native"
    )
    shown = "; ".join(f"{why} (x{n})" for why, n in reasons.most_common(SHOWN_REASONS))
    more = len(reasons) - SHOWN_REASONS
    message = (
        f"{native} of the last {len(done)} GPU containers in {path} were prepared natively "
        "(no interpreter, no daemon)"
    )
    if reasons:
        message += f"; {len(done) - native} by Python: {shown}"
        message += f"; {more} other reason(s)" if more > 0 else ""
    stuck = [why for why in reasons if not why.startswith(EXPECTED)]
    if stuck and native * 2 < len(done):
        return warned(
            NAME,
            message,
            f"most GPU containers take the slower path because {stuck[0]}: change what it "
            "names (the image, the spec's edits) where you can, or accept ~5-13 ms more per "
            "start; every such start is still correct",
        )
    return passed(NAME, message)
