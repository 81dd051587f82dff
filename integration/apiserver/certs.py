"""A certificate authority and a serving certificate for ``127.0.0.1``/``localhost``, made
fresh for each test run with the ``openssl`` command: the client must trust the server only
through the CA file it is given (the in-cluster ``ca.crt``), as in a real pod."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServingCerts:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certs(directory: Path) -> ServingCerts:
    """A CA (``ca.crt``) and a server certificate it signed (``server.crt``/``server.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "server.ext"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
             "-out", str(ca), "-days", "1", "-subj", "/CN=nvct-test-kubernetes-ca")  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", "/CN=kube-apiserver")  # fmt: skip
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
    )
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ServingCerts(ca=ca, cert=cert, key=key)
