"""Images for a private containerd, built from the host (no registry): a rootfs as a
docker-archive tar (what ``ctr images import`` reads), and the sandbox ("pause") image, a
static C program built with gcc that sleeps until a signal ends it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

from integration.harness import run_command
from integration.harness.images import rootfs_tar

PAUSE_TAG = "nvct.local/pause:test"
# What a pod sandbox needs: PID 1 that sleeps, and exits on SIGTERM/SIGINT (PID 1 ignores
# signals it has no handler for); containerd's StopPodSandbox kills it anyway.
PAUSE_C = r"""
#include <signal.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    for (;;) pause();
}
"""


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def docker_archive(
    layer: bytes,
    tag: str,
    *,
    env: Sequence[str] = (),
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
) -> bytes:
    """A one-layer image named ``tag`` as a docker-archive tar (``docker save``'s format)."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": list(env), "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd)},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(image_config).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id[7:] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add(tar, config_name, config_bytes)
        _add(tar, layer_name, layer)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    return buffer.getvalue()


def rootfs_archive(rootfs: Path, tag: str, *, env: Sequence[str] = ()) -> bytes:
    """``rootfs`` (owned by 0:0) as the single layer of image ``tag``."""
    return docker_archive(rootfs_tar(rootfs), tag, env=env)


def pause_archive(work: Path) -> bytes:
    """The sandbox image: ``/pause`` built with ``gcc -static`` in ``work``.

    Raises:
        CommandFailed: gcc failed (no static libc: apt-get install libc6-dev).
    """
    source = work / "pause.c"
    source.write_text(PAUSE_C)
    binary = work / "pause"
    run_command(["gcc", "-static", "-Os", "-o", str(binary), str(source)], timeout=120)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("pause")
        data = binary.read_bytes()
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return docker_archive(layer.getvalue(), PAUSE_TAG, entrypoint=["/pause"])
