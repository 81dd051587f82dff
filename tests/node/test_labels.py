"""Node labels (NVIDIA's GFD names) for each simulated preset, a two-model node, and the NFD
feature file ``nvct-cli labels`` writes. Unprivileged: recorded inventories."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness.processes import until
from integration.simdriver import inject
from nvct.config import parse_config
from nvct.host.inventory import Inventory
from nvct.node.labels import family, node_labels, sanitise
from nvct.node.sharing import SharingPlan, plan_sharing
from tests.cli.test_cli import cli, roots

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
N = "nvidia.com/"


def inventory(name: str) -> Inventory:
    return Inventory.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


DRIVER_550 = {
    "cuda.driver-version.major": "550",
    "cuda.driver-version.minor": "54",
    "cuda.driver-version.revision": "15",
    "cuda.driver-version.full": "550.54.15",
    "cuda.driver.major": "550",
    "cuda.driver.minor": "54",
    "cuda.driver.rev": "15",
    "cuda.runtime-version.major": "12",
    "cuda.runtime-version.minor": "4",
    "cuda.runtime-version.full": "12.4",
    "cuda.runtime.major": "12",
    "cuda.runtime.minor": "4",
}


A100 = "NVIDIA-A100-SXM4-80GB"


def test_single_mig_with_every_gpu_alike() -> None:
    inv = inventory("a100x8-570-mig")
    first = inv.gpus[0]
    same = dataclasses.replace(first, migs=tuple(m for m in first.migs if m.profile == "3g.40gb"))
    alike = dataclasses.replace(inv, gpus=(same, dataclasses.replace(same, index=1)))
    labels = node_labels(alike, mig_strategy="single")
    assert labels[f"{N}gpu.product"] == f"{A100}-MIG-3g.40gb"
    assert labels[f"{N}gpu.count"] == "2" and labels[f"{N}gpu.memory"] == "40192"


def test_a_two_model_node_is_described_by_its_majority_model() -> None:
    """Deterministic whatever the enumeration order: most GPUs wins, ties go to the model of
    the lowest index; the count is every GPU, gpu.models says the node is mixed."""
    inv = inventory("h100x4-550")
    l4 = {"name": "NVIDIA L4", "compute_capability": "8.9", "memory_mib": 23034}
    mixed = [dataclasses.replace(g, **l4) if g.index in (1, 2, 3) else g for g in inv.gpus]
    labels = node_labels(dataclasses.replace(inv, gpus=tuple(mixed)))
    assert labels[f"{N}gpu.product"] == "NVIDIA-L4"
    assert labels[f"{N}gpu.family"] == "ada-lovelace" and labels[f"{N}gpu.memory"] == "23034"
    assert labels[f"{N}gpu.count"] == "4" and labels[f"{N}gpu.models"] == "2"
    assert labels[f"{N}mig.capable"] == "true"  # the H100 is
    tie = [dataclasses.replace(g, **l4) if g.index in (2, 3) else g for g in inv.gpus]
    for order in (tie, list(reversed(tie))):
        chosen = node_labels(dataclasses.replace(inv, gpus=tuple(order)))
        assert chosen[f"{N}gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # index 0's model


def test_a_node_whose_driver_sees_no_gpu_is_not_marked_present() -> None:
    """Only the driver's labels: the RuntimeClass and DaemonSets must not select it."""
    labels = node_labels(dataclasses.replace(inventory("h100x4-550"), gpus=()))
    assert f"{N}gpu.present" not in labels and f"{N}gpu.count" not in labels
    assert labels[f"{N}cuda.driver-version.full"] == "550.54.15"


@pytest.mark.parametrize(
    ("compute", "name"),
    [("7.0", "volta"), ("7.5", "turing"), ("8.6", "ampere"), ("8.9", "ada-lovelace"),
     ("9.0", "hopper"), ("10.0", "blackwell"), ("12.0", "blackwell"), ("6.1", "pascal"),
     ("x", "undefined")],
)  # fmt: skip
def test_families(compute: str, name: str) -> None:
    assert family(compute) == name


def test_product_names_are_sanitised() -> None:
    assert sanitise("Tesla T4") == "Tesla-T4"
    assert sanitise("NVIDIA GeForce RTX 4090 (x)") == "NVIDIA-GeForce-RTX-4090-x"


def test_the_cli_writes_an_nfd_feature_file(recorded_h100x4, tmp_path: Path) -> None:
    out = tmp_path / "features.d" / "nvct"
    options = ["--output", str(out), "--no-timestamp", "--mig-strategy", "none"]
    done = cli(*roots(recorded_h100x4, tmp_path), "labels", *options, check=False)
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    assert lines == sorted(lines)
    assert f"{N}gpu.product=NVIDIA-H100-80GB-HBM3" in lines
    assert f"{N}gpu.count=4" in lines and f"{N}cuda.driver-version.full=550.54.15" in lines
    assert not [ln for ln in lines if "gfd.timestamp" in ln]
    stamped = cli(*roots(recorded_h100x4, tmp_path), "labels").stdout.splitlines()
    assert [ln for ln in stamped if ln.startswith(f"{N}gfd.timestamp=")]


def _plan(toml: str, inv: Inventory, mig: str = "none") -> SharingPlan:
    text = f'[device-plugin]\nmig-strategy = "{mig}"\n{toml}'
    return plan_sharing(parse_config(text.encode(), source="t"), inv)


def _rule(devices: str, replicas: int, extra: str = "") -> str:
    return f"[[device-plugin.sharing.gpus]]\ndevices = {devices}\nreplicas = {replicas}\n{extra}\n"


def test_sharing_labels_follow_the_plugins_plan() -> None:
    inv = inventory("h100x4-550")
    none = node_labels(inv, plan=_plan("", inv))
    assert (none[f"{N}gpu.replicas"], none[f"{N}gpu.sharing-strategy"]) == ("1", "none")
    sliced = node_labels(inv, plan=_plan(_rule('["0"]', 4) + _rule('["1"]', 2), inv))
    assert sliced[f"{N}gpu.replicas"] == "4"
    assert sliced[f"{N}gpu.sharing-strategy"] == "time-slicing"
    assert sliced[f"{N}gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert not [k for k in sliced if k.startswith(f"{N}gpu.shared.")]
    both = _rule('["0"]', 4) + _rule('["1"]', 2, 'strategy = "mps"')
    assert node_labels(inv, plan=_plan(both, inv))[f"{N}gpu.sharing-strategy"] == "mixed"


def test_renamed_gpus_get_their_own_label_group() -> None:
    inv = inventory("h100x4-550")
    toml = _rule('["0", "1"]', 3, 'strategy = "mps"\nrename = true')
    labels = node_labels(inv, plan=_plan(toml, inv))
    assert {k: v for k, v in labels.items() if k.startswith(f"{N}gpu.shared.")} == {
        f"{N}gpu.shared.{k}": v
        for k, v in {
            "product": "NVIDIA-H100-80GB-HBM3",
            "count": "2",
            "replicas": "3",
            "sharing-strategy": "mps",
            "memory": "81559",
            "family": "hopper",
            "compute.major": "9",
            "compute.minor": "0",
        }.items()
    }
    assert labels[f"{N}gpu.replicas"] == "1" and labels[f"{N}gpu.count"] == "4"
    own = _rule('["2"]', 2, 'strategy = "mps"\nresource = "nvidia.com/gpu.mps"')
    labels = node_labels(inv, plan=_plan(toml + own, inv))
    assert labels[f"{N}gpu.mps.sharing-strategy"] == "mps" and labels[f"{N}gpu.mps.count"] == "1"
    assert labels[f"{N}gpu.shared.count"] == "2"
    mig = inventory("a100x8-570-mig")
    plan = _plan(_rule('["0:2"]', 2, "rename = true"), mig, "mixed")
    labels = node_labels(mig, mig_strategy="mixed", plan=plan)
    assert labels[f"{N}mig-1g.10gb.shared.replicas"] == "2"
    assert labels[f"{N}mig-1g.10gb.shared.count"] == "1"
    assert labels[f"{N}mig-1g.10gb.replicas"] == "1"


def test_the_cli_labels_with_the_device_plugins_config(recorded_a100mig, tmp_path: Path) -> None:
    options = roots(recorded_a100mig, tmp_path)
    config = Path(options[options.index("--config") + 1])
    config.write_text(
        config.read_text()
        + '[device-plugin]\nmig-strategy = "mixed"\n'
        + _rule('["2"]', 4, "rename = true")
    )
    lines = cli(*options, "labels", "--no-timestamp").stdout.splitlines()
    assert f"{N}mig.strategy=mixed" in lines  # the plugin's strategy, not "none"
    assert f"{N}gpu.shared.replicas=4" in lines and f"{N}gpu.shared.count=1" in lines
    assert f"{N}gpu.sharing-strategy=none" in lines
    config.write_text(config.read_text() + _rule('["2"]', 2))
    done = cli(*options, "labels", check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("nvct-cli: error: ") and "matched by rule 1" in done.stderr


# NVIDIA's documented shapes (k8s-device-plugin README), as a config-manager writes a node's entry
NVIDIA_MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"
NVIDIA_TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def _labels(argv: list[str], **env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "nvct.cli.main", *argv],
        capture_output=True, text=True, timeout=60, check=True, env={**os.environ, **env},
    )  # fmt: skip
    return done.stdout.splitlines()


def _strategy(lines: list[str]) -> str | None:
    found = [line.split("=", 1)[1] for line in lines if line.startswith(f"{N}mig.strategy=")]
    return found[0] if found else None


def test_the_labels_follow_nvidias_plugin_config_as_the_plugin_reads_it(
    recorded_a100mig, recorded_h100x4, tmp_path: Path
) -> None:
    """--config-file / CONFIG_FILE and NVIDIA's environment names, in the plugin's precedence:
    a node's per-node config reaches its labels."""
    mixed, sliced = tmp_path / "mixed.yaml", tmp_path / "sliced.yaml"
    mixed.write_text(NVIDIA_MIXED)
    sliced.write_text(NVIDIA_TIME_SLICING)
    mig = roots(recorded_a100mig, tmp_path / "a")
    assert _strategy(_labels([*mig, "labels"])) is None  # none: GFD writes no label
    assert f"{N}mig.strategy=mixed" in _labels([*mig, "labels", "--config-file", str(mixed)])
    assert f"{N}mig.strategy=mixed" in _labels([*mig, "labels"], CONFIG_FILE=str(mixed))
    # environment > file, flag > both
    assert f"{N}mig.strategy=single" in _labels(
        [*mig, "labels"], CONFIG_FILE=str(mixed), MIG_STRATEGY="single"
    )
    flagged = [*mig, "labels", "--config-file", str(mixed), "--mig-strategy", "none"]
    assert _strategy(_labels(flagged)) is None
    lines = _labels([*roots(recorded_h100x4, tmp_path / "h"), "labels"], CONFIG_FILE=str(sliced))
    assert f"{N}gpu.replicas=4" in lines and f"{N}gpu.sharing-strategy=time-slicing" in lines


@contextlib.contextmanager
def _labeller(
    argv: list[str], errors: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A running labeller, its stderr in ``errors``; killed at the end if a test left it on,
    after it quit with SIGTERM and its file gone otherwise."""
    with errors.open("w") as stderr:
        labeller = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        yield labeller
    finally:
        if labeller.poll() is None:
            labeller.kill()
            labeller.wait()


def test_the_labeller_reads_the_config_again_on_sighup(recorded_a100mig, tmp_path: Path) -> None:
    """A config-manager sidecar rewrites the file and sends SIGHUP: the labels follow at once,
    not at the next round (60 s here), and the labeller lives on."""
    out, errors, chosen = tmp_path / "features.d" / "nvct", tmp_path / "stderr", tmp_path / "c"
    chosen.write_text("version: v1\nflags:\n  migStrategy: none\n")
    argv = [sys.executable, "-m", "nvct.cli.main", *roots(recorded_a100mig, tmp_path)]
    argv += ["labels", "--output", str(out), "--interval", "60", "--config-file", str(chosen)]
    with _labeller(argv, errors) as labeller:
        assert until(out.exists, 30), errors.read_text()
        assert _strategy(out.read_text().splitlines()) is None
        (tmp_path / "next").write_text(NVIDIA_MIXED)
        (tmp_path / "next").replace(chosen)
        labeller.send_signal(signal.SIGHUP)
        assert until(lambda: f"{N}mig.strategy=mixed\n" in out.read_text(), 5), errors.read_text()
        # an unreadable config keeps the last labels, said once per round
        chosen.write_text("version: v9\n")
        labeller.send_signal(signal.SIGHUP)
        assert until(lambda: "warning" in errors.read_text(), 5)
        assert labeller.poll() is None and f"{N}mig.strategy=mixed\n" in out.read_text()
        labeller.send_signal(signal.SIGTERM)
        assert labeller.wait(timeout=30) == 0
        assert not out.exists()


@pytest.mark.root
def test_the_labeller_keeps_its_labels_through_an_nvml_error_and_removes_them_on_sigterm(
    h100x4, tmp_path: Path
) -> None:
    out, ctl, errors = tmp_path / "features.d" / "nvct", tmp_path / "ctl", tmp_path / "stderr"
    argv = [sys.executable, "-m", "nvct.cli.main", *roots(h100x4, tmp_path), "--no-cache"]
    argv += ["labels", "--output", str(out), "--interval", "1", "--no-timestamp"]
    env = {**os.environ, **h100x4.env(), inject.ENV_CONTROL_DIR: str(ctl)}
    with _labeller(argv, errors, env) as labeller:
        assert until(out.exists, 30), errors.read_text()
        first = out.read_text()
        assert f"{N}gpu.count=4\n" in first
        inject.flaky(ctl, 2, 1)  # every query on GPU 2 fails: discovery fails
        assert until(lambda: "warning" in errors.read_text(), 10)
        kept = out.stat().st_ino
        assert out.read_text() == first and labeller.poll() is None
        assert "NVML" in errors.read_text() and "the last labels stay" in errors.read_text()
        inject.flaky(ctl, 2, 0)
        assert until(lambda: out.stat().st_ino != kept, 10)  # written again
        assert out.read_text() == first
        labeller.send_signal(signal.SIGTERM)
        assert labeller.wait(timeout=30) == 0
        assert not out.exists()
