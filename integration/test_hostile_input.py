"""Bad input to the hook and the shim: one line on stderr naming the cause, exit != 0
(issue 7, item 6). Never a traceback, never a container."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from integration.harness.nvct_config import NVCT_BIN, write_nvct_config

pytestmark = [pytest.mark.root]

MANY = ",".join(str(i) for i in range(10_000))
GARBAGE = "\u0000\u0001\u00ff\ud800GPU-\u202e\ufffd,,\x7f" + "\u0300" * 50

# id -> (container env, expected text in the error line)
SPEC_CASES: dict[str, tuple[list[str], str]] = {
    "10000-devices": ([f"NVIDIA_VISIBLE_DEVICES={MANY}"], "lists 10000 devices"),
    "binary-devices": ([f"NVIDIA_VISIBLE_DEVICES={GARBAGE}"], "NVIDIA_VISIBLE_DEVICES"),
    "unknown-capability": (
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"],
        "'warp'",
    ),
    "binary-capability": (
        ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES={GARBAGE}"],
        "capabilit",
    ),
    "garbage-requirement": (
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=>=((brand=="],
        "NVIDIA_REQUIRE_CUDA",
    ),
    "binary-requirement": (
        ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_REQUIRE_X={GARBAGE}"],
        "NVIDIA_REQUIRE_X",
    ),
}

# config.toml bodies with wrong types -> the key the error must name
CONFIG_CASES: dict[str, tuple[str, str]] = {
    "ldconfig-int": ("ldconfig = 5\n", "ldconfig"),
    "level-int": ("[log]\nlevel = 3\n", "level"),
    "not-toml": ("driver-root = [unclosed\n", "config"),
    "roots-table": ('[driver-root]\nx = "y"\n', "driver-root"),
}


def bundle_with(tmp_path: Path, env: list[str]) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"args": ["/bin/true"], "env": env, "cwd": "/"},
        "root": {"path": "rootfs"},
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def state_for(bundle: Path) -> bytes:
    return json.dumps(
        {"ociVersion": "1.0.2", "id": "x", "pid": os.getpid(), "bundle": str(bundle)}
    ).encode()


def run_hook(stdin: bytes, config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NVCT_BIN / "nvct-hook"), "prestart"],
        input=stdin.decode("latin-1"),
        capture_output=True,
        text=True,
        encoding="latin-1",
        env={"PATH": os.environ["PATH"], "NVCT_CONFIG": str(config), **env},
        timeout=60,
        check=False,
    )


def run_shim(bundle: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NVCT_BIN / "nvct-runtime"), "create", "--bundle", str(bundle), "nvct-bad-input"],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env={**os.environ, "NVCT_CONFIG": str(config)},
        timeout=60,
        check=False,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], who: str, cause: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[:2000]
    assert lines[0].startswith(f"{who}: error: "), lines[0]
    assert cause in lines[0], lines[0]
    assert "Traceback" not in lines[0] and "internal error" not in lines[0]
    assert len(lines[0]) < 1000, f"{len(lines[0])}-character error line"


# --- the hook -----------------------------------------------------------------------------------

STATE_CASES: dict[str, tuple[bytes, str]] = {
    "not-json": (b"{not json", "not JSON"),
    "binary": (b"\xff\xfe\x00\x9c garbage", "not JSON"),
    "empty": (b"", "not JSON"),
    "array": (b"[1, 2]", "not a JSON object"),
    "no-pid": (b'{"bundle": "/tmp"}', "pid"),
    "pid-string": (b'{"pid": "1", "bundle": "/tmp"}', "pid"),
    "relative-bundle": (b'{"pid": 1, "bundle": "b"}', "bundle"),
    "huge": (b'{"pad": "' + b"x" * (2 << 20) + b'"}', "larger than"),
    "missing-bundle": (b'{"pid": 1, "bundle": "/nonexistent/bundle"}', "/nonexistent/bundle"),
}


@pytest.mark.parametrize("case", STATE_CASES)
def test_hook_bad_state(case: str, nvct_config: Path) -> None:
    stdin, cause = STATE_CASES[case]
    assert_one_line(run_hook(stdin, nvct_config), "nvct-hook", cause)


@pytest.mark.parametrize("case", SPEC_CASES)
def test_hook_bad_spec(case: str, nvct_config: Path, tmp_path: Path) -> None:
    env, cause = SPEC_CASES[case]
    bundle = bundle_with(tmp_path, env)
    assert_one_line(run_hook(state_for(bundle), nvct_config), "nvct-hook", cause)


def test_hook_config_json_not_json(nvct_config: Path, tmp_path: Path) -> None:
    """Garbage that may name a GPU is the Python hook's to report; garbage that names none
    asks for nothing (the native hook ends at once, as the launcher hands such a create to
    runc: the runtime that parsed this bundle judges its file)."""
    bundle = bundle_with(tmp_path, [])
    (bundle / "config.json").write_bytes(b'{"process": {"env": ["NVIDIA_VISIBLE_DEVICES\xff\x00')
    assert_one_line(run_hook(state_for(bundle), nvct_config), "nvct-hook", "config.json")
    (bundle / "config.json").write_bytes(b'{"process": \xff\x00')
    done = run_hook(state_for(bundle), nvct_config)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_hook_bad_config_toml(case: str, sim_driver: Any, tmp_path: Path) -> None:
    body, cause = CONFIG_CASES[case]
    config = write_nvct_config(tmp_path / "c" / "config.toml", sim_driver)
    config.write_text(body)
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    assert_one_line(run_hook(state_for(bundle), config), "nvct-hook", cause)


# --- the shim -----------------------------------------------------------------------------------


@pytest.mark.runc
@pytest.mark.parametrize("case", SPEC_CASES)
def test_shim_bad_spec(case: str, nvct_config: Path, tmp_path: Path) -> None:
    env, cause = SPEC_CASES[case]
    bundle = bundle_with(tmp_path, env)
    assert_one_line(run_shim(bundle, nvct_config), "nvct-runtime", cause)


@pytest.mark.runc
def test_shim_missing_bundle_and_bad_config_json(nvct_config: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert_one_line(run_shim(missing, nvct_config), "nvct-runtime", str(missing))
    bundle = bundle_with(tmp_path, [])
    # Broken JSON that names a GPU variable reaches nvct's planner, which refuses it.
    (bundle / "config.json").write_text('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"')
    assert_one_line(run_shim(bundle, nvct_config), "nvct-runtime", "config.json")
    # Garbage naming no GPU variable is passed straight through (nvct-runtime's launcher never
    # starts Python for it); runc refuses it, also in one line.
    (bundle / "config.json").write_text("this is not json")
    assert_passthrough_refused(run_shim(bundle, nvct_config))


def assert_passthrough_refused(result: subprocess.CompletedProcess[str]) -> None:
    """A spec that asks for no GPU went to runc unchanged, and runc refused it in one line."""
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr[:2000]
    assert lines[0].startswith(("nvct-runtime: error: ", 'time="')), lines[0]


SHAPES = {
    "env-not-list": ({"process": {"env": 5}}, "process.env"),
    "env-entry-null": ({"process": {"env": [None, "NVIDIA_VISIBLE_DEVICES=0"]}}, "process.env"),
    "process-string": ({"process": "x"}, "process"),
    "mounts-object": ({"mounts": {"a": 1}}, "mounts"),
    "prestart-object": ({"hooks": {"prestart": {"path": "/x"}}}, "hooks.prestart"),
}


@pytest.mark.runc
@pytest.mark.parametrize("case", SHAPES)
def test_malformed_spec_shapes(case: str, nvct_config: Path, tmp_path: Path) -> None:
    """config.json that is JSON but not an OCI spec: refused in one line by hook and shim."""
    patch, cause = SHAPES[case]
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    spec = {**json.loads((bundle / "config.json").read_text()), **patch}
    (bundle / "config.json").write_text(json.dumps(spec))
    hooked = run_hook(state_for(bundle), nvct_config)
    if "NVIDIA_VISIBLE_DEVICES" in json.dumps(spec):
        assert_one_line(hooked, "nvct-hook", cause)
        assert_one_line(run_shim(bundle, nvct_config), "nvct-runtime", cause)
    else:  # the patch removed the GPU request: a passthrough, refused by runc itself
        assert_passthrough_refused(run_shim(bundle, nvct_config))
        # and nothing for the hook to do (the runtime that runs it parsed the spec)
        assert (hooked.returncode, hooked.stdout, hooked.stderr) == (0, "", "")


@pytest.mark.runc
@pytest.mark.parametrize("case", CONFIG_CASES)
def test_shim_bad_config_toml(case: str, sim_driver: Any, tmp_path: Path) -> None:
    body, cause = CONFIG_CASES[case]
    config = tmp_path / "c" / "config.toml"
    config.parent.mkdir()
    config.write_text(body)
    bundle = bundle_with(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    assert_one_line(run_shim(bundle, config), "nvct-runtime", cause)
