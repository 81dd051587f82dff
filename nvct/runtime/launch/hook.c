/* nvct-hook (also nvidia-container-runtime-hook), native: the OCI prestart hook of
 * `docker run --gpus` and of podman's hooks.d, without an interpreter start per container.
 *
 * `prestart` reads the OCI state on stdin and hands it to the shim daemon, whose pre-forked
 * worker pins the container's process (a pidfd, checked to be the child of our own parent,
 * the runtime) and does the Python hook's work with warm modules and caches: the plan, the
 * device cgroup grant, then the rootfs inside the container's mount namespace. The worker's
 * answer is our exit status: a failure of the work fails the hook (the container does not
 * start), never silently gives a container without its GPUs.
 *
 * When no daemon answers, or it declines before touching anything (not root, another
 * namespace, other nvct code, any doubt about the process), the Python hook runs here with
 * the same state on its stdin. Every other stage (poststart, poststop, procfs) and anything
 * unexpected goes to the Python hook as well.
 *
 * Built by `python -m nvct.runtime.launch.build --native --hook`; the generated header gives
 * NVCT_PYTHON (the Python hook), NVCT_DEFAULT_CONFIG, NVCT_SOCKET and NVCT_CODE_ID.
 */
#define _GNU_SOURCE
#define PROGRAM "nvct-hook"
#include NVCT_LAUNCHER_CONFIG

#include "client.h"
#include "json.h"
#include "rootfs.h"
#include "native.h"
#include "devcg.h"
#include "procdrv.h"
#include "nativehook.h"

/* runc's state holds an id, a pid, a bundle path and annotations: far below this. */
#define MAX_STATE (1 << 20)

/* stdin, whole; exits with an error line when it cannot be read. */
static char *read_state(size_t *size)
{
    char *buf = read_all(STDIN_FILENO, MAX_STATE, size);
    if (!buf && errno == EFBIG)
        fail("OCI state on stdin is larger than 1048576 bytes",
             "check the runtime that runs nvct-hook");
    if (!buf && errno == ENOMEM)
        fail("out of memory", "free memory");
    if (!buf)
        fail("cannot read the OCI state on stdin", "run nvct-hook as an OCI hook");
    return buf;
}

/* --- The state's "bundle", read with json.h's strict scanner: anything it does not accept
 * makes the hook do what it did before it read the bundle itself, never end early. */

/* The top-level "bundle" string of the OCI state into `out`: 0, or -1 (see above); its "id"
 * into `id` and its "pid" into `*pid` where they are there to read (else "" and 0). */
static int state_bundle(const char *state, size_t size, char *out, size_t cap, char *id,
                        size_t id_cap, long *pid)
{
    static const char *const keys[] = {"bundle", "id", "pid", NULL};
    const char *end = state + size, *value[3];
    const char *after = json_members(state, end, keys, value);
    if (!after || ws(after, end) != end || !value[0] || !json_string(value[0], end, out, cap))
        return -1;
    id[0] = '\0';
    *pid = 0;
    if (value[1] && !json_string(value[1], end, id, id_cap))
        id[0] = '\0';
    const char *num_end = value[2] ? json_number(value[2], end) : NULL;
    if (num_end && num_end - value[2] < 12 && *value[2] != '-' &&
        !memchr(value[2], '.', (size_t)(num_end - value[2])) &&
        !memchr(value[2], 'e', (size_t)(num_end - value[2])) &&
        !memchr(value[2], 'E', (size_t)(num_end - value[2])))
        *pid = strtol(value[2], NULL, 10);
    return 0;
}

int main(int argc, char **argv)
{
    const char *env_cfg = getenv("NVCT_CONFIG");
    if (!(env_cfg && env_cfg[0]) && strcmp(NVCT_DEFAULT_CONFIG, "/etc/nvct/config.toml") != 0)
        setenv("NVCT_CONFIG", NVCT_DEFAULT_CONFIG, 1); /* a hook made for another config */
    const char *stage = "";
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') {
            stage = argv[i];
            break;
        }
    if (strcmp(stage, "prestart") != 0)
        exec_python(argv + 1, argc - 1);

    size_t size = 0;
    char *state = read_state(&size);
    /* A NUL would end the payload early: only the Python hook may judge such input. */
    if (!memchr(state, '\0', size)) {
        /* A container that asks for no GPU (podman's hooks.d runs this hook for every one)
         * ends here, as the Python hook would end after its plan: no daemon, no Python. */
        char bundle[PATH_MAX], id[1024];
        long pid = 0;
        if (state_bundle(state, size, bundle, sizeof bundle, id, sizeof id, &pid) == 0 &&
            bundle[0] == '/') {
            size_t len = 0;
            char *spec = bundle_spec(bundle, &len);
            if (!asks_for_gpus(spec, len)) {
                free(spec);
                return 0;
            }
#ifndef NVCT_NO_NATIVE_HOOK
            /* A kind of container done before: here, with no daemon and no Python. */
            const char *cfg = getenv("NVCT_CONFIG");
            int rc = native_prestart(bundle, pid, spec, len,
                                     cfg && cfg[0] ? cfg : NVCT_DEFAULT_CONFIG, id);
            if (rc >= 0)
                return rc;
            /* Whoever does it asks for this kind's entry, for the next one. */
            ask_for_entry();
#else
            /* The tests' and benches' build that always hands the work on: the native path
             * is compiled (so it cannot rot) but never taken. */
            (void)native_prestart;
            (void)ask_for_entry;
            free(spec);
#endif
        }
        char reply[256];
        int timed_out;
        if (ask_daemon("prestart", state, size, argv + 1, argc - 1, reply, sizeof reply,
                       &timed_out)) {
            char *end = NULL;
            long rc = strncmp(reply, "exit ", 5) == 0 ? strtol(reply + 5, &end, 10) : -1;
            if (end && end > reply + 5 && !*end && rc >= 0 && rc < 256)
                return (int)rc;
            fail_no_answer(timed_out); /* it may have begun: never run the work twice */
        }
    }
    state_to_stdin(state, size);
    exec_python(argv + 1, argc - 1);
    return 127;
}
