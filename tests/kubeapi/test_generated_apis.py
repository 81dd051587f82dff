"""Every checked-in gRPC API package holds what its .proto generates (grpcio-tools): the
device plugin API (v1beta1), the pod-resources API (v1), the DRA plugin API (v1,
v1beta1), the plugin registration API and the CRI v1 subset the CRI kubelet
stand-in speaks (integration/cri). Their wire contracts are checked in
tests/deviceplugin/test_api.py, tests/kubeapi/podresources/test_api.py and
tests/harness/test_cri_api.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "package",
    [
        "nvct.kubeapi.deviceplugin",
        "nvct.kubeapi.podresources",
        "nvct.kubeapi.cri",
        "nvct.kubeapi.dra",
        "nvct.kubeapi.registration",
        "integration.cri",
    ],
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


def test_every_generated_nvct_module_is_exempt_from_mypy_by_module() -> None:
    """A path exclude holds only in the checkout the venv was installed from (mypy follows the
    imports to them anyway): each generated module needs its ignore_errors override, or mypy in
    a second clone reports grpcio-tools' untyped code."""
    generated = {
        ".".join(p.relative_to(REPO).with_suffix("").parts)
        for p in (REPO / "nvct").rglob("*_pb2*.py*")
        if "__pycache__" not in p.parts  # compiled copies are not modules of their own
    }
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    exempt = {m for o in config["overrides"] if o.get("ignore_errors") for m in o["module"]}
    assert len(generated) >= 4  # the tree was read: the device plugin's and pod-resources' APIs
    assert generated <= exempt, sorted(generated - exempt)
