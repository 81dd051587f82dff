/* Shared by the simulated libnvidia-ml, libcuda and nvidia-smi: the compiled-in GPU table
 * (simdata.h, generated from a SimDriverSpec) and the device-node visibility rule.
 *
 * Visibility, like the real driver stack: a GPU is visible only if <devdir>/nvidia<minor>
 * exists, a MIG device only if both of its /dev/nvidia-caps/nvidia-cap<N> nodes exist, and
 * nothing works without <devdir>/nvidiactl. <devdir> is $NVCT_SIM_DEV_ROOT/dev when that is
 * set, else <build-time dev root>/dev when that directory exists (the host), else /dev (a
 * container, where the host's temporary path does not exist).
 */
#ifndef SIMCOMMON_H
#define SIMCOMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    unsigned minor;
    const char *uuid;
    const char *bus_id;        /* NVML form: 00000000:3B:00.0 */
    const char *bus_id_legacy; /* 0000:3B:00.0 */
    const char *name;
    const char *serial;
    const char *part_number;
    unsigned brand;
    unsigned arch;
    int cc_major, cc_minor;
    unsigned long long memory_mib;
    unsigned domain, bus, device;
    unsigned pci_device_id, pci_subsystem_id;
    int mig_capable;
    int mig_enabled;
    int mig_first, mig_count; /* slice of sim_migs */
    int numa_node;            /* -1: none */
    int pci_switch;           /* -1: directly on a root port */
    int host_bridge;
    int link_first, link_count; /* slice of sim_nvlinks */
    unsigned long long events;  /* nvmlDeviceGetSupportedEventTypes; 0: NOT_SUPPORTED */
    int row_remapping;          /* nvmlDeviceGetRemappedRows answers */
    int page_retirement;        /* nvmlDeviceGetRetiredPagesPendingStatus answers */
    unsigned virtualization;    /* nvmlDeviceGetVirtualizationMode: 0 none (bare metal) */
    int fabric;                 /* on an NVLink fabric: nvmlDeviceGetGpuFabricInfo answers */
    unsigned char cluster_uuid[16];
    unsigned clique_id;
    int memory_temp; /* NVML_FI_DEV_MEMORY_TEMP answers (HBM parts) */
    int gpm;         /* GPU performance monitoring (nvmlGpm*): Hopper and newer */
} sim_gpu_t;

typedef struct {
    unsigned domain, bus, device; /* the far end of the link */
    int gpu;                      /* its sim_gpus index, or -1 for an NVSwitch */
} sim_nvlink_t;

typedef struct {
    int gpu; /* index into sim_gpus */
    unsigned gi, ci;
    const char *uuid;
    const char *profile;
    const char *name;
    unsigned long long memory_mib;
    unsigned gi_minor, ci_minor;
    /* nvmlDeviceGetAttributes_v2: SMs, copy/decoder/encoder/JPEG/OFA engines, slices */
    struct {
        unsigned sms, copy, decoder, encoder, jpeg, ofa, slices;
    } attr;
} sim_mig_t;

#include "simdata.h"

static int sim_vis_gpu[SIM_NGPUS + 1]; /* visible GPU table indices, in minor order */
static unsigned sim_nvis;
static int sim_vis_mig[SIM_NMIGS + 1]; /* 1 if that MIG device is visible */

static void sim_dev_dir(char *out, size_t n)
{
    const char *env = getenv("NVCT_SIM_DEV_ROOT");

    if (env != NULL && env[0] != '\0') {
        snprintf(out, n, "%s/dev", env);
        return;
    }
    snprintf(out, n, "%s/dev", SIM_BUILD_DEV_ROOT);
    if (access(out, F_OK) == 0) /* access(), not stat(): stat needs GLIBC_2.33 */
        return;
    snprintf(out, n, "/dev");
}

static int sim_node_exists(const char *dir, const char *fmt, unsigned n)
{
    char path[4608], name[64];

    snprintf(name, sizeof(name), fmt, n);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Returns 0, or -1 when the driver looks unloaded (no nvidiactl). */
static int sim_scan(void)
{
    char dir[4096];
    int i;

    sim_dev_dir(dir, sizeof(dir));
    sim_nvis = 0;
    for (i = 0; i < SIM_NMIGS; i++)
        sim_vis_mig[i] = 0;
    if (!sim_node_exists(dir, "nvidiactl", 0))
        return -1;
    for (i = 0; i < SIM_NGPUS; i++) /* the table is sorted by minor */
        if (sim_node_exists(dir, "nvidia%u", sim_gpus[i].minor))
            sim_vis_gpu[sim_nvis++] = i;
    for (i = 0; i < SIM_NMIGS; i++)
        sim_vis_mig[i] = sim_node_exists(dir, "nvidia-caps/nvidia-cap%u", sim_migs[i].gi_minor) &&
                         sim_node_exists(dir, "nvidia-caps/nvidia-cap%u", sim_migs[i].ci_minor);
    return 0;
}

#endif
