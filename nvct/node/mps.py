"""MPS control daemons: started, limited and found again through their control pipe. One per
MPS-shared GPU for the device plugin (``nvct-cli mps-control`` runs them), one per claim for
``nvct-dra-plugin`` (its claim's GPUs, with the claim's limits per GPU).

The driver's ``nvidia-cuda-mps-control -d`` runs as on a host, with ``CUDA_VISIBLE_DEVICES`` the
GPU's UUID and its pipe and log directories under ``<mps-root>/<uuid>/``. Its clients' limits
(pinned device memory, active thread percentage) are set through the control pipe and read back:
a GPU is ready only when the daemon answers with them applied.

The daemon runs in a mount namespace of its own whose ``/dev/shm`` is ``<mps-root>/<uuid>/shm``:
MPS clients and server exchange POSIX shared memory there, so each container gets that same
directory as its ``/dev/shm`` (as NVIDIA mounts ``<mpsRoot>/shm``), and sees neither the host's
``/dev/shm`` nor another GPU's clients' segments.

Who owns the daemons: ``nvct-cli mps-control`` (``mps_control``), a process of its own (its own
DaemonSet, or a host service), never the device plugin. A container's processes die with it —
runc kills the whole cgroup when it deletes a container — so daemons started by the plugin died
with every plugin restart (a crash, an upgrade, a config change), and their clients' work with
them. The plugin only asks each daemon, through its pipe, for the limits it runs with
(``MpsProbe``). Pids are never the way to find a daemon again: the supervisor and the plugin
may live in different PID namespaces, and a pid file can outlive its process.

A new daemon answers on its pipe before its limits are set, with the driver's defaults (no
pinned-memory limit, 100% of the threads). So that the plugin tells "being started" from "runs
with other limits" (a config the two do not share), the supervisor removes
``<mps-root>/<uuid>/limits-applied`` before it starts or quits a daemon and writes it once the
daemon answers with its limits; the plugin asks a daemon nothing until that file is there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nvct.base.atomic import write_atomic
from nvct.base.errors import NvctError
from nvct.config import Config
from nvct.host.inventory import Inventory
from nvct.node.driverbin import driver_library_path
from nvct.node.sharing import MPS_CONTROL, Share, SharingConfigError, mps_control_binary

PID_FILE = "nvidia-cuda-mps-control.pid"
CONTAINER_ROOT = "/mps"  # where a container finds its GPU's pipe directory
CONTAINER_SHM = "/dev/shm"  # noqa: S108 - the container's POSIX shm, the daemon's shm directory
COMMAND_TIMEOUT_S = 5.0
GET_MEMORY = "get_default_device_pinned_mem_limit"
GET_THREADS = "get_default_active_thread_percentage"
START_TIMEOUT_S = 5.0
# The containers given a GPU's replicas mount its pipe and shm directories (CUDA clients connect
# to the daemon's sockets in one and share memory in the other); its log directory is root's
# alone (the daemons and the plugin, both root).
PIPE_MODE = 0o755
SHM_MODE = 0o755
LOG_MODE = 0o700
# The mount namespace: /dev/shm is the GPU's shm directory, then the daemon itself.
_LAUNCH = 'mount --bind -- "$1" /dev/shm && shift && exec "$@"'


class MpsError(NvctError):
    """An MPS control daemon cannot be started or does not take its limits."""


class MpsClientError(MpsError):
    """The control client failed (no daemon listening): the command was not taken."""


@dataclass(frozen=True, slots=True)
class MpsPaths:
    """Where one daemon keeps its pipe, log and shared memory: ``uuid`` is its GPU's UUID (the
    device plugin's daemons) or its claim's UID (a DRA claim's daemon)."""

    root: str
    uuid: str

    @property
    def base(self) -> str:
        """``<mps-root>/<uuid>``."""
        return f"{self.root.rstrip('/')}/{self.uuid}"

    @property
    def pipe(self) -> str:
        """The pipe directory (CUDA_MPS_PIPE_DIRECTORY)."""
        return f"{self.base}/pipe"

    @property
    def log(self) -> str:
        """The log directory (CUDA_MPS_LOG_DIRECTORY)."""
        return f"{self.base}/log"

    @property
    def shm(self) -> str:
        """The daemon's and its clients' /dev/shm."""
        return f"{self.base}/shm"

    @property
    def applied(self) -> str:
        """The file the supervisor writes once the daemon answers with its limits."""
        return f"{self.base}/limits-applied"

    @property
    def container_pipe(self) -> str:
        """The pipe directory as the container sees it."""
        return f"{CONTAINER_ROOT}/{self.uuid}/pipe"


class MpsDaemon:
    """The control daemon of one GPU (``paths.uuid``), or of ``devices`` (UUIDs) with a
    pinned-memory limit per device in ``limits`` (the daemon's device id: its index among
    ``devices``, or a UUID -> MiB; default ``{"0": pinned_memory_mib}``)."""

    def __init__(
        self,
        binary: Path,
        paths: MpsPaths,
        *,
        pinned_memory_mib: int = 0,
        threads: int,
        library_path: str = "",
        devices: Sequence[str] = (),
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self.binary = binary
        self.paths = paths
        self.pinned_memory_mib = pinned_memory_mib
        self.limits = dict(limits) if limits is not None else {"0": pinned_memory_mib}
        self.threads = threads
        self.pid: int | None = None
        self.adopted = False
        self.env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": ",".join(devices) or paths.uuid,
            "CUDA_MPS_PIPE_DIRECTORY": paths.pipe,
            "CUDA_MPS_LOG_DIRECTORY": paths.log,
        }
        if library_path:  # the driver's libraries where the plugin sees them (a pod)
            self.env["LD_LIBRARY_PATH"] = library_path

    def start(self) -> None:
        """Start the daemon (a stale one of this pipe directory is stopped first), apply the
        limits and read them back.

        Raises:
            MpsError: it did not start, or does not answer with the limits applied.
        """
        for directory, mode in (
            (self.paths.pipe, PIPE_MODE),
            (self.paths.log, LOG_MODE),
            (self.paths.shm, SHM_MODE),
        ):
            os.makedirs(directory, mode=mode, exist_ok=True)
            os.chmod(directory, mode)  # makedirs obeys the umask and keeps an old directory's
        answer = self.limits_answered()
        if answer is not None and self.answers_limits(answer):
            self.pid = self.visible_pid()  # an earlier supervisor's: kept, clients and all
            self.adopted = True
            self._mark_applied()
            return
        self._unmark_applied()  # before a daemon without our limits can answer there
        if answer is not None:  # other limits: replaced, so the config holds
            self.quit()
        stale = self._pid_file()
        if stale is not None and alive(stale) and is_control(stale):
            self.pid = stale  # an earlier one that no longer answers
            self.stop()
        self.adopted = False
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _LAUNCH]
        argv += ["nvct-mps", self.paths.shm, str(self.binary), "-d"]
        try:
            done = subprocess.run(
                argv,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise MpsError(f"{self.binary} -d for {self.paths.uuid}: {err}") from err
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
            root = "unshare" in said or "mount" in said
            raise MpsError(
                f"{self.binary} -d for {self.paths.uuid} failed: {said}",
                hint="run the plugin as root: each daemon gets a mount namespace for its /dev/shm"
                if root
                else f"check the driver's MPS (its log in {self.paths.log})",
            )
        self.pid = self._wait_pid()
        try:
            self._limits()
        except MpsError:
            self.stop()  # a daemon without its limits must not serve
            raise
        self._mark_applied()

    def _mark_applied(self) -> None:
        write_atomic(self.paths.applied, f"{self.describe_limits()}\n".encode(), durable=False)

    def _unmark_applied(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.paths.applied)

    def _limits(self) -> None:
        sets = [f"set_default_device_pinned_mem_limit {d} {m}M" for d, m in self.limits.items()]
        first, *rest = [*sets, f"set_default_active_thread_percentage {self.threads}"]
        self._first_command(first)
        for line in rest:
            self.command(line)
        answer = self.limits_answered()
        if answer is None or not self.answers_limits(answer):
            raise MpsError(
                f"the MPS daemon of {self.paths.uuid} answers {answer!r} (pinned memory per "
                f"device, active threads), not {self.describe_limits()}",
                hint="check the driver's MPS (its log in " + self.paths.log + ")",
            )

    def describe_limits(self) -> str:
        """The configured limits as messages say them."""
        memory = ", ".join(f"{d}: {m}M" for d, m in self.limits.items()) or "none"
        return f"pinned memory {memory} and {self.threads}% active threads"

    def command(self, line: str) -> str:
        """Send one control command; its answer.

        Raises:
            MpsError: the client failed or the daemon did not answer in time.
        """
        try:
            done = subprocess.run(
                [str(self.binary)],
                input=line + "\n",
                env=self.env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise MpsError(f"MPS command {line!r} for {self.paths.uuid}: {err}") from err
        if done.returncode != 0:
            said = " ".join(done.stderr.split()) or f"exit {done.returncode}"
            raise MpsClientError(f"MPS command {line!r} for {self.paths.uuid}: {said}")
        return done.stdout.strip()

    def _first_command(self, line: str) -> None:
        """The daemon writes its pid file before it listens: until it does, the client finds
        no daemon (the command is not delivered), so it is sent again, for a while."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self.command(line)
                return
            except MpsClientError:
                if time.monotonic() > deadline or not self.alive():
                    raise
            time.sleep(0.01)

    def alive(self) -> bool:
        """Whether the daemon still runs: by its pid where this process sees it, else by its
        pipe (an adopted daemon of another PID namespace)."""
        if self.pid is not None:
            return alive(self.pid)
        return self.adopted and self.limits_answered() is not None

    def answers_limits(self, answer: tuple[tuple[str, ...], float | None]) -> bool:
        """Whether a ``limits_answered`` answer is the configured limits."""
        memory, threads = answer
        return threads == self.threads and all(
            memory_limit_is(got, mib) for got, mib in zip(memory, self.limits.values(), strict=True)
        )

    def limits_answered(self) -> tuple[tuple[str, ...], float | None] | None:
        """(each limited device's pinned memory as the daemon prints it, the active thread
        percentage), in one client call; None when no daemon answers there."""
        if not os.path.exists(os.path.join(self.paths.pipe, "control")):
            return None
        asks = [f"{GET_MEMORY} {device}" for device in self.limits] + [GET_THREADS]
        try:
            answer = self.command("\n".join(asks))
        except MpsError:
            return None
        lines = answer.splitlines()
        if len(lines) != len(asks):
            return None
        return tuple(line.strip() for line in lines[:-1]), _number(lines[-1])

    def quit(self, timeout: float = 5.0) -> None:
        """``quit`` through the pipe and wait until nothing answers there (a daemon found by
        its pipe, whatever PID namespace it is in)."""
        self._unmark_applied()
        with contextlib.suppress(MpsError):
            self.command("quit")
        deadline = time.monotonic() + timeout
        while self.limits_answered() is not None and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self, timeout: float = 5.0) -> None:
        """``quit``, then SIGKILL if it is still there after ``timeout``."""
        self._unmark_applied()
        if self.pid is None:
            if self.adopted:
                self.quit(timeout)
                self.adopted = False
            return
        with contextlib.suppress(MpsError):
            self.command("quit")
        deadline = time.monotonic() + timeout
        while alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if alive(self.pid) and is_control(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            while alive(self.pid) and time.monotonic() < deadline + 1:
                time.sleep(0.02)
        self.pid = None

    def _pid_file(self) -> int | None:
        try:
            return int(Path(self.paths.pipe, PID_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def visible_pid(self) -> int | None:
        """The daemon's pid from its pid file when this process sees that very daemon."""
        pid = self._pid_file()
        return pid if pid is not None and alive(pid) and is_control(pid) else None

    def _wait_pid(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid = self._pid_file()
            if pid is not None and alive(pid):
                return pid
            time.sleep(0.01)
        raise MpsError(
            f"the MPS daemon of {self.paths.uuid} wrote no pid file in {self.paths.pipe}"
        )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; one that is our child is reaped)."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def is_control(pid: int) -> bool:
    """Whether ``pid`` runs nvidia-cuda-mps-control (a pid file can outlive its process, and
    the pid be reused by another one)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return os.path.basename(argv0) == MPS_CONTROL.encode()


def memory_limit_is(answer: str, mib: int) -> bool:
    """Whether the daemon's pinned-memory answer (``40960M``, ``39G``, ``40960``: MiB) is a
    limit of ``mib`` MiB. The daemon prints a limit in its largest unit, truncated: driver 580
    answers ``39G`` for ``40779M`` (39.8 GiB), so a whole number of a unit stands for
    everything up to the next one."""
    text = answer.strip().upper().removesuffix("B")
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(text[-1:], 1)
    try:
        number = float(text.rstrip("KMGT"))
    except ValueError:
        return False
    if number.is_integer():
        return number * scale <= mib < (number + 1) * scale
    return abs(number * scale - mib) < 1


def _number(answer: str) -> float | None:
    try:
        return float(answer.strip())
    except ValueError:
        return None


PROBE_EVERY_S = 0.5  # how often the plugin asks a daemon that answered before


class MpsProbe(MpsDaemon):
    """A GPU's daemon as the device plugin sees it: asked through its pipe for the limits it
    runs with, never started or stopped here (``nvct-cli mps-control`` owns it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answered_at = -float("inf")

    def start(self) -> None:
        """Whether the daemon answers with the configured limits (a probe starts nothing).

        Raises:
            MpsError: its supervisor has not applied the limits, no daemon answers on the
                pipe, or it runs with other limits.
        """
        if not os.path.exists(self.paths.applied):  # asked nothing: it may be starting
            raise MpsError(
                f"nvct-cli mps-control has not applied the limits of {self.paths.uuid}'s MPS "
                f"control daemon yet (no {self.paths.applied})",
                hint="run nvct-cli mps-control on this node with the device plugin's config "
                "(deployments/mps-control.yaml)",
            )
        answer = self.limits_answered()
        if answer is None:
            raise MpsError(
                f"no MPS control daemon answers in {self.paths.pipe}",
                hint="run nvct-cli mps-control on this node with the device plugin's config "
                "(deployments/mps-control.yaml)",
            )
        memory, threads = answer
        if not self.answers_limits(answer):
            raise MpsError(
                f"the MPS control daemon of {self.paths.uuid} runs with pinned memory "
                f"{', '.join(memory)} and {threads}% active threads, not "
                f"{self.describe_limits()}",
                hint="give nvct-cli mps-control the device plugin's config",
            )
        self._answered_at = time.monotonic()

    def alive(self) -> bool:
        """Whether the daemon answered with the limits within ``PROBE_EVERY_S``, or does now."""
        if time.monotonic() - self._answered_at < PROBE_EVERY_S:
            return True
        answer = self.limits_answered()
        if answer is not None and self.answers_limits(answer):
            self._answered_at = time.monotonic()
            return True
        return False

    def stop(self, timeout: float = 5.0) -> None:
        """Nothing: the daemon outlives the plugin."""


D = TypeVar("D", bound=MpsDaemon)


def gpu_daemons(
    kind: type[D], config: Config, inventory: Inventory, shares: Iterable[Share]
) -> list[D]:
    """One ``kind`` (a daemon to run, or a probe of one) per MPS-shared device of ``shares``.

    Raises:
        SharingConfigError: the driver root has no ``nvidia-cuda-mps-control``.
    """
    binary, library_path = mps_program(config, inventory)
    return [
        kind(
            binary,
            MpsPaths(config.device_plugin.sharing.mps_root, s.device.uuid),
            pinned_memory_mib=s.pinned_memory_mib,
            threads=s.active_thread_percentage,
            library_path=library_path,
        )
        for s in shares
        if s.strategy == "mps"
    ]


def mps_program(config: Config, inventory: Inventory) -> tuple[Path, str]:
    """The host driver's ``nvidia-cuda-mps-control`` (never a binary of an image) and the
    LD_LIBRARY_PATH its daemons need ("" where the driver root is /).

    Raises:
        SharingConfigError: the driver root has no ``nvidia-cuda-mps-control``.
    """
    binary = mps_control_binary(Path(config.driver_root))
    if binary is None:
        raise SharingConfigError(
            f"no nvidia-cuda-mps-control under {config.driver_root}",
            hint="install the driver's MPS control program, or use time-slicing",
        )
    # The daemon starts MPS servers that load libcuda.
    return binary, driver_library_path(config, inventory)
