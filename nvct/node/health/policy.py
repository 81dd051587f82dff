"""What an event, or NVML's memory-health answers, mean for a GPU, and when it may be used
again: one policy for nvct-device-plugin (what the kubelet is told) and the exporter (its
health gauge), so both say the same thing for the same reason.

- An XID in ``ignored-xids`` changes nothing (the configuration's word; NVIDIA's plugin ignores
  13, 31, 43, 45, 68 and 109 by default, and so does nvct).
- Any other XID makes its devices Unhealthy. NVIDIA's catalogue (``xids``) decides how long:
  an XID whose immediate action is a GPU reset, a node or VM reboot, or an NVLink / double-bit
  ECC workflow (which end in a reset) holds the GPU until it was reset (``RESET``); every other
  one (restart the application, ignore, contact support, unknown) until ``quiet-period``
  passed without another error (``TRANSIENT``). A double-bit ECC event is XID 48's case.
- "Was reset" is NVML's word, where the driver reports the GPU recovery-action field
  (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``): the action is NONE, no row remap is pending and no
  retired page is pending. A driver that does not report the field cannot say; then a held GPU
  stays Unhealthy until the node reboots (a new boot id) or an operator clears it
  (``nvct-cli device-plugin-health clear``), after resetting it.
- The recovery-action field itself, when it asks for anything, makes the GPU Unhealthy for as
  long as it asks. A row-remapping failure (the GPU needs service) holds it until an operator
  clears it (``SERVICE``), reboots included.

Note: the catalogue puts 109 (context-switch timeout) under RESET_GPU, while the default
``ignored-xids`` keeps NVIDIA's plugin's choice and ignores it (it is mostly an application
that hogs a context). Where the driver reports the recovery-action field, a 109 that really
needs a reset still makes the GPU Unhealthy through that field. Remove 109 from
``ignored-xids`` to hold the GPU on every 109.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvct.node.health.xids import CATALOG

TRANSIENT = "transient"  # over after the quiet period
RESET = "reset"  # over once NVML says the GPU was reset (and the quiet period passed)
SERVICE = "service"  # over only when an operator clears it

_ACTIONS = {
    "RESET_GPU": (RESET, "reset the GPU"),
    "RESTART_BM": (RESET, "reboot the node"),
    "RESTART_VM": (RESET, "restart the VM"),
    "WORKFLOW_XID_48": (RESET, "reset the GPU to remap the row"),
    "WORKFLOW_NVLINK_ERR": (RESET, "reset the GPU and its NVLinks"),
    "WORKFLOW_NVLINK5_ERR": (RESET, "reset the GPU and its NVLinks"),
    "RESTART_APP": (TRANSIENT, "restart the application"),
    "IGNORE": (TRANSIENT, "no action"),
    "WORKFLOW_XID_45": (TRANSIENT, "no action"),
    "CONTACT_SUPPORT": (TRANSIENT, "contact support if it persists"),
    "CHECK_MECHANICALS": (TRANSIENT, "check power and cooling"),
    "UPDATE_SWFW": (TRANSIENT, "update driver and firmware"),
    "CHECK_UVM": (TRANSIENT, "check the UVM driver"),
    "FOLLOW_RECOVERY_ACTION": (TRANSIENT, "follow NVML's recovery action"),
}

DOUBLE_BIT_ECC_XID = 48

# NVML's nvmlDeviceGpuRecoveryAction_t
RECOVERY_ACTIONS = {
    0: "none",
    1: "GPU reset",
    2: "node reboot",
    3: "drain P2P",
    4: "drain and reset",
    5: "recover IMEX domain",
    6: "bus reset",
    7: "system reboot",
}


@dataclass(frozen=True, slots=True)
class Effect:
    """What one event does to its devices: ``counts`` (False: ignored by configuration), how
    long it holds them (``TRANSIENT``/``RESET``/``SERVICE``) and the reason shown."""

    counts: bool
    hold: str
    reason: str


def xid_effect(code: int, ignored: frozenset[int] | tuple[int, ...]) -> Effect:
    """The effect of XID ``code`` under ``ignored`` (the configured ``ignored-xids``)."""
    name, action = CATALOG.get(code, ("", ""))
    hold, advice = _ACTIONS.get(action, (TRANSIENT, "not in NVIDIA's catalogue"))
    label = f"XID {code} ({name})" if name else f"XID {code}"
    return Effect(code not in ignored, hold, f"{label}: {advice}")


def double_bit_ecc() -> Effect:
    """A double-bit ECC event: the driver's XID 48."""
    return Effect(True, RESET, "double-bit ECC error: reset the GPU to remap the row")


def remap_failure() -> Effect:
    """Row remapping failed: the GPU has used up its spare rows and needs service."""
    return Effect(True, SERVICE, "row remapping failed: the GPU needs service")


@dataclass(frozen=True, slots=True)
class GpuCondition:
    """NVML's memory-health answers for one GPU; None where the GPU or driver does not report
    them (NOT_SUPPORTED)."""

    recovery_action: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pending: bool | None = None

    @property
    def was_reset(self) -> bool:
        """NVML says the GPU can be used again: recovery action NONE, nothing pending. False
        where the driver does not report the recovery action (it cannot say)."""
        return self.recovery_action == 0 and not self.remap_pending and not self.retired_pending

    def asks(self) -> str:
        """Why the recovery-action field keeps the GPU Unhealthy now ("" when it does not)."""
        if not self.recovery_action:
            return ""
        name = RECOVERY_ACTIONS.get(self.recovery_action, str(self.recovery_action))
        return f"NVML recovery action: {name}"


def holds(hold: str, since: float, now: float, *, quiet: float, condition: GpuCondition) -> bool:
    """Whether an effect held since ``since`` still keeps its GPU Unhealthy at ``now``."""
    if hold == SERVICE:
        return True
    if hold == RESET and not condition.was_reset:
        return True
    return now - since < quiet
