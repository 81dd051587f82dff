"""doctor's CRI-O check: the drop-in, and a crio started before it changed."""

from __future__ import annotations

from nvct.doctor import FAIL, PASS, WARN, crio
from tests.doctor.conftest import by_name, context, fake_process


def test_crio_drop_in(tmp_path) -> None:
    dropins = tmp_path / "crio/crio.conf.d"
    dropins.mkdir(parents=True)
    (dropins / "10-base.conf").write_text("[crio.runtime]\nlog_level = 'info'\n")
    ctx = context(tmp_path)
    assert by_name(crio.check_crio(ctx), crio.CONFIG).status == WARN  # no crio running
    fake_process(tmp_path / "proc", 55, "crio", ["/usr/bin/crio"])
    result = by_name(crio.check_crio(ctx), crio.CONFIG)
    assert result.status == FAIL and "nvct-cli configure --runtime crio" in result.fix
    (dropins / "99-nvidia.conf").write_text(
        '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvct-runtime"\n'
        'runtime_type = "oci"\n'
    )
    results = crio.check_crio(ctx)
    assert by_name(results, crio.CONFIG).status == PASS
    restart = by_name(results, crio.RESTART)  # the drop-in was written after crio started
    assert restart.status == WARN and "99-nvidia.conf changed" in restart.message
