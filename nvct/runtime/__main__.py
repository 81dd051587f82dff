"""``nvct-runtime``: patch GPU containers' bundles on ``create``, exec runc for everything.

This module runs for every runtime call containerd makes (create, start, state, kill,
delete, ...), so at import it loads only ``os`` and ``sys``; the planning code is imported
only for ``create`` / ``run``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~6 ms to import; annotations are strings here
if TYPE_CHECKING:
    from nvct.runtime.args import RuncArgs


def main() -> int:
    """Entry point; returns only on error (success replaces the process with runc)."""
    import gc

    # This process lives until it execs runc: collecting cycles while a create's imports
    # allocate costs ~0.5 ms of CPU and frees nothing that matters.
    gc.disable()
    rc, runtime, argv = decide(sys.argv[0], sys.argv[1:])
    if runtime is None:
        return rc
    os.execv(runtime, [runtime, *argv])
    return 1  # pragma: no cover - execv does not return


def decide(
    myself: str, raw_args: list[str], via: str = "shim"
) -> tuple[int, str | None, list[str]]:
    """Prepare the bundle of a ``create``/``run`` and choose the low-level runtime.

    Returns the exit status (when there is nothing to exec), the runtime to exec (None on
    error, already reported) and runc's argv without nvct's own flags. ``myself`` (this
    shim's path) is never chosen as the runtime. The shim daemon calls this too, in a child
    with the launcher's working directory, environment and stderr (``nvct.runtime.launch.daemon``),
    with ``via="daemon"``: the create's log events say which did the work.
    """
    from nvct.runtime.args import parse_runc_args, strip_own_flags
    from nvct.runtime.lowlevel import find_low_level, runtimes_from_config

    config_file, argv = strip_own_flags(raw_args)
    args = parse_runc_args(argv)
    candidates = None
    if args.subcommand in ("create", "run"):
        rc, candidates = _create(args, config_file, via)
        if rc:
            return rc, None, argv
    if candidates is None:
        from nvct.base.defaults import config_path

        candidates = runtimes_from_config(config_path(config_file)[0])
    runtime = find_low_level(candidates, myself)
    if runtime is None:
        _fail(
            args.log_file,
            args.log_format,
            f"no low-level runtime found (tried {', '.join(candidates)})",
            "install runc or crun, or set [runtime] low-level in nvct's config.toml",
        )
        return 1, None, argv
    return 0, runtime, argv


def _create(
    args: RuncArgs, config_file: str | None, via: str
) -> tuple[int, tuple[str, ...] | None]:
    from nvct.base.log import EventLog
    from nvct.runtime.create import prepare_bundle

    log = EventLog("nvct-runtime", "")
    log.bind(via=via)
    try:
        return 0, prepare_bundle(args, config_file, log)
    except Exception as err:
        # Imported here: a create that raises none of nvct's errors never loads them (~0.2 ms).
        from nvct.base.errors import NvctError

        if not isinstance(err, NvctError):
            raise
        log.log("error", "create_refused", error=err.one_line())
        _fail(args.log_file, args.log_format, err.one_line(), None)
        return 1, None
    finally:
        log.flush()


def _fail(log_file: str, log_format: str, message: str, hint: str | None) -> None:
    """Report on stderr and in runc's --log file, where containerd reads runtime errors."""
    text = message + (f" (fix: {hint})" if hint else "")
    sys.stderr.write(f"nvct-runtime: error: {text}\n")
    if not log_file:
        return
    import json
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if log_format == "json":
        line = json.dumps({"level": "error", "msg": f"nvct-runtime: {text}", "time": stamp})
    else:
        line = f'time="{stamp}" level=error msg={json.dumps("nvct-runtime: " + text)}'
    try:
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
