"""The native nvct-cdi-hook (cdihook.c): the Python hook's work without an interpreter, byte for
byte (links, ld.so.conf.d, the merged ld.so.cache), confined to the container's root, and
everything it does not take handed to the Python hook with the same arguments and state.

Two builds: ``native_only``, whose Python fallback is a stand-in that says it ran (exit 99),
shows which runs the native hook finished alone; ``native``, with the real Python hook behind
it, shows what a user gets. Unprivileged: plain files; the real podman starts are in
integration/test_cdi_podman.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integration.harness.skips import need_cc, require
from nvct.base.ldcache_format import ENDIAN_FLAGS, add_entries, read_entries, write_cache
from nvct.base.oci import CDI_LD_CACHE_ENV
from nvct.runtime.launch.build import build_native, cdi_hook_command
from tests.random_json import RandomJson

FALLBACK = 99
LIB = "/usr/lib/x86_64-linux-gnu"
LIBC = (0x303, b"libc.so.6", b"/lib/x86_64-linux-gnu/libc.so.6", 0, 0)
# What a 1-GPU spec's planner writes: 64 and 32-bit libraries share SONAMEs.
ENTRIES = [
    ["libnvidia-ml.so.1", f"{LIB}/nvidia-driver/libnvidia-ml.so.1", 0x303],
    ["libcuda.so.1", f"{LIB}/nvidia-driver/libcuda.so.1", 0x303],
    ["libcuda.so.1", "/usr/lib/i386-linux-gnu/nvidia-driver/libcuda.so.1", 0x003],
    ["libnvidia-ptxjitcompiler.so.1", f"{LIB}/nvidia-driver/libnvidia-ptxjitcompiler.so.1", 0x303],
]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require(need_cc())
    out = tmp_path_factory.mktemp("cdihook")
    stand_in = f"/bin/sh -c 'echo FALLBACK \"$@\" >&2; cat >&2; exit {FALLBACK}' fallback"
    native_only, native = out / "native-only", out / "native"
    build_native(native_only, stand_in, program="cdi-hook")
    build_native(native, cdi_hook_command(), program="cdi-hook")
    return {"native_only": native_only, "native": native}


def bundle(tmp: Path, cache: bytes | None = None, *, conf_d: bool = False) -> tuple[Path, dict]:
    """A bundle whose rootfs has ``cache`` as its ld.so.cache, and its OCI state."""
    root = tmp / "bundle/rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "usr/lib").mkdir(parents=True)
    if cache is not None:
        (root / "etc/ld.so.cache").write_bytes(cache)
    if conf_d:
        (root / "etc/ld.so.conf.d").mkdir()
    (tmp / "bundle/config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = {"ociVersion": "1.0.2", "id": "x", "pid": 1, "bundle": str(tmp / "bundle")}
    return root, state


def run(
    hook: Path, state: dict | bytes, args: list[str], entries: object = ENTRIES
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin"}
    if entries is not None:
        env[CDI_LD_CACHE_ENV] = entries if isinstance(entries, str) else json.dumps(entries)
    data = state if isinstance(state, bytes) else json.dumps(state).encode()
    return subprocess.run(
        [str(hook), *args], input=data.decode(errors="replace"), capture_output=True, text=True,
        env=env, timeout=60, check=False,
    )  # fmt: skip


LDCONFIG = ["--ldconfig", "/nonexistent/ldconfig", "--ldconfig-dir", f"{LIB}/nvidia-driver"]


def test_links_stay_inside_the_root_an_image_file_is_kept_a_stale_link_replaced(
    builds, tmp_path
) -> None:
    root, state = bundle(tmp_path, write_cache(ENDIAN_FLAGS, [LIBC]))
    (root / "usr/lib/evil").symlink_to("/")  # an image trying to escape
    (root / "usr/lib/kept.so").write_text("the image's own")
    (root / "usr/lib/stale.so").symlink_to("elsewhere")
    args = [
        "--symlink", "libx.so.1::/usr/lib/libx.so",
        "--symlink", "t::/usr/lib/evil/tmp/nvct-native-x",
        "--symlink", "k::/usr/lib/kept.so",
        "--symlink", "s.so.1::/usr/lib/stale.so",
        "--symlink", "d::/opt/made/deep/link",
        *LDCONFIG,
    ]  # fmt: skip
    done = run(builds["native_only"], state, args)
    assert done.returncode == 0, done.stderr
    assert os.readlink(root / "usr/lib/libx.so") == "libx.so.1"
    assert os.readlink(root / "tmp/nvct-native-x") == "t"  # /usr/lib/evil -> / resolved in root
    assert not os.path.lexists("/tmp/nvct-native-x")
    assert (root / "usr/lib/kept.so").read_text() == "the image's own"
    assert os.readlink(root / "usr/lib/stale.so") == "s.so.1"
    assert os.readlink(root / "opt/made/deep/link") == "d"


def test_no_image_symlink_or_dotdot_leads_a_write_out_of_the_root(builds, tmp_path) -> None:
    """The image points its ld.so.conf.d and a library directory out of the root (relative
    and absolute), and a link path climbs with ``..``: every write lands inside the root,
    as if the root were /, and nothing appears beside it."""
    root, state = bundle(tmp_path, write_cache(ENDIAN_FLAGS, [LIBC]))
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "outside").mkdir()  # where the links lead inside the root: /outside, and
    (root / str(outside).lstrip("/")).mkdir(parents=True)  # the absolute path, rooted
    (root / "etc/ld.so.conf.d").symlink_to("../../../outside")
    (root / "usr/lib/up").symlink_to("../../../../outside")
    (root / "usr/lib/abs").symlink_to(str(outside))
    args = [
        "--symlink", "a::/usr/lib/up/a",
        "--symlink", "b::/usr/lib/abs/b",
        "--symlink", "c::/usr/../../../../outside/c",
        *LDCONFIG, "--ld-conf", f"{LIB}/nvidia-driver",
    ]  # fmt: skip
    done = run(builds["native_only"], state, args)
    assert done.returncode == 0, done.stderr
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in (root / "outside").iterdir()) == [
        "000-nvidia-driver.conf",  # ld.so.conf.d -> ../../../outside, rooted
        "a",
        "c",
    ]
    assert os.readlink(root / str(outside).lstrip("/") / "b") == "b"


def test_the_merged_cache_is_the_python_hooks_byte_for_byte(builds, tmp_path) -> None:
    """The host's own ld.so.cache as the image's (hundreds of real SONAMEs, digit runs,
    32-bit entries), the planner's entries merged: what ldcache_format.add_entries makes."""
    image = Path("/etc/ld.so.cache").read_bytes()
    root, state = bundle(tmp_path, image)
    done = run(builds["native_only"], state, LDCONFIG)
    assert done.returncode == 0, done.stderr
    merged = (root / "etc/ld.so.cache").read_bytes()
    assert merged == add_entries(image, [(s, p, f) for s, p, f in ENTRIES])
    assert len(read_entries(merged)[1]) == len(read_entries(image)[1]) + len(ENTRIES)
    assert (root / "etc/ld.so.cache").stat().st_mode & 0o777 == 0o644


# Names that meet in the order where it is subtle: digit runs of other lengths, leading zeros,
# a run against a letter, a name that is another's prefix; and names of any shape.
CLOSE = st.from_regex(
    r"lib(a|ab|b|2)?(\.so)?(\.(0|00|1|9|10|010|99|100|18446744073709551617))"
    r"{0,3}(\.(x|1|2|10))?",
    fullmatch=True,
)
SONAME = st.one_of(
    CLOSE, st.from_regex(r"lib[a-z0-9_+-]{0,6}(\.so(\.[0-9]{1,12}){0,3})?", fullmatch=True)
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    image=st.lists(st.tuples(SONAME, st.sampled_from([0x303, 0x003, 0x001])), max_size=30),
    extra=st.lists(st.tuples(SONAME, st.sampled_from([0x303, 0x003])), min_size=1, max_size=8),
)
def test_any_order_of_names_is_ldconfigs(builds, tmp_path_factory, image, extra) -> None:
    """Digit runs of any length and leading zeros, flags, repeated names: the native merge
    orders as ldconfig (ldcache_format) does, or hands the cache to the Python hook where
    that declines."""
    tmp = tmp_path_factory.mktemp("order")
    cache = add_entries(write_cache(ENDIAN_FLAGS, []), [(s, f"/lib/{s}", f) for s, f in image])
    assert cache is not None
    root, state = bundle(tmp, cache)
    extras = [[s, f"/usr/lib/nv/{s}", f] for s, f in extra]
    expected = add_entries(cache, [(s, p, f) for s, p, f in extras])
    done = run(builds["native_only"], state, ["--ldconfig-dir", "/usr/lib/nv"], extras)
    if expected is None:  # a name the image lists: the Python hook's (ldconfig's) to order
        assert done.returncode == FALLBACK, done.stderr
        assert (root / "etc/ld.so.cache").read_bytes() == cache
    else:
        assert done.returncode == 0, done.stderr
        assert (root / "etc/ld.so.cache").read_bytes() == expected


def test_ld_so_conf_d_lists_the_library_directories(builds, tmp_path) -> None:
    root, state = bundle(tmp_path, write_cache(ENDIAN_FLAGS, [LIBC]), conf_d=True)
    conf = [
        "--ld-conf",
        f"{LIB}/nvidia-driver",
        "--ld-conf",
        "/usr/lib/i386-linux-gnu/nvidia-driver",
    ]
    done = run(builds["native_only"], state, [*LDCONFIG, *conf])
    assert done.returncode == 0, done.stderr
    assert (root / "etc/ld.so.conf.d/000-nvidia-driver.conf").read_text() == (
        "# The host's NVIDIA driver libraries, bound here by nvct\n"
        f"{LIB}/nvidia-driver\n/usr/lib/i386-linux-gnu/nvidia-driver\n"
    )


def test_crun_states_root_is_the_root(builds, tmp_path) -> None:
    root, state = bundle(tmp_path, write_cache(ENDIAN_FLAGS, [LIBC]))
    config = (tmp_path / "bundle/config.json").read_text()
    (tmp_path / "bundle/config.json").write_text("{}")  # only the state says where the root is
    done = run(builds["native_only"], {**state, "root": str(root)}, ["--symlink", "a::/usr/lib/b"])
    assert done.returncode == 0, done.stderr
    assert os.readlink(root / "usr/lib/b") == "a"
    # a "root" that is no string (or an empty one) counts for nothing, as in the Python hook
    (tmp_path / "bundle/config.json").write_text(config)
    for other in ({"path": "/elsewhere"}, 7, None, ""):
        done = run(builds["native_only"], {**state, "root": other}, ["--symlink", "c::/usr/lib/d"])
        assert done.returncode == 0, (other, done.stderr)
        assert os.readlink(root / "usr/lib/d") == "c"
        (root / "usr/lib/d").unlink()


HWCAP_EXT = (0x303, b"libm.so.6", b"/lib/glibc-hwcaps/x86-64-v3/libm.so.6", 0, 1 << 62)


@pytest.mark.parametrize(
    ("why", "image", "entries", "change"),
    [
        ("no entries: ldconfig runs", [LIBC], None, None),
        ("entries that are not the planner's", [LIBC], '[["libcuda.so.1", 771]]', None),
        ("an empty list", [LIBC], "[]", None),
        ("a float for flags", [LIBC], '[["libcuda.so.1", "/l/libcuda.so.1", 771.5]]', None),
        ("a SONAME the image lists", [(0x303, b"libcuda.so.1", b"/x/libcuda.so.1", 0, 0)],
         ENTRIES, None),
        ("glibc-hwcaps entries", [LIBC, HWCAP_EXT], ENTRIES, None),
        ("a name outside ASCII", [LIBC], [["libé.so.1", "/l/libé.so.1", 0x303]], None),
        ("no cache in the image", None, ENTRIES, None),
        ("a cache that is a symlink", [LIBC], ENTRIES, "cache-symlink"),
        # opened, it would block the hook (and the container) for good
        ("a cache that is a FIFO", [LIBC], ENTRIES, "cache-fifo"),
        ("not a cache", [LIBC], ENTRIES, "garbage"),
        ("a config.json without root.path", [LIBC], ENTRIES, "no-root-path"),
        ("a duplicate bundle", [LIBC], ENTRIES, "duplicate-bundle"),
        ("an argument it does not know", [LIBC], ENTRIES, "unknown-arg"),
        ("a directory through a dangling symlink", [LIBC], ENTRIES, "dangling"),
    ],
)  # fmt: skip
def test_what_the_native_hook_does_not_take_goes_to_python_unchanged(
    builds, tmp_path, why, image, entries, change
) -> None:
    root, state = bundle(tmp_path, None if image is None else write_cache(ENDIAN_FLAGS, image))
    args = ["--symlink", "libx.so.1::/usr/lib/libx.so", *LDCONFIG]
    data: dict | bytes = state
    if change == "cache-symlink":
        (root / "etc/ld.so.cache").rename(root / "etc/real.cache")
        (root / "etc/ld.so.cache").symlink_to("real.cache")
    elif change == "cache-fifo":
        (root / "etc/ld.so.cache").rename(root / "etc/real.cache")
        os.mkfifo(root / "etc/ld.so.cache")
    elif change == "garbage":
        (root / "etc/ld.so.cache").write_bytes(b"not a cache at all" * 8)
    elif change == "no-root-path":
        (tmp_path / "bundle/config.json").write_text('{"root": {}}')
    elif change == "duplicate-bundle":
        text = json.dumps(state)
        data = (text[:-1] + f', "bundle": "{tmp_path}"}}').encode()
    elif change == "unknown-arg":
        args += ["--new-flag", "x"]
    elif change == "dangling":
        (root / "opt").symlink_to("missing/dir")
        args += ["--symlink", "y::/opt/sub/y"]
    before = sorted(p.name for p in (root / "etc").iterdir())
    kept = image is not None and change not in ("cache-symlink", "cache-fifo")
    cache_before = (root / "etc/ld.so.cache").read_bytes() if kept else None
    done = run(builds["native_only"], data, args, entries)
    assert done.returncode == FALLBACK, (why, done.stderr)
    sent = data if isinstance(data, bytes) else json.dumps(data).encode()
    assert done.stderr == f"FALLBACK {' '.join(args)}\n{sent.decode()}", why  # argv and state whole
    assert sorted(p.name for p in (root / "etc").iterdir()) == before, why  # no temporary left
    if cache_before is not None:
        assert (root / "etc/ld.so.cache").read_bytes() == cache_before, why


def test_the_python_hook_behind_it_finishes_what_it_declines(builds, tmp_path) -> None:
    """A link under a dangling image symlink: the native hook hands over; the real Python
    hook, given the same argv and state, makes the link's target inside the root (as mkdir -p
    in a chroot would), then all the links, and (no ldconfig here) fails as it says."""
    root, state = bundle(tmp_path, write_cache(ENDIAN_FLAGS, [LIBC]))
    (root / "opt").symlink_to("missing/dir")
    args = ["--symlink", "libx.so.1::/usr/lib/libx.so", "--symlink", "y::/opt/sub/y", *LDCONFIG]
    done = run(builds["native"], state, args, entries=None)
    assert os.readlink(root / "usr/lib/libx.so") == "libx.so.1"
    assert os.readlink(root / "missing/dir/sub/y") == "y"
    assert done.returncode == 1
    assert "nvct cdi hook: cannot open ldconfig /nonexistent/ldconfig" in done.stderr


def test_the_native_hook_finds_the_root_as_the_python_hook_on_random_states(
    builds, tmp_path
) -> None:
    """Random states as runtimes could write them (bundle or bundlePath, crun's root as an
    absolute or relative string or something else, nested annotations, text from every
    Unicode plane, escaped or raw, any spacing): where the native hook does the work, it
    does it in the root the Python hook finds (nvct.hook.cdi.container_root), and every state
    whose root is there to open it takes (the others, a root that is not a path of one, it
    hands over untouched)."""
    import random

    from nvct.hook.cdi import container_root

    rng = random.Random(47)  # noqa: S311 - a repeatable test, not a secret
    bundles = {}
    for name in ("a", "b"):
        root, _ = bundle(tmp_path / name, write_cache(ENDIAN_FLAGS, [LIBC]))
        bundles[name] = root.parent
    crun_root = tmp_path / "crun-root"
    (crun_root / "usr/lib").mkdir(parents=True)
    draw = RandomJson(rng, ["root", "bundle"])
    text, value = draw.text, draw.value

    handed, done_natively = 0, 0
    for i in range(120):
        state: dict[str, object] = {text(): value(0) for _ in range(rng.randrange(3))}
        for key in ("bundle", "bundlePath", "root"):
            state.pop(key, None)
        state[rng.choice(["bundle", "bundle", "bundlePath"])] = str(bundles[rng.choice("ab")])
        root_kind = rng.randrange(4)
        if root_kind == 1:
            state["root"] = str(crun_root)
        elif root_kind == 2:
            state["root"] = "rootfs"  # relative to the bundle
        elif root_kind == 3:
            state["root"] = value(1)
        items = list(state.items())
        rng.shuffle(items)
        data = json.dumps(
            dict(items),
            ensure_ascii=rng.random() < 0.5,
            indent=rng.choice([None, 1]),
            separators=rng.choice([(",", ":"), (", ", ": ")]),
        )
        expected = Path(container_root(json.loads(data)))
        link = f"/usr/lib/marker-{i}"
        done = run(builds["native_only"], data.encode(), ["--symlink", f"m::{link}"], None)
        made = [r for r in (*(b / "rootfs" for b in bundles.values()), crun_root)
                if os.path.lexists(f"{r}{link}")]  # fmt: skip
        plain = expected.is_dir()  # a root the Python hook finds and can open
        if done.returncode == FALLBACK:
            handed += 1
            assert made == [] and not plain, data
        else:
            done_natively += 1
            assert done.returncode == 0, (data, done.stderr)
            assert made == [expected], data
    assert handed and done_natively  # both kinds were met
