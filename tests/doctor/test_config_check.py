"""doctor's config check: an invalid config file fails, and the other checks still run."""

from __future__ import annotations

import json

from nvct.doctor import FAIL
from tests.cli.test_cli import cli


def test_invalid_config_fails_and_the_rest_still_runs(tmp_path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("[request]\naccept-envvar-when-unprivilged = false\n")
    result = cli(
        "--config",
        str(bad),
        "--driver-root",
        str(tmp_path),
        "doctor",
        "--json",
        "--cdi-dir",
        str(tmp_path / "cdi"),
        check=False,
    )
    assert result.returncode == 1
    data = json.loads(result.stdout)
    first = data["checks"][0]
    assert first["name"] == "config" and first["status"] == FAIL
    assert "unknown key [request] 'accept-envvar-when-unprivilged'" in first["message"]
    assert "accept-envvar-when-unprivileged" in first["fix"]
    assert [c["name"] for c in data["checks"]][1] == "nvml"
