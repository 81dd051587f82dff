/* Native entries: what the Python side did for the first container of a kind
 * (nvct.plan.native_entry), read so that nvct-runtime's launcher (nativecreate.h) and
 * nvct-hook (nativehook.h) do the next one of that kind themselves, with no interpreter. An
 * entry is found by a key of every input its work depends on (the reader's code and kind, the
 * config file's path and bytes, the image's layout, the container's NVIDIA_ and
 * DOCKER_RESOURCE_ variables and CUDA_VERSION, its privilege, its cdi.k8s.io/ annotations),
 * compared byte for byte, and used only while the driver's fingerprint and the CDI specs'
 * stamp, taken again, are those it was written with. Here too: what both readers check of the
 * image before their first write, their writes in the root (rootfs.h) and their log line.
 *
 * Included by launcher.c and hook.c after client.h, json.h and rootfs.h.
 */
#include <dirent.h>
#include <time.h>

#define NATIVE_MAGIC "nvct-native 1\n"

/* Why the native path handed the work on: the first reason met, the innermost, which the
 * Python side logs as `native_declined` (ask_for_entry), so that an admin can see why a kind
 * of container keeps taking the slower path. Also on stderr in a build with
 * -DNVCT_NATIVE_DEBUG (CFLAGS), with the line. */
static const char *native_why;
#ifdef NVCT_NATIVE_DEBUG
#define NOTE_WHY(why)                                                                          \
    (fprintf(stderr, PROGRAM ": native: %s (line %d)\n", why, __LINE__),                      \
     native_why = native_why ? native_why : (why))
#else
#define NOTE_WHY(why) (native_why = native_why ? native_why : (why))
#endif
#define HANDOVER(why)                                                                          \
    do {                                                                                       \
        NOTE_WHY(why);                                                                         \
        goto handover;                                                                         \
    } while (0)
#define DECLINE(why)                                                                           \
    do {                                                                                       \
        NOTE_WHY(why);                                                                         \
        return -1;                                                                             \
    } while (0)

/* NVCT_NATIVE_ENV for the daemon or the Python side that does the work instead: our code id
 * (write the entry for the next one of this kind), then why we did not do it. */
static void ask_for_entry(void)
{
    char value[512];
    snprintf(value, sizeof value, "%s%s%s", NVCT_CODE_ID, native_why ? " " : "",
             native_why ? native_why : "");
    setenv(NVCT_NATIVE_ENV, value, 1);
}
#define NATIVE_KEY_MAGIC "nvct-native-key 1"
#define MAX_ENV_NAME 256

enum {
    F_KEY, F_STAMP, F_ROOTS, F_RUNTIMES, F_LOG, F_MOUNTS, F_MOUNT_DSTS, F_DEVICES,
    F_DEVICE_PATHS, F_RULES, F_MAJORS, F_HOOKS, F_SYMLINKS, F_BINLINKS, F_LIBDIRS, F_LD_CONF,
    F_LD_CACHE, F_COMPAT, F_ENV, F_ENV_NAMES, F_CDI_HOOKS, F_CDI_DIRS, F_CDI_STAMP, F_EVENTS,
    F_BINDS, F_NODES, F_PROC, F_COUNT
};
static const char *const FIELD_NAMES[F_COUNT] = {
    "key", "stamp", "roots", "runtimes", "log", "mounts", "mount-dsts", "devices",
    "device-paths", "rules", "majors", "hooks", "symlinks", "binlinks", "libdirs", "ld-conf",
    "ld-cache", "compat", "env", "env-names", "cdi-hooks", "cdi-dirs", "cdi-stamp", "events",
    "binds", "nodes", "proc"};
#define HOOK_STAGES 6
static const char *const STAGES[HOOK_STAGES + 1] = {
    "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop",
    NULL};

struct field {
    const char *p;
    size_t n;
};

/* `s` without its NUL (client.h's put keeps it: the daemon's requests are NUL-separated). */
static void put_text(struct buf *b, const char *s)
{
    put_bytes(b, s, strlen(s));
}

/* The next NUL-separated item of a field, from `*at`: 1 with `item` set, 0 at its end. Every
 * item is a C string in place: parse_entry ends each field with a NUL. */
static int next_item(const struct field *f, size_t *at, struct field *item)
{
    if (*at >= f->n)
        return 0;
    const char *start = f->p + *at;
    const char *nul = memchr(start, '\0', f->n - *at);
    size_t len = nul ? (size_t)(nul - start) : f->n - *at;
    *item = (struct field){start, len};
    *at += len + 1;
    return 1;
}

static int count_items(const struct field *f)
{
    size_t at = 0;
    int n = 0;
    struct field item;
    while (next_item(f, &at, &item))
        n++;
    return n;
}

static int item_is(const struct field *item, const char *s, size_t n)
{
    return item->n == n && memcmp(item->p, s, n) == 0;
}

/* The items of a field as an array of C strings (NULL-terminated, `*n` of them): NULL when
 * out of memory. */
static const char **items_of(const struct field *f, int *n)
{
    const char **list = malloc(((size_t)count_items(f) + 1) * sizeof *list);
    size_t at = 0;
    struct field item;
    *n = 0;
    if (!list)
        return NULL;
    while (next_item(f, &at, &item))
        list[(*n)++] = item.p;
    list[*n] = NULL;
    return list;
}

/* --- The entry: `name len\n<len bytes>\n` records after the magic line, each field once.
 * Each field's closing newline becomes a NUL, so its items are C strings where they lie. */
static int parse_entry(char *data, size_t size, struct field *fields)
{
    size_t magic = strlen(NATIVE_MAGIC);
    int seen = 0;
    if (size < magic || memcmp(data, NATIVE_MAGIC, magic) != 0)
        return -1;
    for (size_t at = magic; at < size;) {
        const char *nl = memchr(data + at, '\n', size - at);
        const char *sp = nl ? memchr(data + at, ' ', (size_t)(nl - (data + at))) : NULL;
        if (!sp)
            return -1;
        char *endp;
        unsigned long long len = strtoull(sp + 1, &endp, 10);
        size_t body = (size_t)(nl + 1 - data);
        if (endp != nl || len > size - body || body + len >= size || data[body + len] != '\n')
            return -1;
        int which = -1;
        for (int i = 0; i < F_COUNT; i++)
            if ((size_t)(sp - (data + at)) == strlen(FIELD_NAMES[i]) &&
                memcmp(data + at, FIELD_NAMES[i], strlen(FIELD_NAMES[i])) == 0)
                which = i;
        if (which < 0 || (seen & (1 << which)))
            return -1;
        seen |= 1 << which;
        fields[which] = (struct field){data + body, (size_t)len};
        data[body + len] = '\0';
        at = body + len + 1;
    }
    return seen == (1 << F_COUNT) - 1 ? 0 : -1;
}

/* --- The config's cache-dir, as nvct.plan.order_key.cache_dir_of reads its plain forms; NULL
 * for any other (the shim's TOML parser decides) or when caching is off. */
static char *strip(char *s, char *end)
{
    while (s < end && strchr(" \t\r\v\f", *s))
        s++;
    while (end > s && strchr(" \t\r\v\f", end[-1]))
        end--;
    *end = '\0';
    return s;
}

static const char *cache_dir_of(char *raw, size_t size, char *out, size_t cap)
{
    int in_table = 0, found = 0;
    out[0] = '\0';
    if (memmem(raw, size, "\"\"\"", 3) || memmem(raw, size, "'''", 3))
        return NULL;
    for (char *line = raw; line < raw + size;) {
        char *nl = memchr(line, '\n', (size_t)(raw + size - line));
        char *end = nl ? nl : raw + size; /* `raw` is a copy with a NUL after its end */
        char *text = strip(line, end);
        int plain = 0;
        if (!*text || *text == '#') {
            plain = 1;
        } else if (!strstr(text, "cache-dir")) {
            in_table = in_table || *text == '[';
            plain = 1;
        } else if (!in_table && !found && strncmp(text, "cache-dir", 9) == 0) {
            char *p = text + 9 + strspn(text + 9, " \t\r\v\f");
            if (*p == '=') {
                p += 1 + strspn(p + 1, " \t\r\v\f");
                char quote = *p;
                char *close = quote == '"' || quote == '\'' ? strchr(p + 1, quote) : NULL;
                if (close) {
                    char *tail = close + 1 + strspn(close + 1, " \t\r\v\f");
                    size_t len = (size_t)(close - p - 1);
                    if ((*tail == '\0' || *tail == '#') && len < cap &&
                        !(quote == '"' && memchr(p + 1, '\\', len))) {
                        memcpy(out, p + 1, len);
                        out[len] = '\0';
                        found = plain = 1;
                    }
                }
            }
        }
        if (!plain)
            return NULL;
        if (!nl)
            break;
        line = nl + 1;
    }
    if (!found)
        snprintf(out, cap, "%s", NVCT_CACHE_DIR);
    return out[0] ? out : NULL;
}

/* --- Walking JSON values (json.h finds members; these visit every one). */

/* The first element of the array at `p` (past '['), or its end: `*done` set at ']'. */
static const char *array_next(const char *p, const char *end, int first, int *done)
{
    p = ws(p, end);
    *done = 0;
    if (p >= end)
        return NULL;
    if (first) {
        if (*p++ != '[')
            return NULL;
        p = ws(p, end);
        if (p < end && *p == ']')
            *done = 1;
        return p < end ? p : NULL;
    }
    if (*p == ']') {
        *done = 1;
        return p;
    }
    if (*p != ',')
        return NULL;
    return ws(p + 1, end);
}

/* Each element of the array at `p`: `visit(element, end, ctx)` < 0 stops with -1. The position
 * of its closing ']' in `*close` and whether it has elements in `*any`; -1 when malformed. */
static int each_element(const char *p, const char *end,
                        int (*visit)(const char *, const char *, void *), void *ctx,
                        const char **close, int *any)
{
    int done;
    *any = 0;
    for (p = array_next(p, end, 1, &done); p && !done; p = array_next(p, end, 0, &done)) {
        if (visit && visit(p, end, ctx) < 0)
            return -1;
        *any = 1;
        if (!(p = json_skip(p, end, 1)))
            return -1;
    }
    if (!p)
        return -1;
    *close = p;
    return 0;
}

/* Each member of the object at `p`: `visit(key, value, end, ctx)` (a key this cannot hold,
 * longer than MAX_ENV_NAME - 1 bytes, is given as ""); -1 when malformed or `visit` says so. */
static int each_member(const char *p, const char *end,
                       int (*visit)(const char *, const char *, const char *, void *), void *ctx)
{
    p = ws(p, end);
    if (p >= end || *p++ != '{')
        return -1;
    p = ws(p, end);
    if (p < end && *p == '}')
        return 0;
    for (;;) {
        char key[MAX_ENV_NAME];
        const char *after = json_string(ws(p, end), end, key, sizeof key);
        if (!after) {
            key[0] = '\0';
            if (!(after = json_string(ws(p, end), end, NULL, 0)))
                return -1;
        }
        p = ws(after, end);
        if (p >= end || *p++ != ':')
            return -1;
        p = ws(p, end);
        if (visit(key, p, end, ctx) < 0 || !(p = json_skip(p, end, 1)))
            return -1;
        p = ws(p, end);
        if (p >= end)
            return -1;
        if (*p == '}')
            return 0;
        if (*p++ != ',')
            return -1;
    }
}

/* Whether `p` is UTF-8 (no overlong form, surrogate or code point past U+10FFFF): the shim's
 * JSON parser refuses a spec that is not, so the native create must not take one. */
static int valid_utf8(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p, *end = s + n;
    while (s < end) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        if (!len || c > 0xF4 || end - s < len)
            return 0;
        unsigned cp = c & (0x3F >> (len - 1));
        for (int i = 1; i < len; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += len;
    }
    return 1;
}

/* --- What the create needs of config.json. */

struct var {
    char *text; /* KEY=VALUE, decoded */
    size_t keylen, len;
};

struct spec {
    const char *text, *end;
    const char *top;                     /* the spec's '{' */
    const char *process, *mounts, *linux_, *hooks, *annotations, *root;
    const char *mounts_close;            /* where mounts are appended */
    int mounts_any;
    struct var *vars, *annos; /* the relevant variables; the cdi.k8s.io/ annotations */
    int nvars, nannos, privileged;
    const struct field *ours;            /* the entry, for the overlap checks */
};

static int is_relevant(const char *text, size_t keylen)
{
    return (keylen >= 7 && memcmp(text, "NVIDIA_", 7) == 0) ||
           (keylen >= 16 && memcmp(text, "DOCKER_RESOURCE_", 16) == 0) ||
           (keylen == 12 && memcmp(text, "CUDA_VERSION", 12) == 0);
}

/* `text` (KEY=VALUE, its key `keylen` long, owned from here) appended to a list: 0, or -1. */
static int push_var(struct var **list, int *n, char *text, size_t keylen)
{
    struct var *more = realloc(*list, (size_t)(*n + 1) * sizeof *more);
    if (!more) {
        free(text);
        return -1;
    }
    *list = more;
    (*list)[(*n)++] = (struct var){text, keylen, strlen(text)};
    return 0;
}

static int visit_env(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    const char *after = json_string(p, end, NULL, 0);
    if (!after)
        return -1; /* not a string, or an escaped NUL: the shim decides */
    size_t cap = (size_t)(after - p);
    char *text = malloc(cap);
    if (!text || !json_string(p, end, text, cap)) {
        free(text);
        return -1;
    }
    char *eq = strchr(text, '=');
    if (!eq || !is_relevant(text, (size_t)(eq - text))) {
        free(text);
        return 0;
    }
    size_t keylen = (size_t)(eq - text);
    for (int i = 0; i < s->nvars; i++) /* a later one wins, as in execve's users */
        if (s->vars[i].keylen == keylen && memcmp(s->vars[i].text, text, keylen) == 0) {
            free(s->vars[i].text);
            s->vars[i] = (struct var){text, keylen, strlen(text)};
            return 0;
        }
    return push_var(&s->vars, &s->nvars, text, keylen);
}

static int visit_capability(const char *p, const char *end, void *ctx)
{
    char name[32];
    if (!json_string(p, end, name, sizeof name))
        return json_string(p, end, NULL, 0) ? 0 : -1; /* a longer name is another */
    if (strcmp(name, "CAP_SYS_ADMIN") == 0)
        *(int *)ctx = 1;
    return 0;
}

static int read_process(struct spec *s)
{
    static const char *const keys[] = {"env", "capabilities", NULL};
    static const char *const bounding_key[] = {"bounding", NULL};
    const char *v[2], *b[1], *close;
    int any;
    if (!s->process)
        return 0;
    if (*s->process != '{' || !json_members(s->process, s->end, keys, v))
        return -1;
    if (v[0] && strncmp(v[0], "null", 4) != 0 &&
        each_element(v[0], s->end, visit_env, s, &close, &any) < 0)
        return -1;
    if (!v[1] || strncmp(v[1], "null", 4) == 0)
        return 0;
    if (*v[1] != '{' || !json_members(v[1], s->end, bounding_key, b))
        return -1; /* a list of capabilities: the shim reads that spelling */
    if (!b[0] || strncmp(b[0], "null", 4) == 0)
        return 0;
    return each_element(b[0], s->end, visit_capability, &s->privileged, &close, &any);
}

/* Whether `item` is one of the NUL-separated items of `list`. */
static int listed(const struct field *list, const char *s, size_t n)
{
    size_t at = 0;
    struct field item;
    while (next_item(list, &at, &item))
        if (item_is(&item, s, n))
            return 1;
    return 0;
}

static int string_member(const char *obj, const char *end, const char *key, char *out,
                         size_t cap)
{
    const char *const keys[] = {key, NULL};
    const char *v[1];
    if (*obj != '{' || !json_members(obj, end, keys, v))
        return -1;
    if (!v[0])
        return 0;
    return json_string(v[0], end, out, cap) ? 1 : -1;
}

static int visit_device(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    char path[PATH_MAX];
    int has = string_member(p, end, "path", path, sizeof path);
    if (has > 0 && listed(&s->ours[F_DEVICE_PATHS], path, strlen(path)))
        return NOTE_WHY("config.json has one of the entry's device nodes already"), -1;
    return has < 0 ? -1 : 0;
}

/* A cdi.k8s.io/ annotation with a string value (the request's, nvct.request.inputs): kept as
 * `key=value` for the key; a value of another type counts for nothing, as for the shim. */
static int visit_annotation(const char *key, const char *value, const char *end, void *ctx)
{
    struct spec *s = ctx;
    size_t prefix = strlen(NVCT_CDI_ANNOTATION_PREFIX), klen = strlen(key);
    if (!klen)
        return -1; /* a key too long to read here */
    if (strncmp(key, NVCT_CDI_ANNOTATION_PREFIX, prefix) != 0 || *value != '"')
        return 0;
    const char *after = json_string(value, end, NULL, 0);
    size_t cap = after ? klen + 1 + (size_t)(after - value) : 0;
    char *text = cap ? malloc(cap) : NULL;
    if (!text)
        return -1;
    memcpy(text, key, klen);
    text[klen] = '=';
    if (!json_string(value, end, text + klen + 1, cap - klen - 1)) {
        free(text);
        return -1;
    }
    return push_var(&s->annos, &s->nannos, text, klen);
}

/* --- The key: what the shim's nvct.plan.native_entry.native_key builds from the same
 * inputs. A variable is `<len>:KEY=VALUE` in the order of their names. */
static int by_name(const void *a, const void *b)
{
    const struct var *x = a, *y = b;
    size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = memcmp(x->text, y->text, n);
    return c ? c : (x->keylen > y->keylen) - (x->keylen < y->keylen);
}

/* A list of KEY=VALUE texts in the order of their keys, each `<length>:text`, then a NUL. */
static void put_vars(struct buf *key, struct var *vars, int n)
{
    char num[32];
    if (n > 1) /* none: `vars` is NULL, which qsort must not be given */
        qsort(vars, (size_t)n, sizeof *vars, by_name);
    for (int i = 0; i < n; i++) {
        snprintf(num, sizeof num, "%zu:", vars[i].len);
        put_text(key, num);
        put_bytes(key, vars[i].text, vars[i].len);
    }
    put_bytes(key, "", 1);
}

static void build_key(struct buf *key, const char *kind, const char *cfg, const char *raw,
                      size_t raw_len, int debian, struct spec *s)
{
    put_text(key, NATIVE_KEY_MAGIC);
    put_bytes(key, "", 1);
    put_text(key, NVCT_CODE_ID);
    put_bytes(key, "", 1);
    put_text(key, kind);
    put_bytes(key, "", 1);
    put_text(key, cfg);
    put_bytes(key, "", 1);
    put_text(key, debian ? "debian" : "plain");
    put_bytes(key, "", 1);
    put_text(key, s->privileged ? "privileged" : "unprivileged");
    put_bytes(key, "", 1);
    put_vars(key, s->vars, s->nvars);
    put_vars(key, s->annos, s->nannos);
    put_bytes(key, raw, raw_len);
}

/* The CRC-32 of zlib and Python's binascii.crc32 (reflected, polynomial 0xEDB88320): the
 * entry's file name, which only spreads the entries (the whole key is compared). */
static uint32_t crc32_of(const char *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ (unsigned char)p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* --- The driver's fingerprint, as the parts nvct.host.fingerprint.fingerprint_parts takes. */

/* `root`/`rel` as os.path.join spells it; the caller keeps `root` short enough to fit. */
static void join(char *out, size_t cap, const char *root, const char *rel)
{
    size_t n = strlen(root);
    if (snprintf(out, cap, "%s%s%s", root, n && root[n - 1] == '/' ? "" : "/", rel) >= (int)cap)
        out[0] = '\0';
}

static void part(struct buf *b, const char *s)
{
    if (b->len)
        put_bytes(b, "", 1);
    put_text(b, s);
}

static void stat_id(struct buf *b, const char *path, int inode)
{
    char text[PATH_MAX + 128];
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(text, sizeof text, "%s:-", name);
    } else {
        int n = snprintf(text, sizeof text, "%s:%o:%lld:%lld", name, (unsigned)st.st_mode,
                         (long long)st.st_size,
                         (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
        if (inode && n > 0 && (size_t)n < sizeof text)
            snprintf(text + n, sizeof text - (size_t)n, ":%llu", (unsigned long long)st.st_ino);
    }
    part(b, text);
}

static int by_string(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    return x && y ? strcmp(x, y) : (x != NULL) - (y != NULL); /* NULL: a strdup that failed */
}

/* The names under `dir` starting with `prefix`, sorted; their count (-1: no such directory). */
static int names_in(const char *dir, const char *prefix, char ***out)
{
    DIR *d = opendir(dir);
    int n = 0, room = 16;
    char **names = malloc((size_t)room * sizeof *names);
    if (!d || !names) {
        if (d)
            closedir(d);
        free(names);
        return -1;
    }
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        if (n == room) {
            char **more = realloc(names, (size_t)(room *= 2) * sizeof *names);
            if (!more)
                break;
            names = more;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_string);
    *out = names;
    return n;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* `name:mode:rdev` of each entry, sorted as the shim sorts these texts (not their names:
 * "nvidia-uvm-tools:" sorts before "nvidia-uvm:"). */
static void nodes(struct buf *b, const char *dir, const char *prefix)
{
    char **names, path[PATH_MAX], text[NAME_MAX + 64];
    int n = names_in(dir, prefix, &names), kept = 0;
    if (n < 0) {
        const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
        snprintf(text, sizeof text, "%s:-", base);
        part(b, text);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct stat st;
        char *name = names[i];
        names[i] = NULL;
        if (name && snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path &&
            lstat(path, &st) == 0) {
            snprintf(text, sizeof text, "%s:%o:%llu", name, (unsigned)st.st_mode,
                     (unsigned long long)st.st_rdev);
            names[kept++] = strdup(text);
        }
        free(name);
    }
    qsort(names, (size_t)kept, sizeof *names, by_string);
    for (int i = 0; i < kept; i++)
        if (names[i])
            part(b, names[i]);
    free_names(names, n);
}

/* -1 when a path does not fit (the shim's part would stat another file). */
static int mig_instances(struct buf *b, const char *caps)
{
    int fits = 1;
    char mig[PATH_MAX], gi_dir[PATH_MAX], text[PATH_MAX];
    char **gpus, **gis, **cis, **all = NULL;
    int ngpu = names_in(caps, "gpu", &gpus), count = 0;
    for (int g = 0; g < ngpu; g++) {
        fits &= snprintf(mig, sizeof mig, "%s/%s/mig", caps, gpus[g]) < (int)sizeof mig;
        int ngi = names_in(mig, "gi", &gis);
        for (int i = 0; i < ngi; i++) {
            fits &= snprintf(gi_dir, sizeof gi_dir, "%s/%s", mig, gis[i]) < (int)sizeof gi_dir;
            int nci = names_in(gi_dir, "ci", &cis);
            for (int c = 0; c < nci; c++) {
                fits &= snprintf(text, sizeof text, "%s/mig/%s/%s", gpus[g], gis[i], cis[c]) <
                        (int)sizeof text;
                char **more = realloc(all, (size_t)(count + 1) * sizeof *all);
                if (more) {
                    all = more;
                    all[count++] = strdup(text);
                }
            }
            if (nci >= 0)
                free_names(cis, nci);
        }
        if (ngi >= 0)
            free_names(gis, ngi);
    }
    if (ngpu >= 0)
        free_names(gpus, ngpu);
    if (count > 1) /* none: `all` is NULL, which qsort must not be given */
        qsort(all, (size_t)count, sizeof *all, by_string);
    for (int i = 0; i < count; i++)
        if (all[i])
            part(b, all[i]);
    free_names(all, count);
    return fits ? 0 : -1;
}

/* The parts, or -1 when a root is too long for every path to fit. */
static int fingerprint(struct buf *b, const char *driver, const char *dev, const char *proc)
{
    if (strlen(driver) > PATH_MAX / 2 || strlen(dev) > PATH_MAX / 2 || strlen(proc) > PATH_MAX / 2)
        return -1;
    char path[PATH_MAX];
    join(path, sizeof path, driver, "etc/ld.so.cache");
    stat_id(b, path, 1);
    for (int i = 0; NVCT_IPC_PATHS[i]; i++) {
        join(path, sizeof path, driver, NVCT_IPC_PATHS[i] + 1);
        stat_id(b, path, 0);
    }
    join(path, sizeof path, dev, "dev");
    nodes(b, path, "nvidia");
    join(path, sizeof path, dev, "dev/nvidia-caps");
    nodes(b, path, "nvidia");
    static const char *const features[] = {"dev/infiniband", "dev/nvidia-caps-imex-channels",
                                           "dev/dri", NULL};
    for (int i = 0; features[i]; i++) {
        join(path, sizeof path, dev, features[i]);
        nodes(b, path, "");
    }
    join(path, sizeof path, dev, "dev/gdrdrv");
    stat_id(b, path, 1);
    join(path, sizeof path, proc, "driver/nvidia/version");
    size_t size = 0;
    char *version = read_file(path, &size);
    if (b->len)
        put_bytes(b, "", 1);
    if (version)
        put_bytes(b, version, size);
    else
        put_text(b, "-");
    free(version);
    join(path, sizeof path, proc, "driver/nvidia/capabilities");
    return mig_instances(b, path);
}

/* The CDI spec files' stats (nvct.host.fingerprint.cdi_stamp_parts): a work order made from
 * CDI specs is good while they are unchanged. -1 when a path does not fit. */
static int cdi_stamp(struct buf *b, const struct field *dirs)
{
    static const char *const suffixes[] = {".json", ".yaml", ".yml", NULL};
    size_t at = 0;
    struct field item;
    char path[PATH_MAX], text[PATH_MAX + 8];
    while (next_item(dirs, &at, &item)) {
        char **names;
        const char *dir = item.p;
        if (item.n >= PATH_MAX)
            return -1;
        int n = names_in(dir, "", &names);
        if (n < 0) {
            snprintf(text, sizeof text, "%s:-", dir);
            part(b, text);
            continue;
        }
        int fits = 1;
        for (int i = 0; i < n && fits; i++) {
            size_t len = names[i] ? strlen(names[i]) : 0;
            int spec = 0;
            for (int k = 0; suffixes[k] && len; k++)
                spec |= len >= strlen(suffixes[k]) &&
                        strcmp(names[i] + len - strlen(suffixes[k]), suffixes[k]) == 0;
            if (!spec)
                continue;
            fits = snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path;
            if (fits)
                stat_id(b, path, 1);
        }
        free_names(names, n);
        if (!fits)
            return -1;
    }
    return 0;
}

/* --- Checks of the host and the image before anything is written. */

/* The entry's library directories on the host, each holding every name the entry lists:
 * 0, or -1 (the reason noted). */
static int libdirs_whole(const struct field *f)
{
#define NOT_WHOLE "a library directory of the entry is not whole on the host"
    size_t at = 0;
    struct field host, names;
    char name[NAME_MAX + 1];
    while (next_item(f, &at, &host) && next_item(f, &at, &names)) {
        struct stat st;
        char **have;
        if (lstat(host.p, &st) < 0 || !S_ISDIR(st.st_mode))
            DECLINE(NOT_WHOLE);
        int n = names_in(host.p, "", &have), ok = n >= 0;
        for (size_t i = 0; ok && i < names.n;) {
            const char *slash = memchr(names.p + i, '/', names.n - i);
            size_t len = slash ? (size_t)(slash - (names.p + i)) : names.n - i;
            if (len > NAME_MAX)
                ok = 0;
            else {
                memcpy(name, names.p + i, len);
                name[len] = '\0';
                const char *key = name;
                ok = bsearch(&key, have, (size_t)n, sizeof *have, by_string) != NULL;
            }
            i += len + 1;
        }
        if (n >= 0)
            free_names(have, n);
        if (!ok)
            DECLINE(NOT_WHOLE); /* a cleaner took a file: the shim makes the directory again */
    }
    return 0;
#undef NOT_WHOLE
}

/* --- The rootfs's writes. */

/* A binary's link, made where nothing has its name (links.link_only): 1 when the link is there,
 * 0 when the image holds that path (the binary is bound there instead), -1 on failure. */
static int link_only(int dir, const char *name, const char *target)
{
    if (symlinkat(target, dir, name) == 0)
        return 1;
    struct stat st;
    char now[PATH_MAX];
    if (errno != EEXIST || fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!S_ISLNK(st.st_mode))
        return 0;
    ssize_t n = readlinkat(dir, name, now, sizeof now);
    return n >= 0 && (size_t)n == strlen(target) && memcmp(now, target, (size_t)n) == 0;
}

/* The entry's `path\0target\0...` links, made by rootfs.h's make_links. */
static int make_entry_links(int root, const struct field *f)
{
    int n;
    const char **items = items_of(f, &n);
    struct link *links = items ? calloc((size_t)n / 2 + 1, sizeof *links) : NULL;
    int rc = -1;
    if (links) {
        for (int i = 0; i + 1 < n; i += 2)
            links[i / 2] = (struct link){.path = items[i], .target = items[i + 1]};
        rc = make_links(root, links, n / 2);
    }
    free(links);
    free(items);
    return rc;
}

static int write_entry_ld_conf(int root, const struct field *f)
{
    int n;
    const char **dirs = f->n ? items_of(f, &n) : NULL;
    int rc = !f->n ? 0 : dirs ? write_ld_conf(root, dirs, n) : -1;
    free(dirs);
    return rc;
}

/* --- The log: the shim's EventLog lines (nvct.base.log), appended with one write. */
static void put_json_string(struct buf *b, const char *s)
{
    put_text(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = '\0';
            put_text(b, esc);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put_text(b, esc);
        } else {
            put_bytes(b, (const char *)&c, 1);
        }
    }
    put_text(b, "\"");
}

static void log_line(struct buf *b, const struct field *level, const char *event,
                     const char *id, const char *bundle, const char *fields, size_t nfields)
{
    struct timespec now;
    struct tm tm;
    char ts[64];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + strlen(ts), sizeof ts - strlen(ts), ".%03ldZ", now.tv_nsec / 1000000);
    put_text(b, "{\"ts\":\"");
    put_text(b, ts);
    put_text(b, "\",\"level\":\"");
    put_bytes(b, level->p, level->n);
    put_text(b, "\",\"component\":\"" PROGRAM "\",\"event\":\"");
    put_text(b, event);
    put_text(b, "\",\"via\":\"native\",\"container_id\":");
    put_json_string(b, id);
    put_text(b, ",\"bundle\":");
    put_json_string(b, bundle);
    if (nfields) {
        put_text(b, ",");
        put_bytes(b, fields, nfields);
    }
    put_text(b, "}\n");
}

/* Append `b`'s lines to the log file the entry's `f` (file, level) names, with one write: not
 * where it names none or /dev/null. */
static void append_log(const struct field *f, const struct buf *b)
{
    size_t at = 0;
    struct field file;
    if (!b->len || !next_item(f, &at, &file) || !file.n || item_is(&file, "/dev/null", 9))
        return;
    int fd = open(file.p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd >= 0) {
        write_all(fd, b->data, b->len, 0);
        close(fd);
    }
}

static double ms_between(struct timespec t0, struct timespec t1)
{
    return (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

/* The entry's `level\0event\0fields` events at or above the configured level (nvct.base.log's
 * LEVELS), with what this create or hook measured added to container_prepared and
 * container_configured. */
static void write_log(const struct field *f, const struct field *events, const char *id,
                      const char *bundle, const char *extra, int mounts, int links,
                      const char *ld_cache, double ms)
{
    size_t at = 0;
    struct field file, threshold, level, event, fields;
    char tail[256];
    if (!next_item(f, &at, &file) || !next_item(f, &at, &threshold) || !file.n ||
        item_is(&file, "/dev/null", 9))
        return;
    int debug = item_is(&threshold, "debug", 5);
    int info = debug || item_is(&threshold, "info", 4) ||
               !(item_is(&threshold, "warning", 7) || item_is(&threshold, "error", 5));
    struct buf b = {0};
    at = 0;
    while (next_item(events, &at, &level) && next_item(events, &at, &event) &&
           next_item(events, &at, &fields)) {
        const char *name = event.p;
        if (!(item_is(&level, "debug", 5) ? debug : info))
            continue;
        if (strcmp(name, "container_prepared") != 0 && strcmp(name, "container_configured") != 0) {
            log_line(&b, &level, name, id, bundle, fields.p, fields.n);
            continue;
        }
        struct buf all = {0};
        put_bytes(&all, fields.p, fields.n);
        snprintf(tail, sizeof tail,
                 "%s%s\"mounts\":%d,\"binary_links\":%d,\"ld_cache\":\"%s\",\"total_ms\":%.2f",
                 fields.n ? "," : "", extra, mounts, links, ld_cache, ms);
        put_text(&all, tail);
        log_line(&b, &level, name, id, bundle, all.data, all.len);
        free(all.data);
    }
    append_log(f, &b);
    free(b.data);
}

/* --- A bundle and its entry, read for the create (nativecreate.h) or the hook (nativehook.h). */

struct native {
    char *text, *raw, *raw_copy, *entry;
    struct spec s;
    struct buf key, stamp, binds, cache, out;
    int root, bundle_fd, debian;
};

static void native_free(struct native *c)
{
    for (int i = 0; i < c->s.nvars; i++)
        free(c->s.vars[i].text);
    free(c->s.vars);
    for (int i = 0; i < c->s.nannos; i++)
        free(c->s.annos[i].text);
    free(c->s.annos);
    free(c->text);
    free(c->raw);
    free(c->raw_copy);
    free(c->entry);
    free(c->key.data);
    free(c->stamp.data);
    free(c->binds.data);
    free(c->cache.data);
    free(c->out.data);
    if (c->root >= 0)
        close(c->root);
    if (c->bundle_fd >= 0)
        close(c->bundle_fd);
}


/* The entry for this spec under the config's cache-dir, checked: 0, or -1 (a miss). */
static int find_entry(struct native *c, const char *kind, const char *cfg, int debian,
                      struct field *e)
{
#define MISS(why) DECLINE(why)
    char cache_dir[PATH_MAX], path[PATH_MAX + 64];
    size_t size = 0;
    build_key(&c->key, kind, cfg, c->raw, strlen(c->raw), debian, &c->s);
    if (!cache_dir_of(c->raw_copy, strlen(c->raw_copy), cache_dir, sizeof cache_dir))
        MISS("no cache-dir in the config as the native path reads it (a plain string)");
    snprintf(path, sizeof path, "%s/native/%08x", cache_dir,
             (unsigned)crc32_of(c->key.data, c->key.len));
    /* O_NONBLOCK: a FIFO of that name must not hang every GPU start. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        MISS("the first container of its kind (no native entry for it yet)");
    /* The shim writes it as the user it runs as (root): nobody else may have. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        !(st.st_mode & 022))
        c->entry = read_all(fd, MAX_FILE, &size);
    close(fd);
    if (!c->entry || parse_entry(c->entry, size, e) < 0 || e[F_KEY].n != c->key.len ||
        memcmp(e[F_KEY].p, c->key.data, c->key.len) != 0)
        MISS("its native entry is unreadable, not root's, or another kind's");
    struct field r[3];
    size_t at = 0;
    for (int i = 0; i < 3; i++)
        if (!next_item(&e[F_ROOTS], &at, &r[i]))
            MISS("its native entry names no driver roots");
    if (fingerprint(&c->stamp, r[0].p, r[1].p, r[2].p) < 0)
        MISS("a driver root too long");
    if (c->stamp.len != e[F_STAMP].n || memcmp(c->stamp.data, e[F_STAMP].p, e[F_STAMP].n) != 0)
        MISS("the driver changed since its native entry was written"); /* the shim plans again */
    if (e[F_CDI_DIRS].n || e[F_CDI_STAMP].n) {
        struct buf cdi = {0};
        int same = cdi_stamp(&cdi, &e[F_CDI_DIRS]) == 0 && cdi.len == e[F_CDI_STAMP].n &&
                   (!cdi.len || memcmp(cdi.data, e[F_CDI_STAMP].p, cdi.len) == 0);
        free(cdi.data);
        if (!same)
            MISS("the CDI specs changed since its native entry was written");
    }
    return 0;
#undef MISS
}

/* config.json (`c->text`, `size` bytes, the launcher's read) read whole, the rootfs's path
 * into `rootfs`, the config file read, and the rootfs opened (`c->root`, `c->debian`): 0, or
 * -1 (the work goes on to Python). */
static int read_bundle(struct native *c, const char *bundle, size_t size, const char *cfg,
                       char *rootfs, size_t cap)
{
    static const char *const keys[] = {"root", "process", "mounts", "linux", "hooks",
                                       "annotations", NULL};
    const char *v[6];
    char rel[PATH_MAX];
    size_t raw_size = 0;
    if (!c->text || memchr(c->text, '\0', size) || !valid_utf8(c->text, size))
        DECLINE("config.json unreadable, or not UTF-8");
    c->s.text = c->text;
    c->s.end = c->text + size;
    c->s.top = ws(c->text, c->s.end);
    const char *after = json_members(c->text, c->s.end, keys, v);
    if (!after || ws(after, c->s.end) != c->s.end)
        DECLINE("config.json not read whole");
    c->s.root = v[0], c->s.process = v[1], c->s.mounts = v[2], c->s.linux_ = v[3];
    c->s.hooks = v[4], c->s.annotations = v[5];
    if (!c->s.root || string_member(c->s.root, c->s.end, "path", rel, sizeof rel) != 1 ||
        !rel[0] ||
        snprintf(rootfs, cap, rel[0] == '/' ? "%s%s" : "%s/%s", rel[0] == '/' ? "" : bundle,
                 rel) >= (int)cap)
        DECLINE("config.json has no root.path");
    if (read_process(&c->s) < 0)
        DECLINE("config.json's process is one the native path leaves to Python");
    if (c->s.annotations && strncmp(c->s.annotations, "null", 4) != 0 &&
        (*c->s.annotations != '{' ||
         each_member(c->s.annotations, c->s.end, visit_annotation, &c->s) < 0))
        DECLINE("config.json's annotations are not an object of strings");
    if (!(c->raw = read_file(cfg, &raw_size)) || memchr(c->raw, '\0', raw_size) ||
        !(c->raw_copy = strdup(c->raw)))
        DECLINE("the config file cannot be read"); /* Python says whether it must exist */
    if ((c->root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        DECLINE("the container's rootfs cannot be opened");
    int fd = in_root(c->root, "/etc/debian_version", O_PATH);
    if (fd < 0 && errno != ENOENT)
        DECLINE("no openat2 in this kernel"); /* or another error: Python says */
    c->debian = fd >= 0;
    if (fd >= 0)
        close(fd);
    return 0;
}

/* The image's CUDA compat directory, where the order has one (its libcuda may go first: Python
 * decides): 0 when there is none, or -1. */
static int image_compat(struct native *c, const struct field *e)
{
    if (e[F_COMPAT].n) {
        int fd = in_root(c->root, "/usr/local/cuda/compat", O_PATH);
        if (fd >= 0)
            close(fd);
        if (fd >= 0 || errno != ENOENT)
            DECLINE("the image has a CUDA compat directory (/usr/local/cuda/compat)");
    }
    return 0;
}

/* The image's ld.so.cache merged with the driver's entries into `c->cache` (`*how` "merged";
 * "none" where the entry has none): 0, or -1. */
static int image_cache(struct native *c, const struct field *e, const char **how)
{
    *how = "none";
    if (!e[F_LD_CACHE].n)
        return 0;
    char *text = strndup(e[F_LD_CACHE].p, e[F_LD_CACHE].n), *store = NULL;
    struct entry *extra = NULL;
    int missing = 0, k = text ? parse_entries(text, &extra, &store) : -1;
    int ok = k > 0 && merged_cache(c->root, extra, k, &c->cache, &missing) == 0;
    free(text);
    free(extra);
    free(store);
    if (!ok)
        /* ldconfig, or a fresh cache: Python's */
        DECLINE("the image's ld.so.cache cannot be merged (none, not a regular file, or "
                "entries the merge cannot match: ldconfig runs)");
    *how = "merged";
    return 0;
}
