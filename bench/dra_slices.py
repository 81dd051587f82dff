"""nvct-dra-plugin's ResourceSlice publication: how long after a health change, or after the
kubelet wiped the slices, the API server holds what the devices say.

``python -m bench.dra_slices [--rounds N] [--output FILE]`` (needs openssl): nvct.dra.publish's
Publisher, through nvct's API client over HTTPS, publishing the 8 GPUs of the simulated
NVLink-pairs preset (recorded inventory) to the stand-in API server in the same process; each
sample is from the call to the moment the server's store holds the change:

- ``taint``: a device marked Unhealthy until its slice carries the taint, and back (the API
  server keeps taints: DRADeviceTaints on);
- ``leave``: the same where the server drops taints (the feature off): until the Unhealthy
  device is out of the slice, and back in;
- ``republish``: the slice deleted (the kubelet's wipe) until it is there again.

Goal: under 1 s (issue 30). p50/p99 of N each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.deviceplugin import percentiles
from integration.apiserver.certs import make_certs
from integration.apiserver.server import RESOURCE_SLICES, APIServer
from integration.harness.slices import Running, make_publisher, published
from integration.simdriver import preset
from integration.simdriver.sysfs import write_sysfs
from nvct.dra.devices import dra_devices
from nvct.host.inventory import Inventory
from tests.inventories import read_fixture

PRESET = "h100pcie-x8-nvlink-pairs"
REASON = "XID 79 (GPU has fallen off the bus): reset the GPU"


def until_ms(start: float, holds: Callable[[], bool], limit_s: float = 5.0) -> float:
    """Milliseconds from ``start`` to when ``holds()`` (polled every 0.5 ms)."""
    while not holds():
        if time.perf_counter() - start > limit_s:
            raise TimeoutError(f"not within {limit_s} s")
        time.sleep(0.0005)
    return (time.perf_counter() - start) * 1000


def devices_in(server: APIServer) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in published(server) for d in s["spec"]["devices"]}


def health_round(run: Running, server: APIServer, device: str, gone: bool) -> list[float]:
    """Unhealthy then Healthy: the two latencies."""
    if gone:
        unhealthy = lambda: device not in devices_in(server)  # noqa: E731
        healthy = lambda: device in devices_in(server)  # noqa: E731
    else:
        unhealthy = lambda: bool(devices_in(server).get(device, {}).get("taints"))  # noqa: E731
        healthy = lambda: "taints" not in devices_in(server).get(device, {"taints": 1})  # noqa: E731
    start = time.perf_counter()
    run.publisher.health(device, False, REASON)
    first = until_ms(start, unhealthy)
    start = time.perf_counter()
    run.publisher.health(device, True)
    return [first, until_ms(start, healthy)]


def measure(rounds: int, directory: Path) -> dict[str, Any]:
    sysfs = directory / "sys"
    write_sysfs(preset(PRESET), sysfs)
    inventory = Inventory.from_dict(read_fixture(PRESET))
    entries = [d.slice_entry() for d in dra_devices(inventory, sysfs_root=sysfs)]
    server = APIServer(make_certs(directory / "pki"))
    server.start()
    out: dict[str, Any] = {}
    try:
        for mode, keeps in (("taint", True), ("leave", False)):
            server.features["DRADeviceTaints"] = keeps
            with pytest.MonkeyPatch.context() as patch:
                publisher = make_publisher(directory / mode, server, patch)
                run = Running(publisher, entries)
                try:
                    assert publisher.in_sync.wait(10), run.failure
                    samples: list[float] = []
                    for i in range(rounds):
                        samples += health_round(run, server, f"gpu-{i % 8}", gone=not keeps)
                    out[mode] = percentiles(samples)
                    if keeps:
                        wipes = []
                        for _ in range(rounds):
                            (name,) = [s["metadata"]["name"] for s in published(server)]
                            start = time.perf_counter()
                            server.store.delete(RESOURCE_SLICES, "", name)
                            wipes.append(until_ms(start, lambda: bool(published(server))))
                        out["republish"] = percentiles(wipes)
                finally:
                    run.end()
            for s in published(server):  # the next mode starts from an empty pool
                server.store.delete(RESOURCE_SLICES, "", s["metadata"]["name"])
    finally:
        server.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dra_slices")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--output", default="bench/results-dra-slices.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvct-dra-bench-") as tmp:
        results = measure(args.rounds, Path(tmp))
    results["machine"] = {
        "python": sys.version.split()[0],
        "arch": platform.machine(),
        "cpus": os.cpu_count(),
    }
    results["preset"] = PRESET
    Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    for name, value in results.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
