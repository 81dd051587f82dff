"""The simulated NVIDIA driver (integration/simdriver): observable facts of a built root."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from integration.simdriver import (
    DRIVER_LIBS,
    SimDriver,
    SimDriverError,
    SimDriverSpec,
    build_driver,
    cached_driver,
    make_dev_nodes,
    preset,
)
from integration.simdriver.libraries import STALE_LIBCUDA_VERSION
from integration.simdriver.spec import ci_cap_minor, gi_cap_minor

REPO = Path(__file__).resolve().parents[2]


def _why_no_build() -> str | None:
    if os.geteuid() != 0:
        return "building the simulated driver needs root (mknod of /dev/nvidia* nodes)"
    if shutil.which("gcc") is None:
        return "building the simulated driver needs gcc"
    if shutil.which("ldconfig") is None and not Path("/sbin/ldconfig").exists():
        return "building the simulated driver needs ldconfig"
    return None


_F = TypeVar("_F", bound=Callable[..., object])


def needs_build(fn: _F) -> _F:
    """Marks a test `root` and skips it where the simulated driver cannot be built."""
    reason = _why_no_build()
    skip = pytest.mark.skipif(reason is not None, reason=reason or "")
    marked: _F = pytest.mark.root(skip(fn))
    return marked


@pytest.fixture(scope="session")
def sim_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers; cached_driver locks per spec
    return base / "simdriver-cache"


@pytest.fixture(scope="session")
def h100(sim_cache: Path) -> SimDriver:
    return cached_driver(preset("h100x4-550"), sim_cache)


@pytest.fixture(scope="session")
def a100mig(sim_cache: Path) -> SimDriver:
    return cached_driver(preset("a100x8-570-mig"), sim_cache)


@pytest.fixture(scope="session")
def t4(sim_cache: Path) -> SimDriver:
    return cached_driver(preset("t4x1-535"), sim_cache)


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {
        k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NVCT_SIM_DEV_ROOT")
    }
    return subprocess.run(args, env=full | env, capture_output=True, text=True, check=False)


def _smi(
    driver: SimDriver, *args: str, dev_root: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return _run([str(driver.nvidia_smi), *args], driver.env(dev_root))


def _ldcache(driver: SimDriver) -> list[tuple[str, str, str]]:
    out = subprocess.run(
        ["ldconfig", "-r", str(driver.driver_root), "-p"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.findall(r"^\s+(\S+) \(([^)]*)\) => (\S+)$", out, re.M)


# --------------------------------------------------------------------------- spec (no root)


def test_presets_are_deterministic() -> None:
    assert preset("h100x4-550") == preset("h100x4-550")
    spec = preset("h100x4-550")
    assert spec.driver_version == "550.54.15"
    assert spec.cuda_version_int == 12040
    assert len(spec.gpus) == 4
    assert len({g.uuid for g in spec.gpus}) == 4
    assert all(
        re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g.uuid) for g in spec.gpus
    )
    assert spec.gpus[1].pci_bus_id == "00000000:3B:00.0"
    assert spec.gpus[1].proc_bus_id == "0000:3b:00.0"


def test_mig_preset_and_cap_minors() -> None:
    spec = preset("a100x8-570-mig")
    assert (spec.driver_version, spec.cuda_version, len(spec.gpus)) == ("570.86.15", "12.8", 8)
    assert [len(g.migs) for g in spec.gpus] == [3, 2, 0, 0, 0, 0, 0, 0]
    # The numbering /proc/driver/nvidia-caps/mig-minors uses on real systems.
    assert gi_cap_minor(0, 0) == 3
    assert ci_cap_minor(0, 0, 0) == 4
    assert gi_cap_minor(0, 1) == 12
    assert gi_cap_minor(1, 0) == 138
    mig = spec.gpus[0].migs[0]
    assert (mig.gi, mig.ci, mig.gi_cap_minor, mig.ci_cap_minor) == (1, 0, 12, 13)


def test_spec_validation_rejects_bad_values() -> None:
    spec = preset("t4x1-535")
    gpu = spec.gpus[0]
    bad = SimDriverSpec("1.2.3", "12.0", (gpu, gpu))
    with pytest.raises(ValueError, match="minor"):
        bad.validate()
    with pytest.raises(ValueError, match="unknown simdriver preset"):
        preset("nope")


def test_build_refuses_without_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SimDriverError, match="needs root"):
        build_driver(preset("t4x1-535"), tmp_path / "root")
    assert not (tmp_path / "root").exists()


# --------------------------------------------------------------------------- built root


@needs_build
def test_ldcache_lists_driver_libraries(h100: SimDriver) -> None:
    entries = _ldcache(h100)
    ver = h100.spec.driver_version
    by_arch: dict[str, set[str]] = {}
    for soname, flags, path in entries:
        arch = "64" if "x86-64" in flags else "32"
        by_arch.setdefault(arch, set()).add(soname)
        assert flags in ("libc6,x86-64", "libc6"), (soname, flags)
        assert path.startswith("/usr/lib/"), path
    want = {lib.soname_for(ver) for lib in DRIVER_LIBS if not lib.subdir}
    assert {"libcuda.so.1", "libnvidia-ml.so.1"} <= by_arch["64"]
    assert want <= by_arch["64"]
    if h100.lib32_dir is not None:
        assert want <= by_arch["32"]
    # vdpau lives in a subdirectory that ld.so.conf does not list, as on a real host.
    assert "libvdpau_nvidia.so.1" not in by_arch["64"]


@needs_build
def test_sonames_and_links(h100: SimDriver) -> None:
    ver = h100.spec.driver_version
    for lib_dir in filter(None, (h100.lib_dir, h100.lib32_dir)):
        for lib in DRIVER_LIBS:
            d = lib_dir / lib.subdir if lib.subdir else lib_dir
            path = d / lib.file_name(ver)
            with path.open("rb") as fh:
                elf = ELFFile(fh)
                assert elf.elfclass == (64 if lib_dir == h100.lib_dir else 32)
                dyn = elf.get_section_by_name(".dynamic")
                assert isinstance(dyn, DynamicSection)
                tags = [(t.entry.d_tag, t) for t in dyn.iter_tags()]
                sonames = [t.soname for tag, t in tags if tag == "DT_SONAME"]  # type: ignore[attr-defined]
                needed = [t.needed for tag, t in tags if tag == "DT_NEEDED"]  # type: ignore[attr-defined]
            assert sonames == [lib.soname_for(ver)], path
            assert "libc.so.6" in needed
            soname_link = d / lib.soname_for(ver)
            if soname_link != path:
                assert os.readlink(soname_link) == path.name
        # The toolkit creates libcuda.so in containers; the host driver does not ship it.
        assert not (lib_dir / "libcuda.so").exists()
    glx = h100.lib_dir / f"libGLX_nvidia.so.{ver}"
    out = subprocess.run(
        ["readelf", "-d", str(glx)], capture_output=True, text=True, check=True
    ).stdout
    assert f"[libnvidia-glcore.so.{ver}]" in out


@needs_build
def test_tls_abi_note(h100: SimDriver) -> None:
    path = h100.lib_dir / f"libnvidia-tls.so.{h100.spec.driver_version}"
    with path.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".note.ABI-tag")
        notes = list(section.iter_notes())  # type: ignore[union-attr]
    assert notes[0]["n_name"] == "GNU"
    assert notes[0]["n_desc"]["abi_os"] == "ELF_NOTE_OS_LINUX"
    assert (
        notes[0]["n_desc"]["abi_major"],
        notes[0]["n_desc"]["abi_minor"],
        notes[0]["n_desc"]["abi_tiny"],
    ) == (2, 3, 99)


@needs_build
def test_distractors(h100: SimDriver) -> None:
    entries = _ldcache(h100)
    root = h100.driver_root
    cuda64 = [
        path for soname, flags, path in entries if soname == "libcuda.so.1" and "x86-64" in flags
    ]
    assert len(cuda64) == 2
    # The stale libcuda comes first: a selector must check the resolved file's version suffix.
    stale = (root / cuda64[0].lstrip("/")).resolve()
    assert stale.name == f"libcuda.so.{STALE_LIBCUDA_VERSION}"
    assert (root / cuda64[1].lstrip("/")).resolve().name == f"libcuda.so.{h100.spec.driver_version}"
    sonames = {s for s, _, _ in entries}
    assert {"libnvidia-egl-wayland.so.1", "libfoo.so.1"} <= sonames
    assert (
        h100.lib_dir / "libnvidia-egl-wayland.so.1"
    ).resolve().name == "libnvidia-egl-wayland.so.1.1.13"


@needs_build
def test_nvidia_smi_lists_gpus(h100: SimDriver) -> None:
    proc = _smi(h100, "-L")
    assert proc.returncode == 0, proc.stderr
    want = [
        f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {g.uuid})" for i, g in enumerate(h100.spec.gpus)
    ]
    assert proc.stdout.splitlines() == want
    proc = _smi(h100)
    assert "Driver Version: 550.54.15" in proc.stdout
    assert "CUDA Version: 12.4" in proc.stdout
    proc = _smi(h100, "--query-gpu=uuid", "--format=csv,noheader")
    assert proc.stdout.split() == [g.uuid for g in h100.spec.gpus]


@needs_build
def test_nvidia_smi_needs_the_loader_to_find_nvml(h100: SimDriver) -> None:
    host_has_nvml = (
        "libnvidia-ml.so.1"
        in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    )
    if host_has_nvml:
        pytest.skip("the host's own ld.so.cache has a libnvidia-ml.so.1")
    proc = _run([str(h100.nvidia_smi), "-L"], {})
    assert proc.returncode == 127
    assert "libnvidia-ml.so.1" in proc.stderr


@needs_build
def test_visibility_follows_device_nodes(h100: SimDriver, tmp_path: Path) -> None:
    make_dev_nodes(h100.spec, tmp_path, minors=[0, 2, 3])
    proc = _smi(h100, "-L", dev_root=tmp_path)
    gpus = h100.spec.gpus
    assert proc.stdout.splitlines() == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpus[0].uuid})",
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {gpus[2].uuid})",
        f"GPU 2: NVIDIA H100 80GB HBM3 (UUID: {gpus[3].uuid})",
    ]
    (tmp_path / "dev/nvidiactl").unlink()
    proc = _smi(h100, "-L", dev_root=tmp_path)
    assert proc.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in proc.stdout


_PYNVML_PROBE = r"""
import json, pynvml as n
s = lambda x: x.decode() if isinstance(x, bytes) else x
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion(),
       "cuda_v2": n.nvmlSystemGetCudaDriverVersion_v2(), "count": n.nvmlDeviceGetCount(),
       "gpus": []}
for i in range(out["count"]):
    h = n.nvmlDeviceGetHandleByIndex(i)
    pci = n.nvmlDeviceGetPciInfo(h)
    g = {"uuid": n.nvmlDeviceGetUUID(h), "name": n.nvmlDeviceGetName(h),
         "minor": n.nvmlDeviceGetMinorNumber(h), "index": n.nvmlDeviceGetIndex(h),
         "bus_id": s(pci.busId), "bus_id_legacy": s(pci.busIdLegacy),
         "domain": pci.domain, "bus": pci.bus, "device": pci.device,
         "pci_device_id": pci.pciDeviceId,
         "brand": n.nvmlDeviceGetBrand(h), "arch": n.nvmlDeviceGetArchitecture(h),
         "cc": list(n.nvmlDeviceGetCudaComputeCapability(h)),
         "mem": n.nvmlDeviceGetMemoryInfo(h).total,
         "mem_v2": n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2).total,
         "persistence": n.nvmlDeviceGetPersistenceMode(h), "serial": n.nvmlDeviceGetSerial(h),
         "by_uuid": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h))),
         "by_pci": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(s(pci.busId))),
         "migs": []}
    try:
        g["mig_mode"] = n.nvmlDeviceGetMigMode(h)
    except n.NVMLError_NotSupported:
        g["mig_mode"] = None
    if g["mig_mode"] and g["mig_mode"][0]:
        for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except n.NVMLError_NotFound:
                continue
            parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
            g["migs"].append({"uuid": n.nvmlDeviceGetUUID(m), "name": n.nvmlDeviceGetName(m),
                "gi": n.nvmlDeviceGetGpuInstanceId(m), "ci": n.nvmlDeviceGetComputeInstanceId(m),
                "is_mig": int(n.nvmlDeviceIsMigDeviceHandle(m).value),
                "mem": n.nvmlDeviceGetMemoryInfo(m).total, "parent": n.nvmlDeviceGetUUID(parent),
                "by_uuid_is_mig": int(n.nvmlDeviceIsMigDeviceHandle(
                    n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(m))).value)})
    out["gpus"].append(g)
try:
    n.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
except n.NVMLError_NotFound:
    out["unknown_uuid"] = "not found"
n.nvmlShutdown()
print(json.dumps(out))
"""


def _pynvml(driver: SimDriver, dev_root: Path | None = None) -> dict[str, object]:
    proc = _run([sys.executable, "-c", _PYNVML_PROBE], driver.env(dev_root))
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@needs_build
def test_pynvml_reports_the_spec(h100: SimDriver) -> None:
    out = _pynvml(h100)
    assert out["driver"] == "550.54.15"
    assert out["cuda"] == out["cuda_v2"] == 12040
    assert out["count"] == 4
    assert out["unknown_uuid"] == "not found"
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    for i, (got, want) in enumerate(zip(gpus, h100.spec.gpus, strict=True)):
        assert got["uuid"] == want.uuid
        assert got["name"] == want.name
        assert (got["minor"], got["index"], got["by_uuid"], got["by_pci"]) == (want.minor, i, i, i)
        assert got["bus_id"] == want.pci_bus_id
        assert got["bus_id_legacy"] == want.pci_bus_id[4:]
        assert got["pci_device_id"] == 0x233010DE
        assert (got["brand"], got["arch"], got["cc"]) == (14, 9, [9, 0])
        assert got["mem"] == got["mem_v2"] == 81559 * 2**20
        assert got["persistence"] == 0
        assert got["mig_mode"] == [0, 0]
        assert got["migs"] == []


@needs_build
def test_pynvml_mig_devices(a100mig: SimDriver, tmp_path: Path) -> None:
    out = _pynvml(a100mig)
    assert (out["driver"], out["cuda"], out["count"]) == ("570.86.15", 12080, 8)
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert [g["mig_mode"] for g in gpus] == [[1, 1], [1, 1]] + [[0, 0]] * 6
    spec_gpu0 = a100mig.spec.gpus[0]
    assert gpus[0]["migs"] == [
        {
            "uuid": m.uuid,
            "name": f"NVIDIA A100-SXM4-80GB MIG {m.profile}",
            "gi": m.gi,
            "ci": m.ci,
            "is_mig": 1,
            "mem": m.memory_mib * 2**20,
            "parent": spec_gpu0.uuid,
            "by_uuid_is_mig": 1,
        }
        for m in spec_gpu0.migs
    ]
    assert [m["uuid"] for m in gpus[1]["migs"]] == [m.uuid for m in a100mig.spec.gpus[1].migs]

    proc = _smi(a100mig, "-L")
    lines = proc.stdout.splitlines()
    assert lines[1] == f"  MIG 3g.40gb     Device  0: (UUID: {spec_gpu0.migs[0].uuid})"
    assert len(lines) == 8 + 5

    # A container given only GPU 0 and the caps of its first MIG device sees just that one.
    make_dev_nodes(a100mig.spec, tmp_path, minors=[0], mig_caps=False)
    caps = tmp_path / "dev/nvidia-caps"
    caps.mkdir()
    for n in (spec_gpu0.migs[0].gi_cap_minor, spec_gpu0.migs[0].ci_cap_minor):
        os.mknod(caps / f"nvidia-cap{n}", stat.S_IFCHR | 0o444, os.makedev(508, n))
    out = _pynvml(a100mig, tmp_path)
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert out["count"] == 1
    assert [m["uuid"] for m in gpus[0]["migs"]] == [spec_gpu0.migs[0].uuid]


@needs_build
def test_t4_has_no_mig(t4: SimDriver) -> None:
    out = _pynvml(t4)
    gpus = out["gpus"]
    assert isinstance(gpus, list)
    assert (out["driver"], out["cuda"]) == ("535.183.01", 12020)
    assert gpus[0]["mig_mode"] is None
    assert (gpus[0]["brand"], gpus[0]["arch"], gpus[0]["cc"]) == (2, 6, [7, 5])


@needs_build
def test_libcuda_answers(h100: SimDriver) -> None:
    probe = (
        "import ctypes;c=ctypes.CDLL('libcuda.so.1');v=ctypes.c_int();n=ctypes.c_int();"
        "assert c.cuInit(0)==0;c.cuDriverGetVersion(ctypes.byref(v));"
        "c.cuDeviceGetCount(ctypes.byref(n));print(v.value,n.value)"
    )
    proc = _run([sys.executable, "-c", probe], h100.env())
    assert proc.stdout.split() == ["12040", "4"], proc.stderr


@needs_build
def test_device_nodes(a100mig: SimDriver) -> None:
    dev = a100mig.dev_root / "dev"
    expect = {"nvidiactl": (195, 255), "nvidia-modeset": (195, 254), "nvidia-uvm": (511, 0)}
    expect |= {"nvidia-uvm-tools": (511, 1), "nvidia7": (195, 7)}
    for name, (major, minor) in expect.items():
        st = os.stat(dev / name)
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)
        assert stat.S_IMODE(st.st_mode) == 0o666
    mig = a100mig.spec.gpus[0].migs[0]
    for n in (1, 2, mig.gi_cap_minor, mig.ci_cap_minor):
        st = os.stat(dev / f"nvidia-caps/nvidia-cap{n}")
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (508, n)
        assert stat.S_IMODE(st.st_mode) == 0o444


@needs_build
def test_proc_files(a100mig: SimDriver) -> None:
    proc = a100mig.proc_root
    assert "ModifyDeviceFiles: 1" in (proc / "driver/nvidia/params").read_text()
    assert "Kernel Module  570.86.15" in (proc / "driver/nvidia/version").read_text()
    devices = (proc / "devices").read_text()
    assert re.search(r"^195 nvidia-frontend$", devices, re.M)
    assert re.search(r"^508 nvidia-caps$", devices, re.M)
    assert re.search(r"^511 nvidia-uvm$", devices, re.M)
    gpu = a100mig.spec.gpus[1]
    info = (proc / "driver/nvidia/gpus/0000:0f:00.0/information").read_text()
    assert f"GPU UUID: \t {gpu.uuid}" in info
    assert "Device Minor: \t 1" in info
    mig = gpu.migs[1]
    base = proc / f"driver/nvidia/capabilities/gpu1/mig/gi{mig.gi}"
    assert (base / "access").read_text() == (
        f"DeviceFileMinor: {mig.gi_cap_minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    )
    assert f"DeviceFileMinor: {mig.ci_cap_minor}\n" in (base / f"ci{mig.ci}/access").read_text()
    minors = (proc / "driver/nvidia-caps/mig-minors").read_text().splitlines()
    assert minors[:2] == ["config 1", "monitor 2"]
    assert f"gpu1/gi{mig.gi}/access {mig.gi_cap_minor}" in minors
    assert f"gpu1/gi{mig.gi}/ci{mig.ci}/access {mig.ci_cap_minor}" in minors


@needs_build
def test_ipc_firmware_and_config_files(h100: SimDriver) -> None:
    root = h100.driver_root
    for rel in ("var/run/nvidia-persistenced/socket", "var/run/nvidia-fabricmanager/socket"):
        assert stat.S_ISSOCK(os.lstat(root / rel).st_mode)
    assert (root / "tmp/nvidia-mps").is_dir()
    fw = sorted(p.name for p in h100.firmware_dir.glob("gsp*.bin"))
    assert fw == ["gsp_ga10x.bin", "gsp_tu10x.bin"]
    icd = json.loads((root / "etc/vulkan/icd.d/nvidia_icd.json").read_text())
    assert icd["ICD"]["library_path"] == "libGLX_nvidia.so.0"
    assert (root / "etc/OpenCL/vendors/nvidia.icd").read_text().strip() == "libnvidia-opencl.so.1"
    assert (root / "usr/share/glvnd/egl_vendor.d/10_nvidia.json").is_file()
    assert (root / "usr/share/nvidia/nvoptix.bin").is_file()
    for name in ("nvidia-debugdump", "nvidia-persistenced"):
        out = subprocess.run([str(h100.bin_dir / name)], capture_output=True, text=True, check=True)
        assert out.stdout == f"{name}: version 550.54.15\n"
    assert os.access(h100.bin_dir / "nvidia-xconfig", os.X_OK)


@needs_build
def test_cached_driver_is_reused(h100: SimDriver, sim_cache: Path) -> None:
    start = time.monotonic()
    again = cached_driver(preset("h100x4-550"), sim_cache)
    assert again == h100
    assert time.monotonic() - start < 1.0


@needs_build
def test_cli_builds_with_separate_dev_root(tmp_path: Path) -> None:
    out, dev = tmp_path / "root", tmp_path / "devroot"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "integration.simdriver",
            "--preset",
            "t4x1-535",
            "--out",
            str(out),
            "--dev-root",
            str(dev),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["dev_root"] == str(dev)
    assert data["proc_root"] == str(out / "proc")
    assert stat.S_ISCHR(os.stat(dev / "dev/nvidia0").st_mode)
    assert not (out / "dev").exists()
    # The build-time dev root is compiled into NVML: found without NVCT_SIM_DEV_ROOT.
    env = {"LD_LIBRARY_PATH": data["lib_dir"]}
    smi = _run([str(out / "usr/bin/nvidia-smi"), "-L"], env)
    assert smi.stdout.startswith("GPU 0: Tesla T4 (UUID: GPU-")
    if Path("/dev/nvidiactl").exists():
        return  # a real driver on this host: the /dev fallback would find it
    # As inside a container, where the build-time dev root does not exist: NVML looks at /dev.
    dev.rename(tmp_path / "moved")
    assert _run([str(out / "usr/bin/nvidia-smi"), "-L"], env).returncode == 9


def _glibc_versions(path: Path) -> set[tuple[int, ...]]:
    with path.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".gnu.version_r")
        if section is None:
            return set()
        names = [aux.name for _, auxs in section.iter_versions() for aux in auxs]  # type: ignore[attr-defined]
    return {tuple(int(x) for x in n[6:].split(".")) for n in names if n.startswith("GLIBC_")}


@needs_build
def test_binaries_run_with_an_old_glibc(h100: SimDriver) -> None:
    # NVIDIA's files run in old-distro containers; so must ours (nothing newer than CentOS 7's).
    files = [h100.bin_dir / b for b in ("nvidia-smi", "nvidia-persistenced")]
    files += [h100.lib_dir / "libnvidia-ml.so.1", h100.lib_dir / "libcuda.so.1"]
    for path in files:
        assert max(_glibc_versions(path)) <= (2, 17), path


_CACHE_PROBE = """
import json, sys
from pathlib import Path
from integration.simdriver import cached_driver, preset
d = cached_driver(preset("t4x1-535"), Path(sys.argv[1]))
print(json.dumps(d.to_json()))
"""


@needs_build
def test_cached_driver_is_safe_across_processes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CACHE_PROBE, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(3)
    ]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    roots = {json.loads(out)["driver_root"] for out, _ in outs}
    assert len(roots) == 1
    assert len(list(cache.glob("*/complete.json"))) == 1
