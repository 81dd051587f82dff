"""python -m integration.simdriver --preset h100x4-550 --out DIR [--dev-root DIR] [--json]"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .build import SimDriverError, build_driver
from .spec import PRESETS, preset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m integration.simdriver",
        description="Build a simulated NVIDIA driver root (needs root and gcc).",
    )
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--out", required=True, type=Path, help="driver root to create")
    parser.add_argument("--dev-root", type=Path, help="where dev/nvidia* go (default: --out)")
    parser.add_argument("--proc-root", type=Path, help="fake procfs (default: OUT/proc)")
    parser.add_argument(
        "--no-ipc", action="store_true", help="no persistenced/fabricmanager sockets"
    )
    parser.add_argument("--json", action="store_true", help="print the roots as JSON")
    args = parser.parse_args(argv)

    start = time.monotonic()
    try:
        driver = build_driver(
            preset(args.preset), args.out, args.dev_root, args.proc_root, ipc=not args.no_ipc
        )
    except SimDriverError as exc:
        print(f"simdriver: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - start
    if args.json:
        print(json.dumps(driver.to_json() | {"build_seconds": round(elapsed, 2)}, indent=2))
    else:
        print(f"driver_version {driver.spec.driver_version}")
        print(f"driver_root    {driver.driver_root}")
        print(f"dev_root       {driver.dev_root}")
        print(f"proc_root      {driver.proc_root}")
        print(f"lib_dir        {driver.lib_dir}")
        print(f"lib32_dir      {driver.lib32_dir or '-'}")
        print(f"built in       {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
