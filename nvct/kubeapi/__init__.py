"""The kubelet's gRPC APIs as nvct speaks them: the device plugin API with its registration
(``deviceplugin``, v1beta1), the pod-resources API with its client and device IDs
(``podresources``, v1), and how their Python modules are generated from the ``.proto`` files
(``protogen``) and checked to load (``grpc_deps``). DRA's kubelet plugin API goes here too,
as ``dra/``, when nvct grows a DRA driver.

Importing this package imports nothing: grpc loads only with a generated module."""

import os

# grpc's fork handlers only matter to a child that goes on using grpc; nvct's children exec at
# once (discovery, ldconfig, MPS control). With them on, every fork while a stream is open logs
# "skipping fork() handlers" on stderr, one line per reload or health probe.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
