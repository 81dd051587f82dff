"""nvct's C under AddressSanitizer and UndefinedBehaviorSanitizer, over inputs mutated from
valid ones.

The native programs read, as root, what an image's author or a runtime's caller controls: the
image's ld.so.cache (rootfs.h), config.json with the image's environment and the OCI state
(json.h, native.h), and the CDI hook's cache entries. The other tests check what they decide;
these build the same code with ``-fsanitize=address,undefined -fno-sanitize-recover=all``, so
an out-of-bounds read, an overflow or undefined behaviour that happens to give the right
answer still fails the run:

- a driver over rootfs.h, json.h and native.h in one process, fed thousands of records: each
  image cache (valid, or mutated: bits flipped, header counts and string offsets set to edge
  values, truncated, spliced) is read from an allocation of its exact size and merged with
  the planner's entries as the hooks and the launcher merge it, and the merge must be the
  Python merge's (``nvct.base.ldcache_format.add_entries``) byte for byte, declined where it
  declines; each JSON text (states, config.json files, random values, and mutations of them)
  goes through every scanner and through the native create's reading of a config.json, whose
  key must be the shim's (``native_entry.native_key``) byte for byte; each
  config.toml through the launcher's reading of its cache-dir, which must be tomllib's for
  every valid file;
- nvct-cdi-hook and nvct-runtime's native create, built as ``make venv`` builds them plus the
  sanitizers, over mutated states, config.json files and caches; the launcher over random
  runc command lines, the prestart hook over random states.

Where the compiler cannot build or run a sanitized program, they skip and say so.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.skips import need_cc, require
from nvct.base.defaults import DEFAULT_CACHE_DIR
from nvct.base.ldcache_format import ENDIAN_FLAGS, HWCAP_EXTENSION, add_entries, write_cache
from nvct.base.oci import CDI_LD_CACHE_ENV
from nvct.plan.native_entry import native_key
from nvct.runtime.launch import tables
from nvct.runtime.launch.build import build_native
from nvct.runtime.launch.code_id import code_id
from tests.hook.test_native_cdi_hook import bundle as cdi_hook_bundle
from tests.random_json import RandomJson
from tests.runtime.c_driver import SANITIZE, build_driver, sanitizer_flags

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

FOUND = 86  # the exit status of a run a sanitizer stopped
SANITIZER_ENV = {
    "ASAN_OPTIONS": f"exitcode={FOUND}:detect_leaks=0:abort_on_error=0",
    "UBSAN_OPTIONS": f"exitcode={FOUND}:halt_on_error=1:print_stacktrace=1",
}
MARKERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", ": runtime error: ")
LIB = "/usr/lib/x86_64-linux-gnu"
PLANNED = [
    ["libnvidia-ml.so.1", f"{LIB}/nvidia-driver/libnvidia-ml.so.1", 0x303],
    ["libcuda.so.1", f"{LIB}/nvidia-driver/libcuda.so.1", 0x303],
    ["libcuda.so.1", "/usr/lib/i386-linux-gnu/nvidia-driver/libcuda.so.1", 0x003],
]

# Records on stdin: a kind byte, a little-endian u32 length, the bytes. One line out each:
# - 'c', an image cache merged with the current entries: '-' declined, else the merge in hex;
# - 'e', the planner's entries text, current from there on when it parses: '+' or '-';
# - 't', a config.toml for the launcher's reading of its cache-dir: '=DIR', or '-' (the shim
#   reads it);
# - 'j', a JSON text for every scanner: '+' when json_skip took it whole, else '-'; 'u' when
#   valid_utf8 takes it, else 'x'; a space; then, where read_bundle takes it as a config.json,
#   the key build_key makes of it, in hex.
# argv: a root whose /etc/ld.so.cache each merge reads and writes, a bundle directory and a
# config file for read_bundle.
DRIVER = r"""
#define _GNU_SOURCE
#define PROGRAM "sanitized-test"
#include NVCT_LAUNCHER_CONFIG
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the headers' own, used or not */
#include "client.h"
#include "json.h"
#include "rootfs.h"
#include "native.h"
#pragma GCC diagnostic pop

static char *exact(const char *p, size_t n) /* an allocation of n bytes and a NUL, no slack */
{
    char *out = malloc(n + 1);
    if (!out)
        abort();
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

static int count_member(const char *key, const char *value, const char *end, void *ctx)
{
    (void)value, (void)end;
    *(size_t *)ctx += strlen(key);
    return 0;
}

static void cache(int root, const char *path, const char *p, size_t n, const struct entry *extra,
                  int nextra)
{
    char *copy = exact(p, n);
    struct entry *entries = NULL;
    size_t count = 0;
    int flags = 0, missing = 0;
    if (read_cache(copy, n, nextra, &flags, &entries, &count) == 0) {
        for (size_t i = 0; i < count; i++) /* every string read where the loader would */
            if (strlen(entries[i].key) != entries[i].klen ||
                strlen(entries[i].value) != entries[i].vlen)
                abort();
        free(entries);
    }
    free(copy);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        abort();
    struct buf out = {0};
    if (merged_cache(root, extra, nextra, &out, &missing) < 0) {
        puts("-");
    } else {
        for (size_t i = 0; i < out.len; i++)
            printf("%02x", (unsigned char)out.data[i]);
        putchar('\n');
        if (write_image_cache(root, &out) < 0)
            abort();
    }
    free(out.data);
}

static void scan(const char *p, size_t n, const char *bundle, const char *cfg)
{
    static const char *const keys[] = {"bundle", "bundlePath", "root", "process", "mounts",
                                       "linux", "annotations", NULL};
    static const size_t caps[] = {1, 7, 64, 4096};
    const char *values[8], *close;
    char *text = exact(p, n), *end = text + n, decoded[4096];
    int any;
    size_t seen = 0;
    const char *after = json_skip(text, end, 0);
    printf("%c%c ", after && ws(after, end) == end ? '+' : '-', valid_utf8(text, n) ? 'u' : 'x');
    json_members(text, end, keys, values);
    for (const char *q = text; (q = memchr(q, '"', (size_t)(end - q))); q++) {
        json_string(q, end, NULL, 0);
        for (size_t i = 0; i < sizeof caps / sizeof *caps; i++)
            json_string(q, end, decoded, caps[i]);
    }
    for (const char *q = text; q < end; q++) {
        if (*q == '[')
            each_element(q, end, NULL, NULL, &close, &any);
        else if (*q == '{')
            each_member(q, end, count_member, &seen);
    }
    asks_for_gpus(text, n);
    /* the native create's reading of it as a bundle's config.json, and the key it makes */
    struct native c = {.text = text, .root = -1, .bundle_fd = -1};
    char rootfs[PATH_MAX];
    if (read_bundle(&c, bundle, n, cfg, rootfs, sizeof rootfs) == 0) {
        build_key(&c.key, "create", cfg, c.raw, strlen(c.raw), c.debian, &c.s);
        for (size_t i = 0; i < c.key.len; i++)
            printf("%02x", (unsigned char)c.key.data[i]);
    }
    putchar('\n');
    native_free(&c);
}

int main(int argc, char **argv)
{
    char path[PATH_MAX];
    size_t size = 0;
    if (argc != 4)
        return 2;
    int root = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
    char *all = read_all(STDIN_FILENO, (size_t)1 << 30, &size), *store = NULL;
    if (root < 0 || !all)
        return 2;
    snprintf(path, sizeof path, "%s/etc/ld.so.cache", argv[1]);
    struct entry *extra = NULL;
    int nextra = parse_entries(getenv("ENTRIES"), &extra, &store);
    for (size_t at = 0; at + 5 <= size;) {
        uint32_t n;
        memcpy(&n, all + at + 1, 4);
        const char *p = all + at + 5;
        if (n > size - at - 5)
            return 2;
        if (all[at] == 'c') {
            cache(root, path, p, n, extra, nextra);
        } else if (all[at] == 't') {
            char *text = exact(p, n), dir[PATH_MAX];
            const char *found = cache_dir_of(text, n, dir, sizeof dir);
            printf("%s%s\n", found ? "=" : "-", found ? found : "");
            free(text);
        } else if (all[at] == 'e') {
            char *text = exact(p, n), *more = NULL;
            struct entry *parsed = NULL;
            int k = parse_entries(text, &parsed, &more);
            puts(k > 0 ? "+" : "-");
            if (k > 0) {
                free(extra), free(store);
                extra = parsed, store = more, nextra = k;
            }
            free(text); /* the entries' strings are in `more` */
        } else {
            scan(p, n, argv[2], argv[3]);
        }
        at += 5 + n;
    }
    free(extra), free(store), free(all);
    return 0;
}
"""


@pytest.fixture(scope="module")
def sanitizers() -> None:
    """The compiler builds and runs a sanitized program here (else: why not)."""
    require(need_cc())
    if not sanitizer_flags():
        pytest.skip(f"{os.environ.get('CC', 'cc')} cannot build and run a program with {SANITIZE}")


@pytest.fixture
def sanitized_builds(sanitizers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """CFLAGS and LDFLAGS with the sanitizers, as build_native reads them."""
    for var, extra in (("CFLAGS", [*SANITIZE, "-g"]), ("LDFLAGS", list(SANITIZE))):
        monkeypatch.setenv(var, " ".join([os.environ.get(var, ""), *extra]))


def assert_clean(done: subprocess.CompletedProcess[Any], what: str) -> None:
    """No sanitizer stopped the run, nor reported on its stderr."""
    stderr = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
    report = [line for line in stderr.splitlines() if any(m in line for m in MARKERS)]
    assert done.returncode != FOUND and not report, f"{what}:\n{stderr[-6000:]}"


# --- Inputs


def random_cache(rng: random.Random) -> tuple[bytes, bool]:
    """A valid cache and whether the merge takes it (no hwcap extension, no planned SONAME)."""
    names = ["libc.so.6", "libm.so.6", "libz.so.1", "libfoo.so.10", "libfoo.so.9", "libx.so"]
    entries = []
    for _ in range(rng.randrange(8)):
        name = rng.choice(
            [*names, "libcuda.so.1", f"lib{rng.randrange(100)}.so.0{rng.randrange(3)}"]
        )
        hwcap = HWCAP_EXTENSION | 1 if rng.random() < 0.1 else rng.choice([0, 0, 1 << 3])
        path = f"/{rng.choice(['lib', 'usr/lib'])}/x86_64-linux-gnu/{name}".encode()
        entries.append((rng.choice([0x303, 0x003, 0x1]), name.encode(), path, 0, hwcap))
    entries.sort(key=lambda e: e[1], reverse=True)  # the order matters not to the reader
    takes = all(not e[4] & HWCAP_EXTENSION and e[1] != b"libcuda.so.1" for e in entries)
    data = write_cache(ENDIAN_FLAGS, entries)
    if rng.random() < 0.2:  # with the libc5 block in front, as old ldconfigs wrote it
        old = rng.randrange(3)
        block = b"ld.so-1.7.0\0" + struct.pack("<I", old) + b"\x01" * 12 * old
        data = block + b"\0" * (-len(block) % 8) + data
    return data, takes


EDGES = (0, 1, 7, 8, 47, 48, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def mutated(rng: random.Random, data: bytes, fields: tuple[int, ...] = ()) -> bytes:
    """``data`` with one to four mutations: a bit flipped, a u32 (one of ``fields`` or any
    aligned one) set to an edge value or one near the length, a cut, a splice of itself, bytes
    inserted or removed."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        op = rng.randrange(6)
        if op == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif op == 1 and len(out) >= 4:
            at = (
                rng.choice(fields)
                if fields and rng.random() < 0.7
                else rng.randrange(len(out) // 4) * 4
            )
            if at + 4 <= len(out):
                near = len(out) + rng.randrange(-8, 9)
                value = rng.choice([*EDGES, max(near, 0), rng.getrandbits(32)]) & 0xFFFFFFFF
                out[at : at + 4] = struct.pack("<I", value)
        elif op == 2:
            del out[rng.randrange(len(out) + 1) :]
        elif op == 3 and out:
            a = rng.randrange(len(out))
            out[a:a] = out[a : a + rng.randrange(1, 64)]
        elif op == 4:
            out[rng.randrange(len(out) + 1) : 0] = bytes(
                rng.choice(b'"\\{}[],:u0\0\xff') for _ in range(rng.randrange(1, 4))
            )
        elif op == 5 and out:
            a = rng.randrange(len(out))
            del out[a : a + rng.randrange(1, 16)]
    return bytes(out)


def cache_fields(data: bytes) -> tuple[int, ...]:
    """The u32 offsets of a cache's header counts and its entries' string offsets."""
    base = data.find(b"glibc-ld.so.cache")
    if base < 0:
        return ()
    fields = [base + 20, base + 24, 12] if base else [20, 24]
    nlibs = struct.unpack_from("<I", data, base + 20)[0] if len(data) >= base + 24 else 0
    for i in range(min(nlibs, 16)):
        fields += [base + 48 + i * 24 + 4, base + 48 + i * 24 + 8]
    return tuple(fields)


def runc_spec(env: list[str], annotations: dict[str, Any]) -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "process": {"env": env, "args": ["sh"], "capabilities": {"bounding": ["CAP_KILL"]}},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
        "annotations": annotations,
    }


def random_texts(rng: random.Random, count: int) -> Iterator[tuple[bytes, bool]]:
    """JSON texts, and whether each is one the scanners must take whole: states and
    config.json files with random values, random values alone, and mutations of each; some
    nested to the scanners' depth or past it."""
    draw = RandomJson(rng, ["bundle", "root", "env", "NVIDIA_VISIBLE_DEVICES=1"], ["/b", "rootfs"])
    for _ in range(count):
        kind = rng.choice([0, 1, 1, 2, 3])  # config.json files twice as often
        if kind == 0:
            value: Any = {draw.text(): draw.value(0), "bundle": "/b", "root": draw.value(1)}
        elif kind == 1:  # a config.json: what the launcher's key is made of, in every form
            names = ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_X", "DOCKER_RESOURCE_G", "CUDA_VERSION",
                     "CUDA_VERSIONS", "NVIDIA", "OTHER"]  # fmt: skip
            env = [f"{rng.choice(names)}{rng.choice(['=', '', '=='])}{draw.text()}"
                   for _ in range(rng.randrange(6))]  # fmt: skip
            annotations = {
                rng.choice(["cdi.k8s.io/", "cdi.k8s.io", "io."]) + draw.text(): draw.value(2)
                for _ in range(rng.randrange(3))
            }
            value = runc_spec(["PATH=/bin", *env], annotations)
            bounding = rng.choice([["CAP_KILL"], ["CAP_SYS_ADMIN"], [], None, "CAP_SYS_ADMIN"])
            value["process"]["capabilities"] = {"bounding": bounding}
        elif kind == 2:
            value = draw.value(0)
        else:
            depth = rng.choice([60, 64, 65, 66, 200])
            value = json.loads("[" * depth + "]" * depth)
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        if rng.random() < 0.6:
            yield mutated(rng, text), False
        else:
            yield text, kind < 3 or depth <= 65  # MAX_DEPTH levels below the outermost


TOML_LINES = (
    'cache-dir = "/c"', "cache-dir='/lit'", 'cache-dir = ""', '"cache-dir" = "/q"',
    'cache-dir = "/a\\tb"', "cache-dir = 5", 'cache-dir = "/x" # note', '#cache-dir = "/n"',
    "[log]", 'file = "/var/log/cache-dir"', 'a = """', '"""', "[runtime]", "x.cache-dir = 1",
    'driver-root = "/"', "", "   ", "cache-dir\t=\t'/t'", "\tcache-dir = '/i'\r",
)  # fmt: skip


def random_toml(rng: random.Random) -> bytes:
    """A config.toml of lines that name cache-dir or not, in every form, and mutations."""
    lines = []
    for _ in range(rng.randrange(6)):
        if rng.random() < 0.7:
            lines.append(rng.choice(TOML_LINES))
        else:
            lines.append("".join(rng.choice("cache-dir=\"/ #[]'\\x\t\r\v") for _ in range(24)))
    text = rng.choice(["\n", "\r\n"]).join(lines).encode()
    return mutated(rng, text) if rng.random() < 0.3 else text


def record(kind: str, data: bytes) -> bytes:
    return kind.encode() + struct.pack("<I", len(data)) + data


# --- The tests


def test_the_parsers_in_one_process(sanitizers: None, tmp_path: Path) -> None:
    """Thousands of records through rootfs.h's cache merge and every JSON scanner: no
    sanitizer finding, every merge the Python merge's byte for byte (declined where it
    declines), every valid cache without a planned SONAME merged, every unmutated JSON text
    skipped whole."""
    driver = build_driver(tmp_path, DRIVER, flags=["-g"])
    root, bundle = tmp_path / "root", tmp_path / "bundle"
    (root / "etc").mkdir(parents=True)
    (bundle / "rootfs").mkdir(parents=True)
    config = tmp_path / "config.toml"
    config.write_text('cache-dir = "/nonexistent"\n')
    rng = random.Random(61)  # noqa: S311 - a repeatable test, not a secret
    # kind, bytes, whether a merge takes it (a cache) or the scanners take it whole (a text)
    records: list[tuple[str, bytes, bool | None]] = []
    for _ in range(2500):
        data, takes = random_cache(rng)
        if rng.random() < 0.7:
            data, takes = mutated(rng, data, cache_fields(data)), None
        records.append(("c", data, takes))
        if rng.random() < 0.05:
            new = [[f"libn{rng.randrange(9)}.so.{rng.randrange(3)}", f"{LIB}/n/x", 0x303], *PLANNED]
            text = json.dumps(new).encode()
            records.append(("e", mutated(rng, text) if rng.random() < 0.5 else text, None))
    records += [("j", text, pristine) for text, pristine in random_texts(rng, 2500)]
    records += [("t", random_toml(rng), None) for _ in range(1500)]
    done = subprocess.run(
        [str(driver), str(root), str(bundle), str(config)],
        input=b"".join(record(kind, data) for kind, data, _ in records), capture_output=True,
        timeout=600, check=False,
        env={**SANITIZER_ENV, "PATH": "/usr/bin:/bin", "ENTRIES": json.dumps(PLANNED)},
    )  # fmt: skip
    assert_clean(done, "the driver")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.decode().splitlines()
    assert len(lines) == len(records)
    entries, merged, scanned, toml_read, not_utf8 = PLANNED, [], [], [], 0
    keyed: list[dict[str, Any]] = []
    code = code_id()  # the driver's, as build_driver's header has it
    for i, ((kind, data, takes), got) in enumerate(zip(records, lines, strict=True)):
        if kind == "e":
            if got == "+":  # what the C takes, Python reads the same way (as os.environ has it)
                entries = json.loads(data.decode(errors="surrogateescape"))
                assert all(type(e[2]) is int and "\0" not in e[0] + e[1] for e in entries)
        elif kind == "c":
            want = add_entries(data, [(s, p, f) for s, p, f in entries])
            if takes is not None and all(s.isascii() and p.isascii() for s, p, _ in entries):
                assert (want is not None) == takes, f"record {i}"  # the generator's own view
            assert got == (want.hex() if want is not None else "-"), f"record {i}"
            merged.append(got != "-")
        elif kind == "t":  # of a valid file, what the launcher reads is what the shim reads
            try:
                value = tomllib.loads(data.decode()).get("cache-dir", DEFAULT_CACHE_DIR)
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                value = got[1:]  # the shim refuses it: no entry is ever written for it
            assert got == "-" or got[1:] == value, data
            toml_read.append(got != "-")
        else:
            try:  # the scanners leave UTF-8 to the caller (read_bundle checks it)
                json.loads(data.decode(errors="surrogateescape"))
                whole = True
            except ValueError:
                whole = False
            try:
                data.decode()
                utf8 = "u"
            except UnicodeDecodeError:
                utf8 = "x"
            assert got[1] == utf8, data[:200]  # valid_utf8 is Python's strict UTF-8
            key = got[3:]
            if key:  # the launcher's key of a config.json is the shim's (native_entry)
                spec = json.loads(data)
                want_key = native_key(code, str(config), config.read_bytes(), False, spec)
                assert want_key is not None and key == want_key.hex(), data[:300]
                keyed.append(spec)
            assert got[0] == "-" or whole, data[:200]  # what the scanner takes whole is JSON
            assert got[0] == "+" or not takes, data[:200]
            scanned.append(got[0])
            not_utf8 += utf8 == "x"
    assert 300 < sum(merged) < len(merged) - 300  # merged and declined, both often
    assert scanned.count("+") > 500 and scanned.count("-") > 500 and not_utf8 > 100
    assert 200 < sum(toml_read) < len(toml_read) - 200
    assert len(keyed) > 250 and len({json.dumps(k, sort_keys=True) for k in keyed}) > 200


def test_the_cdi_hook_over_mutated_states_caches_and_entries(
    sanitized_builds: None, tmp_path: Path
) -> None:
    """nvct-cdi-hook, sanitized, over random states (bundle, crun's root), mutated image
    caches and planner entries: no finding; each run ends done or handed to its fallback."""
    fallback = 99
    hook = tmp_path / "nvct-cdi-hook"
    build_native(hook, f"/bin/sh -c 'cat >/dev/null; exit {fallback}' x", program="cdi-hook")
    rng = random.Random(67)  # noqa: S311 - a repeatable test, not a secret
    root, _ = cdi_hook_bundle(tmp_path, conf_d=True)
    bundle = root.parent
    texts = (text for text, _ in random_texts(rng, 150))
    args = [
        "--ldconfig", "/nonexistent/ldconfig", "--symlink", "libx.so.1::/usr/lib/libx.so",
        "--ldconfig-dir", f"{LIB}/nvidia-driver", "--ld-conf", f"{LIB}/nvidia-driver",
    ]  # fmt: skip
    ends = {0: 0, fallback: 0}
    for i in range(150):
        data, _ = random_cache(rng)
        (root / "etc/ld.so.cache").write_bytes(
            mutated(rng, data, cache_fields(data)) if i % 3 else data
        )
        entries = json.dumps(PLANNED).encode()
        if i % 4 == 0:
            entries = mutated(rng, entries).replace(b"\0", b"")  # an environment holds no NUL
        state = {"ociVersion": "1.0.2", "id": f"c{i}", "bundle": str(bundle)}
        state["x"] = RandomJson(rng).value(0)
        data = next(texts) if i % 5 == 0 else json.dumps(state).encode()
        env = {**SANITIZER_ENV, "PATH": "/usr/bin:/bin", CDI_LD_CACHE_ENV: entries}
        done = subprocess.run(
            [str(hook), *args], input=data, capture_output=True, env=env, timeout=60, check=False
        )
        assert_clean(done, f"run {i}")
        assert done.returncode in ends, done.stderr[-2000:]  # done, or handed over
        ends[done.returncode] += 1
    assert ends[0] > 20 and ends[fallback] > 20, ends


def test_the_native_create_over_mutated_config_json_and_caches(
    sanitized_builds: None, h100x4: Any, tmp_path: Path
) -> None:
    """nvct-runtime, sanitized, with a native entry written by a first create: later creates
    whose config.json is mutated from the first's or is one of the shapes engines give
    (``random_spec``), and whose image cache is mutated, end prepared by the launcher or
    handed to the Python shim, and no run meets a sanitizer finding."""
    from tests.runtime.test_native_create import HOST_CACHE, Node, random_spec
    from tests.runtime.test_native_create import spec_text as shaped

    node = Node(h100x4, tmp_path)
    env = {**SANITIZER_ENV, "PATH": f"{node.bindir}:/usr/bin:/bin"}
    first = node.bundle()
    spec_text = (first / "config.json").read_bytes()  # as the engine wrote it
    done = subprocess.run(
        [str(node.launcher), "create", "--bundle", str(first), "c0"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert_clean(done, "the first create")
    assert node.entries(), done.stderr  # the shim wrote the entry the others read
    image_cache = HOST_CACHE.read_bytes() if HOST_CACHE.is_file() else None  # what bundle() copies
    rng = random.Random(71)  # noqa: S311 - a repeatable test, not a secret
    native = 0
    for i in range(90):
        bundle = node.bundle()
        if i % 3 == 0:
            text = shaped(rng, random_spec(rng)).encode()
        else:
            text = mutated(rng, spec_text) if i % 4 else spec_text
        (bundle / "config.json").write_bytes(text)
        if image_cache is not None and i % 2:
            (bundle / "rootfs/etc/ld.so.cache").write_bytes(
                mutated(rng, image_cache, cache_fields(image_cache))
            )
        done = subprocess.run(
            [str(node.launcher), "create", "--bundle", str(bundle), f"c{i + 1}"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert_clean(done, f"create {i + 1}")
        event = json.loads(node.log.read_text().splitlines()[-1])
        native += event.get("via") == "native"
    assert native > 20  # the mutations left many creates to the launcher itself


def test_the_launcher_and_the_prestart_hook_over_random_command_lines_and_states(
    sanitized_builds: None, tmp_path: Path
) -> None:
    """The launcher, sanitized, over random runc command lines (its value flags with and
    without values, ``--flag=value``, subcommands, bundles that ask for a GPU, for none, or
    that cannot be read) and the prestart hook over random states: no finding, and every run
    ends in the fake runc or the fake Python it execs."""
    from tests.runtime.test_launcher import fake_tools

    bindir = fake_tools(tmp_path)
    gpu, plain = tmp_path / "gpu", tmp_path / "plain"
    for bundle, env in ((gpu, ["NVIDIA_VISIBLE_DEVICES=0"]), (plain, ["PATH=/bin"])):
        (bundle / "rootfs").mkdir(parents=True)
        spec = {"process": {"env": env}, "root": {"path": "rootfs"}}
        (bundle / "config.json").write_text(json.dumps(spec))
    launcher, hook = tmp_path / "nvct-runtime", tmp_path / "nvct-hook"
    build_native(launcher, str(bindir / "fakepy"), socket="")
    build_native(hook, str(bindir / "fakepy"), socket=str(tmp_path / "no.sock"), hook=True)
    env = {**SANITIZER_ENV, "PATH": f"{bindir}:/usr/bin:/bin", "NVCT_CONFIG": "/nonexistent"}
    rng = random.Random(73)  # noqa: S311 - a repeatable test, not a secret
    paths = [str(gpu), str(plain), str(tmp_path / "missing"), "", "relative"]
    words = [
        *tables.global_value_flags(), *tables.bundle_flags(), *tables.sub_value_flags(),
        "create", "run", "state", "delete", "--", "-", "=", "", "x", "--nvct-config",
    ]  # fmt: skip
    for _ in range(200):
        argv = []
        for _ in range(rng.randrange(8)):
            word = rng.choice(words)
            argv.append(f"{word}={rng.choice(paths)}" if rng.random() < 0.2 else word)
            if rng.random() < 0.4:
                argv.append(rng.choice(paths))
        done = subprocess.run(
            [str(launcher), *argv], capture_output=True, env=env, timeout=60, check=False
        )
        assert_clean(done, f"launcher {argv}")
        assert done.stdout.startswith((b"RUNC ", b"CRUN ", b"FAKEPY ")), (argv, done.stderr)
    draw = RandomJson(rng, ["bundle", "bundlePath", "pid"], paths)
    for i in range(150):
        state = {draw.text(): draw.value(0) for _ in range(rng.randrange(3))}
        state[rng.choice(["bundle", "bundlePath", "id"])] = rng.choice(paths)
        data = json.dumps(state, ensure_ascii=rng.random() < 0.5).encode()
        done = subprocess.run(
            [str(hook), "prestart"], input=mutated(rng, data) if i % 2 else data,
            capture_output=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert_clean(done, f"hook {i}")
