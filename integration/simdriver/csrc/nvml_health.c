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

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values)
{
    int i;

    CHECK(d, values);
    if (count < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];

        v->timestamp = 0;
        v->latencyUsec = 0;
        if (v->fieldId != NVML_FI_DEV_GET_GPU_RECOVERY_ACTION || mig_of(d)
            || atoi(SIM_DRIVER_VERSION) < SIM_RECOVERY_FIELD_MAJOR) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.ullVal = 0;
        v->value.uiVal = (unsigned)sim_metric(gpu_of(d)->minor, "recovery_action", 0);
        v->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}
