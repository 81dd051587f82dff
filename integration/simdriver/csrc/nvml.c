/* Simulated libnvidia-ml.so.1: answers NVML queries from the compiled-in GPU table. */
#define _GNU_SOURCE
#include <strings.h>

#include "nvml_api.h"
#include "simcommon.h"
#include "simcontrol.h"

struct nvmlDevice_st {
    int gpu; /* index into sim_gpus */
    int mig; /* index into sim_migs, or -1 for a whole GPU */
};

static struct nvmlDevice_st h_gpu[SIM_NGPUS + 1];
static struct nvmlDevice_st h_mig[SIM_NMIGS + 1];
static int init_count;

#define MAX_MIG_DEVICES 7
#define NVML_MEMORY_V2_VERSION_MAJOR 2

static nvmlReturn_t check(nvmlDevice_t d)
{
    sim_slow();
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (d == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!(d >= h_gpu && d < h_gpu + SIM_NGPUS) && !(d >= h_mig && d < h_mig + SIM_NMIGS))
        return NVML_ERROR_INVALID_ARGUMENT;
    /* A GPU that fell off the bus answers nothing, for its MIG devices too. */
    if (sim_gpu_lost(sim_gpus[d->gpu].minor))
        return NVML_ERROR_GPU_IS_LOST;
    if (sim_flaky(sim_gpus[d->gpu].minor))
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

#define CHECK(d, ptr)                                     \
    do {                                                  \
        nvmlReturn_t r_ = check(d);                       \
        if (r_ != NVML_SUCCESS)                           \
            return r_;                                    \
        if ((ptr) == NULL)                                \
            return NVML_ERROR_INVALID_ARGUMENT;           \
    } while (0)

static const sim_gpu_t *gpu_of(nvmlDevice_t d) { return &sim_gpus[d->gpu]; }
static const sim_mig_t *mig_of(nvmlDevice_t d) { return d->mig < 0 ? NULL : &sim_migs[d->mig]; }

static nvmlReturn_t copy_str(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    int i;

    (void)flags;
    if (sim_scan() != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    for (i = 0; i < SIM_NGPUS; i++) {
        h_gpu[i].gpu = i;
        h_gpu[i].mig = -1;
    }
    for (i = 0; i < SIM_NMIGS; i++) {
        h_mig[i].gpu = sim_migs[i].gpu;
        h_mig[i].mig = i;
    }
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system ---- */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    return copy_str(version, length, SIM_DRIVER_VERSION);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return copy_str(version, length, SIM_NVML_VERSION);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (v == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = SIM_CUDA_VERSION;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* ---- enumeration ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = sim_nvis;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= sim_nvis)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &h_gpu[sim_vis_gpu[index]];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static int gpu_visible(int gpu)
{
    unsigned i;

    for (i = 0; i < sim_nvis; i++)
        if (sim_vis_gpu[i] == gpu)
            return 1;
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    int i;

    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < SIM_NGPUS; i++)
        if (gpu_visible(i) && strcasecmp(uuid, sim_gpus[i].uuid) == 0) {
            *device = &h_gpu[i];
            return NVML_SUCCESS;
        }
    for (i = 0; i < SIM_NMIGS; i++)
        if (sim_vis_mig[i] && gpu_visible(sim_migs[i].gpu) && strcasecmp(uuid, sim_migs[i].uuid) == 0) {
            *device = &h_mig[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    unsigned i;

    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (serial == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < sim_nvis; i++)
        if (strcmp(serial, sim_gpus[sim_vis_gpu[i]].serial) == 0) {
            *device = &h_gpu[sim_vis_gpu[i]];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    unsigned dom = 0, bus, dev, fn = 0, i;

    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (bus_id == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) < 3) {
        dom = 0;
        if (sscanf(bus_id, "%x:%x.%x", &bus, &dev, &fn) < 2)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (i = 0; i < sim_nvis; i++) {
        const sim_gpu_t *g = &sim_gpus[sim_vis_gpu[i]];
        if (g->domain == dom && g->bus == bus && g->device == dev) {
            *device = &h_gpu[sim_vis_gpu[i]];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

/* ---- identity ---- */

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    CHECK(d, uuid);
    return copy_str(uuid, length, mig_of(d) ? mig_of(d)->uuid : gpu_of(d)->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    CHECK(d, name);
    return copy_str(name, length, mig_of(d) ? mig_of(d)->name : gpu_of(d)->name);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length)
{
    CHECK(d, serial);
    return copy_str(serial, length, gpu_of(d)->serial);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t d, char *part, unsigned int length)
{
    CHECK(d, part);
    return copy_str(part, length, gpu_of(d)->part_number);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
    CHECK(d, minor);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *minor = gpu_of(d)->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index)
{
    unsigned i;

    CHECK(d, index);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    for (i = 0; i < sim_nvis; i++)
        if (sim_vis_gpu[i] == d->gpu) {
            *index = i;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, unsigned int *brand)
{
    CHECK(d, brand);
    *brand = gpu_of(d)->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch)
{
    CHECK(d, arch);
    *arch = gpu_of(d)->arch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    CHECK(d, major);
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = gpu_of(d)->cc_major;
    *minor = gpu_of(d)->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode)
{
    CHECK(d, mode);
    *mode = 0; /* NVML_FEATURE_DISABLED */
    return NVML_SUCCESS;
}

/* The mode `nvidia-smi -c` left in <ctl>/computemode/<minor> (the driver keeps it until the
 * next change or driver reload); a MIG device reports its GPU's, the mode being the GPU's. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, unsigned int *mode)
{
    char name[32];
    long v;

    CHECK(d, mode);
    snprintf(name, sizeof(name), "computemode/%u", gpu_of(d)->minor);
    v = sim_read_long(name, 0);
    *mode = (v >= 0 && v <= 3) ? (unsigned int)v : 0;
    return NVML_SUCCESS;
}

/* ---- PCI ---- */

static void fill_legacy_bus_id(char *dst, const sim_gpu_t *g)
{
    memset(dst, 0, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE);
    strncpy(dst, g->bus_id_legacy, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE - 1);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    const sim_gpu_t *g;

    CHECK(d, pci);
    g = gpu_of(d);
    memset(pci, 0, sizeof(*pci));
    fill_legacy_bus_id(pci->busIdLegacy, g);
    strncpy(pci->busId, g->bus_id, sizeof(pci->busId) - 1);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_v2_t *pci)
{
    const sim_gpu_t *g;

    CHECK(d, pci);
    g = gpu_of(d);
    memset(pci, 0, sizeof(*pci));
    fill_legacy_bus_id(pci->busId, g);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_v1_t *pci)
{
    const sim_gpu_t *g;

    CHECK(d, pci);
    g = gpu_of(d);
    memset(pci, 0, sizeof(*pci));
    fill_legacy_bus_id(pci->busId, g);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    return NVML_SUCCESS;
}

/* ---- memory ---- */

static unsigned long long total_bytes(nvmlDevice_t d)
{
    return (mig_of(d) ? mig_of(d)->memory_mib : gpu_of(d)->memory_mib) * 1024ULL * 1024ULL;
}

/* A MIG device's use: memory_used_mib_gi<gi> of its GPU (the GPU's own key is the GPU's). */
static unsigned long long used_bytes(nvmlDevice_t d)
{
    unsigned long long used, total = total_bytes(d);

    if (mig_of(d)) {
        char key[48];

        snprintf(key, sizeof(key), "memory_used_mib_gi%u", mig_of(d)->gi);
        used = sim_metric(gpu_of(d)->minor, key, 0) * 1024ULL * 1024ULL;
        return used > total ? total : used;
    }
    used = sim_metric(gpu_of(d)->minor, "memory_used_mib", 0) * 1024ULL * 1024ULL;
    return used > total ? total : used;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    unsigned long long reserved;

    CHECK(d, m);
    m->total = total_bytes(d);
    /* v1 counts what the driver reserves as used */
    reserved = mig_of(d) ? 0 : sim_metric(gpu_of(d)->minor, "memory_reserved_mib", 0) << 20;
    m->used = used_bytes(d) + reserved > m->total ? m->total : used_bytes(d) + reserved;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    CHECK(d, m);
    if ((m->version >> 24) != NVML_MEMORY_V2_VERSION_MAJOR)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = total_bytes(d);
    /* what the driver keeps for itself: v2 reports it apart, v1 counts it as used */
    m->reserved = mig_of(d) ? 0 : sim_metric(gpu_of(d)->minor, "memory_reserved_mib", 0) * 1024ULL * 1024ULL;
    m->used = used_bytes(d);
    m->free = m->total - m->used - (m->reserved > m->total - m->used ? m->total - m->used : m->reserved);
    return NVML_SUCCESS;
}

/* ---- MIG ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending)
{
    CHECK(d, current);
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_of(d) || !gpu_of(d)->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)gpu_of(d)->mig_enabled;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count)
{
    CHECK(d, count);
    if (mig_of(d) || !gpu_of(d)->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = MAX_MIG_DEVICES;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig)
{
    const sim_gpu_t *g;
    unsigned seen = 0;
    int i;

    CHECK(d, mig);
    g = gpu_of(d);
    if (mig_of(d) || !g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= MAX_MIG_DEVICES)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = g->mig_first; i < g->mig_first + g->mig_count; i++) {
        if (!sim_vis_mig[i])
            continue;
        if (seen++ == index) {
            *mig = &h_mig[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig)
{
    CHECK(d, is_mig);
    *is_mig = mig_of(d) != NULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent)
{
    CHECK(d, parent);
    if (!mig_of(d))
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &h_gpu[d->gpu];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id)
{
    CHECK(d, id);
    if (!mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = mig_of(d)->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id)
{
    CHECK(d, id);
    if (!mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *id = mig_of(d)->ci;
    return NVML_SUCCESS;
}

/* ---- virtualization and fabric ---- */

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t d, unsigned int *mode)
{
    CHECK(d, mode);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = gpu_of(d)->virtualization;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t *info)
{
    CHECK(d, info);
    if (mig_of(d) || !gpu_of(d)->fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, gpu_of(d)->cluster_uuid, sizeof(info->clusterUuid));
    info->status = NVML_SUCCESS;
    info->cliqueId = gpu_of(d)->clique_id;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}

#include "nvml_events.c"
#include "nvml_health.c"
#include "nvml_metrics.c"
#include "nvml_processes.c"
#include "nvml_topology.c"
