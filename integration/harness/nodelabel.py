"""What the node installer's label tests run: the installer's service account on the stand-in
API server, with the chart's rules (``INSTALLER_RULES``), a token that names its node (as a
pod's bound token does) and the chart's admission policy (deployments/node-ready.yaml) judging
its writes; ``installer_env`` is the environment the chart gives node-install.sh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from integration.apiserver import cluster_env, service_account
from integration.apiserver.rbac import Rule
from integration.apiserver.server import APIServer

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "deployments"
NODE = "gpu-node-1"
LABEL = "nvct.io/runtime.ready"
INSTALLER_USER = "system:serviceaccount:nvct-system:nvct-installer"
# deployments/helm/nvct/templates/node-ready.yaml's ClusterRole
INSTALLER_RULES = (Rule("", "nodes", frozenset({"get", "patch"})),)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def node_ready_policies() -> list[dict[str, Any]]:
    """The shipped ValidatingAdmissionPolicies of deployments/node-ready.yaml."""
    text = (DEPLOYMENTS / "node-ready.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ValidatingAdmissionPolicy"]


def installer_account(server: APIServer, directory: Path, node: str = NODE) -> Path:
    """The installer pod's token files on ``node``; the server judges its writes by the
    chart's policy."""
    token = f"installer-{node}"
    server.auth.add(token, INSTALLER_USER, INSTALLER_RULES, {NODE_NAME_EXTRA: [node]})
    server.policies = node_ready_policies()
    return service_account(directory, server.certs, token, "nvct-system")


def installer_env(server: APIServer, account: Path, node: str = NODE) -> dict[str, str]:
    """What the chart's installer pod gets to label its Node (installer.yaml's env)."""
    return {
        **cluster_env(server.url),
        "NODE_NAME": node,
        "NODE_LABEL": LABEL,
        "NVCT_SERVICE_ACCOUNT_DIR": str(account),
    }
