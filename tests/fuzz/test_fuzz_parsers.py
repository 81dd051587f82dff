"""Property tests for every parser that reads attacker-influenced input (issue 7, item 7).

The image's author controls ``config.json`` (env, mounts, ...), the runtime's caller controls
runc's argv and the hook's stdin; none of them may raise anything but nvct's own error types
(which the hook and shim print as one line), and what they accept must be well-formed.
Complements the fuzzing in test_ldcache, test_requirements, test_request and test_config.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nvct.base.errors import ConfigError, NvctError, RequirementError, SpecError
from nvct.base.oci import check_spec_shape, load_spec, parse_state
from nvct.config import Config, parse_config
from nvct.config.container import RequestRules
from nvct.host.ldcache import parse_ldcache
from nvct.plan.order_key import cache_dir_of
from nvct.request.parse import request_from_spec
from nvct.request.requirements import Facts, evaluate, parse_requirement
from nvct.runtime.args import parse_runc_args, strip_own_flags

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)

# --- OCI state on the hook's stdin --------------------------------------------------------------


@given(st.binary(max_size=256))
def test_state_random_bytes(raw: bytes) -> None:
    with contextlib.suppress(SpecError):
        parse_state(raw)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "pid": st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(), JSON),
            "bundle": st.one_of(st.text(max_size=30), st.integers(), JSON),
            "bundlePath": st.text(max_size=30),
            "id": JSON,
            "ociVersion": JSON,
        },
    )
)
def test_state_documents(doc: dict[str, Any]) -> None:
    try:
        state = parse_state(json.dumps(doc).encode())
    except SpecError:
        return
    assert isinstance(state.pid, int) and state.pid > 0
    assert str(state.bundle).startswith("/")
    assert len(state.container_id) <= 128


# --- config.json ----------------------------------------------------------------------------------


@settings(max_examples=50)
@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
def test_load_spec_raises_only_spec_errors(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as bundle:
        (Path(bundle) / "config.json").write_bytes(raw)
        with contextlib.suppress(SpecError):
            assert isinstance(load_spec(Path(bundle)), dict)


ENV_NAMES = [
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_DISABLE_REQUIRE",
    "CUDA_VERSION",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "X",
]
ENV_ENTRY = st.one_of(
    st.builds(
        "{}={}".format,
        st.sampled_from(
            [
                "NVIDIA_VISIBLE_DEVICES",
                "NVIDIA_DRIVER_CAPABILITIES",
                "NVIDIA_REQUIRE_CUDA",
                "NVIDIA_DISABLE_REQUIRE",
                "CUDA_VERSION",
                "NVIDIA_MIG_CONFIG_DEVICES",
                "X",
            ]
        ),
        st.text(max_size=40),
    ),
    st.text(max_size=20),
    JSON,
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "process": st.one_of(
                JSON,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "env": st.one_of(st.lists(ENV_ENTRY, max_size=6), JSON),
                        "capabilities": JSON,
                        "user": JSON,
                    },
                ),
            ),
            "mounts": st.one_of(
                JSON,
                st.lists(
                    st.one_of(JSON, st.fixed_dictionaries({"destination": JSON, "source": JSON})),
                    max_size=4,
                ),
            ),
            "linux": JSON,
        },
    )
)
def test_request_from_any_spec_raises_only_nvct_errors(spec: dict[str, Any]) -> None:
    """Whatever shape the image's config.json has, it is refused in one line or a request is
    made, as the hook and shim read it (load_spec checks the shape, then the request)."""
    for config in (Config(), Config(request=RequestRules(accept_volume_mounts=True))):
        with contextlib.suppress(NvctError):
            check_spec_shape(spec, "config.json")
            request_from_spec(spec, config)


# --- the device list ----------------------------------------------------------------------------

DEVICE_TOKEN = st.one_of(
    st.integers(min_value=-3, max_value=2000).map(str),
    st.builds("GPU-{}".format, st.uuids().map(str)),
    st.builds("MIG-{}".format, st.uuids().map(str)),
    st.builds("{}:{}".format, st.integers(0, 9), st.integers(0, 9)),
    st.sampled_from(["all", "none", "void", "", " ", "0x1", "GPU-", "MIG-GPU-x/1/2"]),
    st.text(max_size=8),
)


@given(st.lists(DEVICE_TOKEN, max_size=30), st.sampled_from([",", " ,", ", ", ",,"]))
def test_device_lists_raise_only_nvct_errors(tokens: list[str], sep: str) -> None:
    spec = {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={sep.join(tokens)}"]}}
    try:
        request = request_from_spec(spec, Config())
    except NvctError as err:
        assert "\n" not in err.one_line()
        return
    assert len(request.devices) <= 1024


# --- the requirement grammar --------------------------------------------------------------------

PREDICATE = st.builds(
    "{}{}{}".format,
    st.sampled_from(["cuda", "driver", "arch", "brand", "CUDA", "", "x", "cuda "]),
    st.sampled_from([">=", "<=", "=", "==", "!=", "<", ">", "~", "=>", ""]),
    st.one_of(
        st.sampled_from(["12.4", "550.54.15", "9.0", "tesla", "", "1..2", "-1", "12.4.0.0.0"]),
        st.from_regex(r"[0-9]{1,6}(\.[0-9]{0,4}){0,4}", fullmatch=True),
        st.text(max_size=6),
    ),
)
EXPRESSION = st.lists(st.lists(PREDICATE, max_size=4).map(",".join), max_size=4).map(" ".join)


@given(EXPRESSION)
def test_requirement_grammar(expression: str) -> None:
    try:
        requirement = parse_requirement(expression, source="NVIDIA_REQUIRE_X")
    except RequirementError as err:
        assert "NVIDIA_REQUIRE_X" in err.one_line()
        return
    for facts in (Facts("12.4", "550.54.15", "9.0", "Nvidia"), Facts(None, None)):
        ok, detail = evaluate(requirement, facts)
        assert isinstance(ok, bool) and isinstance(detail, str)


# --- config.toml ----------------------------------------------------------------------------------

TOML_VALUE = st.one_of(
    st.integers(), st.booleans(), st.text(max_size=10), st.lists(st.integers(), max_size=2),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
SECTIONS = {
    "runtime": ["low-level", "hook-path"],
    "request": ["accept-envvar-when-unprivileged", "accept-volume-mounts", "default-capabilities"],
    "inject": ["gsp-firmware", "mps", "persistenced", "fabricmanager"],
    "log": ["file", "level"],
}


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key in draw(st.sets(st.sampled_from(["driver-root", "ldconfig", "cache-dir", "x"]))):
        data[key] = draw(TOML_VALUE)
    for section in draw(st.sets(st.sampled_from(sorted(SECTIONS)))):
        keys = draw(st.sets(st.sampled_from([*SECTIONS[section], "unknown"]), max_size=3))
        data[section] = {k: draw(TOML_VALUE) for k in keys} if draw(st.booleans()) else 1
    return data


@given(configs())
def test_config_with_wrong_types_raises_only_config_errors(data: dict[str, Any]) -> None:
    import tomlkit

    raw = tomlkit.dumps(data).encode()
    try:
        parse_config(raw, source="config.toml")
    except ConfigError as err:
        assert err.one_line().startswith("config.toml") or "config.toml" in err.one_line()


# --- runc's argv, config.toml's cache-dir, ld.so.cache ---------------------------------------

ARG = st.one_of(
    st.sampled_from(
        ["create", "run", "start", "delete", "--bundle", "-b", "--log", "--log-format", "--root",
         "--", "-", "--bundle=", "--pid-file", "--nvct-config", "--nvct-config=x", "-f", "id"]
    ),
    st.text(max_size=10),
)  # fmt: skip


@given(st.lists(ARG, max_size=12))
def test_runc_argv_never_raises(argv: list[str]) -> None:
    _, rest = strip_own_flags(argv)
    assert "--nvct-config" not in rest and not any(a.startswith("--nvct-config=") for a in rest)
    assert len(rest) <= len(argv)
    args = parse_runc_args(rest)
    assert args.subcommand == "" or args.subcommand in rest
    assert (
        args.bundle == ""
        or args.bundle in rest
        or f"--bundle={args.bundle}" in rest
        or any(a.endswith("=" + args.bundle) for a in rest)
    )


@given(
    st.lists(st.sampled_from([["--log", "/l"], ["--root", "/r"], ["--debug"]]), max_size=3),
    st.sampled_from(["create", "run"]),
    st.text(alphabet="abc/-_.", min_size=1, max_size=12).filter(lambda b: not b.startswith("-")),
    st.text(alphabet="abc0123", min_size=1, max_size=8),
    st.booleans(),
)
def test_runc_argv_well_formed(
    global_flags: list[list[str]], sub: str, bundle: str, cid: str, eq: bool
) -> None:
    flat = [a for pair in global_flags for a in pair]
    bundle_args = [f"--bundle={bundle}"] if eq else ["--bundle", bundle]
    args = parse_runc_args([*flat, sub, *bundle_args, "--pid-file", "/p", cid])
    assert (args.subcommand, args.bundle, args.container_id) == (sub, bundle, cid)


TOML_LINE = st.one_of(
    st.sampled_from(
        ['cache-dir = "/c"', "cache-dir='/lit'", 'cache-dir = ""', '"cache-dir" = "/q"',
         'cache-dir = "/a\\tb"', "cache-dir = 5", 'cache-dir = "/x" # note', "#cache-dir = \"/n\"",
         "[log]", 'file = "/var/log/cache-dir"', 'a = """', '"""', "[runtime]", "x.cache-dir = 1",
         'driver-root = "/"', "", "   "]
    ),
    st.text(alphabet='cache-dir="/ #[]\'\\x\t', max_size=24),
)  # fmt: skip


@given(st.lists(TOML_LINE, max_size=6))
def test_cache_dir_read_without_tomllib_agrees_with_tomllib(lines: list[str]) -> None:
    """The shim reads cache-dir without tomllib on its hot path: same answer for every valid
    file; for a broken one any answer will do (its work orders are never cached)."""
    import tomllib

    raw = "\n".join(lines).encode()
    try:
        doc = tomllib.loads(raw.decode())
    except tomllib.TOMLDecodeError:
        assert cache_dir_of(raw) is None or isinstance(cache_dir_of(raw), str)
        return
    value = doc.get("cache-dir", "/var/cache/nvct")
    expected = value if isinstance(value, str) and value else None
    assert cache_dir_of(raw) == expected


@settings(max_examples=200)
@given(st.binary(min_size=16, max_size=64).map(lambda b: b"glibc-ld.so.cache1.1" + b))
def test_ldcache_new_format_prefix_with_garbage(data: bytes) -> None:
    with contextlib.suppress(NvctError):
        parse_ldcache(data)


# --- Nesting deeper than the interpreter's recursion limit ---------------------------------
# json and tomllib recurse once per nested array, object or inline table: a document nested
# ~1,000 deep raised RecursionError, not a parse error (found by fuzz/fuzz_parsers.py).
DEEP_JSON = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_TOML = b"a = " + b"[" * 5_000 + b"]" * 5_000 + b"\n"
# a quoted key: the shim's hot path leaves the file to tomllib
DEEP_INLINE = b'"cache-dir" = "/x"\nb = ' + b"{c = " * 3_000 + b"1" + b"}" * 3_000 + b"\n"


def test_a_state_or_spec_nested_past_the_recursion_limit_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    import pytest

    with pytest.raises(SpecError, match="nested too deeply"):
        parse_state(DEEP_JSON)
    (tmp_path / "config.json").write_bytes(DEEP_JSON)
    with pytest.raises(SpecError):
        load_spec(tmp_path)


def test_a_config_nested_past_the_recursion_limit_is_refused_in_one_line() -> None:
    import pytest

    for raw in (DEEP_TOML, DEEP_INLINE):
        with pytest.raises(ConfigError, match="nested too deeply"):
            parse_config(raw, source="config.toml")
    assert cache_dir_of(DEEP_INLINE) is None  # a broken file: its work orders are not cached
