"""Regression guard (not a timing test): hot-path entry points import no heavy library."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from integration.harness.bundles import minimal_gpu_bundle
from integration.harness.nvct_config import write_nvct_config
from nvct.runtime.launch.build import default_command
from nvct.runtime.launch.daemon import HOOK_PRELOAD

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.toml"

HEAVY = (
    *("jsonschema", "elftools", "pynvml", "click", "structlog", "asyncio", "tomlkit"),
    # the Kubernetes API client (nvct.kubeapi.client): ~200 ms with httpx2 and msgspec
    *("lightkube", "httpx2"),
)
# The per-container paths also keep Python's own slower modules out (~15 ms together).
LEAN = (*HEAVY, "dataclasses", "typing", "pathlib", "inspect")
# A GPU container's create is nvct's only Python process per start: not even json (re, enum),
# tomllib, hashlib (OpenSSL), ctypes or collections (~30 ms together on this VM class).
LEANEST = (*LEAN, "json", "re", "enum", "tomllib", "hashlib", "ctypes", "collections")
# Nor ctypes' C half (~2 ms): it is needed only to run ldconfig (namespaces, mounts).
READY_LD_CACHE = (*LEANEST, "_ctypes")
# What a cached create once loaded for a rare branch or one small use (0.1-0.3 ms each here):
# errno for rarely raised OSErrors, itertools for a counter, struct's wrapper (``_struct`` is
# enough), nvct's error classes (loaded by the first raise), the overlay's identity for
# reusing ldconfig's cache, and ldconfig itself.
CACHED_CREATE_SKIPS = (
    *("errno", "itertools", "struct", "nvct.base.errors"),
    *("nvct.container.overlay", "nvct.container.ldconfig", "nvct.base.linux"),
)

# What each entry point imports on its hot path (warm caches).
HOT_MODULES = {
    "runtime passthrough": (
        LEAN,
        ["nvct.runtime.__main__", "nvct.runtime.args", "nvct.runtime.lowlevel"],
    ),
    "runtime create, cached work order, ld.so.cache merged or reused": (
        (*READY_LD_CACHE, *CACHED_CREATE_SKIPS),
        [
            "nvct.runtime.__main__",
            "nvct.runtime.args",
            "nvct.runtime.lowlevel",
            "nvct.runtime.create",
            "nvct.plan.order_key",
            "nvct.plan.cached",
            "nvct.plan.spec_edits",
            "nvct.container.links",
            "nvct.container.rootfs",
            "nvct.base.ldcache_format",
            "nvct.base.oci",
            "nvct.base.log",
            "nvct.store.cache",
        ],
    ),
    # The Python hook (no daemon) from a cached work order, through the rootfs work: what
    # `_apply` and `stage_rootfs` load for a GPU container (procfs: inject.proc-driver "hook";
    # cgroup_v2 and its bpf(2) calls on a cgroup v2 host).
    "hook prestart, cached work order, applied": (
        (*LEANEST, "platform"),
        [
            "nvct.plan.order_key",
            "nvct.plan.cached",
            # nvct.hook.pinned is the daemon's alone: it needs signal, hence enum
            *(m for m in HOOK_PRELOAD if m != "nvct.hook.pinned"),
        ],
    ),
    "hook prestart planning itself (--gpus)": (
        HEAVY,
        [
            "nvct.hook.__main__",
            "nvct.host.load",
            "nvct.plan.build",
            "nvct.request.parse",
            "nvct.config",
            "nvct.container.apply",
        ],
    ),
}


def _preloaded() -> set[str]:
    """Modules this interpreter loads before any nvct code (a site .pth file may add some)."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_hot_paths_import_no_heavy_library() -> None:
    preloaded = _preloaded()
    for name, (banned, modules) in HOT_MODULES.items():
        checked = tuple(m for m in banned if m not in preloaded)
        code = (
            "import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            f"print(','.join(h for h in {checked!r} if h in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert out == "", f"{name} imports {out}"


def test_discovery_is_what_pulls_the_heavy_libraries() -> None:
    """The guard above can fail: discovery itself does import them."""
    code = (
        "import pathlib, sys\n"
        "from nvct.host.discover.elf import read_elf\n"
        "read_elf(pathlib.Path(sys.executable))\n"
        "print('elftools' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def imported(stderr: str) -> set[str]:
    """The modules a ``python -X importtime`` run imported, from its stderr."""
    lines = [ln for ln in stderr.splitlines() if ln.startswith("import time:")]
    return {ln.rsplit("|", 1)[1].strip() for ln in lines[1:]}


def test_a_real_cached_create_imports_nothing_it_skips(h100x4: Any, tmp_path: Path) -> None:
    """The process the launcher starts when no daemon answers, with ``-X importtime`` added:
    a create of a kind seen before loads none of LEANEST, ctypes' C half or
    CACHED_CREATE_SKIPS, while the first (planned) create of the same kind does."""
    cfg = write_nvct_config(
        tmp_path / "nvct" / "config.toml", h100x4, **{"runtime.low-level": '["/bin/true"]'}
    )
    python, *flags = shlex.split(default_command())
    started = subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    banned = {*READY_LD_CACHE, *CACHED_CREATE_SKIPS} - set(started)  # an interpreter's own
    loaded = []
    for n in range(2):
        bundle = minimal_gpu_bundle(tmp_path / f"b{n}")
        argv = [python, "-X", "importtime", *flags, "--nvct-config", str(cfg)]
        done = subprocess.run(
            [*argv, "create", "--bundle", str(bundle), f"c{n}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        loaded.append(imported(done.stderr))
    events = [json.loads(ln) for ln in (cfg.parent / "nvct.log").read_text().splitlines()]
    prepared = [e for e in events if e.get("event") == "container_prepared"]
    assert [e["cached"] for e in prepared] == [False, True]
    assert "nvct.runtime.create" in loaded[1]
    assert sorted(banned & loaded[1]) == [], "a cached create imports these"
    assert {"json", "tomllib"} <= loaded[0]  # the check can fail: planning loads them


# The planner's modules: a cached work order is read without them (``nvct.plan.cached``).
PLANNING = ("nvct.plan.model", "nvct.plan.decide", "nvct.config", "nvct.request.parse")


def test_the_python_hooks_cached_plan_imports_no_planning_code(h100x4: Any, tmp_path: Path) -> None:
    """The Python hook (the native hook's fallback where no daemon answers, the hook itself
    where there is no compiler) on a container seen before: it reads the cached entry and
    loads none of LEAN or the planner's modules, while its first pass of that kind does. (It
    read the image's layout through ``nvct.plan.model`` once: ~50 ms of imports on every
    start, a container asking for nothing 71 ms in all, 22 ms without.)"""
    from nvct.runtime.launch.build import hook_command

    cfg = write_nvct_config(tmp_path / "nvct" / "config.toml", h100x4)
    python, *flags = shlex.split(hook_command())
    loaded = []
    for n in range(2):
        bundle = minimal_gpu_bundle(tmp_path / f"b{n}", "void")
        state = json.dumps({"ociVersion": "1.0.2", "id": f"c{n}", "pid": 1, "bundle": str(bundle)})
        done = subprocess.run(
            [python, "-X", "importtime", *flags, "prestart"],
            input=state, env={"NVCT_CONFIG": str(cfg), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        loaded.append(imported(done.stderr))
    assert "nvct.plan.cached" in loaded[1]
    assert sorted({*LEAN, *PLANNING} & loaded[1]) == [], "a cached hook imports these"
    assert set(PLANNING) <= loaded[0]  # the check can fail: planning loads them


def test_cached_create_calls_stay_lean() -> None:
    """What the cached create calls (not only imports) loads none of LEANEST either: reading
    cache-dir from the shipped config and a plain one, JSON both ways, a cache key."""
    preloaded = _preloaded()
    checked = tuple(m for m in LEANEST if m not in preloaded)
    code = (
        "import sys\n"
        "from nvct.base import fastjson\n"
        "from nvct.plan.order_key import cache_dir_of, order_key\n"
        f"shipped = open({str(SHIPPED_CONFIG)!r}, 'rb').read()\n"
        "assert cache_dir_of(shipped) == '/var/cache/nvct'\n"
        "assert cache_dir_of(b'cache-dir = \"/c\"  # here\\n[log]\\n') == '/c'\n"
        'spec = fastjson.loads(b\' {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}} \')\n'
        "order_key('/etc/nvct/config.toml', shipped, True, spec)\n"
        "assert fastjson.loads(fastjson.dumps(spec)) == spec\n"
        f"print(','.join(h for h in {checked!r} if h in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"the cached create loads {out}"


# The hot-path rule as a package rule: what a cached create may import of nvct. Besides the
# three packages, two stdlib-only modules of the stages it skips: the driver's fingerprint (and
# the IPC paths it stats), which a cached work order is revalidated against on every start,
# and the spec's request inputs, which the order key hashes; and of the plan stage only the
# cache's reader and key (shared with the --gpus hook), which import no planning code.
CACHED_CREATE_PACKAGES = ("nvct.base.", "nvct.container.", "nvct.store.", "nvct.runtime.")
CACHED_CREATE_MODULES = {
    *("nvct", "nvct._version", "nvct.host", "nvct.request"),
    *("nvct.host.fingerprint", "nvct.host.components", "nvct.request.inputs"),
    *("nvct.plan", "nvct.plan.cached", "nvct.plan.order_key"),
    # The spec's edits: a leaf over nvct.base, shared by the create and the native entries.
    "nvct.plan.spec_edits",
}


def test_a_cached_create_imports_only_the_helpers_the_container_package_and_the_store() -> None:
    modules = HOT_MODULES["runtime create, cached work order, ld.so.cache merged or reused"][1]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "import nvct.container.ldconfig  # started when only ldconfig can make the cache\n"
        "import nvct.container.overlay  # and its result reused for the same image\n"
        "print(' '.join(m for m in sys.modules if m == 'nvct' or m.startswith('nvct.')))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "nvct.runtime.create" in out
    outside = [
        m
        for m in out
        if not m.startswith(CACHED_CREATE_PACKAGES)
        and m not in CACHED_CREATE_MODULES
        and m + "." not in CACHED_CREATE_PACKAGES  # the package itself
    ]
    assert outside == [], f"a cached create imports {outside}"
