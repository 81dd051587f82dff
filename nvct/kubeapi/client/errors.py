"""The Kubernetes API's failures as nvct's one-line errors, each naming what to fix."""

from __future__ import annotations

from typing import Any

from nvct.base.errors import NvctError


class KubeApiError(NvctError):
    """The API server could not be reached, refused us, or answered an error."""

    def __init__(self, message: str, *, hint: str | None = None, code: int = 0) -> None:
        super().__init__(message, hint=hint)
        self.code = code


def describe(err: BaseException, server: str, token_file: str | None) -> KubeApiError:
    """``err`` (lightkube's ApiError, httpx's transport errors) as a KubeApiError."""
    import httpx2

    if isinstance(err, httpx2.HTTPStatusError):
        code, message = _status(err)
        if code == 401:
            where = f"the token in {token_file}" if token_file else "the kubeconfig's credentials"
            return KubeApiError(
                f"the Kubernetes API server at {server} refused {where} (401 Unauthorized)",
                hint="give the pod its service account token (automountServiceAccountToken: "
                "true) or fix the kubeconfig",
                code=code,
            )
        if code == 403 and "denied request" in message:
            # an admission policy's refusal: RBAC allowed the verb, the policy's message
            # says what it does not allow
            return KubeApiError(
                f"the Kubernetes API server at {server} refused: {message} (403 Forbidden)",
                hint="the change is not one the admission policy named allows this account",
                code=code,
            )
        if code == 403:
            return KubeApiError(
                f"the Kubernetes API server at {server} refused: {message} (403 Forbidden)",
                hint="bind the ServiceAccount to a ClusterRole that grants it "
                "(deployments' RBAC rules)",
                code=code,
            )
        return KubeApiError(
            f"the Kubernetes API server at {server} answered {code}: {message}", code=code
        )
    text = str(err) or type(err).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return KubeApiError(
            f"the Kubernetes API server at {server} has a certificate the CA does not sign: {text}",
            hint="mount the cluster's CA as the service account's ca.crt, or fix the kubeconfig's "
            "certificate-authority",
        )
    return KubeApiError(
        f"cannot reach the Kubernetes API server at {server}: {text}",
        hint="check KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT (or the kubeconfig's server) "
        "and the network policy",
    )


def _status(err: Any) -> tuple[int, str]:
    """The code and message of an error answer: its Status object (lightkube's ApiError has
    it parsed; a refused watch is httpx's plain error, its body not read yet)."""
    from lightkube import ApiError

    if isinstance(err, ApiError):
        return int(err.status.code or 0), err.status.message or str(err)
    response = err.response
    try:
        response.read()
        body = response.json()
        message = str(body.get("message") or response.reason_phrase)
    except (ValueError, AttributeError, OSError, RuntimeError):
        message = response.reason_phrase
    return response.status_code, message
