"""The prepared claims' checkpoint: what one plugin records, the next reads; what cannot be
read stops the plugin with one line rather than forgetting claims it must unprepare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvct.dra.checkpoint import Checkpoint, CheckpointError, MpsRecord, Prepared, PreparedDevice

CLAIM = Prepared(
    "ns", "c", (PreparedDevice(("gpu",), "node-1", "gpu-0", ("k8s.gpu.nvct.io/claim=u-gpu-0",)),),
    "/var/run/cdi/nvct-dra-claim-u.json",
)  # fmt: skip


def test_what_one_plugin_records_the_next_reads(tmp_path: Path) -> None:
    first = Checkpoint(tmp_path)
    first.record("u", CLAIM)
    assert Checkpoint(tmp_path).claims == {"u": CLAIM}
    assert (tmp_path / "checkpoint.json").stat().st_mode & 0o777 == 0o600
    first.forget("u")
    assert Checkpoint(tmp_path).claims == {}
    assert list(tmp_path.iterdir()) == [tmp_path / "checkpoint.json"]  # no temp left


def test_a_claims_mps_daemon_is_recorded_and_older_entries_have_none(tmp_path: Path) -> None:
    mps = MpsRecord("/plugins/mps", ("GPU-a", "GPU-b"), 30, (("GPU-b", 20480),), 4242)
    with_mps = Prepared(CLAIM.namespace, "m", CLAIM.devices, CLAIM.spec, mps)
    Checkpoint(tmp_path).record("m", with_mps)
    assert Checkpoint(tmp_path).claims == {"m": with_mps}
    data = json.loads((tmp_path / "checkpoint.json").read_text())
    del data["claims"]["m"]["mps"]  # as the plugin before MPS per claim wrote it
    (tmp_path / "checkpoint.json").write_text(json.dumps(data))
    assert Checkpoint(tmp_path).claims["m"].mps is None


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "cannot read the checkpoint"), (json.dumps({"version": 9}), "not a version 1")],
)
def test_an_unreadable_checkpoint_is_one_line_with_its_fix(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "checkpoint.json").write_text(content)
    with pytest.raises(CheckpointError, match=message) as raised:
        Checkpoint(tmp_path)
    assert "(fix: " in raised.value.one_line()
    assert "\n" not in raised.value.one_line()


def test_a_claims_compute_modes_are_recorded_and_older_entries_have_none(tmp_path: Path) -> None:
    modes = (("GPU-a", "EXCLUSIVE_PROCESS", "PROHIBITED"),)
    held = Prepared(CLAIM.namespace, "m", CLAIM.devices, CLAIM.spec, compute_mode=modes)
    Checkpoint(tmp_path).record("m", held)
    assert Checkpoint(tmp_path).claims == {"m": held}
    data = json.loads((tmp_path / "checkpoint.json").read_text())
    del data["claims"]["m"]["compute_mode"]  # as the plugin before compute modes wrote it
    (tmp_path / "checkpoint.json").write_text(json.dumps(data))
    assert Checkpoint(tmp_path).claims["m"].compute_mode == ()
