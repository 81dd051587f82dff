"""What NVIDIA's legacy path (libnvidia-container) injects for the default capabilities,
written out from its documented tables (not derived from nvct's own plan), for tests to
compare nvct against."""

UTILITY_COMPUTE_LIBS = frozenset({
    "libnvidia-ml", "libnvidia-cfg", "libcuda", "libcudadebugger", "libnvidia-opencl",
    "libnvidia-gpucomp", "libnvidia-ptxjitcompiler", "libnvidia-allocator", "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3", "libnvidia-nvvm",
})  # fmt: skip
BINARIES = frozenset({
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
})  # fmt: skip
