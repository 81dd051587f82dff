"""The container runtime's CRI (v1), as a read-only client: which pod and container a
container ID belongs to. Read by the exporter to attribute a GPU process (found by its cgroup)
to its pod."""
