/* The simulated driver's mutable state, read from the control directory that tests write
 * (integration/simdriver/inject.py documents the files). Re-read on every NVML call, so a
 * test's change applies at once; nothing is cached across calls.
 *
 * <ctl> is $NVCT_SIM_CONTROL_DIR when set, else SIM_BUILD_CONTROL_DIR (compiled in).
 */
#ifndef SIMCONTROL_H
#define SIMCONTROL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_MAX_MINOR 64

static void sim_ctl_path(char *out, size_t n, const char *name)
{
    const char *env = getenv("NVCT_SIM_CONTROL_DIR");

    snprintf(out, n, "%s/%s", (env != NULL && env[0] != '\0') ? env : SIM_BUILD_CONTROL_DIR, name);
}

static void sim_sleep_ms(long ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static long sim_read_long(const char *name, long dflt)
{
    char path[4608];
    FILE *f;
    long v;

    sim_ctl_path(path, sizeof(path), name);
    f = fopen(path, "r");
    if (f == NULL)
        return dflt;
    if (fscanf(f, "%ld", &v) != 1)
        v = dflt;
    fclose(f);
    return v;
}

/* The "slow NVML" knob: each call sleeps slow_ms first. */
static void sim_slow(void) { sim_sleep_ms(sim_read_long("slow_ms", 0)); }

/* The "flaky NVML" knob: <ctl>/flaky/<minor> holds a per-mille; each query on that GPU fails
 * that often (1000: every one). rand() is never seeded, so a process's run is repeatable. */
static int sim_flaky(unsigned minor)
{
    char name[32];
    long permille;

    snprintf(name, sizeof(name), "flaky/%u", minor);
    permille = sim_read_long(name, 0);
    return permille >= 1000 || (permille > 0 && rand() % 1000 < permille);
}

#define SIM_NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId/computeInstanceId of a whole-GPU event */

typedef struct {
    char kind[16]; /* xid, dbe, lost, recover */
    unsigned minor;
    unsigned long long data;
    unsigned gi, ci; /* the MIG device an event names; SIM_NO_INSTANCE: the whole GPU */
} sim_event_t;

/* Reads the event at byte offset *off of <ctl>/events; 1 and advances *off, or 0 at the end
 * (a partial last line is left for later). A file shorter than *off was reset: start over. */
static int sim_next_event(FILE *f, long *off, sim_event_t *ev)
{
    char line[256];
    long end;

    if (fseek(f, 0, SEEK_END) != 0)
        return 0;
    end = ftell(f);
    if (end < *off)
        *off = 0;
    while (*off < end) {
        if (fseek(f, *off, SEEK_SET) != 0 || fgets(line, sizeof(line), f) == NULL)
            return 0;
        if (strchr(line, '\n') == NULL)
            return 0;
        *off += (long)strlen(line);
        ev->data = 0;
        ev->gi = ev->ci = SIM_NO_INSTANCE;
        if (sscanf(line, "%15s %u %llu %u %u", ev->kind, &ev->minor, &ev->data, &ev->gi,
                   &ev->ci) >= 2)
            return 1;
    }
    return 0;
}

static FILE *sim_open_events(void)
{
    char path[4608];

    sim_ctl_path(path, sizeof(path), "events");
    return fopen(path, "r");
}

/* 1 if GPU `minor` is lost now: its last lost/recover event says lost. */
static int sim_gpu_lost(unsigned minor)
{
    FILE *f = sim_open_events();
    sim_event_t ev;
    long off = 0;
    int lost = 0;

    if (f == NULL)
        return 0;
    while (sim_next_event(f, &off, &ev))
        if (ev.minor == minor) {
            if (strcmp(ev.kind, "lost") == 0)
                lost = 1;
            else if (strcmp(ev.kind, "recover") == 0)
                lost = 0;
        }
    fclose(f);
    return lost;
}

/* A metric of GPU `minor` from <ctl>/metrics/<minor> ("key value" lines), or dflt. */
static unsigned long long sim_metric(unsigned minor, const char *key, unsigned long long dflt)
{
    char path[4608], name[64], k[64];
    unsigned long long v, out = dflt;
    FILE *f;

    snprintf(name, sizeof(name), "metrics/%u", minor);
    sim_ctl_path(path, sizeof(path), name);
    f = fopen(path, "r");
    if (f == NULL)
        return dflt;
    while (fscanf(f, "%63s %llu", k, &v) == 2)
        if (strcmp(k, key) == 0)
            out = v;
    fclose(f);
    return out;
}

#endif
