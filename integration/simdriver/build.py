"""Build a simulated NVIDIA driver installation (Debian layout) from a SimDriverSpec.

Libraries and programs are real ELF files compiled with gcc in parallel (compile.py);
ld.so.cache is written by the real `ldconfig -r`; device nodes are real character devices
(devnodes.py, needs root); /proc files (procfs.py) and sysfs (sysfs.py) are plain files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .common import LIB32, LIB64, SimDriverError, require_root, write_file
from .compile import CSRC, binary_jobs, gcc_m32_works, library_jobs, run_jobs, simdata_header
from .devnodes import make_dev_nodes
from .inject import control_dir
from .libraries import STALE_LIBCUDA_DIR
from .procfs import write_procfs
from .spec import SimDriverSpec
from .sysfs import write_sysfs

__all__ = [
    "LIB32",
    "LIB64",
    "SimDriver",
    "SimDriverError",
    "build_driver",
    "cached_driver",
    "gcc_m32_works",
    "make_dev_nodes",
]

BUILD_FORMAT = "3"

ENV_DEV_ROOT = "NVCT_SIM_DEV_ROOT"


@dataclass(frozen=True)
class SimDriver:
    spec: SimDriverSpec
    driver_root: Path
    dev_root: Path
    proc_root: Path
    lib_dir: Path
    lib32_dir: Path | None

    @property
    def bin_dir(self) -> Path:
        return self.driver_root / "usr/bin"

    @property
    def control_dir(self) -> Path:
        """Where tests change what NVML answers (integration/simdriver/README.md)."""
        return control_dir(self.driver_root)

    @property
    def sys_root(self) -> Path:
        """A sysfs root: `<sys_root>/bus/pci/devices/<address>/numa_node` per GPU."""
        return self.driver_root / "sys"

    @property
    def nvidia_smi(self) -> Path:
        return self.bin_dir / "nvidia-smi"

    @property
    def ld_cache(self) -> Path:
        return self.driver_root / "etc/ld.so.cache"

    @property
    def firmware_dir(self) -> Path:
        return self.driver_root / "lib/firmware/nvidia" / self.spec.driver_version

    def env(self, dev_root: Path | None = None) -> dict[str, str]:
        """Environment for running the driver's programs on the host (`os.environ | env()`)."""
        return {
            "LD_LIBRARY_PATH": str(self.lib_dir),
            ENV_DEV_ROOT: str(dev_root if dev_root is not None else self.dev_root),
        }

    def to_json(self) -> dict[str, object]:
        return {
            "driver_version": self.spec.driver_version,
            "cuda_version": self.spec.cuda_version,
            "driver_root": str(self.driver_root),
            "dev_root": str(self.dev_root),
            "proc_root": str(self.proc_root),
            "lib_dir": str(self.lib_dir),
            "lib32_dir": str(self.lib32_dir) if self.lib32_dir else None,
            "gpus": [
                {
                    "minor": g.minor,
                    "uuid": g.uuid,
                    "pci_bus_id": g.pci_bus_id,
                    "migs": [m.uuid for m in g.migs],
                }
                for g in self.spec.gpus
            ],
        }


def _ldconfig() -> str:
    for cand in (shutil.which("ldconfig"), "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SimDriverError("the simulated driver needs ldconfig to write its ld.so.cache")


def _ld_so_conf(root: Path, m32: bool) -> None:
    write_file(root / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\n")
    conf_d = root / "etc/ld.so.conf.d"
    write_file(conf_d / "x86_64-linux-gnu.conf", f"# Multiarch support\n/{LIB64}\n")
    if m32:
        write_file(conf_d / "i386-linux-gnu.conf", f"# Multiarch support\n/{LIB32}\n")
    # An older driver's libcuda left in its own directory; sorts before x86_64-linux-gnu.conf,
    # so its libcuda.so.1 entry comes first in ld.so.cache.
    write_file(conf_d / "nvidia-535-stale.conf", f"/{STALE_LIBCUDA_DIR}\n")


def _run_ldconfig(root: Path) -> None:
    cmd = [_ldconfig(), "-X", "-r", str(root), "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SimDriverError(f"{' '.join(cmd)} failed:\n{proc.stderr}")


def _config_files(root: Path, ver: str) -> None:
    egl = (
        '{\n    "file_format_version" : "1.0.0",\n'
        '    "ICD" : {\n        "library_path" : "%s"\n    }\n}\n'
    )
    write_file(root / "usr/share/glvnd/egl_vendor.d/10_nvidia.json", egl % "libEGL_nvidia.so.0")
    platform = root / "usr/share/egl/egl_external_platform.d"
    write_file(platform / "15_nvidia_gbm.json", egl % "libnvidia-egl-gbm.so.1")
    write_file(platform / "10_nvidia_wayland.json", egl % "libnvidia-egl-wayland.so.1")
    vulkan = {
        "file_format_version": "1.0.1",
        "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3.277"},
    }
    write_file(root / "etc/vulkan/icd.d/nvidia_icd.json", json.dumps(vulkan, indent=4) + "\n")
    layer = {
        "file_format_version": "1.0.1",
        "layer": {
            "name": "VK_LAYER_NV_optimus",
            "type": "INSTANCE",
            "library_path": "libGLX_nvidia.so.0",
            "api_version": "1.3.277",
            "implementation_version": "1",
            "description": "NVIDIA Optimus layer",
            "functions": {
                "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr",
                "vkGetDeviceProcAddr": "vk_optimusGetDeviceProcAddr",
            },
            "enable_environment": {"__NV_PRIME_RENDER_OFFLOAD": "1"},
            "disable_environment": {"DISABLE_LAYER_NV_OPTIMUS_1": ""},
        },
    }
    write_file(
        root / "etc/vulkan/implicit_layer.d/nvidia_layers.json", json.dumps(layer, indent=4) + "\n"
    )
    write_file(root / "etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
    share = root / "usr/share/nvidia"
    write_file(share / "nvoptix.bin", b"NVSIM-OPTIX\0" + ver.encode() + b"\0" * 52)
    write_file(
        share / f"nvidia-application-profiles-{ver}-rc",
        '{\n    "rules": [],\n    "profiles": []\n}\n',
    )
    write_file(share / f"nvidia-application-profiles-{ver}-key-documentation", "{}\n")
    fw = root / "lib/firmware/nvidia" / ver
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        write_file(fw / name, b"NVSIM-GSP\0" + name.encode() + b"\0" + ver.encode() + b"\0" * 32)


def _ipc(root: Path) -> None:
    for rel in ("var/run/nvidia-persistenced/socket", "var/run/nvidia-fabricmanager/socket"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        # The inode a bind(2) leaves behind; mknod has no sun_path length limit.
        os.mknod(path, stat.S_IFSOCK | 0o666)
        os.chmod(path, 0o666)  # noqa: S103 - the real sockets are world-writable
    mps = root / "tmp/nvidia-mps"
    mps.mkdir(parents=True, exist_ok=True)
    os.chmod(mps, 0o755)  # noqa: S103 - as nvidia-cuda-mps-control makes it


def build_driver(
    spec: SimDriverSpec,
    driver_root: Path,
    dev_root: Path | None = None,
    proc_root: Path | None = None,
    *,
    ipc: bool = True,
) -> SimDriver:
    """Build the simulated driver for `spec` under `driver_root` (created; should be empty)."""
    spec.validate()
    require_root()
    driver_root = Path(driver_root).absolute()
    dev_root = Path(dev_root).absolute() if dev_root is not None else driver_root
    proc_root = Path(proc_root).absolute() if proc_root is not None else driver_root / "proc"
    m32 = gcc_m32_works()
    driver_root.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="simdriver-build-") as tmp:
        build = Path(tmp)
        control = control_dir(driver_root)
        control.mkdir(parents=True, exist_ok=True)
        write_file(build / "simdata.h", simdata_header(spec, dev_root, control))
        include = [build, CSRC]
        first, second = library_jobs(spec, driver_root, build, m32=False)
        if m32:
            f32, s32 = library_jobs(spec, driver_root, build, m32=True)
            first += f32
            second += s32
        bf, bs = binary_jobs(spec, driver_root, build)
        first += bf
        second += bs
        # Compile while the plain files are being written.
        with ThreadPoolExecutor(max_workers=1) as side:
            files = side.submit(_plain_files, spec, driver_root, dev_root, proc_root, ipc, m32)
            run_jobs(first, include)
            run_jobs(second, include)
            files.result()
    _run_ldconfig(driver_root)
    return SimDriver(
        spec=spec,
        driver_root=driver_root,
        dev_root=dev_root,
        proc_root=proc_root,
        lib_dir=driver_root / LIB64,
        lib32_dir=driver_root / LIB32 if m32 else None,
    )


def _plain_files(
    spec: SimDriverSpec, root: Path, dev_root: Path, proc_root: Path, ipc: bool, m32: bool
) -> None:
    _ld_so_conf(root, m32)
    _config_files(root, spec.driver_version)
    if ipc:
        _ipc(root)
    make_dev_nodes(spec, dev_root)
    write_procfs(spec, proc_root)
    write_sysfs(spec, root / "sys")


def _source_digest() -> str:
    h = hashlib.sha256(BUILD_FORMAT.encode())
    for path in sorted(Path(__file__).resolve().parent.rglob("*")):
        if path.suffix in {".c", ".h", ".py"} and "__pycache__" not in path.parts:
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_driver(spec: SimDriverSpec, cache_dir: Path, *, ipc: bool = True) -> SimDriver:
    """Build `spec` once under `cache_dir/<hash>/root` and reuse it (safe across processes)."""
    spec.validate()
    key = f"{spec.identity()}-{_source_digest()}{'-m32' if gcc_m32_works() else ''}"
    key += "" if ipc else "-noipc"
    entry = Path(cache_dir).absolute() / key
    marker = entry / "complete.json"

    def load() -> SimDriver | None:
        try:
            data = json.loads(marker.read_text())
        except (FileNotFoundError, ValueError):
            return None
        lib32 = data.get("lib32_dir")
        return SimDriver(
            spec=spec,
            driver_root=Path(data["driver_root"]),
            dev_root=Path(data["dev_root"]),
            proc_root=Path(data["proc_root"]),
            lib_dir=Path(data["lib_dir"]),
            lib32_dir=Path(lib32) if lib32 else None,
        )

    found = load()
    if found is not None:
        return found
    with _locked(entry.parent / f"{key}.lock"):
        found = load()
        if found is not None:
            return found
        if entry.exists():
            shutil.rmtree(entry)  # a build that died half-way
        driver = build_driver(spec, entry / "root", ipc=ipc)
        tmp_marker = entry / "complete.json.tmp"
        tmp_marker.write_text(json.dumps(driver.to_json(), indent=2))
        tmp_marker.replace(marker)
        return driver
