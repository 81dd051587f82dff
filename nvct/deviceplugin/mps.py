"""One MPS control daemon per MPS-shared GPU: started, limited, watched and restarted.

The driver's ``nvidia-cuda-mps-control -d`` runs as on a host, with ``CUDA_VISIBLE_DEVICES`` the
GPU's UUID and its pipe and log directories under ``<mps-root>/<uuid>/``. Its clients' limits
(pinned device memory, active thread percentage) are set through the control pipe and read back:
a GPU is ready only when the daemon answers with them applied.

The daemon runs in a mount namespace of its own whose ``/dev/shm`` is ``<mps-root>/<uuid>/shm``:
MPS clients and server exchange POSIX shared memory there, so each container gets that same
directory as its ``/dev/shm`` (as NVIDIA mounts ``<mpsRoot>/shm``), and sees neither the host's
``/dev/shm`` nor another GPU's clients' segments.

The daemon forks away from the plugin, so it is watched by the pid in its pid file (a zombie
counts as dead; it is reaped when the plugin is its reaper, as PID 1 of a pod).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from nvct.base.errors import NvctError
from nvct.host.sharing import MPS_CONTROL

PID_FILE = "nvidia-cuda-mps-control.pid"
CONTAINER_ROOT = "/mps"  # where a container finds its GPU's pipe directory
CONTAINER_SHM = "/dev/shm"  # noqa: S108 - the container's POSIX shm, the daemon's shm directory
COMMAND_TIMEOUT_S = 5.0
START_TIMEOUT_S = 5.0
# The mount namespace: /dev/shm is the GPU's shm directory, then the daemon itself.
_LAUNCH = 'mount --bind -- "$1" /dev/shm && shift && exec "$@"'


class MpsError(NvctError):
    """An MPS control daemon cannot be started or does not take its limits."""


class MpsClientError(MpsError):
    """The control client failed (no daemon listening): the command was not taken."""


@dataclass(frozen=True, slots=True)
class MpsPaths:
    """Where one GPU's daemon keeps its pipe, log and shared memory."""

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
    def container_pipe(self) -> str:
        """The pipe directory as the container sees it."""
        return f"{CONTAINER_ROOT}/{self.uuid}/pipe"


class MpsDaemon:
    """The control daemon of one GPU."""

    def __init__(
        self,
        binary: Path,
        paths: MpsPaths,
        *,
        pinned_memory_mib: int,
        threads: int,
        library_path: str = "",
    ) -> None:
        self.binary = binary
        self.paths = paths
        self.pinned_memory_mib = pinned_memory_mib
        self.threads = threads
        self.pid: int | None = None
        self.env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": paths.uuid,
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
        for directory in (self.paths.pipe, self.paths.log, self.paths.shm):
            os.makedirs(directory, mode=0o755, exist_ok=True)
        stale = self._pid_file()
        if stale is not None and alive(stale) and is_control(stale):
            self.pid = stale  # a plugin before this one started it
            self.stop()
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

    def _limits(self) -> None:
        memory = f"{self.pinned_memory_mib}M"
        self._first_command(f"set_default_device_pinned_mem_limit 0 {memory}")
        self.command(f"set_default_active_thread_percentage {self.threads}")
        got_memory = self.command("get_default_device_pinned_mem_limit 0")
        got_threads = self.command("get_default_active_thread_percentage")
        if _mib(got_memory) != self.pinned_memory_mib or _number(got_threads) != self.threads:
            raise MpsError(
                f"the MPS daemon of {self.paths.uuid} answers pinned memory {got_memory!r} and "
                f"active threads {got_threads!r}, not {memory} and {self.threads}",
                hint="check the driver's MPS (its log in " + self.paths.log + ")",
            )

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
        """Whether the daemon still runs."""
        return self.pid is not None and alive(self.pid)

    def stop(self, timeout: float = 5.0) -> None:
        """``quit``, then SIGKILL if it is still there after ``timeout``."""
        if self.pid is None:
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


def _mib(answer: str) -> int | None:
    """``40960M`` / ``40G`` / ``40960`` (MiB) as MiB."""
    text = answer.strip().upper().removesuffix("B")
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(text[-1:], 1)
    try:
        return round(float(text.rstrip("KMGT")) * scale)
    except ValueError:
        return None


def _number(answer: str) -> float | None:
    try:
        return float(answer.strip())
    except ValueError:
        return None
