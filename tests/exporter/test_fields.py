"""The README's metric table is ``nvct.exporter.fields.COUNTERS``, and both are dcgm-exporter's
default counters (its ``etc/default-counters.csv`` at d5e5f51: 24 fields besides the XID gauge
and the driver-version label)."""

from __future__ import annotations

import re
from pathlib import Path

from nvct.exporter.fields import COUNTER, COUNTERS, GAUGE
from nvct.exporter.gpm import METRICS, PCIE
from nvct.exporter.probes import GPM_FIELDS, NVLINK, PROBES

README = Path(__file__).resolve().parents[2] / "README.md"
# dcgm-exporter's default-counters.csv (d5e5f51): uncommented rows but the XID gauge and label
DCGM_DEFAULTS = {
    "DCGM_FI_DEV_SM_CLOCK": GAUGE, "DCGM_FI_DEV_MEM_CLOCK": GAUGE,
    "DCGM_FI_DEV_MEMORY_TEMP": GAUGE, "DCGM_FI_DEV_GPU_TEMP": GAUGE,
    "DCGM_FI_DEV_POWER_USAGE": GAUGE, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": COUNTER,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": COUNTER, "DCGM_FI_DEV_GPU_UTIL": GAUGE,
    "DCGM_FI_DEV_MEM_COPY_UTIL": GAUGE, "DCGM_FI_DEV_ENC_UTIL": GAUGE,
    "DCGM_FI_DEV_DEC_UTIL": GAUGE, "DCGM_FI_DEV_FB_FREE": GAUGE, "DCGM_FI_DEV_FB_USED": GAUGE,
    "DCGM_FI_DEV_FB_RESERVED": GAUGE, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": GAUGE,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": GAUGE, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": COUNTER,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": COUNTER, "DCGM_FI_DEV_ROW_REMAP_FAILURE": GAUGE,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": GAUGE, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": GAUGE,
    "DCGM_FI_PROF_DRAM_ACTIVE": GAUGE, "DCGM_FI_PROF_PCIE_TX_BYTES": GAUGE,
    "DCGM_FI_PROF_PCIE_RX_BYTES": GAUGE,
}  # fmt: skip


def test_the_table_is_dcgm_exporters_defaults_with_their_types() -> None:
    assert {c.name: c.kind for c in COUNTERS} == DCGM_DEFAULTS


def test_every_counter_has_a_reader() -> None:
    read = {f for _, fields in PROBES.values() for f in fields}
    read |= set(GPM_FIELDS) | set(PCIE) | {NVLINK} | {f for f, _ in METRICS.values()}
    read |= {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED"}
    assert read == set(DCGM_DEFAULTS)


def test_the_readme_table_says_the_same() -> None:
    rows = re.findall(
        r"^\| `(DCGM_FI_\w+)` \| (\w+) \| ([^|]+) \| ([^|]+) \| (yes|no) \|$",
        README.read_text(),
        re.MULTILINE,
    )
    assert [(n, k, u.strip(), s.strip(), m == "yes") for n, k, u, s, m in rows] == [
        (c.name, c.kind, c.unit, c.source, c.per_mig) for c in COUNTERS
    ]
