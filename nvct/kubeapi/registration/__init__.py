"""The kubelet's plugin registration service (``pluginregistration``): how a DRA (or CSI)
plugin announces itself through a socket in the kubelet's ``plugins_registry`` directory."""
