"""nvct-dra-plugin's NodePrepareResources latency, seen from the DRA kubelet stand-in.

``python -m bench.dra [--rounds N] [--output FILE]`` (root: the simulated driver's device
nodes; openssl for the stand-in API server's certificate): the real plugin process on the
8-GPU simulated driver (h100pcie-x8-nvlink-pairs), in-cluster against the stand-in API server
over HTTPS. Each round creates a fresh allocated ResourceClaim, so a prepare does all its work
(GET the claim, check it, write its CDI spec, record the checkpoint with fsync), then
unprepares it. p50/p99 over gRPC, for a claim of one GPU and of eight, the kubelet's retry of a
prepared claim (answered from the checkpoint), and unprepare. Goal: one GPU under 20 ms p99.

``--sharing`` measures claims that share their GPU instead (``bench/results-dra-sharing.json``):
one GPU with MPS (the claim's control daemon started, limits set and read back; at unprepare
quit and its directories removed) and one GPU at time-slice Long (nvidia-smi compute-policy at
prepare, Default again at unprepare), on the simulated driver's programs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.deviceplugin import percentiles, rss_mib, timed_ms
from integration.apiserver.certs import make_certs
from integration.apiserver.server import APIServer
from integration.harness.dra import (
    CLAIMS,
    DRIVER,
    DraPluginProcess,
    allocated_claim,
    gpu_config,
    put_claim,
)
from integration.kubelet.dra import DraKubelet
from integration.simdriver import cached_driver, preset

PRESET = "h100pcie-x8-nvlink-pairs"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dra")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--sharing", action="store_true", help="MPS and time-slice claims")
    args = parser.parse_args()
    name = "results-dra-sharing.json" if args.sharing else "results-dra.json"
    output = args.output or Path("bench") / name
    if os.geteuid() != 0:
        print("bench: needs root (the simulated driver's device nodes)", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="nvct-bench-dra-"))
    sim = cached_driver(preset(PRESET), Path("/tmp/nvct-test-simdrivers"))
    server = APIServer(make_certs(work / "pki"))
    server.add_kind(CLAIMS)
    server.start()
    kubelet = DraKubelet(work / "plugins_registry").start()
    plugin = DraPluginProcess(
        work / "plugin", sim, server, registry_dir=kubelet.registry_dir,
        plugins_dir=work / "plugins", cdi_root=work / "cdi",
    ).start()  # fmt: skip
    try:
        if not _wait(lambda: kubelet.registrations > 0, 60):
            print(f"bench: the plugin did not register\n{plugin.output()}", file=sys.stderr)
            return 1
        gpus = [f"gpu-{i}" for i in range(len(sim.spec.gpus))]
        results: dict[str, object] = {"gpus": len(gpus), "preset": PRESET}
        if args.sharing:
            results |= _sharing(server, kubelet, args.rounds)
        for label, devices in (
            () if args.sharing else (("1 GPU", gpus[:1]), (f"{len(gpus)} GPUs", gpus))
        ):
            prepare, retry, unprepare = [], [], []
            for n in range(args.rounds):
                claim = put_claim(
                    server, allocated_claim(f"c-{len(devices)}-{n}", {"gpus": devices})
                )
                prepare.append(timed_ms(lambda c=claim: _ok(kubelet.prepare(DRIVER, [c]), c)))
                retry.append(timed_ms(lambda c=claim: _ok(kubelet.prepare(DRIVER, [c]), c)))
                unprepare.append(timed_ms(lambda c=claim: _ok(kubelet.unprepare(DRIVER, [c]), c)))
            results[f"NodePrepareResources {label}"] = percentiles(prepare)
            results[f"NodePrepareResources {label}, kubelet's retry"] = percentiles(retry)
            results[f"NodeUnprepareResources {label}"] = percentiles(unprepare)
        results["plugin RSS (MiB)"] = rss_mib(plugin.proc.pid)  # type: ignore[union-attr]
    finally:
        plugin.stop()
        kubelet.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))
    output.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _sharing(server: APIServer, kubelet: DraKubelet, rounds: int) -> dict[str, object]:
    """Prepare and unprepare of one-GPU claims with MPS and with time-slice Long."""
    mps = {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        },
    }
    sliced = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
    out: dict[str, object] = {}
    for label, sharing in (("MPS", mps), ("time-slice Long", sliced)):
        prepare, unprepare = [], []
        for n in range(rounds):
            config = gpu_config(sharing)
            name = f"s-{label[:3].lower()}-{n}"
            claim = put_claim(server, allocated_claim(name, {"gpu": ["gpu-1"]}, config=config))
            prepare.append(timed_ms(lambda c=claim: _ok(kubelet.prepare(DRIVER, [c]), c)))
            unprepare.append(timed_ms(lambda c=claim: _ok(kubelet.unprepare(DRIVER, [c]), c)))
        out[f"NodePrepareResources 1 GPU, {label}"] = percentiles(prepare)
        out[f"NodeUnprepareResources 1 GPU, {label}"] = percentiles(unprepare)
    return out


def _ok(answers: dict[str, object], claim: tuple[str, str, str]) -> None:
    error = getattr(answers[claim[1]], "error", "")
    if error:
        raise SystemExit(f"bench: {claim[2]}: {error}")


def _wait(predicate: object, timeout: float) -> bool:
    from integration.harness.processes import until

    return until(predicate, timeout)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
