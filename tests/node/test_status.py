"""The status file under two writer threads (the NVML and MPS watchers): a reader never sees a
partial file, and the newest state is the one left."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from nvct.base.atomic import write_atomic
from nvct.deviceplugin.status import StatusWriter
from nvct.node.files import STATUS_FILE
from nvct.node.status import read_status, status_bytes


def document(n: int, size: int) -> dict[str, list[dict[str, object]]]:
    entry = {"id": f"GPU-{n}", "health": "Unhealthy", "reason": "x" * 64}
    return {"nvidia.com/gpu": [dict(entry, id=f"GPU-{n}-{i}") for i in range(size)]}


def test_two_writers_and_a_reader_never_meet_a_torn_file(tmp_path: Path) -> None:
    # write_atomic itself, without the writer's lock: each call needs its own temp file
    path = str(tmp_path / STATUS_FILE)
    write_atomic(path, status_bytes(document(0, 1), {"quiet-period": 1.0}))
    stop = threading.Event()
    reads: list[int] = []
    problems: list[str] = []

    def read() -> None:
        while not stop.is_set():
            status, why = read_status(tmp_path)
            if status is None:
                problems.append(why)
            else:
                reads.append(len(status.resources["nvidia.com/gpu"]))

    failed: list[str] = []

    def write(size: int) -> None:
        try:
            many(size)
        except OSError as err:  # another thread's rename took this one's temp file
            failed.append(repr(err))

    def many(size: int) -> None:
        for n in range(300):  # big and small documents from each thread
            data = status_bytes(document(n, size), {"quiet-period": 1.0})
            write_atomic(path, data, durable=False)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(size,)) for size in (3, 400)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert problems == [] and failed == []
    assert len(reads) > 50 and set(reads) <= {1, 3, 400}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != STATUS_FILE]
    assert leftovers == []
    last = json.loads((tmp_path / STATUS_FILE).read_text())
    assert last["settings"] == {"quiet-period": 1.0}


def test_each_write_reads_the_state_inside_the_lock(tmp_path: Path) -> None:
    writer = StatusWriter(tmp_path / STATUS_FILE, {})
    state = {"n": 0}
    gate = threading.Event()

    def slow_build() -> dict[str, list[dict[str, object]]]:
        gate.wait(5)  # the other thread changes the state and writes meanwhile
        return document(state["n"], 1)

    first = threading.Thread(target=writer.write, args=(slow_build,))
    first.start()
    state["n"] = 1
    second = threading.Thread(target=writer.write, args=(lambda: document(state["n"], 1),))
    second.start()
    gate.set()
    first.join()
    second.join()
    status, _ = read_status(tmp_path)
    assert status is not None and status.resources["nvidia.com/gpu"][0]["id"] == "GPU-1-0"


def test_a_killed_writers_temp_file_is_swept_a_live_ones_is_not(tmp_path: Path) -> None:
    writer = StatusWriter(tmp_path / STATUS_FILE, {})
    killed = tmp_path / f".{STATUS_FILE}.1.0.tmp"
    killed.write_text('{"version": 2, "res')
    old = time.time() - 60
    os.utime(killed, (old, old))
    writing = tmp_path / f".{STATUS_FILE}.1.1.tmp"  # another writer, this moment
    writing.write_text("{")
    other = tmp_path / ".kubelet_internal_checkpoint.1.tmp"
    other.write_text("x")
    os.utime(other, (old, old))
    assert writer.sweep() == [killed.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([writing.name, other.name])
