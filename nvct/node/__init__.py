"""What this node offers the kubelet, for every Kubernetes frontend alike.

``offer.offer(config, inventory)`` is the one answer: the resources and device IDs under the
MIG strategy and the sharing plan (``devices``, ``sharing``), with each device's NUMA node; the
labels that describe them (``labels``). nvct-device-plugin serves it, ``nvct-cli labels``
labels it, doctor checks against it and the exporter attributes pods by it. Beside it: the
health policy the plugin and the exporter judge GPUs by (``health``), the plugin's files in the
kubelet's directory (``files``) and the status file it records what it advertises and runs with
in (``status``), the leak guard's rule for a plugin's answers (``guard``), and how the GPUs
are joined (``topology``: NVLink and PCIe, read once through NVML by the device and DRA
plugins).

A library: it imports ``base``, ``config`` and ``host``, never a frontend and never grpc."""
