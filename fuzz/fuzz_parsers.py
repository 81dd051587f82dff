"""atheris target: every parser of attacker-influenced input raises only nvct's own errors.

Run: ``python fuzz/fuzz_parsers.py -max_total_time=60`` (libFuzzer flags; add a corpus dir).
The first byte picks the parser, the rest is its input.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from nvct.base import fastjson
    from nvct.base.errors import NvctError
    from nvct.base.oci import check_spec_shape, parse_state
    from nvct.config import Config, parse_config
    from nvct.host.ldcache import parse_ldcache
    from nvct.plan.order_key import cache_dir_of
    from nvct.request.parse import request_from_spec
    from nvct.request.requirements import Facts, evaluate, parse_requirement
    from nvct.runtime.args import parse_runc_args, strip_own_flags

FACTS = Facts("12.4", "550.54.15", "9.0", "Nvidia")


def _spec(text: str) -> None:
    try:
        spec = fastjson.loads(text)
    except ValueError:
        return  # load_spec reports this as SpecError; here only the shape matters
    if isinstance(spec, dict):
        check_spec_shape(spec, "config.json")
        request_from_spec(spec, Config())


def _env(text: str) -> None:
    name, _, value = text.partition("\n")
    request_from_spec({"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={name}", value]}}, Config())


TARGETS = [
    parse_ldcache,
    parse_state,
    lambda data: parse_config(data, source="config.toml"),
    lambda data: _spec(data.decode("utf-8", "replace")),
    lambda data: _env(data.decode("utf-8", "replace")),
    lambda data: evaluate(parse_requirement(data.decode("utf-8", "replace"), source="R"), FACTS),
    lambda data: parse_runc_args(strip_own_flags(data.decode("utf-8", "replace").split("\0"))[1]),
    cache_dir_of,
]


def test_one_input(data: bytes) -> None:
    if not data:
        return
    with contextlib.suppress(NvctError):
        TARGETS[data[0] % len(TARGETS)](data[1:])


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
