/* Simulated nvidia-smi: a real NVML client, linked against libnvidia-ml.so.1 (found through
 * the dynamic loader, so in a container it runs only once the library was injected).
 * `compute-policy` keeps each GPU's compute time-slice in the control directory
 * (timeslice/<minor>: 0 Default, 1 Short, 2 Medium, 3 Long), as the driver keeps it until the
 * next change or reboot; setting it needs CAP_SYS_ADMIN, as the driver's. `-c` (compute mode)
 * keeps each GPU's mode in computemode/<minor> (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS),
 * which NVML's nvmlDeviceGetComputeMode reports; it needs CAP_SYS_ADMIN too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "nvml_api.h"
#include "oldglibc.h"
#include "simcommon.h"
#include "simcontrol.h"

#define NAME_LEN 96
#define UUID_LEN 96

static int init_or_die(void)
{
    nvmlReturn_t r = nvmlInit_v2();

    if (r == NVML_ERROR_DRIVER_NOT_LOADED) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        exit(9);
    }
    if (r != NVML_SUCCESS) {
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(r));
        exit(255);
    }
    return 0;
}

static unsigned count_or_die(void)
{
    unsigned n = 0;

    nvmlDeviceGetCount_v2(&n);
    if (n == 0) {
        printf("No devices were found\n");
        exit(6);
    }
    return n;
}

static void cuda_version(char *buf, size_t n)
{
    int v = 0;

    nvmlSystemGetCudaDriverVersion(&v);
    snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

static const char *mig_profile(const char *mig_name)
{
    const char *p = strstr(mig_name, "MIG ");
    return p ? p + 4 : mig_name;
}

static int list_gpus(void)
{
    unsigned n, i, j, max;
    nvmlDevice_t dev, mig;
    char name[NAME_LEN], uuid[UUID_LEN];
    unsigned cur, pend;

    init_or_die();
    n = count_or_die();
    for (i = 0; i < n; i++) {
        nvmlDeviceGetHandleByIndex_v2(i, &dev);
        nvmlDeviceGetName(dev, name, sizeof(name));
        nvmlDeviceGetUUID(dev, uuid, sizeof(uuid));
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        if (nvmlDeviceGetMigMode(dev, &cur, &pend) != NVML_SUCCESS || !cur)
            continue;
        if (nvmlDeviceGetMaxMigDeviceCount(dev, &max) != NVML_SUCCESS)
            continue;
        for (j = 0; j < max; j++) {
            if (nvmlDeviceGetMigDeviceHandleByIndex(dev, j, &mig) != NVML_SUCCESS)
                continue;
            nvmlDeviceGetName(mig, name, sizeof(name));
            nvmlDeviceGetUUID(mig, uuid, sizeof(uuid));
            printf("  MIG %-11s Device %2u: (UUID: %s)\n", mig_profile(name), j, uuid);
        }
    }
    nvmlShutdown();
    return 0;
}

static void row(const char *a, const char *b, const char *c)
{
    printf("|%-41s|%-24s|%-22s|\n", a, b, c);
}

static int summary(void)
{
    unsigned n, i, cur, pend;
    nvmlDevice_t dev;
    char name[NAME_LEN], driver[80], cuda[16], a[128], b[64], c[64];
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    int persistence = 0;
    const char *sep = "+-----------------------------------------+------------------------+"
                      "----------------------+";
    const char *wide = "+-----------------------------------------------------------------------------------------+";

    init_or_die();
    n = count_or_die();
    nvmlSystemGetDriverVersion(driver, sizeof(driver));
    cuda_version(cuda, sizeof(cuda));
    printf("%s\n", wide);
    printf("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n", driver, driver, cuda);
    printf("|-----------------------------------------+------------------------+----------------------+\n");
    row(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ", " Volatile Uncorr. ECC ");
    row(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ", " GPU-Util  Compute M. ");
    row("", "", "               MIG M. ");
    printf("|=========================================+========================+======================|\n");
    for (i = 0; i < n; i++) {
        nvmlDeviceGetHandleByIndex_v2(i, &dev);
        nvmlDeviceGetName(dev, name, sizeof(name));
        nvmlDeviceGetPciInfo_v3(dev, &pci);
        nvmlDeviceGetMemoryInfo(dev, &mem);
        nvmlDeviceGetPersistenceMode(dev, &persistence);
        snprintf(a, sizeof(a), " %3u  %-30.30s %3s ", i, name, persistence ? "On" : "Off");
        snprintf(b, sizeof(b), "   %-16s Off ", pci.busId);
        row(a, b, "                    0 ");
        snprintf(c, sizeof(c), "%lluMiB / %6lluMiB", mem.used >> 20, mem.total >> 20);
        snprintf(b, sizeof(b), "%23s ", c);
        row(" N/A   30C    P0             70W /  700W ", b, "      0%      Default ");
        if (nvmlDeviceGetMigMode(dev, &cur, &pend) == NVML_SUCCESS)
            snprintf(c, sizeof(c), " %20s ", cur ? "Enabled" : "Disabled");
        else
            snprintf(c, sizeof(c), " %20s ", "N/A");
        row("", "", c);
        printf("%s\n", sep);
    }
    printf("\n%s\n", wide);
    printf("| Processes:                                                                              |\n");
    printf("|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |\n");
    printf("|        ID   ID                                                               Usage      |\n");
    printf("|=========================================================================================|\n");
    printf("|  No running processes found                                                             |\n");
    printf("%s\n", wide);
    nvmlShutdown();
    return 0;
}

/* nvmlComputeMode_t's names, as `-c` takes them and as --query-gpu=compute_mode prints them */
static const char *const compute_modes[] = {"DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED",
                                            "EXCLUSIVE_PROCESS"};
static const char *const compute_mode_fields[] = {"Default", "Exclusive_Thread", "Prohibited",
                                                  "Exclusive_Process"};

/* --query-gpu=a,b,c --format=csv[,noheader][,nounits] */
static int query(const char *fields, const char *format)
{
    unsigned n, i;
    nvmlDevice_t dev;
    char buf[128], driver[80], cuda[16], *list, *f, *save = NULL;
    int header = strstr(format, "noheader") == NULL;
    int units = strstr(format, "nounits") == NULL;
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    int ma, mi;
    unsigned mode;

    if (strncmp(format, "csv", 3) != 0) {
        fprintf(stderr, "Only CSV output is supported by this simulated nvidia-smi.\n");
        return 2;
    }
    init_or_die();
    n = count_or_die();
    nvmlSystemGetDriverVersion(driver, sizeof(driver));
    cuda_version(cuda, sizeof(cuda));
    if (header) {
        list = strdup(fields);
        for (f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save))
            printf("%s%s%s", f == list ? "" : ", ", f,
                   units && strcmp(f, "memory.total") == 0 ? " [MiB]" : "");
        printf("\n");
        free(list);
    }
    for (i = 0; i < n; i++) {
        nvmlDeviceGetHandleByIndex_v2(i, &dev);
        list = strdup(fields);
        save = NULL;
        for (f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
            buf[0] = '\0';
            if (strcmp(f, "index") == 0)
                snprintf(buf, sizeof(buf), "%u", i);
            else if (strcmp(f, "name") == 0 || strcmp(f, "gpu_name") == 0)
                nvmlDeviceGetName(dev, buf, sizeof(buf));
            else if (strcmp(f, "uuid") == 0 || strcmp(f, "gpu_uuid") == 0)
                nvmlDeviceGetUUID(dev, buf, sizeof(buf));
            else if (strcmp(f, "serial") == 0)
                nvmlDeviceGetSerial(dev, buf, sizeof(buf));
            else if (strcmp(f, "pci.bus_id") == 0 || strcmp(f, "gpu_bus_id") == 0) {
                nvmlDeviceGetPciInfo_v3(dev, &pci);
                snprintf(buf, sizeof(buf), "%s", pci.busId);
            } else if (strcmp(f, "driver_version") == 0)
                snprintf(buf, sizeof(buf), "%s", driver);
            else if (strcmp(f, "memory.total") == 0) {
                nvmlDeviceGetMemoryInfo(dev, &mem);
                snprintf(buf, sizeof(buf), "%llu%s", mem.total >> 20, units ? " MiB" : "");
            } else if (strcmp(f, "compute_mode") == 0) {
                nvmlDeviceGetComputeMode(dev, &mode);
                snprintf(buf, sizeof(buf), "%s", compute_mode_fields[mode <= 3 ? mode : 0]);
            } else if (strcmp(f, "compute_cap") == 0) {
                nvmlDeviceGetCudaComputeCapability(dev, &ma, &mi);
                snprintf(buf, sizeof(buf), "%d.%d", ma, mi);
            } else {
                fprintf(stderr, "Field \"%s\" is not a valid field to query.\n\n", f);
                free(list);
                return 2;
            }
            printf("%s%s", f == list ? "" : ", ", buf);
        }
        printf("\n");
        free(list);
    }
    nvmlShutdown();
    return 0;
}

static const char *const timeslices[] = {"Default", "Short", "Medium", "Long"};

/* The driver's administrator test on Linux: CAP_SYS_ADMIN (not the uid), as the real RM
 * checks it for privileged controls such as the compute policy. */
static int sys_admin(void)
{
    char line[256];
    unsigned long long caps = 0;
    FILE *f = fopen("/proc/self/status", "r");

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    fclose(f);
    return (int)((caps >> 21) & 1); /* CAP_SYS_ADMIN */
}

/* The GPUs `id` (an index or a UUID; NULL: all) names, by index into found[]; their count. */
static unsigned select_gpus(const char *id, nvmlDevice_t *found, unsigned max)
{
    unsigned n, i, k = 0;
    nvmlDevice_t dev;
    char uuid[UUID_LEN], index[16];

    n = count_or_die();
    for (i = 0; i < n && k < max; i++) {
        nvmlDeviceGetHandleByIndex_v2(i, &dev);
        nvmlDeviceGetUUID(dev, uuid, sizeof(uuid));
        snprintf(index, sizeof(index), "%u", i);
        if (id == NULL || strcmp(id, uuid) == 0 || strcmp(id, index) == 0)
            found[k++] = dev;
    }
    if (k == 0)
        printf("No devices were found\n");
    return k;
}

/* <ctl>/<dir>/<minor> := value, as the driver keeps a GPU's setting until the next change or
 * reboot; 0, or 255 said on stderr. */
static int record_setting(const char *dir, unsigned minor, long value)
{
    char name[64], path[4608];
    FILE *f;

    sim_ctl_path(path, sizeof(path), dir);
    mkdir(path, 0755);
    snprintf(name, sizeof(name), "%s/%u", dir, minor);
    sim_ctl_path(path, sizeof(path), name);
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "cannot record the %s: %s\n", dir, strerror(errno));
        return 255;
    }
    fprintf(f, "%ld\n", value);
    fclose(f);
    return 0;
}

/* compute-policy [-i ID] (--set-timeslice N | --set-timeslice=N | -l | --list) */
static int compute_policy(int argc, char **argv)
{
    const char *id = NULL, *set = NULL;
    int list = 0, i;
    unsigned k, j, minor;
    nvmlDevice_t found[SIM_MAX_MINOR];
    char name[32], uuid[UUID_LEN];
    long value = 0;
    char *end;

    for (i = 0; i < argc; i++) {
        if ((strcmp(argv[i], "-i") == 0 || strcmp(argv[i], "--id") == 0) && i + 1 < argc)
            id = argv[++i];
        else if (strncmp(argv[i], "--id=", 5) == 0)
            id = argv[i] + 5;
        else if (strcmp(argv[i], "--set-timeslice") == 0 && i + 1 < argc)
            set = argv[++i];
        else if (strncmp(argv[i], "--set-timeslice=", 16) == 0)
            set = argv[i] + 16;
        else if (strcmp(argv[i], "-l") == 0 || strcmp(argv[i], "--list") == 0)
            list = 1;
        else {
            fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi "
                            "compute-policy -h' for help.\n");
            return 2;
        }
    }
    if ((set == NULL) == !list) {
        fprintf(stderr, "Specify one of --set-timeslice or --list.\n");
        return 2;
    }
    init_or_die();
    k = select_gpus(id, found, SIM_MAX_MINOR);
    if (k == 0)
        return 6;
    if (set != NULL) {
        value = strtol(set, &end, 10);
        if (*set == '\0' || *end != '\0' || value < 0 || value > 3) {
            fprintf(stderr, "Invalid timeslice value \"%s\": use 0 (default), 1 (short), 2 "
                            "(medium) or 3 (long).\n", set);
            return 2;
        }
        if (!sys_admin()) {
            printf("Insufficient Permissions\n");
            return 4;
        }
    }
    for (j = 0; j < k; j++) {
        nvmlDeviceGetMinorNumber(found[j], &minor);
        nvmlDeviceGetUUID(found[j], uuid, sizeof(uuid));
        snprintf(name, sizeof(name), "timeslice/%u", minor);
        if (set != NULL) {
            if (record_setting("timeslice", minor, value) != 0)
                return 255;
            printf("Set compute timeslice to %s for GPU %s.\n", timeslices[value], uuid);
        } else {
            value = sim_read_long(name, 0);
            printf("GPU %s: Timeslice: %s\n", uuid, timeslices[value >= 0 && value <= 3 ? value : 0]);
        }
    }
    nvmlShutdown();
    return 0;
}

/* -i ID -c MODE: MODE a number or a name of compute_modes (EXCLUSIVE_THREAD is refused, as the
 * drivers that dropped it refuse it); no -i: every GPU. */
static int set_compute_mode(const char *id, const char *arg)
{
    unsigned k, j, minor;
    nvmlDevice_t found[SIM_MAX_MINOR];
    nvmlPciInfo_t pci;
    long value = -1, m;
    char *end;

    for (m = 0; m < 4; m++)
        if (strcasecmp(arg, compute_modes[m]) == 0)
            value = m;
    if (value < 0) {
        m = strtol(arg, &end, 10);
        if (*arg != '\0' && *end == '\0')
            value = m;
    }
    if (value < 0 || value > 3 || value == 1) {
        fprintf(stderr, "Invalid compute mode \"%s\": use 0/DEFAULT, 2/PROHIBITED or "
                        "3/EXCLUSIVE_PROCESS.\n", arg);
        return 2;
    }
    init_or_die();
    k = select_gpus(id, found, SIM_MAX_MINOR);
    if (k == 0)
        return 6;
    if (!sys_admin()) {
        printf("Insufficient Permissions\nTerminating early due to previous errors.\n");
        return 4;
    }
    for (j = 0; j < k; j++) {
        nvmlDeviceGetMinorNumber(found[j], &minor);
        nvmlDeviceGetPciInfo_v3(found[j], &pci);
        if (record_setting("computemode", minor, value) != 0)
            return 255;
        printf("Set compute mode to %s for GPU %s.\n", compute_modes[value], pci.busId);
    }
    printf("All done.\n");
    nvmlShutdown();
    return 0;
}

int main(int argc, char **argv)
{
    const char *fields = NULL, *format = "csv", *id = NULL, *mode = NULL;
    char driver[80], cuda[16];
    int i;

    if (argc > 1 && strcmp(argv[1], "compute-policy") == 0)
        return compute_policy(argc - 2, argv + 2);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0)
            return list_gpus();
        if (strncmp(argv[i], "--query-gpu=", 12) == 0)
            fields = argv[i] + 12;
        else if (strncmp(argv[i], "--format=", 9) == 0)
            format = argv[i] + 9;
        else if ((strcmp(argv[i], "-i") == 0 || strcmp(argv[i], "--id") == 0) && i + 1 < argc)
            id = argv[++i];
        else if (strncmp(argv[i], "--id=", 5) == 0)
            id = argv[i] + 5;
        else if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--compute-mode") == 0) &&
                 i + 1 < argc)
            mode = argv[++i];
        else if (strncmp(argv[i], "--compute-mode=", 15) == 0)
            mode = argv[i] + 15;
        else if (strcmp(argv[i], "--version") == 0) {
            init_or_die();
            nvmlSystemGetDriverVersion(driver, sizeof(driver));
            cuda_version(cuda, sizeof(cuda));
            printf("NVIDIA-SMI version  : %s\nDRIVER version      : %s\nCUDA Version        : %s\n",
                   driver, driver, cuda);
            return 0;
        } else {
            fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' "
                            "for help.\n");
            return 2;
        }
    }
    if (mode != NULL)
        return set_compute_mode(id, mode);
    if (id != NULL) {
        fprintf(stderr, "-i selects GPUs for -c only in this simulated nvidia-smi.\n");
        return 2;
    }
    if (fields != NULL)
        return query(fields, format);
    return summary();
}
