"""Build a simulated NVIDIA driver installation (Debian layout) from a SimDriverSpec.

Libraries and programs are real ELF files compiled with gcc (in parallel); ld.so.cache is
written by the real `ldconfig -r`; device nodes are real character devices (needs root).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .libraries import (
    DRIVER_BINS,
    DRIVER_LIBS,
    EGL_GBM,
    EGL_WAYLAND,
    FOREIGN_LIB,
    STALE_LIBCUDA_DIR,
    STALE_LIBCUDA_VERSION,
    DriverLib,
)
from .spec import (
    ARCHITECTURES,
    BRANDS,
    MAX_COMPUTE_INSTANCES,
    MAX_GPU_INSTANCES,
    MAX_GPUS,
    MIG_CONFIG_MINOR,
    MIG_MONITOR_MINOR,
    SimDriverSpec,
    ci_cap_minor,
    gi_cap_minor,
    parse_bus_id,
)

CSRC = Path(__file__).resolve().parent / "csrc"
# Bump when the built layout changes, so cached drivers are rebuilt.
BUILD_FORMAT = "2"

LIB64 = "usr/lib/x86_64-linux-gnu"
LIB32 = "usr/lib/i386-linux-gnu"

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR = 511
CAPS_MAJOR = 508

ENV_DEV_ROOT = "NVCT_SIM_DEV_ROOT"


class SimDriverError(RuntimeError):
    """The simulated driver could not be built (missing root, gcc, ldconfig...)."""


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


# ---------------------------------------------------------------------------- toolchain


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SimDriverError("the simulated driver needs gcc to compile its libraries")
    return gcc


def _ldconfig() -> str:
    for cand in (shutil.which("ldconfig"), "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SimDriverError("the simulated driver needs ldconfig to write its ld.so.cache")


@functools.lru_cache(maxsize=1)
def gcc_m32_works() -> bool:
    """True if `gcc -m32` can link a shared library (gcc-multilib installed)."""
    try:
        gcc = _gcc()
    except SimDriverError:
        return False
    with tempfile.TemporaryDirectory(prefix="simdriver-m32-") as tmp:
        src = Path(tmp, "t.c")
        src.write_text("int f(void) { return 1; }\n")
        proc = subprocess.run(
            [gcc, "-m32", "-shared", "-fPIC", "-o", str(Path(tmp, "t.so")), str(src)],
            capture_output=True,
            check=False,
        )
        return proc.returncode == 0


def require_root() -> None:
    if os.geteuid() != 0:
        raise SimDriverError(
            "building the simulated driver needs root: it creates character device nodes "
            "(mknod /dev/nvidia*)"
        )


# ---------------------------------------------------------------------------- C generation


def _c_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def _simdata_header(spec: SimDriverSpec, dev_root: Path) -> str:
    gpus = sorted(spec.gpus, key=lambda g: g.minor)
    cuda_major = spec.cuda_version.split(".")[0]
    lines = [
        "/* Generated by integration.simdriver from a SimDriverSpec. */",
        f"#define SIM_DRIVER_VERSION {_c_str(spec.driver_version)}",
        f"#define SIM_NVML_VERSION {_c_str(cuda_major + '.' + spec.driver_version)}",
        f"#define SIM_CUDA_VERSION {spec.cuda_version_int}",
        f"#define SIM_BUILD_DEV_ROOT {_c_str(str(dev_root))}",
        f"#define SIM_NGPUS {len(gpus)}",
        f"#define SIM_NMIGS {sum(len(g.migs) for g in gpus)}",
        "static const sim_gpu_t sim_gpus[SIM_NGPUS + 1] = {",
    ]
    migs: list[str] = []
    for i, g in enumerate(gpus):
        dom, bus, dev, _fn = parse_bus_id(g.pci_bus_id)
        lines.append(
            "    {"
            + ", ".join(
                [
                    str(g.minor),
                    _c_str(g.uuid),
                    _c_str(f"{dom:08X}:{bus:02X}:{dev:02X}.0"),
                    _c_str(f"{dom:04X}:{bus:02X}:{dev:02X}.0"),
                    _c_str(g.name),
                    _c_str(g.serial),
                    _c_str(g.board_part_number),
                    str(BRANDS[g.brand]),
                    str(ARCHITECTURES[g.architecture]),
                    str(g.compute_capability[0]),
                    str(g.compute_capability[1]),
                    f"{g.memory_mib}ULL",
                    str(dom),
                    str(bus),
                    str(dev),
                    f"0x{g.pci_device_id:08X}u",
                    f"0x{g.pci_subsystem_id:08X}u",
                    str(int(g.mig_capable)),
                    str(int(g.mig_enabled)),
                    str(len(migs)),
                    str(len(g.migs)),
                ]
            )
            + "},"
        )
        migs.extend(
            "    {"
            + ", ".join(
                [
                    str(i),
                    str(m.gi),
                    str(m.ci),
                    _c_str(m.uuid),
                    _c_str(m.profile),
                    _c_str(g.mig_name(m)),
                    f"{m.memory_mib}ULL",
                    str(m.gi_cap_minor),
                    str(m.ci_cap_minor),
                ]
            )
            + "},"
            for m in g.migs
        )
    lines += ["    {0}", "};", "static const sim_mig_t sim_migs[SIM_NMIGS + 1] = {"]
    lines += [*migs, "    {0}", "};", ""]
    return "\n".join(lines)


_ABI_TAG_ASM = r"""
/* GNU/Linux 2.3.99 ABI note: libnvidia-container mounts only the TLS variant carrying it. */
__asm__(".pushsection .note.ABI-tag,\"a\",@note\n"
        ".balign 4\n"
        ".long 4\n.long 16\n.long 1\n.asciz \"GNU\"\n"
        ".long 0\n.long 2\n.long 3\n.long 99\n"
        ".popsection\n");
"""


def _stub_source(name: str, version: str, symbols: Iterable[str], abi_tag: bool = False) -> str:
    ident = "".join(c if c.isalnum() else "_" for c in name)
    lines = [
        f"/* Simulated {name} ({version}): exports a few of the real entry points. */",
        f"const char nvsim_{ident}_version[] = {_c_str(version)};",
        *(f"int {sym}(void) {{ return 0; }}" for sym in symbols),
    ]
    if abi_tag:
        lines.append(_ABI_TAG_ASM)
    return "\n".join(lines) + "\n"


def _tool_source(name: str, version: str) -> str:
    return (
        '#include "oldglibc.h"\n'
        "#include <stdio.h>\n"
        f"/* Simulated {name}: prints its name and the driver version. */\n"
        "int main(void)\n{\n"
        f'    printf("%s: version %s\\n", {_c_str(name)}, {_c_str(version)});\n'
        "    return 0;\n}\n"
    )


# ---------------------------------------------------------------------------- compile jobs


@dataclass
class _Job:
    out: Path
    src: Path
    args: list[str]
    links: list[tuple[Path, str]] = field(default_factory=list)  # (link path, target)
    mode: int = 0o644

    def run(self, gcc: str, include: list[Path]) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [gcc, "-O1", "-w", *(f"-I{d}" for d in include), "-o", str(self.out), str(self.src)]
        cmd += self.args
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SimDriverError(
                f"gcc failed building {self.out.name}:\n{' '.join(cmd)}\n{proc.stderr}"
            )
        os.chmod(self.out, self.mode)
        for link, target in self.links:
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            link.symlink_to(target)


def _lib_job(
    build: Path,
    src: Path,
    out_dir: Path,
    file_name: str,
    soname: str,
    m32: bool,
    link_with: Iterable[str] = (),
) -> _Job:
    # --no-as-needed: keep DT_NEEDED libc.so.6 (and the listed deps) like NVIDIA's libraries;
    # without it ldconfig tags 32-bit stubs "ELF" instead of "libc6".
    args = ["-shared", "-fPIC", f"-Wl,-soname,{soname}", "-Wl,-z,noexecstack", "-Wl,--no-as-needed"]
    if m32:
        args.insert(0, "-m32")
    deps = list(link_with)
    if deps:
        args += [f"-L{out_dir}", *(f"-l:{d}" for d in deps)]
    links = [] if soname == file_name else [(out_dir / soname, file_name)]
    return _Job(out_dir / file_name, src, args, links)


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    os.chmod(path, mode)


def _library_jobs(
    spec: SimDriverSpec, root: Path, build: Path, m32: bool
) -> tuple[list[_Job], list[_Job]]:
    """(independent jobs, jobs that link against the first set) for one architecture."""
    ver = spec.driver_version
    lib_dir = root / (LIB32 if m32 else LIB64)
    by_name = {lib.name: lib for lib in DRIVER_LIBS}
    first: list[_Job] = []
    second: list[_Job] = []
    arch = "32" if m32 else "64"

    def src_for(lib: DriverLib) -> Path:
        if lib.name == "libnvidia-ml":
            return CSRC / "nvml.c"
        if lib.name == "libcuda":
            return CSRC / "cuda.c"
        path = build / f"{lib.name}.{arch}.c"
        _write(path, _stub_source(lib.name, ver, lib.symbols, abi_tag=lib.name == "libnvidia-tls"))
        return path

    for lib in DRIVER_LIBS:
        out_dir = lib_dir / lib.subdir if lib.subdir else lib_dir
        deps = [by_name[d].soname_for(ver) for d in lib.needed]
        job = _lib_job(
            build, src_for(lib), out_dir, lib.file_name(ver), lib.soname_for(ver), m32, deps
        )
        (second if deps else first).append(job)

    # Distractors a driver-library selector must skip.
    for file_name, soname in (EGL_WAYLAND, EGL_GBM, FOREIGN_LIB):
        src = build / f"{soname}.{arch}.c"
        _write(src, _stub_source(soname, file_name, ("nvsim_distractor",)))
        first.append(_lib_job(build, src, lib_dir, file_name, soname, m32))
    if not m32 and ver != STALE_LIBCUDA_VERSION:
        src = build / "libcuda-stale.c"
        _write(
            src, _stub_source("libcuda", STALE_LIBCUDA_VERSION, ("cuInit", "cuDriverGetVersion"))
        )
        first.append(
            _lib_job(
                build,
                src,
                root / STALE_LIBCUDA_DIR,
                f"libcuda.so.{STALE_LIBCUDA_VERSION}",
                "libcuda.so.1",
                m32,
            )
        )
    return first, second


def _binary_jobs(spec: SimDriverSpec, root: Path, build: Path) -> tuple[list[_Job], list[_Job]]:
    bin_dir = root / "usr/bin"
    first: list[_Job] = []
    second: list[_Job] = []
    # Own _start (csrc/oldglibc.h) so the programs also run in containers with an old glibc.
    base = ["-Wl,-z,noexecstack"]
    if platform.machine() == "x86_64":
        base += ["-DSIM_OWN_START", "-nostartfiles"]
    for b in DRIVER_BINS:
        if b.uses_nvml:
            args = [*base, f"-L{root / LIB64}", "-l:libnvidia-ml.so.1"]
            second.append(_Job(bin_dir / b.name, CSRC / f"{b.name}.c", args, mode=0o755))
        else:
            src = build / f"{b.name}.c"
            _write(src, _tool_source(b.name, spec.driver_version))
            first.append(_Job(bin_dir / b.name, src, base, mode=0o755))
    return first, second


def _run_jobs(jobs: list[_Job], include: list[Path]) -> None:
    gcc = _gcc()
    workers = max(2, (os.cpu_count() or 2) * 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in [pool.submit(job.run, gcc, include) for job in jobs]:
            fut.result()


# ---------------------------------------------------------------------------- files


def _ld_so_conf(root: Path, m32: bool) -> None:
    _write(root / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\n")
    conf_d = root / "etc/ld.so.conf.d"
    _write(conf_d / "x86_64-linux-gnu.conf", f"# Multiarch support\n/{LIB64}\n")
    if m32:
        _write(conf_d / "i386-linux-gnu.conf", f"# Multiarch support\n/{LIB32}\n")
    # An older driver's libcuda left in its own directory; sorts before x86_64-linux-gnu.conf,
    # so its libcuda.so.1 entry comes first in ld.so.cache.
    _write(conf_d / "nvidia-535-stale.conf", f"/{STALE_LIBCUDA_DIR}\n")


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
    _write(root / "usr/share/glvnd/egl_vendor.d/10_nvidia.json", egl % "libEGL_nvidia.so.0")
    platform = root / "usr/share/egl/egl_external_platform.d"
    _write(platform / "15_nvidia_gbm.json", egl % "libnvidia-egl-gbm.so.1")
    _write(platform / "10_nvidia_wayland.json", egl % "libnvidia-egl-wayland.so.1")
    vulkan = {
        "file_format_version": "1.0.1",
        "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3.277"},
    }
    _write(root / "etc/vulkan/icd.d/nvidia_icd.json", json.dumps(vulkan, indent=4) + "\n")
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
    _write(
        root / "etc/vulkan/implicit_layer.d/nvidia_layers.json", json.dumps(layer, indent=4) + "\n"
    )
    _write(root / "etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
    share = root / "usr/share/nvidia"
    _write(share / "nvoptix.bin", b"NVSIM-OPTIX\0" + ver.encode() + b"\0" * 52)
    _write(
        share / f"nvidia-application-profiles-{ver}-rc",
        '{\n    "rules": [],\n    "profiles": []\n}\n',
    )
    _write(share / f"nvidia-application-profiles-{ver}-key-documentation", "{}\n")
    fw = root / "lib/firmware/nvidia" / ver
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        _write(fw / name, b"NVSIM-GSP\0" + name.encode() + b"\0" + ver.encode() + b"\0" * 32)


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


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)  # mknod's mode is filtered by the umask


def make_dev_nodes(
    spec: SimDriverSpec,
    dev_root: Path,
    *,
    minors: Iterable[int] | None = None,
    mig_caps: bool = True,
    control: bool = True,
) -> Path:
    """Create `<dev_root>/dev/nvidia*` character devices for `spec`; returns the dev dir.

    `minors` restricts the per-GPU nodes (and their MIG caps) to those GPU minors, e.g. to
    build a second dev root in which the simulated NVML sees fewer GPUs.
    `control=False` leaves out nvidiactl, so NVML reports the driver as not loaded.
    """
    require_root()
    dev = dev_root / "dev"
    dev.mkdir(parents=True, exist_ok=True)
    keep = None if minors is None else set(minors)
    if control:
        _mknod(dev / "nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR, 0o666)
    _mknod(dev / "nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, 0o666)
    _mknod(dev / "nvidia-uvm", UVM_MAJOR, 0, 0o666)
    _mknod(dev / "nvidia-uvm-tools", UVM_MAJOR, 1, 0o666)
    gpus = [g for g in spec.gpus if keep is None or g.minor in keep]
    for g in gpus:
        _mknod(dev / f"nvidia{g.minor}", NVIDIA_MAJOR, g.minor, 0o666)
    if mig_caps and any(g.migs for g in spec.gpus):
        caps = dev / "nvidia-caps"
        caps.mkdir(exist_ok=True)
        os.chmod(caps, 0o755)  # noqa: S103 - as nvidia-modprobe makes it
        cap_minors = {MIG_CONFIG_MINOR, MIG_MONITOR_MINOR}
        for g in gpus:
            for m in g.migs:
                cap_minors |= {m.gi_cap_minor, m.ci_cap_minor}
        for n in sorted(cap_minors):
            _mknod(caps / f"nvidia-cap{n}", CAPS_MAJOR, n, 0o444)
    return dev


def _access(minor: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def _proc_files(spec: SimDriverSpec, proc: Path) -> None:
    ver = spec.driver_version
    char_devs = [
        (1, "mem"),
        (4, "/dev/vc/0"),
        (4, "tty"),
        (5, "/dev/tty"),
        (5, "/dev/console"),
        (5, "/dev/ptmx"),
        (10, "misc"),
        (136, "pts"),
        (195, "nvidia-frontend"),
        (195, "nvidia"),
        (CAPS_MAJOR, "nvidia-caps"),
        (UVM_MAJOR, "nvidia-uvm"),
    ]
    devices = "Character devices:\n" + "".join(f"{n:3d} {name}\n" for n, name in char_devs)
    devices += "\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n"
    _write(proc / "devices", devices, 0o444)

    nv = proc / "driver/nvidia"
    _write(
        nv / "version",
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  Thu Jan  1 00:00:00 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        0o444,
    )
    params = [
        "ResmanDebugLevel: 4294967295",
        "RmLogonRC: 1",
        "ModifyDeviceFiles: 1",
        "DeviceFileUID: 0",
        "DeviceFileGID: 0",
        "DeviceFileMode: 438",
        "InitializeSystemMemoryAllocations: 1",
        "UsePageAttributeTable: 4294967295",
        "EnableMSI: 1",
        "EnablePCIeGen3: 0",
        "MemoryPoolSize: 0",
        "KMallocHeapMaxSize: 0",
        "VMallocHeapMaxSize: 0",
        "IgnoreMMIOCheck: 0",
        "EnableStreamMemOPs: 0",
        "EnableUserNUMAManagement: 1",
        "NvLinkDisable: 0",
        "RmProfilingAdminOnly: 1",
        "PreserveVideoMemoryAllocations: 0",
        "EnableS0ixPowerManagement: 0",
        "DynamicPowerManagement: 3",
        'RegistryDwords: ""',
        'RegistryDwordsPerDevice: ""',
        'RmMsg: ""',
        'GpuBlacklist: ""',
        'TemporaryFilePath: ""',
        'ExcludedGpus: ""',
        "DmaRemapPeerMmio: 1",
        "ImexChannelCount: 2048",
        "CreateImexChannel0: 0",
        "EnableResizableBar: 0",
    ]
    _write(nv / "params", "\n".join(params) + "\n", 0o444)
    _write(nv / "registry", 'Binary: ""\n', 0o444)
    for i, g in enumerate(sorted(spec.gpus, key=lambda g: g.minor)):
        dom, bus, dev, fn = parse_bus_id(g.pci_bus_id)
        info = (
            f"Model: \t\t {g.name}\n"
            f"IRQ:   \t\t {150 + i}\n"
            f"GPU UUID: \t {g.uuid}\n"
            "Video BIOS: \t 96.00.99.00.01\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\n"
            "DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {dom:04x}:{bus:02x}:{dev:02x}.{fn:x}\n"
            f"Device Minor: \t {g.minor}\n"
            f"GPU Firmware: \t {ver}\n"
            "GPU Excluded:\t No\n"
        )
        _write(nv / "gpus" / g.proc_bus_id / "information", info, 0o444)
        _write(
            nv / "gpus" / g.proc_bus_id / "power",
            "Runtime D3 status:          Not supported\n",
            0o444,
        )

    if any(g.migs for g in spec.gpus):
        caps = nv / "capabilities"
        _write(caps / "mig/config", _access(MIG_CONFIG_MINOR).replace("292", "256"), 0o444)
        _write(caps / "mig/monitor", _access(MIG_MONITOR_MINOR), 0o444)
        for g in spec.gpus:
            for m in g.migs:
                gi_dir = caps / f"gpu{g.minor}/mig/gi{m.gi}"
                _write(gi_dir / "access", _access(m.gi_cap_minor), 0o444)
                _write(gi_dir / f"ci{m.ci}/access", _access(m.ci_cap_minor), 0o444)
    # The kernel lists every possible MIG minor, whether or not such an instance exists.
    lines = [f"config {MIG_CONFIG_MINOR}", f"monitor {MIG_MONITOR_MINOR}"]
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GPU_INSTANCES):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_cap_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_cap_minor(gpu, gi, ci)}"
                for ci in range(MAX_COMPUTE_INSTANCES)
            ]
    _write(proc / "driver/nvidia-caps/mig-minors", "\n".join(lines) + "\n", 0o444)


# ---------------------------------------------------------------------------- entry points


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
        _write(build / "simdata.h", _simdata_header(spec, dev_root))
        include = [build, CSRC]
        first, second = _library_jobs(spec, driver_root, build, m32=False)
        if m32:
            f32, s32 = _library_jobs(spec, driver_root, build, m32=True)
            first += f32
            second += s32
        bf, bs = _binary_jobs(spec, driver_root, build)
        first += bf
        second += bs
        # Compile while the plain files are being written.
        with ThreadPoolExecutor(max_workers=1) as side:
            files = side.submit(_plain_files, spec, driver_root, dev_root, proc_root, ipc, m32)
            _run_jobs(first, include)
            _run_jobs(second, include)
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
    _proc_files(spec, proc_root)


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
