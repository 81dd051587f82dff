"""The one function every Kubernetes frontend asks: what this node offers the kubelet.

nvct-device-plugin serves ``Offer.resources()``, ``nvct-cli labels`` writes ``Offer.labels()``,
doctor checks both against the GPUs, the exporter attributes pods for its resources: all from
one sharing plan and one MIG strategy, so what is advertised and what is labelled cannot
disagree. (The exporter also reads the offer as the running plugin recorded it,
``nvct.node.status.advertised``: the plugin may run from a ConfigMap the node's config.toml does
not show.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nvct.config import Config
from nvct.host.inventory import Inventory
from nvct.node.devices import Resource, pci_class, resources
from nvct.node.labels import node_labels
from nvct.node.sharing import SharingConfigError, SharingPlan, plan_sharing
from nvct.node.vgpu import scan


@dataclass(frozen=True, slots=True)
class Offer:
    """This node's GPUs as ``[device-plugin]`` offers them; ``plan`` is empty where the sharing
    rules were not applied (``offer(..., strict=False)`` on rules that do not fit)."""

    inventory: Inventory
    mig_strategy: str
    plan: SharingPlan
    sysfs_root: Path

    def resources(self) -> tuple[Resource, ...]:
        """The resources served, each with its devices (replicas of the shared ones).

        Raises:
            DeviceConfigError: the MIG strategy does not fit the GPUs.
        """
        return resources(
            self.inventory,
            mig_strategy=self.mig_strategy,
            sysfs_root=self.sysfs_root,
            plan=self.plan,
        )

    def labels(self, *, machine: str = "", timestamp: int | None = None) -> dict[str, str]:
        """The node's labels (GFD's names) for this offer; ``machine`` is the DMI product,
        ``gpu.mode`` comes from the GPUs' PCI class in sysfs, ``vgpu.*`` from the PCI config
        space there (GFD's sources)."""
        classes = [pci_class(self.sysfs_root, g.pci_bus_id) for g in self.inventory.gpus]
        return node_labels(
            self.inventory,
            mig_strategy=self.mig_strategy,
            plan=self.plan,
            machine=machine,
            pci_classes=[c for c in classes if c],
            vgpu=scan(self.sysfs_root),
            timestamp=timestamp,
        )


def offer(
    config: Config, inventory: Inventory, *, sysfs_root: Path | None = None, strict: bool = True
) -> Offer:
    """What ``config``'s ``[device-plugin]`` offers on ``inventory``'s GPUs.

    ``sysfs_root`` (default ``[device-plugin] sysfs-root``) is where NUMA nodes are read;
    ``strict=False`` offers every device whole when the sharing rules do not fit (doctor's
    sharing check says why; the whole devices still count).

    Raises:
        SharingConfigError: ``strict`` and the sharing rules do not fit these GPUs.
    """
    try:
        plan = plan_sharing(config, inventory)
    except SharingConfigError:
        if strict:
            raise
        plan = SharingPlan({})
    root = Path(config.device_plugin.sysfs_root) if sysfs_root is None else sysfs_root
    return Offer(inventory, config.device_plugin.mig_strategy, plan, root)
