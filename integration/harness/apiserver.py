"""Fixtures for tests that talk to the stand-in Kubernetes API server (integration/apiserver):
``kube_certs`` (a CA and serving certificate, once per test run), ``apiserver`` (a server per
test, stopped after it), and what the config-manager tests run: a stand-in plugin that records
each signal it gets with the config file's content at that moment (``SignalRecorder``),
``nvct-config-manager`` itself (``ConfigManager``), and its pod's volumes (``Pod``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.apiserver import cluster_env, service_account
from integration.apiserver.certs import ServingCerts, make_certs
from integration.apiserver.rbac import Rule
from integration.apiserver.server import APIServer
from integration.harness.nvct_config import NVCT_BIN
from integration.harness.processes import terminate, until
from integration.harness.skips import need_binary, require

# The config-manager's ClusterRole rule (and NVIDIA's): nothing but reading nodes.
NODE_READER = (Rule("", "nodes", frozenset({"get", "list", "watch"})),)
MANAGER_USER = "system:serviceaccount:nvct:nvct-config-manager"


@pytest.fixture(scope="session")
def kube_certs(tmp_path_factory: pytest.TempPathFactory) -> ServingCerts:
    require(need_binary("openssl"))
    return make_certs(tmp_path_factory.mktemp("kube-pki"))


@pytest.fixture
def apiserver(kube_certs: ServingCerts) -> Iterator[APIServer]:
    server = APIServer(kube_certs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pod_files(server: APIServer, directory: Path, token: str, rules: Any = NODE_READER) -> Path:
    """A service account directory for ``token``, registered on ``server`` with ``rules``."""
    server.auth.add(token, MANAGER_USER, rules)
    return service_account(directory, server.certs, token, "nvct")


# A stand-in plugin: on SIGHUP (or SIGUSR1), one JSON line with the signal and what the config
# file holds at that moment; "ready" once its handlers are installed.
RECORDER = """\
import json, signal, sys, time
config, record = sys.argv[1], sys.argv[2]
def seen(signum, _frame):
    try:
        with open(config) as f:
            content = f.read()
    except OSError as err:
        content = "<" + err.strerror + ">"
    with open(record, "a") as f:
        f.write(json.dumps({"signal": signum, "content": content}) + "\\n")
signal.signal(signal.SIGHUP, seen)
signal.signal(signal.SIGUSR1, seen)
open(record, "a").write(json.dumps({"ready": True}) + "\\n")
while True:
    time.sleep(3600)
"""


class SignalRecorder:
    """A real process with a name of its own (``name``) standing in for the plugin."""

    def __init__(self, directory: Path, config: Path) -> None:
        self.name = f"recorder-{uuid.uuid4().hex[:12]}"
        self.script = directory / self.name
        self.script.write_text(f"#!{sys.executable}\n{RECORDER}")
        self.script.chmod(0o755)
        self.record = directory / f"{self.name}.jsonl"
        self.proc = subprocess.Popen([str(self.script), str(config), str(self.record)])
        assert until(lambda: self.record.exists() and "ready" in self.record.read_text(), 10)

    def signals(self) -> list[dict[str, Any]]:
        lines = self.record.read_text().splitlines()
        return [s for s in map(json.loads, lines) if "signal" in s]

    def stop(self) -> None:
        terminate(self.proc, timeout=5)


class ConfigManager:
    """``nvct-config-manager`` as a pod would run it: in-cluster (the service account files
    and KUBERNETES_SERVICE_*), configured by NVIDIA's environment names."""

    def __init__(
        self,
        server: APIServer,
        account: Path,
        env: dict[str, str],
        program: Path = NVCT_BIN / "nvct-config-manager",
        user: int | None = None,
    ) -> None:
        self.log = account.parent / f"config-manager-{uuid.uuid4().hex[:8]}.log"
        full = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            **cluster_env(server.url),
            "NVCT_SERVICE_ACCOUNT_DIR": str(account),
            **env,
        }
        # ``user``: that uid (and as gid), without root's supplementary groups
        who: dict[str, Any] = {}
        if user is not None:
            who = {"user": user, "group": user, "extra_groups": []}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([str(program)], env=full, stdout=out, stderr=out, **who)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int:
        return terminate(self.proc, timeout=5)

    def errors(self) -> list[str]:
        """The one-line errors it said on stderr."""
        return [
            line
            for line in self.output().splitlines()
            if line.startswith("nvct-config-manager: error: ")
        ]


NODE = "gpu-node-1"
LABEL = "nvidia.com/device-plugin.config"
# Entries in NVIDIA's documented shapes (what the plugin reads; this side copies bytes).
CONFIGS = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "ts4": (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: 4\n"
    ),
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
}


class Pod:
    """The pod's volumes: the ConfigMap at ``available``, the shared ``config.yaml``."""

    def __init__(self, root: Path, server: APIServer, entries: dict[str, str]) -> None:
        self.available = root / "available-configs"
        self.available.mkdir()
        for name, text in entries.items():
            (self.available / name).write_text(text)
        # what the kubelet's ConfigMap volume also holds: never an entry
        (self.available / "..data").mkdir()
        (root / "config").mkdir()
        self.dst = root / "config" / "config.yaml"
        self.server = server
        self.account = pod_files(server, root / "serviceaccount", "manager-token")
        self.root = root

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "NODE_NAME": NODE,
            "NODE_LABEL": LABEL,
            "CONFIG_FILE_SRCDIR": str(self.available),
            "CONFIG_FILE_DST": str(self.dst),
            **extra,
        }

    def manager(
        self, program: Path | None = None, user: int | None = None, **extra: str
    ) -> ConfigManager:
        """``nvct-config-manager`` (``program``: another install's) with this pod's
        volumes, as root or as ``user``; ``extra``: more of its environment."""
        program = program or NVCT_BIN / "nvct-config-manager"
        return ConfigManager(self.server, self.account, self.env(**extra), program, user)
