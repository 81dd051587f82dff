/* Simulated libcuda.so.1: driver API entry points answered from the compiled-in GPU table. */
#include "simcommon.h"

typedef int CUresult;
typedef int CUdevice;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101

static int initialized;

CUresult cuInit(unsigned int flags)
{
    (void)flags;
    if (sim_scan() != 0 || sim_nvis == 0)
        return CUDA_ERROR_NO_DEVICE;
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = SIM_CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = (int)sim_nvis;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || (unsigned)ordinal >= sim_nvis)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static const sim_gpu_t *dev_of(CUdevice dev)
{
    if (!initialized || dev < 0 || (unsigned)dev >= sim_nvis)
        return NULL;
    return &sim_gpus[sim_vis_gpu[dev]];
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const sim_gpu_t *g = dev_of(dev);

    if (g == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", g->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    const sim_gpu_t *g = dev_of(dev);

    if (g == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    const sim_gpu_t *g = dev_of(dev);

    if (g == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)(g->memory_mib * 1024ULL * 1024ULL);
    return CUDA_SUCCESS;
}
