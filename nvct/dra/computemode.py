"""The compute mode of a sharing claim's GPUs, set at prepare and set back at unprepare.

NVIDIA's DRA driver puts an MPS claim's GPUs (a MIG device's: its GPU) in
``EXCLUSIVE_PROCESS`` before it starts the claim's control daemon (only the MPS server then
makes contexts on them) and a time-sliced claim's GPUs in ``DEFAULT``, with the host driver's
``nvidia-smi -i <uuid> -c <mode>``. nvct sets the same modes the same way (``nvct.dra.smi``),
but first reads each GPU's mode (``--query-gpu=uuid,compute_mode``: one nvidia-smi for all,
no privilege) and only sets one that differs, so a time-sliced claim on a GPU left at DEFAULT
needs neither nvidia-smi's privilege nor a process per GPU; the mode it found is recorded so
unprepare gives the GPU back as it was (NVIDIA's driver leaves it as the claim had it).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import structlog

from nvct.dra.claim import ClaimError
from nvct.dra.smi import SmiError, run_smi

log = structlog.get_logger("nvct-dra-plugin")

DEFAULT = "DEFAULT"
EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"
# --query-gpu=compute_mode's words -> -c's
Record = tuple[str, str, str]  # (GPU UUID, the mode set, the mode before), as the checkpoint has it
_QUERIED = {
    "Default": DEFAULT,
    "Exclusive_Thread": "EXCLUSIVE_THREAD",
    "Prohibited": "PROHIBITED",
    "Exclusive_Process": EXCLUSIVE_PROCESS,
}


class ComputeModes:
    """Reads and sets GPUs' compute modes with the host driver's nvidia-smi."""

    def __init__(self, program: tuple[Path, str] | str) -> None:
        """``program``: nvidia-smi and the LD_LIBRARY_PATH it needs, or the one line saying
        why there is none (then a claim that needs a mode is refused with it)."""
        self.program = program

    def read(self, *, what: str) -> dict[str, str]:
        """Each GPU's compute mode by UUID (``-c``'s words).

        Raises:
            SmiError: no nvidia-smi, it failed, or it answered a mode nvct does not know.
        """
        out = run_smi(
            self.program, ["--query-gpu=uuid,compute_mode", "--format=csv,noheader"],
            what=what, instead="use no sharing config",
        )  # fmt: skip
        modes: dict[str, str] = {}
        for line in out.splitlines():
            uuid, _, word = (part.strip() for part in line.partition(","))
            if not uuid:
                continue
            if word not in _QUERIED:
                raise SmiError(f"nvidia-smi answered compute mode {word!r} for {uuid}")
            modes[uuid] = _QUERIED[word]
        return modes

    def set(self, uuids: Iterable[str], mode: str, *, what: str) -> None:
        """Put each GPU of ``uuids`` in compute ``mode``.

        Raises:
            SmiError: no nvidia-smi, or it refused or failed for a GPU.
        """
        for uuid in uuids:
            args = ["-i", uuid, "-c", mode]
            run_smi(self.program, args, what=what, instead="use no sharing config")
            log.info("compute_mode_set", gpu=uuid, mode=mode)

    def differing(self, wanted: Mapping[str, str], *, what: str) -> dict[str, str]:
        """The GPUs of ``wanted`` (UUID -> mode) whose mode differs, with the mode they have."""
        have = self.read(what=what)
        return {u: have.get(u, DEFAULT) for u, m in wanted.items() if have.get(u, DEFAULT) != m}

    def claim(
        self, wanted: Mapping[str, str], held: Mapping[str, Record], *, what: str
    ) -> tuple[Record, ...]:
        """Put the GPUs of ``wanted`` (UUID -> mode) in their modes; ``held``: the records of
        the other prepared claims by UUID (a GPU one of them holds keeps its mode and the mode
        before it). A failure sets the GPUs already done back.

        Raises:
            ClaimError: a GPU another claim holds in another mode.
            SmiError: nvidia-smi cannot read or set a mode.
        """
        for uuid, mode in wanted.items():
            if uuid in held and held[uuid][1] != mode:
                raise ClaimError(
                    f"{what}: GPU {uuid} is in compute mode {held[uuid][1]} for another "
                    f"prepared claim; this claim needs {mode}",
                    hint="give MIG devices of one GPU the same sharing strategy, or wait for "
                    "the other claim to end",
                )
        free = {u: m for u, m in wanted.items() if u not in held}
        before = self.differing(free, what=what) if free else {}
        done: list[Record] = []
        try:
            for uuid, mode in before.items():
                self.set([uuid], free[uuid], what=what)
                done.append((uuid, free[uuid], mode))
        except SmiError:
            self.give_back(done, set(), what=what, quiet=True)
            raise
        return tuple(held[u] if u in held else (u, m, before.get(u, m)) for u, m in wanted.items())

    def give_back(
        self, records: Iterable[Record], others: Collection[str], *, what: str, quiet: bool = False
    ) -> None:
        """Set each GPU of ``records`` back to the mode it had, where it was changed and no
        other claim (``others``: their GPUs' UUIDs) holds it.

        Raises:
            SmiError: nvidia-smi failed (``quiet``: logged instead, for a prepare that keeps
                its own error).
        """
        for uuid, mode, before in records:
            if before == mode or uuid in others:
                continue
            try:
                self.set([uuid], before, what=what)
            except SmiError as err:
                if not quiet:
                    raise
                log.warning("compute_mode_not_restored", gpu=uuid, error=err.one_line())

    def again(self, records: Iterable[Record], *, what: str) -> None:
        """Set the modes of ``records`` again where a GPU lost its (a driver reload or a
        reboot resets every GPU to DEFAULT).

        Raises:
            SmiError: nvidia-smi cannot read or set a mode.
        """
        wanted = {uuid: mode for uuid, mode, _ in records}
        for uuid in self.differing(wanted, what=what):
            self.set([uuid], wanted[uuid], what=what)
