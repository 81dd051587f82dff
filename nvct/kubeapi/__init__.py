"""The kubelet's gRPC APIs as nvct speaks them: the device plugin API with its registration
(``deviceplugin``, v1beta1), the pod-resources API with its client and device IDs
(``podresources``, v1), and how their Python modules are generated from the ``.proto`` files
(``protogen``) and checked to load (``grpc_deps``). DRA's kubelet plugin API goes here too,
as ``dra/``, when nvct grows a DRA driver.

Importing this package imports nothing: grpc loads only with a generated module."""
