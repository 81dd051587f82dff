"""doctor's checks of nvct's own programs: the runtime shim, the hook, runc/crun, ldconfig."""

from __future__ import annotations

from nvct.doctor import FAIL, PASS, Completed, binaries
from tests.doctor.conftest import FakeCommands, context, executable


def test_programs_missing(tmp_path) -> None:
    from nvct.config import Config
    from nvct.config.container import Runtime

    config = Config(
        runtime=Runtime(
            hook_path=str(tmp_path / "nope/nvct-hook"),
            low_level=("runc-none", str(tmp_path / "crun")),
        ),
        ldconfig=tmp_path / "ldconfig",
    )
    ctx = context(tmp_path, config)
    runtime = binaries.check_runtime(ctx)
    assert runtime.status == FAIL and "nvct-runtime is not on PATH" in runtime.message
    hook = binaries.check_hook(ctx)
    assert hook.status == FAIL and "hook-path" in hook.message
    low = binaries.check_low_level(ctx)
    assert low.status == FAIL and "install runc" in low.fix
    ldconfig = binaries.check_ldconfig(ctx)
    assert ldconfig.status == FAIL and "command -v ldconfig" in ldconfig.fix


def test_hook_runs_with_the_runtimes_interpreter(tmp_path) -> None:
    python = executable(tmp_path / "venv/bin/python3")
    runtime = tmp_path / "venv/bin/nvct-runtime"
    runtime.write_text(f"#!{python}\nimport sys\n")
    runtime.chmod(0o755)
    broken = FakeCommands(
        {"import nvct.hook": Completed(1, "", "ModuleNotFoundError: No module named 'nvct'\n")}
    )
    which = {"nvct-runtime": str(runtime)}.get
    ctx = context(tmp_path, run=broken, which=which)
    assert binaries.check_runtime(ctx).status == PASS
    result = binaries.check_hook(ctx)
    assert result.status == FAIL and f"{python} -I -m nvct.hook" in result.message
    assert "No module named 'nvct'" in result.message
    assert broken.calls[-1][0] == str(python)
    ok = context(tmp_path, which=which)
    assert binaries.check_hook(ok).status == PASS
