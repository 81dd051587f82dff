"""The nvct-runtime launchers (native and POSIX shell): which calls reach Python, which go to
runc. Both must behave alike; every test runs on both."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from integration.harness.skips import need_cc, require
from nvct.runtime.launch import build, tables
from nvct.runtime.launch.build import build_native, install

KINDS = ["shell", "native"]


def make_launcher(kind: str, out: Path, python: str, config: str | None = None) -> None:
    """A launcher of ``kind``; the native one with no shim daemon (see test_shim_daemon)."""
    if kind == "shell":
        install(out, python, *([config] if config else []))
        return
    require(need_cc())
    build_native(out, python, *([config] if config else []), socket="")


def fake_tools(tmp_path: Path) -> Path:
    """A bin dir with ``runc``, ``crun`` and ``fakepy`` that echo their name, argv and
    NVCT_CONFIG."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("runc", "crun", "fakepy"):
        tool = bindir / name
        tool.write_text(f'#!/bin/sh\necho "{name.upper()} $* NVCT_CONFIG=${{NVCT_CONFIG:-}}"\n')
        tool.chmod(0o755)
    return bindir


@pytest.fixture(params=KINDS)
def launcher(request, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bindir = fake_tools(tmp_path)
    out = tmp_path / "nvct-runtime"
    make_launcher(request.param, out, str(bindir / "fakepy"))
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "NVCT_CONFIG": str(tmp_path / "absent.toml")}
    return out, env


def bundle(tmp_path: Path, env: list[str]) -> Path:
    b = tmp_path / "bundle"
    b.mkdir(exist_ok=True)
    (b / "config.json").write_text(json.dumps({"process": {"env": env}, "root": {"path": "r"}}))
    return b


def call(launcher: tuple[Path, dict[str, str]], *args: str, cwd: Path | None = None) -> str:
    path, env = launcher
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, env=env, cwd=cwd, check=True
    ).stdout.strip()


@pytest.mark.parametrize("sub", ["state", "start", "delete", "kill", "features"])
def test_passthrough_goes_straight_to_runc(launcher, sub: str) -> None:
    out = call(launcher, "--root", "/run/x", "--log", "/tmp/l", "--log-format", "json", sub, "id")
    assert out.startswith(f"RUNC --root /run/x --log /tmp/l --log-format json {sub} id")


@pytest.mark.parametrize(
    "form",
    [["--bundle", "{b}"], ["--bundle={b}"], ["-b", "{b}"], ["-bundle", "{b}"], ["-b={b}"]],
    ids=["long", "long=", "short", "go-style", "short="],
)
def test_create_with_a_gpu_request_goes_to_python(launcher, tmp_path, form) -> None:
    b = bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    args = [a.format(b=b) for a in form]
    assert call(launcher, "create", *args, "id").startswith("FAKEPY create")


def test_create_without_gpu_request_skips_python(launcher, tmp_path) -> None:
    b = bundle(tmp_path, ["PATH=/bin"])
    assert call(launcher, "--root", "/r", "create", "--bundle", str(b), "id").startswith("RUNC")
    # the bundle defaults to the working directory, and the last --bundle wins
    assert call(launcher, "create", "id", cwd=b).startswith("RUNC")
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    (gpu / "config.json").write_text(json.dumps({"process": {"env": ["CUDA_VERSION=12.0"]}}))
    assert call(launcher, "create", "-b", str(b), "-b", str(gpu), "id").startswith("FAKEPY")


def test_own_flag_is_stripped_and_exported(launcher, tmp_path) -> None:
    out = call(launcher, "--nvct-config", "/etc/x.toml", "--root", "/r", "state", "id")
    assert out == "RUNC --root /r state id NVCT_CONFIG=/etc/x.toml"
    out = call(launcher, "--nvct-config=/etc/y.toml", "state", "id")
    assert out == "RUNC state id NVCT_CONFIG=/etc/y.toml"


def test_configured_low_level_runtimes(launcher, tmp_path) -> None:
    """The native launcher reads a plainly written list itself; the shell one leaves any list
    to Python (it has no parser), which finds the same runtime."""
    path, env = launcher
    cfg = tmp_path / "c.toml"
    cfg.write_text("#[runtime] low-level is commented out\n")
    env = {**env, "NVCT_CONFIG": str(cfg)}
    assert call((path, env), "state", "id").startswith("RUNC")
    cfg.write_text('[runtime]\nlow-level = ["crun"]\n')
    native = path.read_bytes().startswith(b"\x7fELF")
    assert call((path, env), "state", "id").startswith("CRUN state id" if native else "FAKEPY")


# (config text, what the native launcher execs for a passthrough call: a tool, or FAKEPY when
# only the TOML parser may read the list). {bin} is the fake tools' directory.
SPELLINGS = [
    ('[runtime]\nlow-level = ["crun"]\n[log]\nlevel = "debug"\n', "CRUN"),
    ("[ runtime ]  # ours\nlow-level=[ 'nope', \"crun\" , ]  # first found\n", "CRUN"),
    ('[runtime]\nlow-level = ["{bin}/runc", "crun"]\n', "RUNC"),
    ('[runtime]\nhook-path = "/x/low-level"\n', "RUNC"),
    ('runtime.low-level = ["crun"]\n', "FAKEPY"),
    ('[runtime]\n"low-level" = ["crun"]\n', "FAKEPY"),
    ('[runtime]\nlow-level = [\n  "crun",\n]\n', "FAKEPY"),
    ('[runtime]\nlow-level = ["cr\\u0075n"]\n', "FAKEPY"),
    ('[request]\nlow-level = ["crun"]\n', "FAKEPY"),
    ('[runtime]\nhook-path = """\nlow-level = ["crun"]\n"""\n', "FAKEPY"),
    ('["runtime"]\nlow-level = ["crun"]\n', "FAKEPY"),
    ("[runtime]\nlow-level = []\n", "FAKEPY"),
    ('[runtime]\nlow-level = ["nope"]\n', "FAKEPY"),
]


@pytest.mark.parametrize(("text", "expected"), SPELLINGS)
def test_native_launcher_reads_a_plain_low_level_list(tmp_path, text: str, expected: str) -> None:
    """What the native launcher execs is what the shim would choose (``runtimes_from_config``
    + ``find_low_level``); any other spelling is left to the shim's TOML parser."""
    from nvct.runtime.lowlevel import find_low_level, runtimes_from_config

    bindir = fake_tools(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(text.replace("{bin}", str(bindir)))
    out = tmp_path / "nvct-runtime"
    make_launcher("native", out, str(bindir / "fakepy"))
    env = {"PATH": f"{bindir}:/nonexistent", "NVCT_CONFIG": str(cfg)}
    assert call((out, env), "state", "id").split()[0] == expected
    if expected != "FAKEPY":
        old_path = os.environ["PATH"]
        os.environ["PATH"] = env["PATH"]
        try:
            chosen = find_low_level(runtimes_from_config(str(cfg)), str(out))
        finally:
            os.environ["PATH"] = old_path
        assert chosen is not None and Path(chosen).name.upper() == expected


def test_missing_config_json_goes_to_python_for_the_error(launcher, tmp_path) -> None:
    assert call(launcher, "create", "--bundle", str(tmp_path / "nope"), "id").startswith("FAKEPY")


def test_shell_launcher_is_an_executable_posix_sh_script(tmp_path) -> None:
    path = tmp_path / "nvct-runtime"
    install(path, "/usr/bin/python3")
    subprocess.run(["sh", "-n", str(path)], check=True)
    assert os.access(path, os.X_OK)


def test_native_launcher_carries_its_python_command_byte_for_byte(tmp_path, monkeypatch) -> None:
    """The shim's command is compiled in as C strings (quotes, backslashes, trigraph-like
    ``??=``, non-ASCII), and the C source builds with no warning."""
    monkeypatch.setenv("CFLAGS", "-Werror")
    argv_dump = tmp_path / "args"
    argv_dump.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done\n')
    argv_dump.chmod(0o755)
    odd = 'a "q" \\ b??= \u00e9'
    path = tmp_path / "nvct-runtime"
    make_launcher("native", path, f"{argv_dump} {shlex.quote(odd)}")
    b = bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    out = call((path, {"PATH": "/usr/bin:/bin"}), "create", "--bundle", str(b), "id")
    assert out.splitlines() == [f"[{odd}]", "[create]", "[--bundle]", f"[{b}]", "[id]"]


@pytest.mark.parametrize("kind", KINDS)
def test_launcher_made_for_a_config_uses_and_exports_it(tmp_path, kind: str) -> None:
    """One launcher per config (no docker runtimeArgs): its config is the default, exported to
    the Python shim; NVCT_CONFIG and --nvct-config still win."""
    bindir = fake_tools(tmp_path)
    cfg = tmp_path / "my config.toml"
    cfg.write_text('runtime.low-level = ["crun"]\n')  # only Python reads a dotted key
    out = tmp_path / "nvct-runtime-mine"
    make_launcher(kind, out, str(bindir / "fakepy"), str(cfg))
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    assert call((out, env), "state", "id") == f"FAKEPY state id NVCT_CONFIG={cfg}"
    other = tmp_path / "other.toml"
    other.write_text("")
    assert call((out, {**env, "NVCT_CONFIG": str(other)}), "state", "id") == (
        f"RUNC state id NVCT_CONFIG={other}"
    )
    assert call((out, env), "--nvct-config", str(other), "state", "id") == (
        f"RUNC state id NVCT_CONFIG={other}"
    )
    default = tmp_path / "nvct-runtime"
    make_launcher(kind, default, str(bindir / "fakepy"))
    assert call((default, env), "state", "id") == "RUNC state id NVCT_CONFIG="


def test_runc_anywhere_comes_before_crun(launcher, tmp_path) -> None:
    """Both launchers look as the shim does: each name through every directory in turn."""
    path, env = launcher
    first = tmp_path / "first"
    first.mkdir()
    crun = first / "crun"
    crun.write_text('#!/bin/sh\necho "EARLY-CRUN $*"\n')
    crun.chmod(0o755)
    env = {**env, "PATH": f"{first}:{env['PATH']}"}
    assert call((path, env), "state", "id").startswith("RUNC state id")


# --- The lists both launchers take from the shim's constants (nvct.runtime.launch.tables) ----


@pytest.mark.parametrize("marker", tables.gpu_markers())
def test_each_gpu_marker_of_the_shim_sends_a_create_to_python(launcher, tmp_path, marker) -> None:
    """A launcher built now carries every marker the shim's request inputs define: a spec
    holding any one of them reaches the shim (a dropped one would start a GPU container
    without its GPUs)."""
    b = bundle(tmp_path, [f"X={marker}"])
    assert call(launcher, "create", "--bundle", str(b), "id").startswith("FAKEPY")


def test_each_runc_value_flag_of_the_shim_is_skipped_with_its_value(launcher, tmp_path) -> None:
    """Every global value flag, in both spellings, consumes its value (which is no
    subcommand), and every subcommand value flag consumes its value (which is no bundle)."""
    gpu = bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    plain = tmp_path / "plain"  # the working directory: the bundle when none is named
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"process": {"env": ["PATH=/bin"]}}))
    for flag in tables.global_value_flags():
        for form in (flag, flag[1:]):
            out = call(launcher, form, "create", "state", "id")
            assert out.startswith(f"RUNC {form} create state id"), (form, out)
    for flag in tables.sub_value_flags():
        out = call(launcher, "create", flag, str(gpu), "id", cwd=plain)
        assert out.startswith("RUNC"), (flag, out)  # the value named no bundle
    for flag in tables.bundle_flags():
        for form in (flag, flag[1:]):
            assert call(launcher, "create", form, str(gpu), "id").startswith("FAKEPY"), form
            assert call(launcher, "create", f"{form}={gpu}", "id").startswith("FAKEPY"), form


def test_the_launcher_sources_hold_no_copy_of_the_shims_lists() -> None:
    """launcher.c, hook.c, client.h and launcher.sh name none of the generated strings
    themselves."""
    sources = (build.SOURCE, build.HOOK_SOURCE, Path(build.SOURCE).parent / "client.h")
    text = "\n".join(Path(p).read_text() for p in sources)
    source = re.sub(r"/\*.*?\*/", "", re.sub(r"#define PROGRAM .*", "", text), flags=re.DOTALL)
    script = (Path(build.SOURCE).parent / "launcher.sh").read_text().splitlines()
    template = "\n".join(line for line in script if not line.lstrip().startswith("#"))
    words = (*tables.gpu_markers(), *tables.global_value_flags(), *tables.sub_value_flags())
    for text in (*words, *tables.search_dirs(), *tables.runtimes()):
        assert f'"{text}"' not in source, text
        # as a word of the script (the shebang's /bin/sh is not a search directory)
        assert not re.search(rf"(?<![\w/!-]){re.escape(text)}(?![\w/-])", template), text
