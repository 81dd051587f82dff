"""NVIDIA's own CDI spec for the simulated driver, in the form nvidia-ctk writes it, for the
tests that put it beside nvct's specs or hand it to nvct-runtime."""

from __future__ import annotations

from typing import Any


def nvidia_yaml(sim: Any) -> str:
    """NVIDIA's spec as ``nvidia-ctk cdi generate`` (index names) writes it: nodes by path
    only, the control nodes, library mounts and its update-ldcache hook spec-wide."""
    root, lib = sim.driver_root, "usr/lib/x86_64-linux-gnu"
    devices = "".join(
        f'- name: "{i}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{g.minor}\n'
        f"      hostPath: {sim.dev_root}/dev/nvidia{g.minor}\n"
        for i, g in enumerate(sim.spec.gpus)
    )
    every = "".join(
        f"    - path: /dev/nvidia{g.minor}\n      hostPath: {sim.dev_root}/dev/nvidia{g.minor}\n"
        for g in sim.spec.gpus
    )
    return f"""---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
{devices}- name: all
  containerEdits:
    deviceNodes:
{every}containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: {sim.dev_root}/dev/nvidiactl
  mounts:
  - hostPath: {root}/{lib}/libnvidia-ml.so.1
    containerPath: /{lib}/libnvidia-ml.so.1
    options: [ro, nosuid, nodev, bind]
  - hostPath: {root}/usr/bin/nvidia-smi
    containerPath: /usr/bin/nvidia-smi
    options: [ro, nosuid, nodev, bind]
"""
