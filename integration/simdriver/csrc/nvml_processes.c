/* Simulated NVML: the compute processes on each GPU and their utilization samples, from
 * <ctl>/processes/<minor> (inject.gpu_process). Included by nvml.c.
 *
 * As the real driver does, NVML answers only the processes visible in the caller's PID
 * namespace, under their pid there: each line records a process's pid in the injector's
 * (outer) namespace and in its own (innermost) one, with both namespaces' inode numbers; a
 * caller in the outer namespace gets the outer pid, one in the process's own namespace the inner
 * pid, any other caller nothing.
 *
 * Line: <outer ns> <outer pid> <inner ns> <inner pid> <used MiB> <SM %> <memory %>
 */

#define SIM_MAX_PROCS 256

typedef struct {
    unsigned pid; /* in the caller's namespace */
    unsigned long long used_mib;
    unsigned sm, mem;
} sim_proc_t;

/* The inode of the caller's PID namespace, from the link's text "pid:[<inode>]" (readlink,
 * not stat: the library links against glibc 2.17's symbols, and stat is a 2.33 one). */
static unsigned long long caller_pid_ns(void)
{
    char link[64];
    unsigned long long ino = 0;
    ssize_t len = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);

    if (len <= 0)
        return 0;
    link[len] = '\0';
    if (sscanf(link, "pid:[%llu]", &ino) != 1)
        return 0;
    return ino;
}

static int sim_processes(unsigned minor, sim_proc_t *out, int max)
{
    char path[4608], name[32];
    unsigned long long outer_ns, inner_ns, used, self;
    unsigned outer_pid, inner_pid, sm, mem;
    FILE *f;
    int n = 0;

    self = caller_pid_ns();
    if (self == 0)
        return 0;
    snprintf(name, sizeof(name), "processes/%u", minor);
    sim_ctl_path(path, sizeof(path), name);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (n < max && fscanf(f, "%llu %u %llu %u %llu %u %u", &outer_ns, &outer_pid, &inner_ns,
                             &inner_pid, &used, &sm, &mem) == 7) {
        if (self == inner_ns)
            out[n].pid = inner_pid;
        else if (self == outer_ns)
            out[n].pid = outer_pid;
        else
            continue; /* not in the caller's namespace */
        out[n].used_mib = used;
        out[n].sm = sm;
        out[n].mem = mem;
        n++;
    }
    fclose(f);
    return n;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    sim_proc_t procs[SIM_MAX_PROCS];
    int i, n;

    CHECK(d, count);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED; /* ask the GPU: each answer names its GPU instance */
    n = sim_processes(gpu_of(d)->minor, procs, SIM_MAX_PROCS);
    if (*count < (unsigned)n || (n > 0 && infos == NULL)) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    for (i = 0; i < n; i++) {
        infos[i].pid = procs[i].pid;
        infos[i].usedGpuMemory = procs[i].used_mib << 20;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}

/* One sample per visible process, stamped now; lastSeen later than now: none (NOT_FOUND). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count, unsigned long long lastSeen)
{
    sim_proc_t procs[SIM_MAX_PROCS];
    struct timespec ts;
    unsigned long long now;
    int i, n;

    CHECK(d, count);
    if (mig_of(d))
        return NVML_ERROR_NOT_SUPPORTED;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    n = now > lastSeen ? sim_processes(gpu_of(d)->minor, procs, SIM_MAX_PROCS) : 0;
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (samples == NULL || *count < (unsigned)n) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    for (i = 0; i < n; i++) {
        samples[i].pid = procs[i].pid;
        samples[i].timeStamp = now;
        samples[i].smUtil = procs[i].sm;
        samples[i].memUtil = procs[i].mem;
        samples[i].encUtil = 0;
        samples[i].decUtil = 0;
    }
    return NVML_SUCCESS;
}
