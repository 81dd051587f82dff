"""nvct-config-manager's start-up on each install path, against the stand-in API server.

``python -m bench.configmanager [--rounds N] [--seed N] [--installs LIST] [--deb NAME=FILE]
[--output FILE]`` (root; a few minutes for 25 rounds on a busy 2-core VM, plus the package
build once), the same as ``python -m bench.k8s_startup --command config-manager``: the manager
as each install path puts it on a machine (bench/startup.py), run as the chart's init container
runs it (``ONESHOT=true``: read the Node over HTTPS, write the labelled entry, exit).
``written_ms`` is the config file's mtime, which the kernel stamps with its coarse clock (a few
ms of resolution); lightkube and httpx2 come in lazily, when the client is made.

The results go to ``bench/results-configmanager.json``; the figures to bench/README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.startup import Job, NotDone, measure, parser
from integration.apiserver import cluster_env
from integration.apiserver.server import APIServer
from integration.harness.apiserver import CONFIGS, LABEL, NODE, Pod

OUTPUT = Path("bench/results-configmanager.json")


class ConfigManager:
    """``nvct-config-manager`` in oneshot mode: the Node labelled ``ts4``, that entry written
    to the pod's config file."""

    name = "config-manager"
    program = "nvct-config-manager"

    def serve(self, server: APIServer) -> None:
        server.put_node(NODE, {LABEL: "ts4"})

    def job(self, directory: Path, server: APIServer) -> Job:
        directory.mkdir(parents=True)
        pod = Pod(directory, server, CONFIGS)
        env = {
            **cluster_env(server.url),
            "NVCT_SERVICE_ACCOUNT_DIR": str(pod.account),
            **pod.env(ONESHOT="true", SEND_SIGNAL="false"),
        }

        def written_ns() -> int:
            try:
                text = pod.dst.read_text()
            except FileNotFoundError:
                raise NotDone(f"{pod.dst} not written") from None
            if text != CONFIGS["ts4"]:
                raise NotDone(f"{pod.dst} holds {text!r}, not the ts4 entry")
            return pod.dst.stat().st_mtime_ns

        return Job([], env, lambda: pod.dst.unlink(missing_ok=True), written_ns)


def main() -> int:
    args = parser("python -m bench.configmanager", OUTPUT).parse_args()
    return measure(ConfigManager(), args, "bench.configmanager")


if __name__ == "__main__":
    sys.exit(main())
