"""``nvct-config-manager``: NVIDIA's config-manager flags and environment names, same rules.

Logs are JSON lines on stdout (the container's log); errors also go to stderr as one line.
Exit: 0 after a oneshot update or on SIGTERM; 1 when the oneshot update fails or the API
server refuses our token or rules; 2 for bad flags.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog

from nvct.base.errors import NvctError
from nvct.base.log import configure_stdout_structlog
from nvct.configmanager.apply import apply
from nvct.configmanager.choose import EMPTY, check_fallbacks, choose, entries
from nvct.configmanager.processes import send
from nvct.kubeapi.client.access import SERVICE_ACCOUNT_DIR, ClusterAccess
from nvct.kubeapi.client.errors import KubeApiError

NAME = "nvct-config-manager"
DEFAULT_LABEL = "nvidia.com/device-plugin.config"
# nvct's plugin; NVIDIA's default is nvidia-device-plugin (PROCESS_TO_SIGNAL names either).
DEFAULT_PROCESS = "nvct-device-plugin"
# How often the chosen entry is read again: a ConfigMap edit (the kubelet swaps the mounted
# files) reaches the plugin without a label change.
RECHECK_S = 1.0

log = structlog.get_logger(NAME)


def error(message: str) -> None:
    """Log an error, and say it on stderr as one line."""
    log.error("error", error=message)
    print(f"{NAME}: error: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Settings:
    oneshot: bool
    node_name: str
    node_label: str
    srcdir: Path
    dst: Path
    default_config: str
    fallbacks: tuple[str, ...]
    send_signal: bool
    signum: int
    process: str


class Manager:
    """Applies label values as they come; remembers the last one and the last error said."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.label: str | None = None
        self._said = ""

    def update(self, label: str) -> None:
        """Choose, write, signal; NvctError when any step fails (the file is then as before)."""
        s = self.s
        entry = choose(label, entries(s.srcdir), s.default_config, s.fallbacks)
        if not apply(s.srcdir, entry, s.dst):
            return
        log.info("config_updated", label=label or None, config=entry or "(empty)", dst=str(s.dst))
        if s.send_signal:
            pids = send(s.process, s.signum)
            log.info("signalled", process=s.process, pids=pids, signal=s.signum)

    def settle(self, label: str) -> bool:
        """``update``, saying an error once (not on every recheck); whether it succeeded."""
        if label != self.label:
            log.info("label", label=self.s.node_label, value=label or None)
        self.label = label
        try:
            self.update(label)
        except NvctError as err:
            if err.one_line() != self._said:
                error(err.one_line())
                self._said = err.one_line()
            return False
        self._said = ""
        return True


def _watch(access: ClusterAccess, settings: Settings, values: queue.Queue[Any]) -> None:
    """The Node's label values into ``values``; a fatal KubeApiError as the last item."""
    from lightkube.resources.core_v1 import Node

    from nvct.kubeapi.client.reflect import Reflector

    def label_of(node: Any) -> str:
        return str((node.metadata.labels or {}).get(settings.node_label, ""))

    def synced(nodes: list[Any]) -> None:
        values.put(label_of(nodes[0]) if nodes else EMPTY)

    def event(kind: str, node: Any) -> None:
        values.put(EMPTY if kind == "DELETED" else label_of(node))

    def retried(err: KubeApiError) -> None:
        log.warning("api_retry", error=err.one_line())

    try:
        client = access.connect()
        Reflector(
            client,
            Node,
            access.server(),
            access.token_file,
            on_sync=synced,
            on_event=event,
            on_error=retried,
            fields={"metadata.name": settings.node_name},
        ).run()
    except KubeApiError as err:
        values.put(err)
    except Exception as err:  # a bug: said, and the process exits (the pod restarts us)
        values.put(KubeApiError(f"the node watch crashed: {err!r}"))


def run(access: ClusterAccess, settings: Settings) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    values: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=_watch, args=(access, settings, values), daemon=True).start()
    manager = Manager(settings)
    log.info("waiting", label=settings.node_label, node=settings.node_name)
    while not stop.is_set():
        try:
            value = values.get(timeout=RECHECK_S)
        except queue.Empty:
            if manager.label is not None:
                manager.settle(manager.label)  # the ConfigMap's files may have changed
            continue
        while not values.empty():  # only the newest value matters
            value = values.get_nowait()
        if isinstance(value, KubeApiError):
            error(value.one_line())
            return 1
        ok = manager.settle(value)
        if settings.oneshot:
            return 0 if ok else 1
    log.info("stopped")
    return 0


def _fallbacks(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> Any:
    """Repeated flags and the comma list of FALLBACK_STRATEGIES alike."""
    return tuple(f.strip() for v in value for f in v.split(",") if f.strip())


@click.command(NAME)
@click.option(
    "--oneshot/--no-oneshot",
    envvar="ONESHOT",
    default=False,
    help="check and update the config only once and then exit",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default="",
    help="absolute path to the kubeconfig file (default: in-cluster)",
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default="",
    help="the name of the node to watch for label changes on",
)
@click.option(
    "--node-label",
    envvar="NODE_LABEL",
    default=DEFAULT_LABEL,
    help="the name of the node label to use for selecting a config",
)
@click.option(
    "--config-file-srcdir",
    envvar="CONFIG_FILE_SRCDIR",
    default="",
    help="the directory holding the available configs (the mounted ConfigMap)",
)
@click.option(
    "--config-file-dst",
    envvar="CONFIG_FILE_DST",
    default="",
    help="the config file the plugin reads",
)
@click.option(
    "--default-config",
    envvar="DEFAULT_CONFIG",
    default="",
    help="the config to use when no label is set",
)
@click.option(
    "--fallback-strategies",
    envvar="FALLBACK_STRATEGIES",
    multiple=True,
    callback=_fallbacks,
    help="ordered fallbacks when no label and no default: named, single, empty",
)
@click.option(
    "--send-signal/--no-send-signal",
    envvar="SEND_SIGNAL",
    default=True,
    help="signal <process-to-signal> once the config changed",
)
@click.option(
    "--signal",
    "signum",
    envvar="SIGNAL",
    type=int,
    default=int(signal.SIGHUP),
    help="the signal to send (default 1, SIGHUP)",
)
@click.option(
    "--process-to-signal",
    envvar="PROCESS_TO_SIGNAL",
    default=DEFAULT_PROCESS,
    help="the name of the process to signal",
)
@click.option(
    "--service-account-dir",
    envvar="NVCT_SERVICE_ACCOUNT_DIR",
    default=SERVICE_ACCOUNT_DIR,
    help="the in-cluster token and CA (tests move it)",
)
def cli(**flags: Any) -> int:  # fmt: skip
    """Write the config its Node's label names where the device plugin reads it, and signal
    the plugin."""
    try:
        settings = _settings(flags)
    except NvctError as err:
        error(err.one_line())
        return 2
    access = ClusterAccess(flags["kubeconfig"], flags["service_account_dir"])
    return run(access, settings)


def _settings(flags: dict[str, Any]) -> Settings:
    for flag, env in (
        ("node_name", "NODE_NAME"),
        ("node_label", "NODE_LABEL"),
        ("config_file_srcdir", "CONFIG_FILE_SRCDIR"),
        ("config_file_dst", "CONFIG_FILE_DST"),
    ):
        if not flags[flag]:
            option = "--" + flag.replace("_", "-")
            raise NvctError(f"{option} is empty", hint=f"set {option} or {env}")
    fallbacks = flags["fallback_strategies"]
    check_fallbacks(fallbacks)
    if flags["send_signal"] and not flags["process_to_signal"]:
        raise NvctError(
            "--process-to-signal is empty", hint="set PROCESS_TO_SIGNAL, or SEND_SIGNAL=false"
        )
    return Settings(
        oneshot=flags["oneshot"],
        node_name=flags["node_name"],
        node_label=flags["node_label"],
        srcdir=Path(flags["config_file_srcdir"]),
        dst=Path(flags["config_file_dst"]),
        default_config=flags["default_config"],
        fallbacks=fallbacks,
        send_signal=flags["send_signal"],
        signum=flags["signum"],
        process=flags["process_to_signal"],
    )


# NVIDIA's boolean flags (urfave/cli) also take a value: --oneshot=false.
BOOL_FLAGS = ("--oneshot", "--send-signal")


def nvidia_bool_flags(args: list[str]) -> list[str]:
    """``--oneshot=true``/``--oneshot=false`` as click's ``--oneshot``/``--no-oneshot``."""
    out = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        if sep and flag in BOOL_FLAGS and value.lower() in ("true", "false", "1", "0"):
            out.append(flag if value.lower() in ("true", "1") else "--no-" + flag[2:])
        else:
            out.append(arg)
    return out


def main() -> None:
    """The console script: click's usage errors as one line too."""
    configure_stdout_structlog()
    try:
        code = cli.main(nvidia_bool_flags(sys.argv[1:]), standalone_mode=False)
    except click.UsageError as err:
        error(f"{err.format_message()} (fix: see {NAME} --help)")
        code = 2
    except click.exceptions.Abort:
        code = 1
    sys.exit(int(code or 0))


if __name__ == "__main__":
    main()
