"""Where ``nvct-cli labels`` puts a round's labels: NFD's feature file (or stdout), or NFD's
NodeFeature object through the Kubernetes API (``--use-node-feature-api``). Each says a round
that made no labels (``kept``) and a failed write (``failed``) in its own way, and what is left
when the labeller stops (``close``)."""

from __future__ import annotations

from pathlib import Path

import click

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError
from nvct.kubeapi.client.errors import KubeApiError
from nvct.node.labels import feature_file

KEPT = "the last labels stay until the next round"


class NodeFeatureOutput:
    """The NodeFeature writer of ``--use-node-feature-api``, each write's outcome one JSON
    line on stdout; usage and connection errors (no node name, no in-cluster token) at once."""

    def __init__(
        self, node: str, namespace: str, kubeconfig: str, service_account_dir: str
    ) -> None:
        import structlog

        from nvct.base.log import configure_stdout_structlog
        from nvct.kubeapi.client.access import ClusterAccess
        from nvct.kubeapi.client.nodefeature import NodeFeatureWriter

        if not node:
            raise click.UsageError(
                "--use-node-feature-api needs the node's name: set --node-name or NODE_NAME "
                "(in a pod: from the downward API's spec.nodeName)"
            )
        configure_stdout_structlog()
        self.log = structlog.get_logger("nvct-cli labels")
        access = ClusterAccess(kubeconfig, service_account_dir)
        client = access.connect()  # KubeApiError: one line, exit 1
        self.writer = NodeFeatureWriter(
            client,
            node,
            namespace or client.namespace,
            server=access.server(),
            token_file=access.token_file,
        )

    def publish(self, found: dict[str, str]) -> None:
        done = self.writer.publish(found)  # KubeApiError: see failed
        if done != "unchanged":
            self.log.info(
                f"nodefeature_{done}",
                object=f"{self.writer.namespace}/{self.writer.name}",
                labels=len(found),
            )

    def kept(self, err: NvctError) -> None:
        """A round without labels (NVML, the config): the object keeps the last ones."""
        self.log.warning("labels_kept", error=err.one_line(), said=KEPT)

    def failed(self, err: KubeApiError) -> None:
        self.log.warning(
            "nodefeature_failed",
            object=f"{self.writer.namespace}/{self.writer.name}",
            error=err.one_line(),
        )

    def close(self) -> None:
        """Nothing: the object stays (NFD keeps the node's labels, as GFD leaves it)."""


class FileOutput:
    """NFD's feature file at ``output`` (stdout without one), removed when the labeller stops:
    an uninstalled labeller leaves no labels behind."""

    def __init__(self, output: Path | None) -> None:
        self.output = output

    def publish(self, found: dict[str, str]) -> None:
        text = feature_file(found)
        if self.output is None:
            click.echo(text, nl=False)
        else:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(self.output), text.encode(), 0o644)

    def kept(self, err: NvctError) -> None:
        click.echo(f"nvct-cli labels: warning: {err.one_line()}; {KEPT}", err=True)

    def failed(self, err: KubeApiError) -> None:  # a file write raises no API error
        raise err

    def close(self) -> None:
        if self.output is not None:
            self.output.unlink(missing_ok=True)
