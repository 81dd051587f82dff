"""Everything nvct does inside a container's root filesystem: the security boundary.

nvct runs as root over a rootfs, a config.json and an environment that the image's author
shapes. Every module here keeps these invariants (README, "Security model", and the tests it
names in ``integration/test_hostile_*.py``):

- A path in the rootfs is resolved from a descriptor of the rootfs, never from a string:
  ``openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)``, else an ``O_NOFOLLOW`` walk that
  confines ``..`` and absolute symlinks to the rootfs (``rootfs.Rootfs``).
- Files, links and device nodes are created with ``*at`` calls under an already-resolved
  parent; bind mounts target ``/proc/self/fd/N`` of the resolved descriptor, are checked to be
  the mounted file before their flags change, and are made private.
- No binary from the image runs in a host process: ldconfig is the host's, opened on the host
  and executed by descriptor, chrooted in a private mount namespace with the procfs under the
  rootfs detached (``ldconfig``).
- Device access is granted for exactly the selected nodes (``cgroup``, ``cgroup_v2``).
- A failure is an ``ApplyError``: the container does not start, and nothing half-done stays
  outside it.

Only the standard library (and ctypes where a syscall has no wrapper) is imported here: a
cached GPU create runs this code with nothing else loaded (``tests/architecture/test_hot_path.py``).
"""
