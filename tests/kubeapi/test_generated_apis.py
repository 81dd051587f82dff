"""Every checked-in gRPC API package holds what its .proto generates (grpcio-tools): the
device plugin API (v1beta1), the pod-resources API (v1) and the CRI v1 subset the CRI kubelet
stand-in speaks (integration/cri). Their wire contracts are checked in
tests/deviceplugin/test_api.py, tests/kubeapi/podresources/test_api.py and
tests/harness/test_cri_api.py."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "package", ["nvct.kubeapi.deviceplugin", "nvct.kubeapi.podresources", "integration.cri"]
)
def test_generated_modules_are_current(package: str) -> None:
    pytest.importorskip("grpc_tools")
    done = subprocess.run(
        [sys.executable, "-m", f"{package}.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
