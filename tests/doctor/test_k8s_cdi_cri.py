"""doctor's device-plugin-cdi-cri check: a cdi-cri answer meets a containerd that drops CDI
devices (1.6, or 1.7 with enable_cdi off) on a Kubernetes node."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvct.config import Config
from nvct.config.kubernetes import DevicePlugin
from nvct.doctor import FAIL, PASS, SKIP, WARN, Completed
from nvct.doctor.k8s_cdi_cri import check_cdi_cri
from tests.doctor.conftest import FakeCommands, context


def ctx(tmp: Path, version: str | None, strategies: tuple[str, ...], cri: str = "") -> object:
    config = tmp / "containerd/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n{cri}')
    answer = Completed(0, f"containerd github.com/containerd/containerd {version} abc\n", "")
    return context(
        tmp,
        Config(device_plugin=DevicePlugin(device_list_strategy=strategies)),
        run=FakeCommands({"containerd --version": answer}),
        which=lambda name: f"/usr/bin/{name}" if version and name == "containerd" else None,
    )


@pytest.mark.parametrize(
    ("version", "cri", "strategies", "status", "said"),
    [
        ("1.6.20~ds1", "", ("cdi-cri",), FAIL, "containerd 1.6.20~ds1 has no CDI"),
        ("1.6.20~ds1", "", ("cdi-cri", "cdi-annotations"), WARN, "from the cdi-annotations"),
        ("v1.7.13", "", ("cdi-cri",), FAIL, "has CDI off (enable_cdi)"),
        ("v1.7.13", "enable_cdi = true\n", ("cdi-cri",), PASS, "applies the cdi-cri answer"),
        ("v2.0.0", "", ("cdi-cri",), PASS, "applies"),
        ("v2.0.0", "enable_cdi = false\n", ("cdi-cri",), FAIL, "has CDI off"),
        ("1.6.20", "", ("volume-mounts",), SKIP, "no cdi-cri answer"),
        (None, "", ("cdi-cri",), SKIP, "no containerd here"),
    ],
)
def test_cdi_cri_against_containerd(
    tmp_path: Path,
    version: str | None,
    cri: str,
    strategies: tuple[str, ...],
    status: str,
    said: str,
) -> None:
    result = check_cdi_cri(ctx(tmp_path, version, strategies, cri))  # type: ignore[arg-type]
    assert result.status == status and said in result.message, result
    if status == FAIL:
        assert "nvct-cli configure --runtime containerd --cdi" in result.fix
