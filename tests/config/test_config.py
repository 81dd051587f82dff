"""nvct's config.toml: documented defaults, validation errors, lookup order."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvct.base.errors import ConfigError
from nvct.config import Config, load_config, parse_config
from nvct.config.container import CAPABILITIES, Cdi, Inject, Log, RequestRules, Runtime

SHIPPED = Path(__file__).parent.parent.parent / "config" / "config.toml"


def test_shipped_file_is_all_comments_and_matches_the_code_defaults() -> None:
    raw = SHIPPED.read_bytes()
    assert parse_config(raw, source="shipped") == Config()
    uncommented = re.sub(rb"(?m)^#([a-z])", rb"\1", raw)
    assert uncommented != raw
    assert parse_config(uncommented, source="uncommented") == Config()


def test_every_schema_key_is_documented() -> None:
    from nvct.config import config_schema

    text = SHIPPED.read_text()

    def documented(table: str, properties: dict[str, Any]) -> None:
        for key, schema in properties.items():
            name = f"{table}.{key}".lstrip(".")
            if schema.get("type") == "object":
                assert f"[{name}]" in text, name
                documented(name, schema["properties"])
            elif schema.get("type") == "array" and schema["items"].get("type") == "object":
                assert f"[[{name}]]" in text, name  # an example, commented out
                for sub in schema["items"]["properties"]:
                    assert re.search(rf"(?m)^# {re.escape(sub)} = ", text), f"{name}.{sub}"
            else:
                assert re.search(rf"(?m)^#{re.escape(key)} = ", text), name

    documented("", config_schema()["properties"])


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("driver-rot = '/'", r"unknown key 'driver-rot'.*allowed keys here: cache-dir"),
        ("[inject]\ngsp = true", r"unknown key \[inject\] 'gsp'"),
        ("[inject]\ngsp-firmware = 'yes'", r"inject.gsp-firmware.*true or false"),
        ("driver-root = 'relative'", r"driver-root.*absolute path"),
        ("[request]\ndefault-capabilities = ['gaming']", r"one of utility, compute"),
        ("[log]\nlevel = 3", r"log.level"),
        ("[runtime]\nlow-level = []", r"runtime.low-level"),
        ("[exporter]\nport = 70000", r"exporter.port"),
        (
            "[exporter]\npod-resources-socket = 'kubelet.sock'",
            r"exporter.pod-resources-socket.*absolute",
        ),
        ("[exporter]\nlisten = ':9400'", r"unknown key \[exporter\] 'listen'.*address"),
        ("x = [", r"invalid TOML"),
        (
            "[request]\nswarm-resource = ['GPUS']",
            r"request.swarm-resource.0.*fix: expected a Swarm resource variable, DOCKER_RESOURCE_",
        ),
    ],
)
def test_errors_name_file_key_and_allowed_values(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(toml.encode(), source="/etc/nvct/config.toml")
    assert err.value.one_line().startswith("/etc/nvct/config.toml: ")
    assert "\n" not in err.value.one_line()


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / "env.toml"
    env_file.write_text("[log]\nlevel = 'debug'\n")
    flag_file = tmp_path / "flag.toml"
    flag_file.write_text("[log]\nlevel = 'error'\n")
    monkeypatch.setenv("NVCT_CONFIG", str(env_file))
    assert load_config(use_cache=False).log.level == "debug"
    assert load_config(str(flag_file), use_cache=False).log.level == "error"
    monkeypatch.setenv("NVCT_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(use_cache=False)


def test_validation_is_remembered_per_content(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"cache-dir = '{tmp_path / 'cache'}'\n[log]\nlevel = 'debug'\n")
    assert load_config(str(cfg)).log.level == "debug"
    assert list((tmp_path / "cache").glob("config-*.ok"))
    cfg.write_text(f"cache-dir = '{tmp_path / 'cache'}'\n[log]\nlevel = 'loud'\n")
    with pytest.raises(ConfigError, match=r"log\.level"):
        load_config(str(cfg))


@given(st.text(max_size=200))
def test_fuzz_only_config_errors(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_config(text.encode(), source="f")


@given(
    st.dictionaries(
        st.sampled_from(["driver-root", "ldconfig", "cache-dir", "log", "inject"]),
        st.one_of(
            st.integers(), st.text(max_size=10), st.booleans(), st.lists(st.integers(), max_size=2)
        ),
    )
)
def test_fuzz_wrong_types_are_config_errors(data) -> None:
    import tomlkit

    try:
        raw = tomlkit.dumps(data).encode()
    except Exception:
        return
    with contextlib.suppress(ConfigError):
        parse_config(raw, source="f")


def test_with_table_sets_a_sections_keys_validated_as_a_files() -> None:
    """Settings recorded elsewhere (the device plugin's status file) applied to a Config."""
    from nvct.config import with_table

    base = Config(log=Log(level="debug"))
    table = {"mig-strategy": "mixed", "device-list-strategy": ["envvar"], "ignored-xids": [48]}
    changed = with_table(base, "device-plugin", table, source="status")
    assert (
        changed.device_plugin.mig_strategy == "mixed"
        and changed.device_plugin.device_list_strategy == ("envvar",)
    )
    assert changed.device_plugin.ignored_xids == (48,) and changed.log.level == "debug"
    with pytest.raises(ConfigError, match=re.escape("status: key 'device-plugin.mig-strategy'")):
        with_table(base, "device-plugin", {"mig-strategy": "weird"}, source="status")


def test_every_container_key_loads_into_its_section() -> None:
    """Each key of the container path's tables and the top level reaches its field (TOML names
    differ from field names: swarm-resource is swarm_resources)."""
    raw = b"""driver-root = "/d"
dev-root = "/v"
proc-root = "/p"
ldconfig = "/l"
cache-dir = ""
[runtime]
low-level = ["crun"]
hook-path = "/h"
[request]
default-capabilities = ["video"]
accept-envvar-when-unprivileged = false
accept-volume-mounts = true
only-allocated-gpus = true
disable-require = true
swarm-resource = ["DOCKER_RESOURCE_R"]
[inject]
persistenced = false
fabricmanager = false
mps = false
gsp-firmware = false
proc-driver = "off"
cuda-compat = "off"
library-mounts = "files"
[cdi]
spec-dirs = ["/c"]
[log]
file = "/f"
level = "error"
"""
    config = parse_config(raw, source="f")
    assert (config.driver_root, config.dev_root, config.proc_root, config.ldconfig) == (
        Path("/d"), Path("/v"), Path("/p"), Path("/l"),
    )  # fmt: skip
    assert config.cache_dir == "" and config.runtime == Runtime(low_level=("crun",), hook_path="/h")
    assert config.request == RequestRules(
        default_capabilities=("video",), accept_envvar_when_unprivileged=False,
        accept_volume_mounts=True, only_allocated_gpus=True, disable_require=True,
        swarm_resources=("DOCKER_RESOURCE_R",),
    )  # fmt: skip
    assert config.inject == Inject(
        persistenced=False, fabricmanager=False, mps=False, gsp_firmware=False,
        proc_driver="off", cuda_compat="off", library_mounts="files",
    )  # fmt: skip
    assert config.cdi == Cdi(spec_dirs=("/c",)) and config.log == Log(file="/f", level="error")
    every = parse_config(b"[request]\ndefault-capabilities = ['all', 'video']\n", source="f")
    assert every.request.default_capabilities == CAPABILITIES


def test_every_swarm_resource_name_accepted_carries_a_launchers_marker() -> None:
    """A name the config accepts is one the launchers and the native hook look for before any
    Python runs (else a container asking through it would go to runc without its GPUs); the
    name Docker's own example gives Swarm's variable (a kind with a dash) is accepted."""
    from nvct.config import config_schema
    from nvct.runtime.launch.tables import request_markers

    names = ["DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA-GPU", "DOCKER_RESOURCE_gpu.a100"]
    config = parse_config(f"[request]\nswarm-resource = {names}".encode(), source="c")
    assert config.request.swarm_resources == tuple(names)
    items = config_schema()["properties"]["request"]["properties"]["swarm-resource"]["items"]
    prefix = items["pattern"].removeprefix("^").split("[", 1)[0]  # the literal start
    assert any(prefix.startswith(marker) for marker in request_markers()), prefix
