/* Simulated nvidia-cuda-mps-control: `-d` (or `-f`, foreground) runs the control daemon, which
 * takes commands through the FIFO $CUDA_MPS_PIPE_DIRECTORY/control (default /tmp/nvidia-mps),
 * logs to $CUDA_MPS_LOG_DIRECTORY/control.log (default /var/log/nvidia-mps), keeps the
 * defaults it is given, records every command to <control dir>/mps-commands and exits on
 * `quit`. Without arguments it is the client: each stdin line is sent to the daemon and its
 * answer printed, as `echo quit | nvidia-cuda-mps-control` does with the real one. A client
 * names its answer FIFO within the pipe directory, so a client in a container that mounts
 * the directory elsewhere is answered too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "oldglibc.h"
#include "simcommon.h"
#include "simcontrol.h"

#define LINE 1024
#define MAX_LIMITS 64

static char pipe_dir[2048], log_dir[2048];
static double thread_pct = 100.0;
static char limit_dev[MAX_LIMITS][128], limit_val[MAX_LIMITS][64];
static int nlimits;

static void dirs(void)
{
    const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY"), *l = getenv("CUDA_MPS_LOG_DIRECTORY");

    snprintf(pipe_dir, sizeof(pipe_dir), "%s", p && *p ? p : "/tmp/nvidia-mps");
    snprintf(log_dir, sizeof(log_dir), "%s", l && *l ? l : "/var/log/nvidia-mps");
}

static void path_in(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static void logf_line(const char *what)
{
    char path[4096];
    FILE *f;
    time_t now = time(NULL);
    struct tm tm;
    char stamp[64];

    path_in(path, sizeof(path), log_dir, "control.log");
    f = fopen(path, "a");
    if (f == NULL)
        return;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(f, "[%s.000 Control %6d] %s\n", stamp, (int)getpid(), what);
    fclose(f);
}

/* What tests read: "<pipe dir>\t<command>" a line, in the simulated driver's control dir. */
static void record(const char *cmd)
{
    char path[4608];
    FILE *f;

    sim_ctl_path(path, sizeof(path), "mps-commands");
    f = fopen(path, "a");
    if (f == NULL)
        return;
    fprintf(f, "%s\t%s\n", pipe_dir, cmd);
    fclose(f);
}

/* A pinned-memory limit as driver 580's daemon prints it: in its largest whole unit,
 * truncated (set to 40779M, it answers 39G). */
static void print_limit(const char *value, char *out, size_t n)
{
    char *end;
    long long mib = strtoll(value, &end, 10);

    if (*end == 'G' || *end == 'g')
        mib *= 1024;
    if (mib >= 1024)
        snprintf(out, n, "%lldG\n", mib / 1024);
    else
        snprintf(out, n, "%lldM\n", mib);
}

/* Answers one command into out; returns 1 on quit. */
static int handle(const char *cmd, char *out, size_t n)
{
    char verb[64] = "", a[128] = "", b[64] = "";
    int i;

    out[0] = '\0';
    sscanf(cmd, "%63s %127s %63s", verb, a, b);
    if (strcmp(verb, "quit") == 0)
        return 1;
    if (strcmp(verb, "get_server_list") == 0 || strcmp(verb, "start_server") == 0 ||
        strcmp(verb, "shutdown_server") == 0 || strcmp(verb, "get_device_client_list") == 0)
        return 0;
    if (strcmp(verb, "set_default_active_thread_percentage") == 0 && a[0]) {
        thread_pct = atof(a);
        snprintf(out, n, "%.1f\n", thread_pct);
    } else if (strcmp(verb, "get_default_active_thread_percentage") == 0) {
        snprintf(out, n, "%.1f\n", thread_pct);
    } else if (strcmp(verb, "set_default_device_pinned_mem_limit") == 0 && a[0] && b[0]) {
        for (i = 0; i < nlimits && strcmp(limit_dev[i], a) != 0; i++)
            ;
        if (i == nlimits && nlimits < MAX_LIMITS)
            nlimits++;
        if (i < MAX_LIMITS) {
            snprintf(limit_dev[i], sizeof(limit_dev[i]), "%s", a);
            snprintf(limit_val[i], sizeof(limit_val[i]), "%s", b);
        }
    } else if (strcmp(verb, "get_default_device_pinned_mem_limit") == 0 && a[0]) {
        for (i = 0; i < nlimits; i++)
            if (strcmp(limit_dev[i], a) == 0) {
                print_limit(limit_val[i], out, n);
                return 0;
            }
        snprintf(out, n, "0\n");
    } else {
        snprintf(out, n, "Unrecognized command: %s\n", cmd);
    }
    return 0;
}

static int daemon_main(int foreground)
{
    char ctl[4096], pidf[4096], line[LINE + 4200], resp[4096], out[LINE];
    FILE *in;
    int fd, quit = 0;
    char *tab;

    mkdir(pipe_dir, 0755);
    mkdir(log_dir, 0755);
    path_in(ctl, sizeof(ctl), pipe_dir, "control");
    path_in(pidf, sizeof(pidf), pipe_dir, "nvidia-cuda-mps-control.pid");
    fd = open(ctl, O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
        close(fd);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    unlink(ctl);
    if (mkfifo(ctl, 0666) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", ctl, strerror(errno));
        return 1;
    }
    if (!foreground) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid > 0)
            return 0;
        setsid();
        fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0);
            dup2(fd, 1);
            dup2(fd, 2);
        }
    }
    in = fopen(pidf, "w");
    if (in != NULL) {
        fprintf(in, "%d\n", (int)getpid());
        fclose(in);
    }
    logf_line("Starting control daemon");
    /* O_RDWR: the daemon is its own writer, so reads block instead of seeing EOF. */
    fd = open(ctl, O_RDWR);
    in = fd < 0 ? NULL : fdopen(fd, "r");
    while (in != NULL && !quit && fgets(line, sizeof(line), in) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        tab = strchr(line, '\t');
        if (tab == NULL)
            continue;
        *tab = '\0';
        if (strchr(line, '/') != NULL) /* a name in the pipe directory, never a path */
            continue;
        path_in(resp, sizeof(resp), pipe_dir, line);
        record(tab + 1);
        logf_line(tab + 1);
        quit = handle(tab + 1, out, sizeof(out));
        fd = open(resp, O_WRONLY);
        if (fd >= 0) {
            if (write(fd, out, strlen(out)) < 0)
                ;
            close(fd);
        }
    }
    unlink(ctl);
    unlink(pidf);
    logf_line("Exiting control daemon");
    return 0;
}

static int client_main(void)
{
    char ctl[4096], resp[4096], cmd[LINE], req[LINE + 4200], buf[4096], name[64];
    struct timespec now;
    int fd, rc = 0;
    ssize_t n;

    path_in(ctl, sizeof(ctl), pipe_dir, "control");
    /* The answer's FIFO is named relative to the pipe directory: the daemon and a client in a
     * container see that directory at different paths (as the real MPS's sockets there are
     * found by both). Pid and time: clients of other PID namespaces may share a pid. */
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, sizeof(name), ".client.%d.%ld", (int)getpid(), (long)now.tv_nsec);
    path_in(resp, sizeof(resp), pipe_dir, name);
    while (fgets(cmd, sizeof(cmd), stdin) != NULL) {
        cmd[strcspn(cmd, "\n")] = '\0';
        if (cmd[0] == '\0')
            continue;
        fd = open(ctl, O_WRONLY | O_NONBLOCK);
        if (fd < 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        unlink(resp);
        if (mkfifo(resp, 0600) != 0) {
            close(fd);
            return 1;
        }
        snprintf(req, sizeof(req), "%s\t%s\n", name, cmd);
        if (write(fd, req, strlen(req)) < 0)
            rc = 1;
        close(fd);
        fd = open(resp, O_RDONLY); /* until the daemon answers */
        while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        if (fd >= 0)
            close(fd);
        unlink(resp);
        fflush(stdout);
    }
    return rc;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    dirs();
    if (argc > 1 && strcmp(argv[1], "-d") == 0)
        return daemon_main(0);
    if (argc > 1 && strcmp(argv[1], "-f") == 0)
        return daemon_main(1);
    if (argc > 1) {
        fprintf(stderr, "Usage: nvidia-cuda-mps-control [-d | -f]\n");
        return 1;
    }
    return client_main();
}
