"""``nvct-cli doctor``: PASS / WARN / FAIL checks of everything GPU containers depend on.

One small module per check family; each check is a function returning ``CheckResult``s, and
reads the host only through a ``DoctorContext`` (roots and overridable paths).
"""

from __future__ import annotations

from nvct.doctor.context import Completed, DoctorContext, run_command
from nvct.doctor.report import DoctorReport, run_doctor
from nvct.doctor.result import FAIL, PASS, SKIP, WARN, CheckResult

__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "WARN",
    "CheckResult",
    "Completed",
    "DoctorContext",
    "DoctorReport",
    "run_command",
    "run_doctor",
]
