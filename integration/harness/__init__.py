"""Harness for the real-container tests: private dockerds, rootfs images, OCI bundles.

Modules: ``dockerd`` (``Dockerd``), ``images`` (rootfs trees, ``docker_import``), ``bundles``
(``make_bundle``, ``run_runc``), ``skips`` (skip reasons). This module holds what they share:
the error type and ``run_command``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CommandFailed", "HarnessError", "run_command", "tail"]


class HarnessError(RuntimeError):
    """The harness could not set up or tear down what a test needs."""


class CommandFailed(HarnessError):
    """A command the harness ran exited non-zero or timed out."""

    def __init__(self, argv: Sequence[str], message: str, stdout: str, stderr: str) -> None:
        self.argv = list(argv)
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(
            f"{' '.join(self.argv)}: {message}\n"
            f"--- stdout (tail) ---\n{tail(stdout)}\n--- stderr (tail) ---\n{tail(stderr)}"
        )


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data


def run_command(
    argv: Sequence[str | os.PathLike[str]],
    *,
    input: str | bytes | None = None,
    timeout: float | None = 120,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` capturing its output as text; raise ``CommandFailed`` on error or timeout.

    ``input`` may be bytes (a tar stream for ``docker import``); the output is decoded either way.
    """
    args = [os.fspath(a) for a in argv]
    try:
        raw = subprocess.run(
            args,
            input=input.encode() if isinstance(input, str) else input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(
            args, f"timed out after {timeout} s", _text(exc.stdout), _text(exc.stderr)
        ) from None
    done = subprocess.CompletedProcess(args, raw.returncode, _text(raw.stdout), _text(raw.stderr))
    if check and done.returncode != 0:
        raise CommandFailed(args, f"exit status {done.returncode}", done.stdout, done.stderr)
    return done
