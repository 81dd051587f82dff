"""The simulated driver's /proc files: devices, driver/nvidia/*, MIG capabilities."""

from __future__ import annotations

from pathlib import Path

from .common import write_file
from .devnodes import CAPS_MAJOR, UVM_MAJOR
from .spec import (
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

SIM_BOOT_ID = "5ee1b007-0000-4000-8000-000000000001"


def _access(minor: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def write_procfs(spec: SimDriverSpec, proc: Path) -> None:
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
    write_file(proc / "devices", devices, 0o444)
    # The boot this proc root belongs to (nvct's GPU latches are kept per boot): a test that
    # reboots writes another id into its own copy.
    write_file(proc / "sys/kernel/random/boot_id", f"{SIM_BOOT_ID}\n", 0o444)

    nv = proc / "driver/nvidia"
    write_file(
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
    write_file(nv / "params", "\n".join(params) + "\n", 0o444)
    write_file(nv / "registry", 'Binary: ""\n', 0o444)
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
        write_file(nv / "gpus" / g.proc_bus_id / "information", info, 0o444)
        write_file(
            nv / "gpus" / g.proc_bus_id / "power",
            "Runtime D3 status:          Not supported\n",
            0o444,
        )

    if any(g.migs for g in spec.gpus):
        caps = nv / "capabilities"
        write_file(caps / "mig/config", _access(MIG_CONFIG_MINOR).replace("292", "256"), 0o444)
        write_file(caps / "mig/monitor", _access(MIG_MONITOR_MINOR), 0o444)
        for g in spec.gpus:
            for m in g.migs:
                gi_dir = caps / f"gpu{g.minor}/mig/gi{m.gi}"
                write_file(gi_dir / "access", _access(m.gi_cap_minor), 0o444)
                write_file(gi_dir / f"ci{m.ci}/access", _access(m.ci_cap_minor), 0o444)
    # The kernel lists every possible MIG minor, whether or not such an instance exists.
    lines = [f"config {MIG_CONFIG_MINOR}", f"monitor {MIG_MONITOR_MINOR}"]
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GPU_INSTANCES):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_cap_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_cap_minor(gpu, gi, ci)}"
                for ci in range(MAX_COMPUTE_INSTANCES)
            ]
    write_file(proc / "driver/nvidia-caps/mig-minors", "\n".join(lines) + "\n", 0o444)
