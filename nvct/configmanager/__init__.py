"""``nvct-config-manager``: NVIDIA's config-manager, for nvct's device plugin.

It watches its own Node's ``nvidia.com/device-plugin.config`` label through the Kubernetes API,
picks that entry of the multi-entry ConfigMap mounted at the source directory (NVIDIA's default
and fallback rules: ``choose``), writes it atomically where the plugin reads its config
(``apply``) and signals the plugin, found by name in the pod's shared PID namespace
(``processes``). So the plugin itself needs no API access, and the service account needs only
get/list/watch on nodes."""
