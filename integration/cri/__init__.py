"""nvct's reduced copy of the CRI v1 API (``runtime_v1.proto``) and its generated modules,
for the kubelet stand-in that drives a real containerd's CRI plugin."""
