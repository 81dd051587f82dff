"""One doctor finding: a named check, its status, what was seen and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASS = "PASS"  # noqa: S105 - a status, not a password
WARN = "WARN"
FAIL = "FAIL"
SKIP = "SKIP"
STATUSES = (PASS, WARN, FAIL, SKIP)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check; ``fix`` is set for every FAIL (and for most WARNs)."""

    name: str
    status: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "status": self.status, "message": self.message, "fix": self.fix}


def passed(name: str, message: str) -> CheckResult:
    """A PASS result."""
    return CheckResult(name, PASS, message)


def warned(name: str, message: str, fix: str = "") -> CheckResult:
    """A WARN result."""
    return CheckResult(name, WARN, message, fix)


def failed(name: str, message: str, fix: str) -> CheckResult:
    """A FAIL result; a fix is mandatory."""
    return CheckResult(name, FAIL, message, fix)


def skipped(name: str, message: str) -> CheckResult:
    """A check that does not apply on this host."""
    return CheckResult(name, SKIP, message)
