"""Take a forked worker's copy-on-write faults before a request arrives, not during it.

A worker forked from the shim daemon shares the daemon's heap until it writes to it, and
CPython writes to every object it touches (reference counts): the first create in a fresh
worker took ~470 page faults, ~1-2 ms of a container's start on this VM class, which a second
create in the same process did not pay (``bench/README.md``). ``MADV_POPULATE_WRITE``
(Linux 5.14) copies the worker's private writable pages in one call, while it waits idle;
each worker then holds its own copy of the heap (~15 MB with nvct's modules loaded).
"""

from __future__ import annotations

from nvct.base import linux

# Kernel-provided mappings that are not the process's memory to copy.
_SPECIAL = ("[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]")


def writable_private(maps: str) -> list[tuple[int, int]]:
    """The (start, length) of each private writable mapping in a ``/proc/PID/maps`` text."""
    regions = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) < 5 or not fields[1].startswith("rw") or fields[1][3:4] != "p":
            continue
        if len(fields) > 5 and fields[5] in _SPECIAL:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        regions.append((start, end - start))
    return regions


def populate_writable() -> int:
    """Fault in this process's own copy of its private writable memory; the bytes copied.
    0 where the kernel lacks ``MADV_POPULATE_WRITE`` (the faults then come as before)."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
        regions = writable_private(f.read())
    done = 0
    for start, length in regions:
        try:
            linux.madvise(start, length, linux.MADV_POPULATE_WRITE)
        except OSError:  # EINVAL before Linux 5.14; a mapping that cannot be populated
            continue
        done += length
    return done
