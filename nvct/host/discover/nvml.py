"""GPUs and driver versions through NVML (pynvml), loaded from the driver root.

The library is opened by absolute path from the driver root's ld.so.cache, never by the
caller's LD_LIBRARY_PATH, so a containerized driver or the simulated driver is honoured.
"""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from nvct.base.errors import DiscoveryError
from nvct.host.inventory import MigAttributes

ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
}


@dataclass(frozen=True, slots=True)
class NvmlMig(MigAttributes):
    """A MIG device as NVML reports it."""

    index: int
    uuid: str
    gpu_instance: int
    compute_instance: int
    profile: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    """A GPU as NVML reports it."""

    index: int
    minor: int
    uuid: str
    pci_bus_id: str
    name: str
    brand: str
    architecture: str
    compute_capability: str
    memory_mib: int
    persistence_mode: bool
    mig_enabled: bool
    migs: tuple[NvmlMig, ...]
    mig_capable: bool = False
    virtualization_mode: int = 0
    fabric_clique: str = ""


@dataclass(frozen=True, slots=True)
class NvmlReport:
    """Driver-wide facts and the GPUs NVML sees."""

    driver_version: str
    cuda_version: str
    gpus: tuple[NvmlGpu, ...]


def query_nvml(library: Path) -> NvmlReport:
    """Read every fact nvct uses from NVML, in a forked child process.

    Like libnvidia-container's RPC helper, the child keeps the driver library out of the
    caller: a crash in NVML cannot take the hook down with a half-applied plan, and one
    process can query drivers of different roots (glibc would otherwise reuse the first
    ``libnvidia-ml.so.1`` it loaded, whatever path is asked for later).

    Raises:
        DiscoveryError: NVML cannot be loaded or initialised (no driver, wrong root).
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_end)
            try:
                payload: dict[str, Any] = {"report": asdict(_query_in_process(library))}
            except DiscoveryError as err:
                payload = {"error": err.message, "hint": err.hint}
            except Exception as err:  # reported to the parent as one line
                payload = {"error": f"NVML query failed: {type(err).__name__}: {err}"}
            data = json.dumps(payload).encode()
            while data:
                data = data[os.write(write_end, data) :]
        except BaseException:  # the child must never return into the caller's code
            code = 1
        os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 1 << 16):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    try:
        payload = json.loads(b"".join(chunks))
    except ValueError:
        raise DiscoveryError(
            f"NVML ({library}) crashed the discovery helper (wait status {status})",
            hint="check the driver installation with nvidia-smi",
        ) from None
    if "error" in payload:
        raise DiscoveryError(payload["error"], hint=payload.get("hint"))
    report = payload["report"]
    gpus = tuple(
        NvmlGpu(**{**g, "migs": tuple(NvmlMig(**m) for m in g["migs"])}) for g in report["gpus"]
    )
    return NvmlReport(report["driver_version"], report["cuda_version"], gpus)


_bound: list[str] = []  # the library pynvml was last bound to in this process


def bind_library(pynvml: Any, library: Path) -> None:
    """Point pynvml at ``library``.

    pynvml caches each NVML function's pointer for the whole process. Bound to another
    driver's library (a changed driver-root, or tests with several simulated drivers), the
    cached pointers would still call into the first one, which answers "Uninitialized": so the
    cache is dropped when the library changes, and only then (a health watch may be calling
    through it meanwhile).

    Raises:
        OSError: the library cannot be loaded.
    """
    handle = ctypes.CDLL(str(library))
    if _bound and _bound[-1] != str(library):
        cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
        if isinstance(cache, dict):
            cache.clear()
    pynvml.nvmlLib = handle
    _bound[:] = [str(library)]


def open_nvml(library: Path) -> Any:
    """pynvml bound to ``library`` and initialised, for the long-running NVML users (the device
    plugin's health watch, the exporter); they shut it down.

    Raises:
        DiscoveryError: the library cannot be loaded or NVML does not start.
    """
    import pynvml

    try:
        bind_library(pynvml, library)
        pynvml.nvmlInit()
    except (OSError, pynvml.NVMLError) as err:
        raise DiscoveryError(
            f"NVML ({library}) cannot start: {err}",
            hint="check driver-root, that the nvidia kernel module is loaded and /dev/nvidiactl "
            "exists (in a pod: the nvidia runtime class or the driver mounted)",
        ) from err
    return pynvml


def _query_in_process(library: Path) -> NvmlReport:
    import pynvml  # 30 ms import, discovery only

    try:
        bind_library(pynvml, library)
    except OSError as err:
        raise DiscoveryError(
            f"cannot load NVML from {library}: {err}",
            hint="check that the NVIDIA driver is installed and driver-root points at it",
        ) from err
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise DiscoveryError(
            f"NVML ({library}) failed to initialise: {err}",
            hint="check that the nvidia kernel module is loaded and /dev/nvidiactl exists",
        ) from err
    try:
        version = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        gpus = tuple(_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount()))
    except pynvml.NVMLError as err:
        raise DiscoveryError(f"NVML ({library}) query failed: {err}") from err
    finally:
        pynvml.nvmlShutdown()
    return NvmlReport(
        driver_version=version,
        cuda_version=f"{cuda // 1000}.{(cuda % 1000) // 10}",
        gpus=gpus,
    )


def _gpu(nvml: Any, index: int) -> NvmlGpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    mig_enabled = mig_capable = False
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        mig_enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        mig_capable = True  # GFD's IsMigCapable: NVML answers the mode at all
    except nvml.NVMLError:  # NOT_SUPPORTED: not MIG-capable
        pass
    try:
        persistence = nvml.nvmlDeviceGetPersistenceMode(handle) == 1
    except nvml.NVMLError:
        persistence = False
    try:
        arch = ARCHITECTURES.get(nvml.nvmlDeviceGetArchitecture(handle), "Unknown")
    except nvml.NVMLError:
        arch = "Unknown"
    return NvmlGpu(
        index=index,
        minor=nvml.nvmlDeviceGetMinorNumber(handle),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        brand=_brand(nvml, handle),
        architecture=arch,
        compute_capability=f"{major}.{minor_cc}",
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1 << 20),
        persistence_mode=persistence,
        mig_enabled=mig_enabled,
        mig_capable=mig_capable,
        migs=_migs(nvml, handle) if mig_enabled else (),
        virtualization_mode=_optional(
            nvml, lambda: int(nvml.nvmlDeviceGetVirtualizationMode(handle)), 0
        ),
        fabric_clique=_fabric_clique(nvml, handle),
    )


T = TypeVar("T")


def _optional(nvml: Any, query: Callable[[], T], default: T) -> T:
    """A query a GPU or driver may not support (NOT_SUPPORTED, FUNCTION_NOT_FOUND)."""
    try:
        return query()
    except nvml.NVMLError:
        return default


def _fabric_clique(nvml: Any, handle: Any) -> str:
    """GFD's ``<clusterUUID>.<cliqueID>`` of a GPU whose fabric registration completed."""
    struct = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)  # an nvidia-ml-py without fabric info
    if struct is None:
        return ""
    info = struct()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except nvml.NVMLError:  # NOT_SUPPORTED: no NVLink fabric (HGX A100/H100, PCIe)
        return ""
    if info.state != nvml.NVML_GPU_FABRIC_STATE_COMPLETED or info.status != nvml.NVML_SUCCESS:
        return ""
    return f"{uuid.UUID(bytes=bytes(info.clusterUuid))}.{info.cliqueId}"


def _mig_attributes(nvml: Any, mig: Any) -> dict[str, int]:
    try:
        a = nvml.nvmlDeviceGetAttributes_v2(mig)
    except nvml.NVMLError:
        return {}
    return {
        "multiprocessors": a.multiprocessorCount,
        "slices_gi": a.gpuInstanceSliceCount,
        "slices_ci": a.computeInstanceSliceCount,
        "engines_copy": a.sharedCopyEngineCount,
        "engines_decoder": a.sharedDecoderCount,
        "engines_encoder": a.sharedEncoderCount,
        "engines_jpeg": a.sharedJpegCount,
        "engines_ofa": a.sharedOfaCount,
    }


def _migs(nvml: Any, handle: Any) -> tuple[NvmlMig, ...]:
    out = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nvml.NVMLError_NotFound:
            continue
        name = _text(nvml.nvmlDeviceGetName(mig))
        out.append(
            NvmlMig(
                index=i,
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                gpu_instance=nvml.nvmlDeviceGetGpuInstanceId(mig),
                compute_instance=nvml.nvmlDeviceGetComputeInstanceId(mig),
                profile=name.split()[-1] if " " in name else name,
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // (1 << 20),
                **_mig_attributes(nvml, mig),
            )
        )
    return tuple(out)


_BRANDS = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}


def _brand(nvml: Any, handle: Any) -> str:
    try:
        return _BRANDS.get(nvml.nvmlDeviceGetBrand(handle), "Unknown")
    except nvml.NVMLError:
        return "Unknown"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
