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

#include <sys/mman.h>

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

/* --- The state's "bundle", read with a strict JSON scanner: anything it does not accept
 * (malformed JSON, a duplicate or absent "bundle", an escape it cannot decode) makes the hook
 * do what it did before it read the bundle itself, never end early. */

#define MAX_DEPTH 64

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Append code point `cp` as UTF-8 to `out` (`*n` used of `cap`, one kept for the NUL). */
static int put_utf8(char *out, size_t cap, size_t *n, unsigned long cp)
{
    char enc[4];
    size_t k = cp < 0x80      ? (enc[0] = (char)cp, 1)
               : cp < 0x800   ? (enc[0] = (char)(0xC0 | cp >> 6), 2)
               : cp < 0x10000 ? (enc[0] = (char)(0xE0 | cp >> 12), 3)
                              : (enc[0] = (char)(0xF0 | cp >> 18), 4);
    for (size_t i = 1; i < k; i++)
        enc[i] = (char)(0x80 | ((cp >> (6 * (k - 1 - i))) & 0x3F));
    if (!out)
        return 0;
    if (*n + k >= cap)
        return -1;
    memcpy(out + *n, enc, k);
    *n += k;
    return 0;
}

/* The JSON string at `p` (its opening quote), decoded into `out` (NUL-terminated) unless
 * `out` is NULL; the position after it, or NULL when it is malformed, too long for `cap`, or
 * holds an escaped NUL (which no path can hold). */
static const char *json_string(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        unsigned long cp = c;
        if (c == '"') {
            if (out)
                out[n] = '\0';
            return p + 1;
        }
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            if (++p >= end)
                return NULL;
            unsigned u, low;
            switch (*p) {
            case '"': case '\\': case '/': cp = (unsigned char)*p; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (hex4(p + 1, end, &u) < 0)
                    return NULL;
                p += 4;
                cp = u;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a surrogate pair, or nothing */
                    if (end - p < 7 || p[1] != '\\' || p[2] != 'u' ||
                        hex4(p + 3, end, &low) < 0 || low < 0xDC00 || low > 0xDFFF)
                        return NULL;
                    p += 6;
                    cp = 0x10000 + ((unsigned long)(u - 0xD800) << 10) + (low - 0xDC00);
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return NULL;
                }
                break;
            default:
                return NULL;
            }
            if (cp == 0 || put_utf8(out, cap, &n, cp) < 0)
                return NULL;
            continue;
        }
        if (out) {
            if (n + 1 >= cap)
                return NULL;
            out[n++] = (char)c;
        }
    }
    return NULL;
}

static const char *digits(const char *p, const char *end)
{
    const char *start = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p > start ? p : NULL;
}

/* Past the JSON number at `p` (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or NULL. */
static const char *json_number(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0')
        p++;
    else if (!(p = digits(p, end)))
        return NULL;
    if (p < end && *p == '.' && !(p = digits(p + 1, end)))
        return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!(p = digits(p, end)))
            return NULL;
    }
    return p;
}

/* Past the JSON value at `p`; NULL when it is malformed or nested deeper than MAX_DEPTH. */
static const char *json_skip(const char *p, const char *end, int depth)
{
    p = ws(p, end);
    if (p >= end || depth > MAX_DEPTH)
        return NULL;
    if (*p == '"')
        return json_string(p, end, NULL, 0);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_string(ws(p, end), end, NULL, 0);
                if (!p)
                    return NULL;
                p = ws(p, end);
                if (p >= end || *p++ != ':')
                    return NULL;
            }
            p = json_skip(p, end, depth + 1);
            if (!p)
                return NULL;
            p = ws(p, end);
            if (p >= end)
                return NULL;
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    static const char *const literals[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(literals[i]);
        if ((size_t)(end - p) >= n && memcmp(p, literals[i], n) == 0)
            return p + n;
    }
    return json_number(p, end);
}

/* The top-level "bundle" string of the OCI state into `out`: 0, or -1 (see above). */
static int state_bundle(const char *state, size_t size, char *out, size_t cap)
{
    const char *p = ws(state, state + size), *end = state + size;
    int found = 0;
    if (p >= end || *p++ != '{')
        return -1;
    p = ws(p, end);
    if (p < end && *p == '}')
        return -1;
    for (;;) {
        char key[sizeof "bundle" + 1];
        const char *after = json_string(ws(p, end), end, key, sizeof key);
        int is_bundle = after && strcmp(key, "bundle") == 0;
        if (!after && !(after = json_string(ws(p, end), end, NULL, 0)))
            return -1; /* not a string: a longer key was what did not fit */
        p = ws(after, end);
        if (p >= end || *p++ != ':')
            return -1;
        p = ws(p, end);
        if (is_bundle) {
            if (found || !(p = json_string(p, end, out, cap)))
                return -1;
            found = 1;
        } else if (!(p = json_skip(p, end, 0))) {
            return -1;
        }
        p = ws(p, end);
        if (p >= end)
            return -1;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return -1;
    }
    return found && ws(p + 1, end) == end ? 0 : -1;
}

/* Give the Python hook the state we read: a memory file as its stdin. */
static void state_to_stdin(const char *state, size_t size)
{
    int fd = memfd_create("nvct-oci-state", MFD_CLOEXEC);
    if (fd < 0 || write_all(fd, state, size, 0) < 0 || lseek(fd, 0, SEEK_SET) != 0 ||
        dup2(fd, STDIN_FILENO) < 0)
        fail("cannot hand the OCI state to the Python hook", "free memory");
    close(fd);
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
        char bundle[PATH_MAX];
        if (state_bundle(state, size, bundle, sizeof bundle) == 0 && bundle[0] == '/' &&
            !asks_for_gpus(bundle))
            return 0;
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
