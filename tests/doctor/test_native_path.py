"""doctor's native-path check: how recent GPU containers were prepared, read from nvct's log as
the real launcher and shim wrote it."""

from __future__ import annotations

import json
from pathlib import Path

from nvct.config import parse_config
from nvct.doctor import PASS, SKIP, WARN
from nvct.doctor.native_path import TAIL_BYTES, check_native_path
from tests.doctor.conftest import context
from tests.runtime.test_native_create import FIRST_OF_KIND, Node

COMPAT = "the image has a CUDA compat directory (/usr/local/cuda/compat)"


def logging_to(tmp: Path, log: Path) -> object:
    config = parse_config(f'[log]\nfile = "{log}"\n'.encode(), source=str(tmp / "config.toml"))
    return context(tmp / "doctor", config=config)


def test_the_paths_of_real_creates_are_counted_with_the_launchers_reasons(h100x4, tmp_path) -> None:
    node = Node(h100x4, tmp_path)
    for _ in range(3):  # the shim (the first of its kind), then the launcher twice
        node.create(node.bundle())
    compat = node.bundle()
    (compat / "rootfs/usr/local/cuda/compat").mkdir(parents=True)
    assert node.create(compat)["via"] == "shim"
    result = check_native_path(logging_to(tmp_path, node.log))
    assert result.status == PASS, result
    assert f"2 of the last 4 GPU containers in {node.log} were prepared natively" in (
        result.message
    )
    assert f"2 by Python: {FIRST_OF_KIND} (x1); {COMPAT} (x1)" in result.message


def test_a_kind_stuck_on_python_is_a_warning_naming_its_reason(tmp_path) -> None:
    log = tmp_path / "nvct.log"
    events = [{"event": "container_configured", "via": "native"}]
    events += [{"event": "container_prepared", "via": "daemon", "native_declined": COMPAT}] * 3
    events += [{"event": "container_prepared", "via": "shim", "native_declined": FIRST_OF_KIND}]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    result = check_native_path(logging_to(tmp_path, log))
    assert result.status == WARN
    assert "1 of the last 5" in result.message and f"{COMPAT} (x3)" in result.message
    assert f"because {COMPAT}" in result.fix


def test_only_the_logs_tail_is_read_and_a_cut_line_is_skipped(tmp_path) -> None:
    log = tmp_path / "nvct.log"
    old = json.dumps({"event": "container_prepared", "via": "shim", "pad": "x" * 200}) + "\n"
    new = json.dumps({"event": "container_prepared", "via": "native"}) + "\n"
    log.write_text(old * (2 * TAIL_BYTES // len(old)) + new * 60)
    result = check_native_path(logging_to(tmp_path, log))
    assert result.status == PASS
    assert "50 of the last 50 GPU containers" in result.message


def test_no_log_or_no_gpu_container_yet_is_skipped(tmp_path) -> None:
    log = tmp_path / "nvct.log"
    assert check_native_path(logging_to(tmp_path, log)).status == SKIP
    log.write_text('{"event": "passthrough_create"}\nnot json\n')
    result = check_native_path(logging_to(tmp_path, log))
    assert result.status == SKIP and "no GPU container" in result.message
