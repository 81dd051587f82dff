"""nvct-cli configure --import-nvidia-config: NVIDIA's config.toml carried over to nvct's."""

from __future__ import annotations

import json
from pathlib import Path

from nvct.config import load_config
from tests.cli.test_cli import cli

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "config.toml"

NVIDIA = """\
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
swarm-resource = "DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA"

[nvidia-container-cli]
environment = []
ldconfig = "@/usr/sbin/ldconfig"
load-kmods = true
no-cgroups = true
root = "/run/nvidia/driver"

[nvidia-container-runtime]
log-level = "warn"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "disabled"

[features]
disable-imex-channel-creation = true
"""


def _files(tmp: Path, nvidia: str = NVIDIA) -> tuple[Path, Path]:
    source, target = tmp / "nvidia.toml", tmp / "nvct.toml"
    source.write_text(nvidia)
    target.write_text(SHIPPED.read_text())
    return source, target


def test_settings_carried_over_with_the_comments_kept(tmp_path: Path) -> None:
    source, target = _files(tmp_path)
    result = cli("--config", str(target), "configure", "--import-nvidia-config", str(source))
    config = load_config(str(target), use_cache=False)
    assert str(config.driver_root) == str(config.dev_root) == "/run/nvidia/driver"
    assert str(config.ldconfig) == "/usr/sbin/ldconfig"
    assert config.request.accept_envvar_when_unprivileged is False
    assert config.request.accept_volume_mounts is True
    assert config.request.swarm_resources == ("DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA")
    assert config.log.level == "warning"
    assert config.inject.cuda_compat == "off"
    text = target.read_text()
    # Every comment of the file is still there, and the old file is kept beside it.
    comments = [ln for ln in SHIPPED.read_text().splitlines() if ln.startswith("#")]
    assert all(c in text.splitlines() for c in comments)
    assert Path(f"{target}.nvct-backup").read_text() == SHIPPED.read_text()
    out = result.stdout.splitlines()
    assert 'driver-root = "/run/nvidia/driver"  (from nvidia-container-cli.root)' in out
    unmapped = {
        ln.split(" = ")[0][len("no nvct equivalent: ") :]: ln for ln in out if "no nvct" in ln
    }
    assert set(unmapped) == {
        "supported-driver-capabilities",
        "nvidia-container-cli.environment",
        "nvidia-container-cli.load-kmods",
        "nvidia-container-cli.no-cgroups",
        "nvidia-container-runtime.mode",
        "features.disable-imex-channel-creation",
    }
    assert "nothing is lost" in unmapped["nvidia-container-cli.load-kmods"]
    assert "nothing is lost" not in unmapped["nvidia-container-cli.no-cgroups"]
    again = cli("--config", str(target), "configure", "--import-nvidia-config", str(source))
    assert again.stdout.rstrip().endswith("already as wanted; nothing written")


def test_dry_run_and_json_write_nothing(tmp_path: Path) -> None:
    source, target = _files(tmp_path)
    result = cli(
        "--config",
        str(target),
        "configure",
        "--import-nvidia-config",
        str(source),
        "--dry-run",
        "--json",
    )
    doc = json.loads(result.stdout)
    assert doc["action"] == "dry-run" and doc["changed"]
    assert {
        "nvidia": "nvidia-container-runtime.log-level",
        "nvct": "log.level",
        "value": "warning",
    } in doc["settings"]
    assert '+level = "warning"' in doc["diff"]
    assert target.read_text() == SHIPPED.read_text()


def test_bad_inputs_are_one_line_errors_and_write_nothing(tmp_path: Path) -> None:
    source, target = _files(tmp_path, "[nvidia-container-runtime]\nruntimes = []\n")
    result = cli(
        "--config", str(target), "configure", "--import-nvidia-config", str(source), check=False
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "low-level" in result.stderr and "nothing was written" in result.stderr
    assert target.read_text() == SHIPPED.read_text()
    missing = cli(
        "--config",
        str(target),
        "configure",
        "--import-nvidia-config",
        str(tmp_path / "nope.toml"),
        check=False,
    )
    assert missing.returncode == 1 and "nope.toml does not exist" in missing.stderr
    # A container-side ldconfig and a relative root have no nvct form: said, not written.
    source.write_text('[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\nroot = "run"\n')
    result = cli("--config", str(target), "configure", "--import-nvidia-config", str(source))
    assert "only the host's (static) ldconfig" in result.stdout
    assert "'run' is not an absolute path" in result.stdout
    assert target.read_text() == SHIPPED.read_text()
