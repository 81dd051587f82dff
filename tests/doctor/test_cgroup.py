"""doctor's cgroup check: the host's cgroup version and docker's cgroup driver."""

from __future__ import annotations

import json

from nvct.doctor import PASS, WARN, cgroup
from tests.doctor.conftest import context, docker_info


def test_cgroup_version_and_docker_driver(tmp_path) -> None:
    ctx = context(tmp_path)
    assert cgroup.check_cgroup(ctx, None).status == WARN
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpu io memory\n")
    info = json.loads(docker_info().stdout)
    result = cgroup.check_cgroup(ctx, info)
    assert result.status == PASS
    assert result.message.startswith("cgroup v2; docker: cgroup driver systemd, cgroup v2")
    v1 = cgroup.check_cgroup(ctx, {**info, "CgroupVersion": "1"})
    assert v1.status == WARN and "disagree" in v1.message
