"""A stand-in Kubernetes API server (HTTPS, real paths, object shapes, watch events, Status
errors, bearer tokens, RBAC-like rules) and the in-cluster files a pod would get
(``service_account``): tests run nvct's API clients against it as they would run in a pod."""

from __future__ import annotations

from pathlib import Path

from integration.apiserver.certs import ServingCerts


def service_account(directory: Path, certs: ServingCerts, token: str, namespace: str) -> Path:
    """The files a pod's service account gives it (``token``, ``ca.crt``, ``namespace``), as
    the kubelet mounts them at /var/run/secrets/kubernetes.io/serviceaccount."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(certs.ca.read_bytes())
    (directory / "namespace").write_text(namespace)
    return directory


def cluster_env(server_url: str) -> dict[str, str]:
    """The variables the kubelet sets in every pod for the API server's Service."""
    host, port = server_url.removeprefix("https://").rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
