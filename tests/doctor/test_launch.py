"""doctor's checks of how GPU creates reach nvct: the native launcher and the shim daemon."""

from __future__ import annotations

import socket

from nvct.doctor import PASS, SKIP, WARN, launch
from tests.doctor.conftest import context, executable


def test_the_launcher_kinds(tmp_path) -> None:
    native = tmp_path / "native" / "nvct-runtime"
    native.parent.mkdir()
    native.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(64))
    shell = tmp_path / "shell" / "nvct-runtime"
    shell.parent.mkdir()
    shell.write_text('#!/bin/sh\nexec runc "$@"\n')
    python = executable(tmp_path / "venv/bin/python3")
    script = tmp_path / "venv/bin/nvct-runtime"
    script.write_text(f"#!{python}\nimport sys\n")
    expected = {native: PASS, shell: PASS, script: WARN}
    for path, status in expected.items():
        result = launch.check_launcher(context(tmp_path, which={"nvct-runtime": str(path)}.get))
        assert result.status == status, (path, result)
    warn = launch.check_launcher(context(tmp_path, which={"nvct-runtime": str(script)}.get))
    assert "Python console script" in warn.message and "C compiler" in warn.fix
    assert launch.check_launcher(context(tmp_path)).status == SKIP


def test_the_shim_daemon_answers_or_the_cost_is_said(tmp_path) -> None:
    ctx = context(tmp_path)
    absent = launch.check_daemon(ctx)
    assert absent.status == WARN
    assert "runs the Python hook (docker --gpus, hooks.d)" in absent.message
    assert "the first GPU container of each kind" in absent.message
    assert "nvct-cli daemon start" in absent.fix
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(ctx.shim_socket))
        listener.listen(1)
        assert launch.check_daemon(ctx).status == PASS
