"""nvct-device-plugin: the kubelet device plugin API server for the node's GPUs."""

import nvct.kubeapi  # noqa: F401 - before grpc: its fork-support setting (see there)
