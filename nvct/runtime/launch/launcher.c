/* nvct-runtime, native launcher.
 *
 * containerd calls the runtime about 4 times per container (create, start, state, delete).
 * Every call but a GPU container's create is exec'd straight to runc/crun from here, with no
 * interpreter and no child process. A GPU container's create is prepared by nvct's Python
 * shim: by the resident shim daemon when one answers on the socket below (its modules and
 * caches are warm, so a create costs a fork, not an interpreter start), else by starting
 * the shim here. The daemon prepares the bundle and names the runtime; this process then
 * execs it with its own argv, environment and file descriptors, so runc cannot tell the two
 * paths apart. The behaviour mirrors launcher.sh, the launcher for hosts with no compiler.
 *
 * Built by `python -m nvct.runtime.launch.build --native`, which generates the header with:
 *   NVCT_PYTHON       argv (NULL-terminated) that runs the Python shim;
 *   NVCT_DEFAULT_CONFIG  the config used when NVCT_CONFIG is unset;
 *   NVCT_SOCKET       the daemon's socket ("" = never ask a daemon);
 *   NVCT_CODE_ID      identity of the nvct code this launcher belongs to: a daemon running
 *                     other code (an upgrade it missed) declines, and the shim runs here.
 */
#define _GNU_SOURCE
#define PROGRAM "nvct-runtime"
#include NVCT_LAUNCHER_CONFIG

#include "client.h"

/* NVCT_MARKERS, NVCT_GLOBAL_VALUE_FLAGS, NVCT_BUNDLE_FLAGS, NVCT_SUB_VALUE_FLAGS,
 * NVCT_SEARCH_DIRS and NVCT_RUNTIMES (NULL-terminated) come with the generated header, from the
 * Python shim's own constants (nvct.runtime.launch.tables): they cannot drift from it. */

#define MAX_LOW_LEVEL 16

static int only_comment(const char *p)
{
    p += strspn(p, " \t\r");
    return *p == '\0' || *p == '#';
}

/* `low-level = ["crun", '/usr/local/sbin/runc']` from `p` (the start of the key): the names,
 * NUL-terminated in place, into `names`; their count, or -1 for anything else. */
static int parse_list(char *p, const char **names, int max)
{
    p += strlen("low-level");
    p += strspn(p, " \t");
    if (*p++ != '=')
        return -1;
    p += strspn(p, " \t");
    if (*p++ != '[')
        return -1;
    int count = 0;
    for (;;) {
        p += strspn(p, " \t");
        if (*p == ']')
            break;
        char quote = *p;
        if ((quote != '"' && quote != '\'') || count == max)
            return -1;
        char *name = ++p;
        char *close = strchr(name, quote);
        if (!close || close == name || memchr(name, '\\', (size_t)(close - name)))
            return -1;
        *close = '\0';
        names[count++] = name;
        p = close + 1;
        p += strspn(p, " \t");
        if (*p == ',')
            p++;
        else if (*p != ']')
            return -1;
    }
    return count > 0 && only_comment(p + 1) ? count : -1;
}

/* The config's [runtime] low-level list, read here when it is written plainly on one line
 * (basic or literal strings without escapes): the count of names put in `names` (they point
 * into `*text`, which stays allocated); 0 when the config names no list (runc, then crun);
 * -1 for any other spelling, which only the TOML parser (the Python shim) may read. */
static int config_low_level(const char *cfg, char **text, const char **names, int max)
{
    static const char KEY_CHARS[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    size_t size = 0;
    *text = read_file(cfg, &size);
    if (!*text || !memmem(*text, size, "low-level", 9))
        return 0;
    if (memmem(*text, size, "\"\"\"", 3) || memmem(*text, size, "'''", 3))
        return -1; /* a multi-line string could hold anything */
    int in_runtime = 0, count = 0;
    for (char *line = *text; line < *text + size;) {
        char *end = memchr(line, '\n', (size_t)(*text + size - line));
        if (end)
            *end = '\0';
        char *p = line + strspn(line, " \t");
        if (*p == '[') { /* a table header: [runtime], [ runtime ] # ... */
            char *q = p + 1 + strspn(p + 1, " \t");
            size_t len = strspn(q, KEY_CHARS);
            char *after = q + len + strspn(q + len, " \t");
            int plain = len > 0 && *after == ']' && only_comment(after + 1);
            if (!plain && strstr(p, "runtime"))
                return -1; /* ["runtime"], [[runtime]]: the parser decides */
            in_runtime = plain && len == 7 && strncmp(q, "runtime", 7) == 0;
        } else if (strncmp(p, "low-level", 9) == 0 && p[9] && strchr(" \t=", p[9])) {
            if (!in_runtime || count)
                return -1;
            count = parse_list(p, names, max);
            if (count < 0)
                return -1;
        } else if (*p != '#' && strstr(p, "low-level")) {
            char *eq = strchr(p, '=');
            if (!eq || strstr(p, "low-level") < eq)
                return -1; /* in a key: quoted, dotted (runtime.low-level), ... */
        }
        if (!end)
            break;
        line = end + 1;
    }
    return count;
}

static int is_runnable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Whether `path` is an executable file other than this launcher (`self`, resolved). */
static int usable(const char *path, const char *self)
{
    char real[PATH_MAX];
    return is_runnable(path) && !(self[0] && realpath(path, real) && strcmp(real, self) == 0);
}

/* The first of `names` found, into `out`: a path as it is, a name in PATH, then in the usual
 * sbin and bin directories (the shim's own order, nvct.runtime.lowlevel). 0, or -1. */
static int find_first(const char *const *names, int count, char *out, size_t cap)
{
    char self[PATH_MAX] = "";
    if (!realpath("/proc/self/exe", self))
        self[0] = '\0';
    const char *path_env = getenv("PATH");
    char candidate[PATH_MAX];
    for (int i = 0; i < count; i++) {
        if (strchr(names[i], '/')) {
            if (usable(names[i], self) && snprintf(out, cap, "%s", names[i]) < (int)cap)
                return 0;
            continue;
        }
        char *dirs = strdup(path_env ? path_env : "");
        if (!dirs)
            fail("out of memory", "free memory");
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (snprintf(candidate, sizeof candidate, "%s/%s", d, names[i]) <
                    (int)sizeof candidate &&
                usable(candidate, self) && snprintf(out, cap, "%s", candidate) < (int)cap) {
                free(dirs);
                return 0;
            }
        free(dirs);
        for (int k = 0; NVCT_SEARCH_DIRS[k]; k++)
            if (snprintf(candidate, sizeof candidate, "%s/%s", NVCT_SEARCH_DIRS[k], names[i]) <
                    (int)sizeof candidate &&
                usable(candidate, self) && snprintf(out, cap, "%s", candidate) < (int)cap)
                return 0;
    }
    return -1;
}

/* Exec the first of `names` found (returns when none is, or it cannot be run). */
static void exec_first(const char *const *names, int count, char **args, int n)
{
    char found[PATH_MAX];
    if (find_first(names, count, found, sizeof found) < 0)
        return;
    const char *head = found; /* argv[0] becomes the runtime found */
    char **argv = argv_of(&head, 1, args, n);
    execv(found, argv);
}

/* Exec the low-level runtime a create was prepared for; the bundle is prepared, so a
 * runtime that cannot run fails the create. */
static void exec_runtime(const char *runtime, char **args, int n)
{
    char **argv = argv_of(&runtime, 1, args, n);
    execv(argv[0], argv);
    fprintf(stderr, "nvct-runtime: error: cannot run %s: %s (fix: check [runtime] low-level in "
                    "nvct's config.toml)\n",
            argv[0], strerror(errno));
    exit(1);
}

#include "json.h"
#include "rootfs.h"
#include "native.h"
#include "nativecreate.h"

/* Exec the low-level runtime for a call that needs no GPU work; the Python shim when only it
 * can tell which (a low-level list spelled otherwise) or when none is found (its error names
 * the fix). */
static void exec_low_level(const char *cfg, char **args, int n)
{
    const char *names[MAX_LOW_LEVEL];
    char *text = NULL;
    int count = config_low_level(cfg, &text, names, MAX_LOW_LEVEL);
    if (count == 0) {
        int defaults = 0;
        while (NVCT_RUNTIMES[defaults])
            defaults++;
        exec_first(NVCT_RUNTIMES, defaults, args, n);
    }
    else if (count > 0)
        exec_first(names, count, args, n);
    exec_python(args, n);
}

/* Ask the shim daemon to prepare the bundle. Returns only when the shim must run here
 * instead (no daemon, or one that declined before touching anything); else execs or exits. */
static void prepare_by_daemon(char **args, int n)
{
    char reply[PATH_MAX + 64];
    int timed_out;
    if (!ask_daemon("create", "", 0, args, n, reply, sizeof reply, &timed_out))
        return;
    if (strncmp(reply, "exec ", 5) == 0) {
        unsetenv(NVCT_NATIVE_ENV); /* the shim's to read, not runc's */
        exec_runtime(reply + 5, args, n);
    }
    if (strncmp(reply, "exit ", 5) == 0)
        exit(atoi(reply + 5) ? atoi(reply + 5) : 1);
    /* The daemon may have begun on the bundle: fail closed rather than prepare it twice. */
    fail_no_answer(timed_out);
}

/* --- runc's command line ----------------------------------------------------------------- */

/* runc accepts --flag and -flag alike; `name` is the --flag form */
static int is(const char *a, const char *name)
{
    return strcmp(a, name) == 0 || strcmp(a, name + 1) == 0;
}

static int is_with_value(const char *a, const char *name)
{
    size_t n = strlen(name);
    return (strncmp(a, name, n) == 0 && a[n] == '=') ||
           (strncmp(a, name + 1, n - 1) == 0 && a[n - 1] == '=');
}

static int is_any(const char *a, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (is(a, names[i]))
            return 1;
    return 0;
}

static int is_any_with_value(const char *a, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (is_with_value(a, names[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *env_cfg = getenv("NVCT_CONFIG");
    const char *cfg = env_cfg && env_cfg[0] ? env_cfg : NVCT_DEFAULT_CONFIG;
    if (!(env_cfg && env_cfg[0]) && strcmp(cfg, "/etc/nvct/config.toml") != 0)
        setenv("NVCT_CONFIG", cfg, 1); /* a launcher made for another config */

    /* --nvct-config PATH is ours: runc must not see it */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args)
        fail("out of memory", "free memory");
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nvct-config") == 0) {
            if (i + 1 < argc)
                cfg = argv[++i];
            setenv("NVCT_CONFIG", cfg, 1);
        } else if (strncmp(argv[i], "--nvct-config=", 14) == 0) {
            cfg = argv[i] + 14;
            setenv("NVCT_CONFIG", cfg, 1);
        } else {
            args[n++] = argv[i];
        }
    }

    /* runc's global flags that take a value; the first other non-flag word is the
     * subcommand. After it, --bundle/-b names the bundle (the last one wins, as in runc). */
    const char *sub = NULL, *bundle = ".", *id = "";
    for (int i = 0; i < n; i++) {
        const char *a = args[i];
        if (!sub) {
            if (is_any(a, NVCT_GLOBAL_VALUE_FLAGS))
                i++;
            else if (a[0] != '-')
                sub = a;
        } else if (a[0] != '-') {
            id = a; /* the container's id: the last word that is no flag's value */
        } else if (is_any(a, NVCT_BUNDLE_FLAGS)) {
            if (i + 1 < n)
                bundle = args[i + 1];
            i++;
        } else if (is_any_with_value(a, NVCT_BUNDLE_FLAGS)) {
            bundle = strchr(a, '=') + 1;
        } else if (is_any(a, NVCT_SUB_VALUE_FLAGS)) {
            i++;
        }
    }

    int creates = sub && (strcmp(sub, "create") == 0 || strcmp(sub, "run") == 0);
    size_t size = 0;
    char *spec = creates ? bundle_spec(bundle, &size) : NULL;
    if (creates && asks_for_gpus(spec, size)) {
        native_create(bundle, spec, size, cfg, id, args, n); /* takes `spec` */
        /* The shim writes the native entry for the next create of this kind. */
        ask_for_entry();
        prepare_by_daemon(args, n);
        exec_python(args, n);
    }
    free(spec);
    exec_low_level(cfg, args, n);
    return 127;
}
