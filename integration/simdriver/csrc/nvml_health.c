/* Simulated NVML memory-health state: remapped rows, retired pages pending and the GPU
 * recovery-action field, answered from <ctl>/metrics/<minor> (simcontrol.h; tests write them
 * with inject.set_condition). Included by nvml.c (one translation unit).
 *
 * What a GPU supports follows the preset: row remapping on HBM data-centre GPUs, page
 * retirement on the other ECC GPUs, NOT_SUPPORTED elsewhere and on MIG handles (ask the
 * parent GPU). The recovery-action field is reported by drivers from 570 on.
 */

#define SIM_RECOVERY_FIELD_MAJOR 570

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    unsigned minor;

    CHECK(d, corrRows);
    if (uncRows == NULL || isPending == NULL || failureOccurred == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_of(d) || !gpu_of(d)->row_remapping)
        return NVML_ERROR_NOT_SUPPORTED;
    minor = gpu_of(d)->minor;
    *corrRows = (unsigned)sim_metric(minor, "remapped_correctable", 0);
    *uncRows = (unsigned)sim_metric(minor, "remapped_uncorrectable", 0);
    *isPending = sim_metric(minor, "remap_pending", 0) != 0;
    *failureOccurred = sim_metric(minor, "remap_failure", 0) != 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *isPending)
{
    CHECK(d, isPending);
    if (mig_of(d) || !gpu_of(d)->page_retirement)
        return NVML_ERROR_NOT_SUPPORTED;
    *isPending = sim_metric(gpu_of(d)->minor, "retired_pending", 0) != 0 ? NVML_FEATURE_ENABLED
                                                                          : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* One field of nvmlDeviceGetFieldValues: the GPU recovery action (drivers 570+), the memory
 * temperature (HBM parts), NVLink throughput counters (KiB, per link: GPUs with NVLink). */
static nvmlReturn_t field_value(nvmlDevice_t d, nvmlFieldValue_t *v)
{
    unsigned minor = gpu_of(d)->minor;

    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.ullVal = 0;
    switch (v->fieldId) {
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
        if (atoi(SIM_DRIVER_VERSION) < SIM_RECOVERY_FIELD_MAJOR)
            return NVML_ERROR_NOT_SUPPORTED;
        v->value.uiVal = (unsigned)sim_metric(minor, "recovery_action", 0);
        return NVML_SUCCESS;
    case NVML_FI_DEV_MEMORY_TEMP:
        if (!gpu_of(d)->memory_temp)
            return NVML_ERROR_NOT_SUPPORTED;
        v->value.uiVal = (unsigned)sim_metric(minor, "memory_temp", 40);
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: {
        /* one link's counter (scopeId: the link); the GPU's total, spread evenly over its
         * links, grows at nvlink_kibps each way (traffic flowing now) */
        struct timespec ts;
        double total;

        if (gpu_of(d)->link_count == 0)
            return NVML_ERROR_NOT_SUPPORTED;
        if (v->scopeId >= (unsigned)gpu_of(d)->link_count)
            return NVML_ERROR_INVALID_ARGUMENT;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        total = (double)sim_metric(minor, v->fieldId % 2 == 0 ? "nvlink_tx_kib" : "nvlink_rx_kib", 0)
                + (double)sim_metric(minor, "nvlink_kibps", 0) * ((double)ts.tv_sec + ts.tv_nsec / 1e9);
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = (unsigned long long)(total / gpu_of(d)->link_count);
        return NVML_SUCCESS;
    }
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values)
{
    int i;

    CHECK(d, values);
    if (count < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < count; i++) {
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = field_value(d, &values[i]);
    }
    return NVML_SUCCESS;
}
