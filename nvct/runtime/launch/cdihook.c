/* nvct-cdi-hook, native: the createContainer hook of nvct's CDI specs (nvct-cli cdi generate,
 * the device plugin's, DRA's), without an interpreter start per container.
 *
 * It does what the Python hook (nvct.hook.cdi) does, in the same order, on the same terms:
 * the spec's SONAME links (an existing symlink of that name replaced, an image file kept),
 * the --ld-conf directories listed in the image's /etc/ld.so.conf.d, then the ld.so.cache:
 * the entries the spec's planner put in NVCT_LD_CACHE_ENV merged into the image's own cache
 * in ldconfig's order (nvct.base.ldcache_format says why and how), written beside it and
 * renamed over it. Every path is resolved inside the container's root with
 * openat2(RESOLVE_IN_ROOT), and every file is made with an *at call under a descriptor so
 * resolved: an image's symlink never leads out of its root. No program of the image runs.
 *
 * Anything else is the Python hook's, which gets the same arguments, environment and state:
 * an argument it does not know, a state or config.json its scanner does not take whole, a
 * kernel without openat2, a directory to make through a dangling symlink, no entries or no
 * cache in the image (ldconfig must run), a cache the merge cannot match ldconfig on (a
 * SONAME the image lists already, glibc-hwcaps entries, names outside ASCII), or any failed
 * call. The cache is written last and whole, so what was done before is done again the same
 * way there.
 *
 * Built by `python -m nvct.runtime.launch.build --native --cdi-hook`; the generated header
 * gives NVCT_PYTHON (the Python hook) and NVCT_LD_CACHE_ENV.
 */
#define _GNU_SOURCE
#define PROGRAM "nvct-cdi-hook"
#include NVCT_LAUNCHER_CONFIG

/* client.h also holds what the programs that ask the shim daemon need; this one never does. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "client.h"
#include "json.h"

#include "rootfs.h"

#define MAX_STATE (1 << 20)

struct args {
    struct link *links;
    int nlinks, ldconfig_dirs;
    const char **conf;
    int nconf;
};

/* --- Arguments: exactly the Python hook's; anything else is its to say. */

static int parse_args(int argc, char **argv, struct args *a)
{
    a->links = calloc((size_t)argc, sizeof *a->links);
    a->conf = calloc((size_t)argc, sizeof *a->conf);
    if (!a->links || !a->conf)
        return -1;
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value)
            return -1;
        if (strcmp(flag, "--symlink") == 0) {
            const char *sep = strstr(value, "::");
            char *target = sep && sep != value ? strndup(value, (size_t)(sep - value)) : NULL;
            if (!target || sep[2] != '/')
                return -1; /* argv stays whole: the Python hook may get it */
            a->links[a->nlinks++] = (struct link){target, sep + 2};
        } else if (strcmp(flag, "--ldconfig-dir") == 0 || strcmp(flag, "--ld-conf") == 0) {
            if (value[0] != '/' || strchr(value, '\n'))
                return -1;
            if (strcmp(flag, "--ldconfig-dir") == 0)
                a->ldconfig_dirs++; /* the Python hook's ldconfig run names them; here a count */
            else
                a->conf[a->nconf++] = value;
        } else if (strcmp(flag, "--ldconfig") != 0 || value[0] != '/') {
            return -1;
        }
    }
    return 0;
}

/* --- The container's root, as the Python hook finds it: the state's "root" (crun adds it),
 * else root.path of <bundle>/config.json, relative to the bundle. */

static int string_at(const char *value, const char *end, char *out, size_t cap)
{
    return value && json_string(value, end, out, cap) && out[0] ? 0 : -1;
}

static int container_root(const char *state, size_t size, char *out, size_t cap)
{
    static const char *const keys[] = {"bundle", "bundlePath", "root", NULL};
    static const char *const root_key[] = {"root", NULL}, *const path_key[] = {"path", NULL};
    const char *end = state + size, *values[3], *root[1], *path[1];
    char bundle[PATH_MAX], rel[PATH_MAX];
    const char *after = json_members(state, end, keys, values);
    if (!after || ws(after, end) != end)
        return -1;
    if (string_at(values[0] ? values[0] : values[1], end, bundle, sizeof bundle) < 0 ||
        bundle[0] != '/')
        return -1;
    rel[0] = '\0'; /* a "root" that is no string, or an empty one, counts for nothing */
    if (values[2] && *values[2] == '"' && !json_string(values[2], end, rel, sizeof rel))
        return -1;
    if (!rel[0]) {
        char config[PATH_MAX];
        size_t len = 0;
        if (snprintf(config, sizeof config, "%s/config.json", bundle) >= (int)sizeof config)
            return -1;
        char *spec = read_file(config, &len);
        if (!spec)
            return -1;
        const char *send = spec + len;
        int ok = !memchr(spec, '\0', len) && (after = json_members(spec, send, root_key, root)) &&
                 ws(after, send) == send && root[0] && *root[0] == '{' &&
                 json_members(root[0], send, path_key, path) &&
                 string_at(path[0], send, rel, sizeof rel) == 0;
        free(spec);
        if (!ok)
            return -1;
    }
    int n = rel[0] == '/' ? snprintf(out, cap, "%s", rel) : snprintf(out, cap, "%s/%s", bundle, rel);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}


/* The image's cache with the planner's entries merged, written over it: 0, or -1. */
static int merge_cache(int root)
{
    const char *text = getenv(NVCT_LD_CACHE_ENV);
    struct entry *extra = NULL;
    char *store = NULL;
    struct buf out = {0};
    int missing, rc = -1;
    int n = text && text[0] ? parse_entries(text, &extra, &store) : -1;
    if (n > 0 && merged_cache(root, extra, n, &out, &missing) == 0)
        rc = write_image_cache(root, &out); /* none, unreadable, no cache: ldconfig decides */
    free(out.data);
    free(extra);
    free(store);
    return rc;
}


/* The Python hook, with the state we read as its stdin and our arguments; never returns. */
static void python_hook(const char *state, size_t size, char **argv, int argc)
{
    state_to_stdin(state, size);
    exec_python(argv + 1, argc - 1);
}

int main(int argc, char **argv)
{
    struct args a = {0};
    size_t size = 0;
    if (chdir("/") < 0)
        fail("cannot change to /", "check the runtime that runs nvct-cdi-hook");
    char *state = read_all(STDIN_FILENO, MAX_STATE, &size);
    if (!state)
        fail("cannot read the OCI state on stdin (at most 1 MiB)", "run nvct-cdi-hook as an "
             "OCI hook");
    char rootfs[PATH_MAX];
    if (parse_args(argc, argv, &a) < 0 || memchr(state, '\0', size) ||
        container_root(state, size, rootfs, sizeof rootfs) < 0)
        python_hook(state, size, argv, argc);
    int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0 || make_links(root, a.links, a.nlinks) < 0 || (a.nconf && write_ld_conf(root, a.conf, a.nconf) < 0))
        python_hook(state, size, argv, argc); /* openat2's ENOSYS included */
    if (a.ldconfig_dirs && merge_cache(root) < 0)
        python_hook(state, size, argv, argc);
    return 0;
}
