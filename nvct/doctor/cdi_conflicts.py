"""CDI device names that two spec files of one directory both define.

By the CDI rules (nvct-runtime's, containerd's and CRI-O's alike) neither definition is then
used, so every container naming such a device fails to start. The usual cause: two specs of one
kind in ``/var/run/cdi`` (``nvct-cli cdi generate``'s, NVIDIA's ``nvidia.yaml``, or a
nvct-device-plugin from before its spec had a kind of its own). One result per pair of files.
"""

from __future__ import annotations

from nvct.doctor.context import DoctorContext
from nvct.doctor.result import CheckResult, failed, passed

NAME = "cdi-conflicts"
_SHOWN = 4


def check_cdi_conflicts(ctx: DoctorContext) -> list[CheckResult]:
    """A FAIL per pair of files defining the same names (with which to remove or
    regenerate), else one PASS."""
    from nvct.cdi.specs import load_cdi_specs

    specs = load_cdi_specs(ctx.cdi_dirs)
    pairs: dict[tuple[str, str], list[str]] = {}
    for conflict in specs.conflicts:
        pairs.setdefault((conflict.first, conflict.second), []).append(conflict.name)
    results = []
    for (first, second), names in pairs.items():
        clash = next(c for c in specs.conflicts if (c.first, c.second) == (first, second))
        shown = ", ".join(names[:_SHOWN]) + (" ..." if len(names) > _SHOWN else "")
        results.append(
            failed(
                NAME,
                f"{first} and {second} both define {len(names)} CDI device(s) ({shown}): "
                "neither definition is used, so containers naming them do not start",
                clash.fix(),
            )
        )
    if not results:
        dirs = ", ".join(map(str, ctx.cdi_dirs))
        results.append(passed(NAME, f"no CDI device is defined twice in {dirs}"))
    return results
