/* Simulated NVML: the rest of dcgm-exporter's default counters (energy, PCIe, encoder and
 * decoder, vGPU licence) and GPU performance monitoring (nvmlGpm*), answered from
 * <ctl>/metrics/<minor> (tests write them with inject.set_metrics). Included by nvml.c.
 *
 * What a GPU supports follows the preset (spec.SimGpu): GPM on Hopper and newer, NOT_SUPPORTED
 * elsewhere; no preset is a vGPU guest, so the licence query answers NOT_SUPPORTED as on bare
 * metal. MIG handles answer NOT_SUPPORTED for the GPU-wide counters (ask the parent GPU).
 */

#include <stdlib.h>

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj)
{
    CHECK(d, mj);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *mj = sim_metric(gpu_of(d)->minor, "energy_mj", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *value)
{
    CHECK(d, value);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *value = (unsigned)sim_metric(gpu_of(d)->minor, "pcie_replay", 0);
    return NVML_SUCCESS;
}

static nvmlReturn_t codec_util(nvmlDevice_t d, const char *key, unsigned *util, unsigned *period)
{
    CHECK(d, util);
    if (period == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *util = (unsigned)sim_metric(gpu_of(d)->minor, key, 0);
    *period = 167000; /* microseconds, as drivers report it */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *util, unsigned int *period)
{
    return codec_util(d, "util_encoder", util, period);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *util, unsigned int *period)
{
    return codec_util(d, "util_decoder", util, period);
}

/* counter 0: TX, 1: RX; KB/s over the driver's 20 ms window */
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *value)
{
    CHECK(d, value);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    if (counter != 0 && counter != 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *value = (unsigned)sim_metric(gpu_of(d)->minor, counter == 0 ? "pcie_tx_kbps" : "pcie_rx_kbps", 0);
    return NVML_SUCCESS;
}

/* A vGPU guest's licence (virtualization mode 2): its one enabled feature, the NVIDIA RTX
 * Virtual Workstation product of a Q profile, licensed unless the control file's vgpu_licensed
 * is 0 (the licence expired or the server never granted one: featureState 0, as nvidia-smi
 * reads "Unlicensed"). Bare metal and MIG devices: NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t d, nvmlGridLicensableFeatures_t *f)
{
    nvmlGridLicensableFeature_t *one;
    int licensed;

    CHECK(d, f);
    if (mig_of(d) || gpu_of(d)->virtualization != 2)
        return NVML_ERROR_NOT_SUPPORTED;
    licensed = sim_metric(gpu_of(d)->minor, "vgpu_licensed", 1) != 0;
    memset(f, 0, sizeof(*f));
    f->isGridLicenseSupported = 1;
    f->licensableFeaturesCount = 1;
    one = &f->gridLicensableFeatures[0];
    one->featureCode = 2;
    one->featureState = licensed ? 1 : 0;
    one->featureEnabled = 1;
    snprintf(one->productName, sizeof(one->productName), "NVIDIA RTX Virtual Workstation");
    if (licensed) {
        one->licenseExpiry.year = 2027;
        one->licenseExpiry.month = 1;
        one->licenseExpiry.day = 1;
        one->licenseExpiry.status = 2;
    }
    return NVML_SUCCESS;
}

/* ---- GPM: a sample is a snapshot of the metrics file; MetricsGet answers sample2's ---- */

#define SIM_GPM_NONE 0xFFFFFFFFu

struct sim_gpm_sample {
    int gpu;     /* sim_gpus index; -1: never filled */
    unsigned gi; /* SIM_GPM_NONE: the whole GPU */
    unsigned long long seq;
    double graphics, tensor, dram, pcie_tx, pcie_rx; /* %, %, %, MiB/s, MiB/s */
};

static unsigned long long sim_gpm_seq;

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *support)
{
    CHECK(d, support);
    if (support->version != NVML_GPM_SUPPORT_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = gpu_of(d)->gpm && !mig_of(d);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    struct sim_gpm_sample *s;

    if (sample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_UNKNOWN;
    s->gpu = -1;
    *sample = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    if (sample == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(sample);
    return NVML_SUCCESS;
}

static double gpm_metric(unsigned minor, const char *key, unsigned gi)
{
    char name[64];

    if (gi == SIM_GPM_NONE)
        return (double)sim_metric(minor, key, 0);
    snprintf(name, sizeof(name), "%s_gi%u", key, gi);
    return (double)sim_metric(minor, name, 0);
}

static nvmlReturn_t gpm_fill(nvmlDevice_t d, unsigned gi, nvmlGpmSample_t sample)
{
    unsigned minor;

    CHECK(d, sample);
    if (mig_of(d) || !gpu_of(d)->gpm)
        return NVML_ERROR_NOT_SUPPORTED;
    minor = gpu_of(d)->minor;
    sample->gpu = d->gpu;
    sample->gi = gi;
    sample->seq = ++sim_gpm_seq;
    sample->graphics = gpm_metric(minor, "gpm_graphics", gi);
    sample->tensor = gpm_metric(minor, "gpm_tensor", gi);
    sample->dram = gpm_metric(minor, "gpm_dram", gi);
    sample->pcie_tx = gpm_metric(minor, "gpm_pcie_tx_mibs", gi);
    sample->pcie_rx = gpm_metric(minor, "gpm_pcie_rx_mibs", gi);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t sample)
{
    return gpm_fill(d, SIM_GPM_NONE, sample);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned int gi, nvmlGpmSample_t sample)
{
    const sim_gpu_t *g;
    int i;

    CHECK(d, sample);
    if (mig_of(d))
        return NVML_ERROR_INVALID_ARGUMENT; /* takes the parent GPU and a GPU instance ID */
    g = gpu_of(d);
    for (i = g->mig_first; i < g->mig_first + g->mig_count; i++)
        if (sim_migs[i].gi == gi)
            return gpm_fill(d, gi, sample);
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get)
{
    const struct sim_gpm_sample *a, *b;
    unsigned i;

    if (get == NULL || get->sample1 == NULL || get->sample2 == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != NVML_GPM_METRICS_GET_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    a = get->sample1;
    b = get->sample2;
    /* two samples of the same GPU (instance), the second one later */
    if (a->gpu < 0 || a->gpu != b->gpu || a->gi != b->gi || a->seq >= b->seq)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *m = &get->metrics[i];

        m->nvmlReturn = NVML_SUCCESS;
        switch (m->metricId) {
        case NVML_GPM_METRIC_GRAPHICS_UTIL: m->value = b->graphics; break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: m->value = b->tensor; break;
        case NVML_GPM_METRIC_DRAM_BW_UTIL: m->value = b->dram; break;
        case NVML_GPM_METRIC_PCIE_TX_PER_SEC: m->value = b->pcie_tx; break;
        case NVML_GPM_METRIC_PCIE_RX_PER_SEC: m->value = b->pcie_rx; break;
        default: m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; m->value = 0;
        }
    }
    return NVML_SUCCESS;
}
