"""Where the API server is and how to authenticate: in-cluster (the service account's token
and CA, the ``KUBERNETES_SERVICE_*`` variables), or a kubeconfig file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nvct.kubeapi.client.errors import KubeApiError

if TYPE_CHECKING:
    from lightkube import Client

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# How long one request may take; a watch's read has no limit (it waits for events) but the
# server ends it after WATCH_TIMEOUT_S, and the reflector starts the next one.
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ClusterAccess:
    """``kubeconfig`` when set (NVIDIA's ``--kubeconfig``/``KUBECONFIG``), else in-cluster:
    ``service_account_dir`` holds ``token``, ``ca.crt`` and ``namespace``."""

    kubeconfig: str = ""
    service_account_dir: str = SERVICE_ACCOUNT_DIR

    @property
    def token_file(self) -> str | None:
        return None if self.kubeconfig else str(Path(self.service_account_dir) / "token")

    def server(self) -> str:
        """The API server's URL (in-cluster), for messages; '' before ``connect``."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{port}" if host else self.kubeconfig

    def connect(self) -> Client:
        """A lightkube client; KubeApiError when the configuration is missing or unreadable."""
        import httpx2
        from lightkube import Client, ConfigError, KubeConfig

        try:
            if self.kubeconfig:
                config = KubeConfig.from_file(self.kubeconfig)
            else:
                self._check_in_cluster()
                config = KubeConfig.from_service_account(self.service_account_dir)
        except (ConfigError, OSError, ValueError) as err:
            raise KubeApiError(
                f"cannot read the Kubernetes client configuration: {err}",
                hint="run in a pod with a service account, or pass --kubeconfig FILE",
            ) from err
        return Client(config, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), trust_env=False)

    def _check_in_cluster(self) -> None:
        missing = [
            v
            for v in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
            if not os.environ.get(v)
        ]
        if missing:
            raise KubeApiError(
                f"{' and '.join(missing)} not set: not running in a Kubernetes pod",
                hint="run in a pod (the kubelet sets them), or pass --kubeconfig FILE",
            )
        for name in ("token", "ca.crt", "namespace"):
            path = Path(self.service_account_dir) / name
            if not path.is_file():
                raise KubeApiError(
                    f"no service account {name} at {path}",
                    hint="give the pod a ServiceAccount with automountServiceAccountToken: true",
                )
