"""checkov's Kubernetes checks on deployments/: every failed check must be in ALLOWED, which
says per DaemonSet and check why nvct needs the exception; only the installer and mps-control
are privileged, and no other DaemonSet fails more than MAX_FAILED checks (NVIDIA's device
plugin DaemonSet fails 13, its GPU feature discovery 17).

checkov has many dependencies, so it lives in a virtual environment of its own, made once
and cached (``make checkov``, or the first run of this test): CHECKOV_VENV, default
~/.cache/nvct/checkov-VERSION. Creating it costs about 40 s and 290 MB (pip from a PyPI
mirror); the scan itself about 3 s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = "3.3.30"  # the allow-list is for this version's checks
MAX_FAILED = 12
PRIVILEGED = {"nvct-installer", "nvct-mps-control"}

_LOCAL_IMAGE = "nvct:0.1.0 is built by `make image` and imported on the nodes, from no registry"
_ROOT = (
    "uid 0 without capabilities: the kubelet's directories and sockets it uses are root's "
    "(0750 / 0700 directories, root-owned sockets), which no other uid may enter"
)
_EVERY_DAEMONSET = {
    "CKV_K8S_43": f"image digest: {_LOCAL_IMAGE}",
    "CKV_K8S_15": f"imagePullPolicy Always: {_LOCAL_IMAGE}",
    "CKV_K8S_23": f"root: {_ROOT}",
    "CKV_K8S_40": f"high uid: {_ROOT}",
}
_PRIVILEGED_POD = {
    "CKV_K8S_16": "privileged: see the manifest's header (README: Security model in the cluster)",
    "CKV_K8S_20": "allowPrivilegeEscalation: a privileged container has every privilege anyway",
    "CKV_K8S_37": "capabilities: a privileged container has every capability",
    "CKV_K8S_28": "NET_RAW: a privileged container has every capability",
    "CKV_K8S_29": "security context: privileged (the pod-level settings would not bind it)",
    "CKV_K8S_31": "seccomp: a privileged container runs unconfined",
    "CKV_K8S_22": "read-only root filesystem: it writes into the node's root, mounted under /host",
    "CKV_K8S_8": "liveness probe: its only work is at start and stop; a restart would undo it",
    "CKV_K8S_9": "readiness probe: it serves nothing",
}
ALLOWED: dict[str, dict[str, str]] = {
    "nvct-device-plugin": _EVERY_DAEMONSET,
    "nvct-labeller": _EVERY_DAEMONSET,
    "nvct-exporter": _EVERY_DAEMONSET,
    "nvct-installer": {
        **_EVERY_DAEMONSET,
        **_PRIVILEGED_POD,
        "CKV_K8S_17": "hostPID: it restarts containerd / CRI-O in the node's namespaces",
    },
    "nvct-mps-control": {
        **_EVERY_DAEMONSET,
        **_PRIVILEGED_POD,
        "CKV_K8S_22": "read-only root filesystem: it makes its daemons' mount namespaces",
    },
}


def checkov_venv() -> Path:
    """The cached virtual environment with checkov VERSION; made when missing.

    Raises:
        RuntimeError: it cannot be made (pip's last lines say why).
    """
    default = Path.home() / ".cache" / "nvct" / f"checkov-{VERSION}"
    venv = Path(os.environ.get("CHECKOV_VENV") or default)
    complete = venv / ".nvct-complete"  # written last: a venv cut short is made again
    if complete.exists() or (os.environ.get("CHECKOV_VENV") and (venv / "bin/checkov").exists()):
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    python = getattr(sys, "_base_executable", sys.executable)
    for argv in (
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", f"checkov=={VERSION}"],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise RuntimeError(
                f"cannot make checkov's venv {venv}: {tail} (fix: reach PyPI, or set "
                "CHECKOV_VENV to a venv with checkov installed)"
            )
    complete.touch()
    return venv


def failed_checks() -> dict[str, set[str]]:
    """DaemonSet name -> the checks it fails."""
    try:
        venv = checkov_venv()
    except RuntimeError as err:
        pytest.fail(str(err))
    done = subprocess.run(
        # not dra/examples: a user's claims and pods, samples of what to ask for, not nvct's
        [str(venv / "bin" / "checkov"), "-d", str(ROOT / "deployments"), "--framework",
         "kubernetes", "--skip-path", "dra/examples", "--quiet", "--compact", "--output", "json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-2000:]  # exit 1 means failed checks
    reports = json.loads(done.stdout)
    failed: dict[str, set[str]] = defaultdict(set)
    for report in reports if isinstance(reports, list) else [reports]:
        for check in report["results"]["failed_checks"]:
            kind, _namespace, name = check["resource"].split(".", 2)
            failed[name if kind == "DaemonSet" else check["resource"]].add(check["check_id"])
    return failed


@pytest.mark.slow
def test_checkov_finds_nothing_the_allow_list_does_not_explain() -> None:
    failed = failed_checks()
    assert failed, "checkov reported no failed check: the scan did not run on the manifests"
    unexplained = {
        name: sorted(checks - set(ALLOWED.get(name, {})))
        for name, checks in failed.items()
        if checks - set(ALLOWED.get(name, {}))
    }
    assert unexplained == {}, "fix these, or allow them in ALLOWED with the reason"
    privileged = {name for name, checks in failed.items() if "CKV_K8S_16" in checks}
    assert privileged == PRIVILEGED
    for name, checks in failed.items():
        if name not in PRIVILEGED:
            assert len(checks) <= MAX_FAILED, (name, sorted(checks))
    # An exception no longer needed goes from the list (the list stays the truth).
    stale = {
        name: sorted(set(allowed) - failed.get(name, set()))
        for name, allowed in ALLOWED.items()
        if set(allowed) - failed.get(name, set())
    }
    assert stale == {}, "these checks pass now: remove them from ALLOWED"


if __name__ == "__main__":  # make checkov
    print(checkov_venv())
