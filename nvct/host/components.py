"""What NVIDIA's driver ships, per driver capability.

The tables follow libnvidia-container's ``nvc_info.c`` (the "legacy" injection users know):
a library is selected when its SONAME starts with one of the prefixes below. Capabilities
that imply others (``video`` brings compute libraries, ``display`` brings graphics ones) are
expanded by ``expand_capabilities``.
"""

from __future__ import annotations

# NVML brands of data-center GPUs (nvmlBrandType): Tesla, and "NVIDIA" for current ones. Only
# they may load an image's forward-compatible libcuda on any driver (nvct.container.cuda_compat).
DATACENTER_BRANDS = frozenset({"tesla", "nvidia"})

LIBRARY_PREFIXES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": (
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-fatbinaryloader.so",
        "libnvidia-allocator.so",
        "libnvidia-compiler.so",
        "libnvidia-pkcs11.so",
        "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so",
    ),
    "video": (
        "libvdpau_nvidia.so",
        "libnvidia-encode.so",
        "libnvidia-opticalflow.so",
        "libnvcuvid.so",
    ),
    "graphics": (
        "libnvidia-eglcore.so",
        "libnvidia-glcore.so",
        "libnvidia-tls.so",
        "libnvidia-glsi.so",
        "libnvidia-fbc.so",
        "libnvidia-ifr.so",
        "libnvidia-rtcore.so",
        "libnvoptix.so",
        "libGLX_nvidia.so",
        "libEGL_nvidia.so",
        "libGLESv2_nvidia.so",
        "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so",
        "libnvidia-cbl.so",
    ),
    "ngx": ("libnvidia-ngx.so",),
}

BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
    # Not a capability: brought by NVIDIA_IMEX_CHANNELS (the IMEX daemon and its control tool).
    "imex": ("nvidia-imex", "nvidia-imex-ctl"),
}
# The IMEX daemon's configuration, relative to the driver root (with NVIDIA_IMEX_CHANNELS).
IMEX_CONFIGS: tuple[str, ...] = ("etc/nvidia-imex/config.cfg", "etc/nvidia-imex/nodes_config.cfg")
MPS_BINARIES = frozenset(BINARIES["compute"])

# Graphics configuration files (ICD loaders look for them), relative to the driver root.
GRAPHICS_CONFIGS: tuple[str, ...] = (
    "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
    "usr/share/egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json",
    "usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json",
    "usr/share/nvidia/nvoptix.bin",
    # Vulkan: the loader reads /etc/vulkan and /usr/share/vulkan; distributions install the
    # ICD as nvidia_icd.json (Debian, Ubuntu, the .run installer) or nvidia_icd.<arch>.json
    # (RPM packages), the layers in implicit_layer.d (and icd.d in some driver versions).
    *(
        f"{root}/vulkan/{rel}"
        for root in ("etc", "usr/share")
        for rel in (
            "icd.d/nvidia_icd.json",
            "icd.d/nvidia_icd.x86_64.json",
            "icd.d/nvidia_icd.aarch64.json",
            "icd.d/nvidia_layers.json",
            "implicit_layer.d/nvidia_layers.json",
        )
    ),
    "etc/OpenCL/vendors/nvidia.icd",
)

# Where binaries are looked up under the driver root, in order.
BINARY_DIRS: tuple[str, ...] = (
    "usr/local/sbin",
    "usr/local/bin",
    "usr/sbin",
    "usr/bin",
    "sbin",
    "bin",
)

IPC_PERSISTENCED = "/var/run/nvidia-persistenced/socket"
IPC_FABRICMANAGER = "/var/run/nvidia-fabricmanager/socket"
IPC_MPS_DIR = "/tmp/nvidia-mps"  # noqa: S108 - CUDA MPS default pipe directory

# Capabilities whose libraries a capability also brings (nvc options.h).
_IMPLIES: dict[str, tuple[str, ...]] = {
    "video": ("video", "compute"),
    "display": ("display", "graphics"),
}


def expand_capabilities(capabilities: frozenset[str]) -> frozenset[str]:
    """Capabilities whose library tables apply, with implied ones added."""
    out: set[str] = set()
    for cap in capabilities:
        out.update(_IMPLIES.get(cap, (cap,)))
    return frozenset(out)


def library_capability(soname: str) -> tuple[str, str] | None:
    """The (capability, prefix) whose table lists this SONAME, or None."""
    for cap, prefixes in LIBRARY_PREFIXES.items():
        for prefix in prefixes:
            if soname == prefix or soname.startswith(prefix + "."):
                return cap, prefix
    return None
