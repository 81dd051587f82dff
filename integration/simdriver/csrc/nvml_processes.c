/* Simulated NVML: the compute processes on each GPU and their utilization samples, from
 * <ctl>/processes/<minor> (inject.gpu_process). Included by nvml.c.
 *
 * MPS as a Volta-or-newer driver reports it (nvidia-smi's "M+C" and "C" rows): an MPS client
 * (kind M) is listed by both the compute and the MPS compute calls, the MPS server (kind C,
 * like any other CUDA process) by the compute call only. On a GPU in MIG mode each process
 * carries its GPU and compute instance IDs: the GPU's handle lists them all with those IDs, a
 * MIG device's handle only its own.
 *
 * As the real driver does, NVML answers only the processes visible in the caller's PID
 * namespace, under their pid there: each line records a process's pid in the injector's
 * (outer) namespace and in its own (innermost) one, with both namespaces' inode numbers; a
 * caller in the outer namespace gets the outer pid, one in the process's own namespace the inner
 * pid, any other caller nothing.
 *
 * Line: <outer ns> <outer pid> <inner ns> <inner pid> <used MiB> <SM %> <memory %> <kind C|M>
 *       <GPU instance> <compute instance>  (4294967295: none, a GPU not in MIG mode)
 */

#define SIM_MAX_PROCS 256

typedef struct {
    unsigned pid; /* in the caller's namespace */
    unsigned long long used_mib;
    unsigned sm, mem;
    char kind; /* C: a CUDA process (or the MPS server); M: an MPS client */
    unsigned gi, ci;
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

/* The processes of d's GPU visible to the caller; a MIG handle's: those of its instance only;
 * mps_only: MPS clients only (nvmlDeviceGetMPSComputeRunningProcesses). */
static int sim_processes(nvmlDevice_t d, int mps_only, sim_proc_t *out, int max)
{
    char path[4608], name[32], kind[2];
    unsigned long long outer_ns, inner_ns, used, self;
    unsigned outer_pid, inner_pid, sm, mem, gi, ci;
    const sim_mig_t *mig = mig_of(d);
    FILE *f;
    int n = 0;

    self = caller_pid_ns();
    if (self == 0)
        return 0;
    snprintf(name, sizeof(name), "processes/%u", gpu_of(d)->minor);
    sim_ctl_path(path, sizeof(path), name);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (n < max && fscanf(f, "%llu %u %llu %u %llu %u %u %1s %u %u", &outer_ns, &outer_pid,
                             &inner_ns, &inner_pid, &used, &sm, &mem, kind, &gi, &ci) == 10) {
        if (mps_only && kind[0] != 'M')
            continue;
        if (mig != NULL && (gi != mig->gi || ci != mig->ci))
            continue; /* another instance's */
        if (self == inner_ns)
            out[n].pid = inner_pid;
        else if (self == outer_ns)
            out[n].pid = outer_pid;
        else
            continue; /* not in the caller's namespace */
        out[n].used_mib = used;
        out[n].sm = sm;
        out[n].mem = mem;
        out[n].kind = kind[0];
        out[n].gi = gi;
        out[n].ci = ci;
        n++;
    }
    fclose(f);
    return n;
}

static nvmlReturn_t running_processes(nvmlDevice_t d, int mps_only, unsigned int *count,
                                      nvmlProcessInfo_t *infos)
{
    sim_proc_t procs[SIM_MAX_PROCS];
    int i, n;

    CHECK(d, count);
    n = sim_processes(d, mps_only, procs, SIM_MAX_PROCS);
    if (*count < (unsigned)n || (n > 0 && infos == NULL)) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)n;
    for (i = 0; i < n; i++) {
        infos[i].pid = procs[i].pid;
        infos[i].usedGpuMemory = procs[i].used_mib << 20;
        infos[i].gpuInstanceId = procs[i].gi;
        infos[i].computeInstanceId = procs[i].ci;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes(d, 0, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    return running_processes(d, 0, count, infos);
}

/* Volta or newer: MPS clients only (the server is a compute process of its own). */
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                        nvmlProcessInfo_t *infos)
{
    CHECK(d, count);
    if (gpu_of(d)->cc_major < 7)
        return NVML_ERROR_NOT_SUPPORTED;
    return running_processes(d, 1, count, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                        nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetMPSComputeRunningProcesses_v3(d, count, infos);
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
    n = now > lastSeen ? sim_processes(d, 0, procs, SIM_MAX_PROCS) : 0;
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
