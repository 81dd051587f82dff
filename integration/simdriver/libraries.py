"""The driver's shared libraries and programs, with NVIDIA's real file names and SONAMEs.

`VER` in a SONAME stands for the driver version (e.g. libnvidia-glcore.so.550.54.15).
"""

from __future__ import annotations

from dataclasses import dataclass

VER = "{ver}"


@dataclass(frozen=True)
class DriverLib:
    name: str  # "libcuda"
    soname: str  # "libcuda.so.1" or "libnvidia-glcore.so.{ver}"
    capability: str  # utility, compute, video, graphics, ngx
    symbols: tuple[str, ...] = ()  # a few real entry points, so the stub exports something
    needed: tuple[str, ...] = ()  # names of other DriverLibs it links against (DT_NEEDED)
    subdir: str = ""  # relative to the lib dir, e.g. "vdpau"

    def file_name(self, driver_version: str) -> str:
        return f"{self.name}.so.{driver_version}"

    def soname_for(self, driver_version: str) -> str:
        return self.soname.format(ver=driver_version)


def _lib(
    name: str,
    soname_suffix: str,
    cap: str,
    symbols: tuple[str, ...] = (),
    needed: tuple[str, ...] = (),
    subdir: str = "",
) -> DriverLib:
    return DriverLib(name, f"{name}.so.{soname_suffix}", cap, symbols, needed, subdir)


# libnvidia-ml and libcuda are implemented in csrc/nvml.c and csrc/cuda.c; the rest are stubs.
DRIVER_LIBS: tuple[DriverLib, ...] = (
    # utility
    _lib("libnvidia-ml", "1", "utility", ("nvmlInit_v2",)),
    _lib("libnvidia-cfg", "1", "utility", ("nvCfgGetPciDevices", "nvCfgOpenPciDevice")),
    # compute
    _lib("libcuda", "1", "compute", ("cuInit",)),
    _lib("libcudadebugger", "1", "compute", ("cudbgGetAPI",)),
    _lib(
        "libnvidia-opencl",
        "1",
        "compute",
        ("clIcdGetPlatformIDsKHR", "clGetExtensionFunctionAddress"),
    ),
    _lib("libnvidia-gpucomp", VER, "compute", ("nvgpucompCompile",)),
    _lib("libnvidia-ptxjitcompiler", "1", "compute", ("__cuda_CallJitEntryPoint",)),
    _lib("libnvidia-allocator", "1", "compute", ("nvidia_allocator_create",)),
    _lib("libnvidia-pkcs11", VER, "compute", ("C_GetFunctionList",)),
    _lib("libnvidia-pkcs11-openssl3", VER, "compute", ("C_GetFunctionList",)),
    _lib("libnvidia-nvvm", "4", "compute", ("nvvmVersion", "nvvmCreateProgram")),
    # video
    _lib("libvdpau_nvidia", "1", "video", ("vdp_imp_device_create_x11",), subdir="vdpau"),
    _lib("libnvidia-encode", "1", "video", ("NvEncodeAPICreateInstance",)),
    _lib("libnvidia-opticalflow", "1", "video", ("NvOFAPICreateInstanceCuda",)),
    _lib("libnvcuvid", "1", "video", ("cuvidCreateDecoder", "cuvidGetDecoderCaps")),
    # graphics
    _lib("libnvidia-eglcore", VER, "graphics", ("NvEglRegClientApi",)),
    _lib("libnvidia-glcore", VER, "graphics", ("_nv000001gl",)),
    _lib("libnvidia-tls", VER, "graphics", ("_nv001tls",)),
    _lib("libnvidia-glsi", VER, "graphics", ("_nv001glsi",)),
    _lib("libnvidia-fbc", "1", "graphics", ("NvFBCCreateInstance",)),
    _lib("libnvidia-rtcore", VER, "graphics", ("rtcoreCreateContext",)),
    _lib("libnvoptix", "1", "graphics", ("optixQueryFunctionTable",)),
    _lib(
        "libGLX_nvidia",
        "0",
        "graphics",
        ("__glx_Main", "vk_icdGetInstanceProcAddr"),
        needed=("libnvidia-glcore", "libnvidia-tls"),
    ),
    _lib(
        "libEGL_nvidia",
        "0",
        "graphics",
        ("__egl_Main",),
        needed=("libnvidia-eglcore", "libnvidia-glsi"),
    ),
    _lib("libGLESv2_nvidia", "2", "graphics", ("glDrawArrays",), needed=("libnvidia-eglcore",)),
    _lib("libGLESv1_CM_nvidia", "1", "graphics", ("glFrustumf",), needed=("libnvidia-eglcore",)),
    _lib("libnvidia-glvkspirv", VER, "graphics", ("_nv002glvkspirv",)),
    # ngx
    _lib("libnvidia-ngx", "1", "ngx", ("NVSDK_NGX_CUDA_Init",)),
)

DRIVER_LIBS_BY_NAME: dict[str, DriverLib] = {lib.name: lib for lib in DRIVER_LIBS}

# Libraries that sit next to the driver's but that a driver-library selector must not pick.
STALE_LIBCUDA_VERSION = "535.104.05"
STALE_LIBCUDA_DIR = "usr/lib/nvidia-535"  # relative to the driver root; own ld.so.conf.d entry
EGL_WAYLAND = ("libnvidia-egl-wayland.so.1.1.13", "libnvidia-egl-wayland.so.1")
EGL_GBM = ("libnvidia-egl-gbm.so.1.1.1", "libnvidia-egl-gbm.so.1")
FOREIGN_LIB = ("libfoo.so.1", "libfoo.so.1")


@dataclass(frozen=True)
class DriverBin:
    name: str
    capability: str  # utility, compute, graphics
    uses_nvml: bool = False


DRIVER_BINS: tuple[DriverBin, ...] = (
    DriverBin("nvidia-smi", "utility", uses_nvml=True),
    DriverBin("nvidia-debugdump", "utility"),
    DriverBin("nvidia-persistenced", "utility"),
    DriverBin("nvidia-cuda-mps-control", "compute"),
    DriverBin("nvidia-cuda-mps-server", "compute"),
    DriverBin("nvidia-xconfig", "graphics"),
)


def libs_for(capability: str) -> tuple[DriverLib, ...]:
    return tuple(lib for lib in DRIVER_LIBS if lib.capability == capability)
