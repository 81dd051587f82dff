"""The driver's libraries bound as one directory per library directory of the plan.

``library_groups`` says which libraries could share one bind, ``group_libraries`` rewrites a
plan to bind them so (``nvct.store.libdir`` keeps the host directories), and
``with_library_dirs`` chooses where the config and the host allow it.

With ``inject.binaries = "links"`` the driver's binaries (``nvidia-smi``, the MPS pair...) join
the 64-bit libraries' directory too, and the container sees each as a symlink into it
(``/usr/bin/nvidia-smi -> /usr/lib/x86_64-linux-gnu/nvidia-driver/nvidia-smi``): one bind
mount and one mount point fewer per binary in every start (5 of a 1-GPU start's 10 mounts).
ldconfig takes no name without ``.so`` from a directory, so they change no ld.so.cache.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import replace

from nvct.config import Config
from nvct.plan.model import (
    LIBRARY_SUBDIR,
    RO_OPTIONS,
    BinaryLink,
    LibraryDir,
    Mount,
    Pairs,
    Plan,
    Symlink,
)
from nvct.store.libcopies import copies_dir, ensure_copies
from nvct.store.libdir import ensure, host_dir, ready, same_filesystem

DIRECTORY = "directory"
COPIES = "directory-copies"  # as DIRECTORY, copying the files where they cannot be linked


def library_groups(plan: Plan, *, binaries: bool = False) -> list[tuple[str, str, Pairs, Pairs]]:
    """``(base, kind, files, links)`` of each directory the plan mounts libraries in one by
    one: those that can be bound there as one directory instead (``group_libraries``),
    ``files`` as (host path, name), ``links`` as (name, target). Subdirectories (vdpau/)
    stay file mounts: their users look for them at that path, not through ld.so.cache.
    With ``binaries``, the 64-bit libraries' group also holds the binaries that are on the
    libraries' filesystem (a hard link cannot cross to another)."""
    groups: dict[str, tuple[str, list[tuple[str, str]], list[tuple[str, str]]]] = {}
    for m in plan.mounts:
        if m.kind in ("lib", "lib32") and posixpath.dirname(m.target) in plan.ldconfig_dirs:
            _, files, _ = groups.setdefault(posixpath.dirname(m.target), (m.kind, [], []))
            files.append((m.source, posixpath.basename(m.target)))
    for link in plan.symlinks:
        group = groups.get(posixpath.dirname(link.path))
        if group is not None:
            group[2].append((posixpath.basename(link.path), link.target))
    if binaries:
        _add_binaries(plan, groups)
    return [(base, kind, tuple(f), tuple(k)) for base, (kind, f, k) in groups.items()]


def _add_binaries(
    plan: Plan, groups: dict[str, tuple[str, list[tuple[str, str]], list[tuple[str, str]]]]
) -> None:
    home = next((g for g in groups.values() if g[0] == "lib" and g[1]), None)
    if home is None:
        return
    _, files, links = home
    device = _device(files[0][0])
    taken = {name for _, name in files} | {name for name, _ in links}
    for m in plan.mounts:
        name = posixpath.basename(m.target)
        if m.kind != "bin" or name in taken or device is None or _device(m.source) != device:
            continue
        files.append((m.source, name))
        taken.add(name)


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def group_libraries(
    plan: Plan,
    groups: list[tuple[str, str, Pairs, Pairs]],
    host_dirs: dict[str, str],
    copied: frozenset[str] = frozenset(),
) -> Plan:
    """``plan`` with the libraries of each ``base`` in ``host_dirs`` bound as one directory:
    ``host_dirs[base]`` (prepared from ``groups``, what ``library_groups`` gave for ``plan``;
    of copies for the bases in ``copied``) at ``base``/nvidia-driver, in place of one mount
    per library and one symlink per SONAME in the container's layer. The ld.so.cache entries
    and ldconfig's directories follow them there. The binaries a group holds (``binaries``
    of ``library_groups``) become links into its directory."""
    if not host_dirs:
        return plan
    dirs: list[LibraryDir] = []
    for base, kind, files, links in groups:
        if base in host_dirs:
            target = f"{base}/{LIBRARY_SUBDIR}"
            dirs.append(
                LibraryDir(base, target, host_dirs[base], kind, files, links, base in copied)
            )
    by_base = {d.base: d for d in dirs}
    holders = {(source, name): d for d in dirs for source, name in d.files}
    bins = {(m.source, posixpath.basename(m.target)) for m in plan.mounts if m.kind == "bin"}
    mounts: list[Mount] = []
    linked: list[BinaryLink] = []
    for m in plan.mounts:
        d = by_base.get(posixpath.dirname(m.target))
        home = holders.get((m.source, posixpath.basename(m.target))) if m.kind == "bin" else None
        if home is not None:
            target = f"{home.target}/{posixpath.basename(m.target)}"
            linked.append(BinaryLink(m.target, target, m.source, m.options, m.reason))
        elif d is None or m.kind not in ("lib", "lib32"):
            mounts.append(m)
        elif not any(x.target == d.target for x in mounts):
            held = "copies of " if d.copies else ""
            nbin = sum(1 for f in d.files if f in bins)
            what = f"{len(d.files) - nbin} driver libraries"
            if nbin:
                what += f", {nbin} binaries"
            reason = f"{held}{what} and {len(d.links)} links, one directory"
            mounts.append(Mount(d.host_dir, d.target, "libdir", RO_OPTIONS, reason))
    entries = []
    for soname, path, flags in plan.ld_cache_entries:
        d = by_base.get(posixpath.dirname(path))
        entries.append((soname, f"{d.target}/{posixpath.basename(path)}" if d else path, flags))
    return replace(
        plan,
        mounts=tuple(mounts),
        symlinks=tuple(
            _follow(s, by_base) for s in plan.symlinks if posixpath.dirname(s.path) not in by_base
        ),
        ldconfig_dirs=tuple(by_base[b].target if b in by_base else b for b in plan.ldconfig_dirs),
        ld_cache_entries=tuple(entries),
        library_dirs=tuple(dirs),
        binary_links=tuple(linked),
    )


def _follow(link: Symlink, by_base: dict[str, LibraryDir]) -> Symlink:
    """A link in a subdirectory of a grouped directory (gbm/) that points up into it
    (``../libnvidia-allocator.so.1``) follows the libraries into ``nvidia-driver/``."""
    parent = posixpath.dirname(posixpath.dirname(link.path))
    name = link.target[3:] if link.target.startswith("../") else ""
    if parent in by_base and name and "/" not in name:
        return replace(link, target=f"../{LIBRARY_SUBDIR}/{name}")
    return link


def with_library_dirs(plan: Plan, config: Config, fingerprint: str, *, create: bool) -> Plan:
    """``plan`` with its libraries bound as directories (``group_libraries``) where
    the config allows it (``inject.library-mounts`` "directory" or "directory-copies", and a
    ``cache-dir``) and the directory exists or can be made; else ``plan`` as it is. Hard
    links where they can be made; with "directory-copies", copies where they cannot. With
    ``create`` false (``list``, ``explain``) nothing is written: a directory that does not
    exist yet counts when the cache dir is on the libraries' filesystem, or copies are on."""
    mode = config.inject.library_mounts
    if mode not in (DIRECTORY, COPIES) or not config.cache_dir:
        return plan
    groups = library_groups(plan, binaries=config.inject.binaries == "links")
    cache_dir = str(config.cache_dir)
    chosen: dict[str, str] = {}
    copied: set[str] = set()
    for base, _kind, files, links in groups:
        try:
            path = host_dir(cache_dir, files, links)
        except OSError:
            continue  # a file the plan names is gone: its mounts say so at the start
        if mode == DIRECTORY or ready(path) or same_filesystem(cache_dir, files):
            if _linked(path, files, links, cache_dir, create=create):
                chosen[base] = path
                continue
            if mode == DIRECTORY:
                continue
        try:  # "directory-copies": the files cannot be hard-linked from the cache dir
            path = copies_dir(cache_dir, fingerprint, files, links)
            if create:
                ensure_copies(path, files, links)
        except OSError:
            continue
        chosen[base] = path
        copied.add(base)
    return group_libraries(plan, groups, chosen, frozenset(copied))


def _linked(path: str, files: Pairs, links: Pairs, cache_dir: str, *, create: bool) -> bool:
    """Whether ``path`` holds (``create``: now holds) hard links of ``files``; without
    ``create``, whether it will (it exists, or the cache dir is on the files' filesystem)."""
    if not create:
        return ready(path) or same_filesystem(cache_dir, files)
    try:
        ensure(path, files, links)
    except OSError:
        return False
    return True
