"""``nvct-cli exporter`` is a lazy subcommand: the other commands never import its libraries,
and its flags and config table reach the settings it runs with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvct.config import Config

HEAVY = ("prometheus_client", "grpc", "pynvml")


def test_other_commands_do_not_import_the_exporters_libraries() -> None:
    code = (
        "import sys\n"
        "from nvct.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('imported:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "exporter" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "imported:"


def test_flags_override_the_config_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[exporter]\nport = 9500\ninterval = 30.0\nhostname = "from-file"\n')
    seen: list[Config] = []

    def fake_run(settings: Config) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr("nvct.exporter.run.run", fake_run)
    from nvct.cli.main import cli

    result: Any = CliRunner().invoke(
        cli,
        ["--config", str(config), "exporter", "--port", "0", "--no-kubernetes",
         "--pod-resources-socket", "/x/kubelet.sock", "--plugin-dir", "/p"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert (settings.exporter.port, settings.exporter.interval, settings.exporter.hostname) == (
        0,
        30.0,
        "from-file",
    )
    assert settings.exporter.kubernetes is False
    assert settings.exporter.pod_resources_socket == "/x/kubelet.sock"
    assert settings.device_plugin.plugin_dir == "/p"
