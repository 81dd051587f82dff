"""The kubelet's pod resources API (v1), as a client: which pod, namespace and container holds
which GPU. Read by the exporter (pod labels on metrics) and usable by ``nvct-cli doctor``."""
