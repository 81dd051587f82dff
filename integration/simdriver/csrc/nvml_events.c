/* Simulated NVML events and metrics, answered from the control directory (simcontrol.h).
 * Included by nvml.c (one translation unit: it uses nvml.c's handle tables and check()). */

#define SIM_XID_FALLEN_OFF_BUS 79ULL
#define SIM_POLL_MS 5

struct nvmlEventSet_st {
    unsigned long long mask[SIM_NGPUS + 1]; /* registered event types per GPU table index */
    long off;                               /* next unread byte of <ctl>/events */
};

static int gpu_by_minor(unsigned minor)
{
    int i;

    for (i = 0; i < SIM_NGPUS; i++)
        if (sim_gpus[i].minor == minor)
            return i;
    return -1;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    FILE *f;
    sim_event_t ev;

    sim_slow();
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof(**set));
    if (*set == NULL)
        return NVML_ERROR_UNKNOWN;
    /* Only events that happen after the set exists are delivered to it. */
    f = sim_open_events();
    if (f != NULL) {
        while (sim_next_event(f, &(*set)->off, &ev))
            ;
        fclose(f);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
    CHECK(d, types);
    /* MIG devices are registered through their GPU; some GPUs deliver no events at all */
    if (mig_of(d) || gpu_of(d)->events == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *types = gpu_of(d)->events;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
    CHECK(d, set);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    /* one unsupported bit and nothing is registered (a GPU without ECC has no ECC events) */
    if (types & ~gpu_of(d)->events)
        return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->gpu] |= types;
    return NVML_SUCCESS;
}

/* The next registered event in the log after set->off, as NVML reports it; 1 if found. */
static int next_delivery(nvmlEventSet_t set, nvmlEventData_t *data)
{
    FILE *f = sim_open_events();
    sim_event_t ev;
    int gpu, found = 0;
    unsigned long long type;

    if (f == NULL)
        return 0;
    while (!found && sim_next_event(f, &set->off, &ev)) {
        gpu = gpu_by_minor(ev.minor);
        if (gpu < 0 || !gpu_visible(gpu))
            continue;
        if (strcmp(ev.kind, "xid") == 0) {
            type = nvmlEventTypeXidCriticalError;
        } else if (strcmp(ev.kind, "lost") == 0) {
            type = nvmlEventTypeXidCriticalError; /* the driver logs XID 79 */
            ev.data = SIM_XID_FALLEN_OFF_BUS;
        } else if (strcmp(ev.kind, "dbe") == 0) {
            type = nvmlEventTypeDoubleBitEccError;
            ev.data = 0;
        } else {
            continue; /* recover: no event, queries just answer again */
        }
        if (!(set->mask[gpu] & type))
            continue;
        data->device = &h_gpu[gpu];
        data->eventType = type;
        data->eventData = ev.data;
        data->gpuInstanceId = ev.gi;
        data->computeInstanceId = ev.ci;
        found = 1;
    }
    fclose(f);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct timespec start, now;
    long long waited_ns, left_ms;

    sim_slow();
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (next_delivery(set, data))
            return NVML_SUCCESS;
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* in nanoseconds: whole milliseconds of a negative tv_nsec difference would round the
         * wait up (C truncates toward zero) and time out early */
        waited_ns = (long long)(now.tv_sec - start.tv_sec) * 1000000000LL
                    + (now.tv_nsec - start.tv_nsec);
        if (waited_ns >= (long long)timeoutms * 1000000LL)
            return NVML_ERROR_TIMEOUT;
        left_ms = ((long long)timeoutms * 1000000LL - waited_ns + 999999LL) / 1000000LL;
        sim_sleep_ms(left_ms < SIM_POLL_MS ? (long)left_ms : SIM_POLL_MS);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ---- metrics (defaults: an idle GPU) ---- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    CHECK(d, u);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned)sim_metric(gpu_of(d)->minor, "util_gpu", 0);
    u->memory = (unsigned)sim_metric(gpu_of(d)->minor, "util_memory", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *temp)
{
    CHECK(d, temp);
    if (sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned)sim_metric(gpu_of(d)->minor, "temp", 30);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
    CHECK(d, mw);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    *mw = (unsigned)sim_metric(gpu_of(d)->minor, "power_mw", 50000);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *mhz)
{
    CHECK(d, mhz);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *mhz = (unsigned)sim_metric(gpu_of(d)->minor, "sm_clock_mhz", 1410);
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        *mhz = (unsigned)sim_metric(gpu_of(d)->minor, "mem_clock_mhz", 1593);
        return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
        *mhz = 1275;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}
