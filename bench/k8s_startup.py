"""Start-up per install path of nvct's Kubernetes-facing one-shot commands, against the
stand-in API server over HTTPS (bench/startup.py says how each install is run and timed).

``python -m bench.k8s_startup --command config-manager|node-label|nodefeature [--rounds N]
[--seed N] [--installs LIST] [--deb NAME=FILE] [--output FILE]`` (root):

- ``node-label``: ``nvct-cli node-label nvct.io/runtime.ready=true`` as the chart's installer
  runs it (its token bound to its Node, the chart's RBAC rule and admission policy judging the
  patch); done when the stand-in stored the Node with that label and its other labels as they
  were (the label is taken off again before each run);
- ``nodefeature``: ``nvct-cli labels --use-node-feature-api`` in one-shot mode (no
  ``--interval``) on the simulated driver (4 x H100), as the chart's labeller runs it
  (GFD's environment names, its service account, NFD's CRD served and checked); done when the
  stand-in stored ``nvidia-features-for-<node>`` with the labels ``nvct-cli labels`` prints
  (the object is deleted again before each run);
- ``config-manager``: ``bench.configmanager``'s.

``written_ms`` is the stand-in's clock when it stored the first right write (it runs in this
process: the same clock the start is read from). Results: ``bench/results-<command>.json``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from bench.configmanager import ConfigManager
from bench.startup import Command, Job, StampedStore, first_write, measure, parser
from integration.apiserver import cluster_env, service_account
from integration.apiserver.crds import NODE_FEATURES, WRITER, validating
from integration.apiserver.server import NODES, APIServer
from integration.apiserver.store import NotFound
from integration.harness.nodelabel import LABEL, NODE, installer_account, installer_env
from integration.harness.nvct_config import NVCT_BIN

# The node's own labels beside the installer's (integration/test_node_label.py's)
OWN = {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.present": "true"}
NAMESPACE = "nvct-system"
LABELLER = "system:serviceaccount:nvct-system:nvct-labeller"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
TIMESTAMP = "nvidia.com/gfd.timestamp"
SIMDRIVERS = Path("/tmp/nvct-test-simdrivers")  # the tests' cache of built drivers


def stamped(server: APIServer) -> StampedStore:
    if not isinstance(server.store, StampedStore):
        raise SystemExit("bench: the stand-in's store does not stamp its writes")
    return server.store


def labels_are(expected: dict[str, str]) -> Callable[[dict[str, Any]], str]:
    """A Node's check: its labels exactly ``expected`` (the change made, nothing else)."""

    def check(node: dict[str, Any]) -> str:
        found = node.get("metadata", {}).get("labels") or {}
        return "" if found == expected else f"labels {found}"

    return check


def features_are(node: str, expected: dict[str, str]) -> Callable[[dict[str, Any]], str]:
    """A NodeFeature's check: ``node``'s, its ``spec.labels`` ``expected`` and a timestamp."""

    def check(obj: dict[str, Any]) -> str:
        owner = (obj.get("metadata", {}).get("labels") or {}).get(NODE_NAME_LABEL)
        if owner != node:
            return f"{NODE_NAME_LABEL} {owner!r}, not {node!r}"
        found = dict(obj.get("spec", {}).get("labels") or {})
        stamp = found.pop(TIMESTAMP, "")
        if not stamp.isdigit():
            return f"{TIMESTAMP} {stamp!r} is no Unix time"
        if found != expected:
            wrong = sorted(set(found.items()) ^ set(expected.items()))
            return f"spec.labels differ from nvct-cli labels' in {wrong}"
        return ""

    return check


class NodeLabel:
    """``nvct-cli node-label`` as the chart's installer runs it."""

    name = "node-label"
    program = "nvct-cli"

    def serve(self, server: APIServer) -> None:
        server.put_node(NODE, OWN)

    def job(self, directory: Path, server: APIServer) -> Job:
        directory.mkdir(parents=True)
        env = installer_env(server, installer_account(server, directory / "sa"))
        store = stamped(server)

        def reset() -> None:
            server.set_node_labels(NODE, {LABEL: None})
            store.stamps.clear()

        def written_ns() -> int:
            done = labels_are({**OWN, LABEL: "true"})
            return first_write(store.stamps, NODES.resource, ("", NODE), done)

        return Job(["node-label", f"{LABEL}=true"], env, reset, written_ns)


class NodeFeature:
    """``nvct-cli labels --use-node-feature-api``, one round, on the simulated driver."""

    name = "nodefeature"
    program = "nvct-cli"

    @cached_property
    def sim(self) -> Any:
        from integration.simdriver import cached_driver, preset

        return cached_driver(preset("h100x4-550"), SIMDRIVERS)

    def serve(self, server: APIServer) -> None:
        server.add_kind(NODE_FEATURES)
        server.defaults.append(validating(NODE_FEATURES))
        server.auth.add("labeller-token", LABELLER, WRITER)

    def roots(self, directory: Path) -> list[str]:
        """nvct-cli's options for the simulated driver, its config and log in ``directory``."""
        config = directory / "config.toml"
        config.write_text(
            f"cache-dir = '{directory / 'cache'}'\n[log]\nfile = '{directory / 'log'}'\n"
        )
        sim = self.sim
        return [
            "--config", str(config), "--driver-root", str(sim.driver_root),
            "--dev-root", str(sim.dev_root), "--proc-root", str(sim.proc_root), "--no-cache",
        ]  # fmt: skip

    def job(self, directory: Path, server: APIServer) -> Job:
        directory.mkdir(parents=True)
        account = service_account(directory / "sa", server.certs, "labeller-token", NAMESPACE)
        (directory / "plugin.yaml").write_text("version: v1\nflags:\n  migStrategy: none\n")
        common = {**self.sim.env(), "CONFIG_FILE": str(directory / "plugin.yaml")}
        env = {
            **common,
            **cluster_env(server.url),
            "GFD_USE_NODE_FEATURE_API": "true",
            "NODE_NAME": NODE,
            "NAMESPACE": NAMESPACE,
            "NVCT_SERVICE_ACCOUNT_DIR": str(account),
        }
        argv = [*self.roots(directory), "labels"]
        expected = printed([str(NVCT_BIN / "nvct-cli"), *argv, "--no-timestamp"], common)
        store = stamped(server)
        key = (NAMESPACE, f"nvidia-features-for-{NODE}")

        def reset() -> None:
            with contextlib.suppress(NotFound):  # the warm-up's first run finds none
                store.delete(NODE_FEATURES, *key)
            store.stamps.clear()

        def written_ns() -> int:
            done = features_are(NODE, expected)
            return first_write(store.stamps, NODE_FEATURES.resource, key, done)

        return Job(argv, env, reset, written_ns)


def printed(argv: list[str], env: dict[str, str]) -> dict[str, str]:
    """The labels ``nvct-cli labels`` prints (what the object must say)."""
    done = subprocess.run(
        argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or "=" not in done.stdout:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return parse_labels(done.stdout)


def parse_labels(text: str) -> dict[str, str]:
    """NFD's feature file lines (``KEY=VALUE``) as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip())


COMMANDS: dict[str, Callable[[], Command]] = {
    "config-manager": ConfigManager,
    "node-label": NodeLabel,
    "nodefeature": NodeFeature,
}


def main() -> int:
    found = parser("python -m bench.k8s_startup", Path("bench/results-<command>.json"))
    found.add_argument("--command", choices=sorted(COMMANDS), required=True)
    args = found.parse_args()
    if args.output == Path("bench/results-<command>.json"):
        args.output = Path(f"bench/results-{args.command}.json")
    return measure(COMMANDS[args.command](), args, "bench.k8s_startup")


if __name__ == "__main__":
    sys.exit(main())
