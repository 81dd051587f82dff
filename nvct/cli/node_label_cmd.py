"""``nvct-cli node-label``: set or remove one label of one Node through the Kubernetes API, as
nvct's node installer marks the nodes whose engine runs nvct's handlers
(deployments/node-install.sh)."""

from __future__ import annotations

import click

from nvct.base.errors import NvctError
from nvct.kubeapi.client.access import SERVICE_ACCOUNT_DIR, ClusterAccess
from nvct.kubeapi.client.nodelabel import change_node_label, parse_change


@click.command("node-label")
@click.option(
    "--node",
    envvar="NODE_NAME",
    default="",
    help="The Node to label (default: $NODE_NAME, the pod's spec.nodeName).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default="",
    help="A kubeconfig file (default: in-cluster, the service account's token and CA).",
)
@click.option(
    "--service-account-dir",
    envvar="NVCT_SERVICE_ACCOUNT_DIR",
    default=SERVICE_ACCOUNT_DIR,
    show_default=True,
    help="Where the in-cluster token, ca.crt and namespace are.",
)
@click.argument("change")
def node_label(node: str, kubeconfig: str, service_account_dir: str, change: str) -> None:
    """Set (KEY=VALUE) or remove (KEY-) one label of the Node, and nothing else of it."""
    wanted = parse_change(change)
    if not node:
        raise NvctError("no node named", hint="pass --node NAME or set NODE_NAME")
    access = ClusterAccess(kubeconfig, service_account_dir)
    changed = change_node_label(access, node, wanted)
    click.echo(f"node {node}: {wanted} {'done' if changed else '(already so)'}")
