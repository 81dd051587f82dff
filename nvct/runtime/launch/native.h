/* nvct-runtime's create of a kind of container nvct has prepared before, with no interpreter.
 *
 * The Python shim (in a daemon worker or started here) plans a container's GPUs once per kind
 * and caches the work order (nvct.plan.cached). Where the launcher asked it to
 * (NVCT_NATIVE_ENV names this launcher's code), it also writes that order as a native entry
 * (nvct.runtime.native_entry): the spec's additions as JSON text, the rootfs's links, the
 * ld.so.cache entries, and the driver's fingerprint (and the CDI specs' stamp, for an order
 * made from CDI devices) as the stats they are made of. A later create of the same kind is
 * then done here, on the same terms as the shim's cached create:
 *
 * - the entry is found by a key of every input the plan depends on (this launcher's code, the
 *   config file's path and bytes, the image's layout, the container's NVIDIA_ and
 *   DOCKER_RESOURCE_ variables and CUDA_VERSION, whether it is privileged, its cdi.k8s.io/
 *   annotations), compared byte for byte; the driver's fingerprint and the CDI specs' stamp
 *   are taken again and compared the same way;
 * - the rootfs is staged under openat2(RESOLVE_IN_ROOT) (rootfs.h): the SONAME links, the
 *   binaries' links, the ld.so.conf.d entry, the image's ld.so.cache with the driver's
 *   entries merged in ldconfig's order;
 * - config.json gets the entry's mounts, device nodes, device-cgroup rules and hooks, and a
 *   CDI order's variables (the image's of the same names dropped), spliced into the arrays
 *   the spec has (never re-serialised: what nvct does not own stays byte for byte), written
 *   beside it and renamed over it.
 *
 * Anything else goes on to the daemon or the Python shim, which read the same files again:
 * no entry, a changed driver or CDI spec, a spec this scanner does not take whole (or not
 * UTF-8), a device-list mount, a GPU hook to remove, a device, mount, rule or hook the spec
 * has already where nvct adds one, a library directory a cache cleaner emptied, an image with
 * a CUDA compat directory or with a cache the merge cannot match ldconfig on, or any failed
 * call before config.json is written. Every check comes before the first write, and the writes
 * are the shim's own (a link it replaces, the same files), so what the shim does after a
 * hand-over is what it would have done alone.
 *
 * Included by launcher.c after client.h, json.h and rootfs.h.
 */
#include <dirent.h>
#include <time.h>

#define NATIVE_MAGIC "nvct-native 1\n"

/* Why a create went to the shim, on stderr in a build with -DNVCT_NATIVE_DEBUG (CFLAGS). */
#ifdef NVCT_NATIVE_DEBUG
#define HANDOVER(why)                                                                          \
    do {                                                                                       \
        fprintf(stderr, "nvct-runtime: native create: %s (line %d)\n", why, __LINE__);         \
        goto handover;                                                                         \
    } while (0)
#define DECLINE()                                                                              \
    do {                                                                                       \
        fprintf(stderr, "nvct-runtime: native create: declined at line %d\n", __LINE__);       \
        return -1;                                                                             \
    } while (0)
#else
#define HANDOVER(why) goto handover
#define DECLINE() return -1
#endif
#define NATIVE_KEY_MAGIC "nvct-native-key 1"
#define MAX_ENV_NAME 256

enum {
    F_KEY, F_STAMP, F_ROOTS, F_RUNTIMES, F_LOG, F_MOUNTS, F_MOUNT_DSTS, F_DEVICES,
    F_DEVICE_PATHS, F_RULES, F_MAJORS, F_HOOKS, F_SYMLINKS, F_BINLINKS, F_LIBDIRS, F_LD_CONF,
    F_LD_CACHE, F_COMPAT, F_ENV, F_ENV_NAMES, F_CDI_HOOKS, F_CDI_DIRS, F_CDI_STAMP, F_EVENTS,
    F_COUNT
};
static const char *const FIELD_NAMES[F_COUNT] = {
    "key", "stamp", "roots", "runtimes", "log", "mounts", "mount-dsts", "devices",
    "device-paths", "rules", "majors", "hooks", "symlinks", "binlinks", "libdirs", "ld-conf",
    "ld-cache", "compat", "env", "env-names", "cdi-hooks", "cdi-dirs", "cdi-stamp", "events"};
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

static int visit_mount(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    char dst[PATH_MAX];
    int has = string_member(p, end, "destination", dst, sizeof dst);
    if (has < 0)
        return -1;
    if (has && (strncmp(dst, NVCT_DEVICE_MOUNT_DIR, strlen(NVCT_DEVICE_MOUNT_DIR)) == 0 ||
                listed(&s->ours[F_MOUNT_DSTS], dst, strlen(dst))))
        return -1; /* a device-list mount, or one of ours already: the shim's */
    return 0;
}

static int visit_device(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    char path[PATH_MAX];
    int has = string_member(p, end, "path", path, sizeof path);
    return has < 0 || (has && listed(&s->ours[F_DEVICE_PATHS], path, strlen(path))) ? -1 : 0;
}

static int visit_rule(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    static const char *const keys[] = {"major", NULL};
    const char *v[1];
    if (*p != '{' || !json_members(p, end, keys, v))
        return -1;
    if (!v[0] || *v[0] == 'n')
        return 0;
    const char *num_end = json_number(v[0], end);
    return !num_end || listed(&s->ours[F_MAJORS], v[0], (size_t)(num_end - v[0])) ? -1 : 0;
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

/* A prestart hook nvct's create replaces (nvct.runtime.spec_edits._is_gpu_hook): the shim
 * removes it. */
static int visit_prestart_arg(const char *p, const char *end, void *ctx)
{
    (void)ctx;
    const char *after = json_string(p, end, NULL, 0);
    if (!after)
        return -1;
    return memmem(p, (size_t)(after - p), NVCT_HOOK_MARK, strlen(NVCT_HOOK_MARK)) ? -1 : 0;
}

static int visit_prestart(const char *p, const char *end, void *ctx)
{
    static const char *const keys[] = {"path", "args", NULL};
    const char *v[2], *close;
    char path[PATH_MAX];
    int any;
    (void)ctx;
    if (*p != '{' || !json_members(p, end, keys, v))
        return -1;
    if (v[0] && !json_string(v[0], end, path, sizeof path))
        return -1;
    if (v[0]) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        for (int i = 0; NVCT_REPLACED_HOOKS[i]; i++)
            if (strcmp(base, NVCT_REPLACED_HOOKS[i]) == 0)
                return -1;
    }
    if (v[1] && *v[1] != 'n' && each_element(v[1], end, visit_prestart_arg, NULL, &close, &any))
        return -1;
    return 0;
}

/* --- Splicing: insertions into config.json's text, applied in order of position. */

struct insertion {
    size_t at, cut;     /* where, and how many bytes of the spec it replaces there */
    char head[64];      /* around the entry's fragment */
    const char *tail;
    struct field body;
    struct buf owned;   /* a body made here (the kept variables) */
    int seq;            /* insertions at one place keep their order */
};

#define MAX_INSERTIONS 24

struct splice {
    struct insertion items[MAX_INSERTIONS];
    int n, overflow; /* overflow: one was not made, so none may be applied */
};

static int insert_cut(struct splice *sp, size_t at, size_t cut, const char *head,
                      struct field body, const char *tail)
{
    if (sp->n == MAX_INSERTIONS || strlen(head) >= sizeof sp->items[0].head) {
        sp->overflow = 1;
        return -1;
    }
    struct insertion *in = &sp->items[sp->n++];
    *in = (struct insertion){.at = at, .cut = cut, .tail = tail, .body = body, .seq = sp->n};
    strcpy(in->head, head);
    return 0;
}

static void insert(struct splice *sp, size_t at, const char *head, struct field body,
                   const char *tail)
{
    insert_cut(sp, at, 0, head, body, tail);
}

static void free_splice(struct splice *sp)
{
    for (int i = 0; i < sp->n; i++)
        free(sp->items[i].owned.data);
}

/* Elements appended to the array at `array` (NULL: the array is missing, and `member` is
 * added after the '{' of the object at `obj`, which must have members already). */
static int append_to(struct splice *sp, const struct spec *s, const char *array,
                     const char *obj, const char *member, struct field body,
                     int (*visit)(const char *, const char *, void *))
{
    const char *close;
    int any;
    if (!body.n)
        return 0;
    if (array) {
        if (*array != '[' || each_element(array, s->end, visit, (void *)s, &close, &any) < 0)
            return -1;
        insert(sp, (size_t)(close - s->text), any ? "," : "", body, "");
        return 0;
    }
    const char *p = ws(obj + 1, s->end);
    if (p >= s->end || *p == '}')
        return -1; /* an empty object: the shim writes it whole */
    insert(sp, (size_t)(obj + 1 - s->text), member, body, "],");
    return 0;
}

/* The spans of an array's elements, for replacing the array with some of them kept. */
struct spans {
    const char *start[256], *end[256];
    int n;
};

static int visit_span(const char *p, const char *end, void *ctx)
{
    struct spans *sp = ctx;
    const char *after = json_skip(p, end, 1);
    if (!after || sp->n == 256)
        return -1;
    sp->start[sp->n] = p;
    sp->end[sp->n++] = after;
    return 0;
}

/* The order's CDI variables (add_cdi_edits): process.env without the image's variables of
 * the same names, then the order's, written over the env array. */
static int plan_env(struct spec *s, const struct field *e, struct splice *sp)
{
    static const char *const keys[] = {"env", NULL};
    const char *v[1], *close;
    struct spans spans = {.n = 0};
    int any;
    if (!e[F_ENV].n)
        return 0;
    if (!s->process || *s->process != '{' || !json_members(s->process, s->end, keys, v) ||
        !v[0] || *v[0] != '[' || each_element(v[0], s->end, visit_span, &spans, &close, &any) < 0)
        DECLINE(); /* no env array to edit: the shim makes one */
    if (insert_cut(sp, (size_t)(v[0] - s->text), (size_t)(close + 1 - v[0]), "[", e[F_ENV],
                   "]") < 0)
        DECLINE();
    struct buf *kept = &sp->items[sp->n - 1].owned;
    for (int i = 0; i < spans.n; i++) {
        size_t cap = (size_t)(spans.end[i] - spans.start[i]); /* the decoded text is shorter */
        char *name = malloc(cap);
        if (!name || !json_string(spans.start[i], s->end, name, cap)) {
            free(name);
            DECLINE(); /* not a string: the shim says so */
        }
        name[strcspn(name, "=")] = '\0';
        int ours = listed(&e[F_ENV_NAMES], name, strlen(name));
        free(name);
        if (ours)
            continue;
        put_bytes(kept, spans.start[i], (size_t)(spans.end[i] - spans.start[i]));
        put_text(kept, ",");
    }
    /* The kept elements, then the order's: one body. */
    put_bytes(kept, e[F_ENV].p, e[F_ENV].n);
    sp->items[sp->n - 1].body = (struct field){kept->data, kept->len};
    return 0;
}

/* The hooks of the order (nvct's procfs hook, a CDI spec's): each into a stage the spec has
 * no hook in (the shim compares hooks; here a stage holding any goes to it), after a check
 * that no GPU prestart hook is left for the shim to remove. */
static int plan_hooks(struct spec *s, const struct field *e, struct splice *sp)
{
    const char *hv[HOOK_STAGES], *close;
    struct field bodies[HOOK_STAGES] = {{0}};
    int any, wanted = 0;
    if (e[F_HOOKS].n) {
        bodies[2] = e[F_HOOKS]; /* createContainer */
        wanted = 1;
    }
    size_t at = 0;
    struct field stage, body;
    while (next_item(&e[F_CDI_HOOKS], &at, &stage) && next_item(&e[F_CDI_HOOKS], &at, &body)) {
        int k = 0;
        while (k < HOOK_STAGES && !item_is(&stage, STAGES[k], strlen(STAGES[k])))
            k++;
        if (k == HOOK_STAGES || bodies[k].n)
            DECLINE(); /* two sources for one stage: the shim orders them */
        bodies[k] = body;
        wanted = 1;
    }
    if (!s->hooks || strncmp(s->hooks, "null", 4) == 0) {
        if (!wanted)
            return 0;
        if (s->hooks)
            DECLINE(); /* "hooks": null: the shim's */
        char head[64] = "\"hooks\":{";
        for (int k = 0, first = 1; k < HOOK_STAGES; k++) {
            if (!bodies[k].n)
                continue;
            /* one insertion per stage at the spec's '{', in order: the first opens "hooks" */
            snprintf(head, sizeof head, "%s\"%s\":[", first ? "\"hooks\":{" : ",", STAGES[k]);
            if (insert_cut(sp, (size_t)(s->top + 1 - s->text), 0, head, bodies[k], "]") < 0)
                DECLINE();
            first = 0;
        }
        insert(sp, (size_t)(s->top + 1 - s->text), "", (struct field){"", 0}, "},");
        return 0;
    }
    if (*s->hooks != '{' || !json_members(s->hooks, s->end, STAGES, hv))
        DECLINE();
    if (hv[0] && strncmp(hv[0], "null", 4) != 0 &&
        each_element(hv[0], s->end, visit_prestart, NULL, &close, &any) < 0)
        DECLINE();
    for (int k = 0; k < HOOK_STAGES; k++) {
        if (!bodies[k].n)
            continue;
        if (hv[k]) {
            if (*hv[k] != '[' || each_element(hv[k], s->end, NULL, NULL, &close, &any) < 0 || any)
                DECLINE(); /* hooks of its own there: the shim compares them with ours */
            insert(sp, (size_t)(close - s->text), "", bodies[k], "");
            continue;
        }
        const char *p = ws(s->hooks + 1, s->end);
        char head[64];
        if (p >= s->end || *p == '}')
            DECLINE(); /* an empty object: the shim writes it whole */
        snprintf(head, sizeof head, "\"%s\":[", STAGES[k]);
        if (insert_cut(sp, (size_t)(s->hooks + 1 - s->text), 0, head, bodies[k], "],") < 0)
            DECLINE();
    }
    return 0;
}

/* The insertions config.json needs for the entry's fields; -1 where the shim must edit it.
 * The binaries' binds, known only once their links are tried, go where `s->mounts_close`
 * says. */
static int plan_splice(struct spec *s, const struct field *e, struct splice *sp)
{
    static const char *const linux_keys[] = {"devices", "resources", NULL};
    static const char *const res_keys[] = {"devices", NULL};
    const char *lv[2], *rv[1];
    if (!s->linux_ || *s->linux_ != '{' || !json_members(s->linux_, s->end, linux_keys, lv))
        DECLINE();
    if (append_to(sp, s, lv[0], s->linux_, "\"devices\":[", e[F_DEVICES], visit_device) < 0)
        DECLINE();
    if (lv[1]) {
        if (*lv[1] != '{' || !json_members(lv[1], s->end, res_keys, rv) ||
            append_to(sp, s, rv[0], lv[1], "\"devices\":[", e[F_RULES], visit_rule) < 0)
            DECLINE();
    } else if (e[F_RULES].n) {
        const char *p = ws(s->linux_ + 1, s->end);
        if (p >= s->end || *p == '}')
            DECLINE();
        insert(sp, (size_t)(s->linux_ + 1 - s->text), "\"resources\":{\"devices\":[",
               e[F_RULES], "]},");
    }
    /* No mounts array at all: not a runc spec this scanner knows. */
    if (!s->mounts || *s->mounts != '[' ||
        each_element(s->mounts, s->end, visit_mount, s, &s->mounts_close, &s->mounts_any) < 0)
        DECLINE();
    if (e[F_MOUNTS].n) {
        insert(sp, (size_t)(s->mounts_close - s->text), s->mounts_any ? "," : "", e[F_MOUNTS],
               "");
        s->mounts_any = 1;
    }
    if (plan_env(s, e, sp) < 0)
        DECLINE();
    return plan_hooks(s, e, sp);
}

static int by_position(const void *a, const void *b)
{
    const struct insertion *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static void apply_splice(struct splice *sp, const struct spec *s, struct buf *out)
{
    size_t from = 0;
    qsort(sp->items, (size_t)sp->n, sizeof *sp->items, by_position);
    for (int i = 0; i < sp->n; i++) {
        const struct insertion *in = &sp->items[i];
        put_bytes(out, s->text + from, in->at - from);
        put_text(out, in->head);
        put_bytes(out, in->body.p, in->body.n);
        put_text(out, in->tail);
        from = in->at + in->cut;
    }
    put_bytes(out, s->text + from, (size_t)(s->end - s->text) - from);
}

/* --- The key: what the shim's nvct.runtime.native_entry.native_key builds from the same
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
    qsort(vars, (size_t)n, sizeof *vars, by_name);
    for (int i = 0; i < n; i++) {
        snprintf(num, sizeof num, "%zu:", vars[i].len);
        put_text(key, num);
        put_bytes(key, vars[i].text, vars[i].len);
    }
    put_bytes(key, "", 1);
}

static void build_key(struct buf *key, const char *cfg, const char *raw, size_t raw_len,
                      int debian, struct spec *s)
{
    put_text(key, NATIVE_KEY_MAGIC);
    put_bytes(key, "", 1);
    put_text(key, NVCT_CODE_ID);
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

static int libdirs_whole(const struct field *f)
{
    size_t at = 0;
    struct field host, names;
    char name[NAME_MAX + 1];
    while (next_item(f, &at, &host) && next_item(f, &at, &names)) {
        struct stat st;
        char **have;
        if (lstat(host.p, &st) < 0 || !S_ISDIR(st.st_mode))
            return -1;
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
            return -1; /* a cleaner took a file: the shim makes the directory again */
    }
    return 0;
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

/* The entry's `path\0target\0mount` binlinks: the mounts standing in for those the image
 * holds go to `binds`; their count, or -1. */
static int make_binlinks(int root, const struct field *f, struct buf *binds)
{
    size_t at = 0;
    struct field path, target, mount;
    char dir[PATH_MAX];
    int count = 0;
    while (next_item(f, &at, &path) && next_item(f, &at, &target) && next_item(f, &at, &mount)) {
        const char *name = split(path.p, dir, sizeof dir);
        int fd = name ? make_dirs(root, dir, 0) : -1;
        int made = fd >= 0 ? link_only(fd, name, target.p) : -1;
        if (fd >= 0)
            close(fd);
        if (made < 0)
            return -1;
        if (!made) {
            if (binds->len)
                put_text(binds, ",");
            put_bytes(binds, mount.p, mount.n);
            count++;
        }
    }
    return count;
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
    put_text(b, "\",\"component\":\"nvct-runtime\",\"event\":\"");
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

/* The entry's `level\0event\0fields` events at or above the configured level (nvct.base.log's
 * LEVELS), with what this create measured added to container_prepared. */
static void write_log(const struct field *f, const struct field *events, const char *id,
                      const char *bundle, int mounts, int links, const char *ld_cache,
                      double ms)
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
        if (strcmp(name, "container_prepared") != 0) {
            log_line(&b, &level, name, id, bundle, fields.p, fields.n);
            continue;
        }
        struct buf all = {0};
        put_bytes(&all, fields.p, fields.n);
        snprintf(tail, sizeof tail,
                 "%s\"mounts\":%d,\"binary_links\":%d,\"ld_cache\":\"%s\",\"total_ms\":%.2f",
                 fields.n ? "," : "", mounts, links, ld_cache, ms);
        put_text(&all, tail);
        log_line(&b, &level, name, id, bundle, all.data, all.len);
        free(all.data);
    }
    if (b.len) {
        int fd = open(file.p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (fd >= 0) {
            write_all(fd, b.data, b.len, 0);
            close(fd);
        }
    }
    free(b.data);
}

/* --- The create. */

struct native {
    char *text, *raw, *raw_copy, *entry;
    struct spec s;
    struct buf key, stamp, binds, cache, out;
    int root, bundle_fd;
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
static int find_entry(struct native *c, const char *cfg, int debian, struct field *e)
{
#ifdef NVCT_NATIVE_DEBUG
#define MISS(why) return (fprintf(stderr, "nvct-runtime: native entry: %s\n", why), -1)
#else
#define MISS(why) return -1
#endif
    char cache_dir[PATH_MAX], path[PATH_MAX + 64];
    size_t size = 0;
    build_key(&c->key, cfg, c->raw, strlen(c->raw), debian, &c->s);
    if (!cache_dir_of(c->raw_copy, strlen(c->raw_copy), cache_dir, sizeof cache_dir))
        MISS("no plain cache-dir");
    snprintf(path, sizeof path, "%s/native/%08x", cache_dir,
             (unsigned)crc32_of(c->key.data, c->key.len));
    /* O_NONBLOCK: a FIFO of that name must not hang every GPU start. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        MISS("none for this key");
    /* The shim writes it as the user it runs as (root): nobody else may have. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        !(st.st_mode & 022))
        c->entry = read_all(fd, MAX_FILE, &size);
    close(fd);
    if (!c->entry || parse_entry(c->entry, size, e) < 0 || e[F_KEY].n != c->key.len ||
        memcmp(e[F_KEY].p, c->key.data, c->key.len) != 0)
        MISS("unreadable, or another key");
    struct field r[3];
    size_t at = 0;
    for (int i = 0; i < 3; i++)
        if (!next_item(&e[F_ROOTS], &at, &r[i]))
            MISS("no roots");
    if (fingerprint(&c->stamp, r[0].p, r[1].p, r[2].p) < 0)
        MISS("a root too long");
    if (c->stamp.len != e[F_STAMP].n || memcmp(c->stamp.data, e[F_STAMP].p, e[F_STAMP].n) != 0)
        MISS("the driver changed"); /* the shim plans again */
    if (e[F_CDI_DIRS].n || e[F_CDI_STAMP].n) {
        struct buf cdi = {0};
        int same = cdi_stamp(&cdi, &e[F_CDI_DIRS]) == 0 && cdi.len == e[F_CDI_STAMP].n &&
                   (!cdi.len || memcmp(cdi.data, e[F_CDI_STAMP].p, cdi.len) == 0);
        free(cdi.data);
        if (!same)
            MISS("the CDI specs changed");
    }
    return 0;
#undef MISS
}

/* The low-level runtime the entry names, found as the launcher finds one: 0, or -1. */
static int entry_runtime(const struct field *f, char *out, size_t cap)
{
    int n;
    const char **names = items_of(f, &n);
    int rc = names && n ? find_first(names, n, out, cap) : -1;
    free(names);
    return rc;
}

/* Prepare the bundle of a create from its native entry and exec the low-level runtime; returns
 * when the daemon or the shim must do it (see the top of this file). `spec` is the bundle's
 * config.json as the launcher read it (NULL: unreadable), freed here. */
static void native_create(const char *bundle, char *spec, size_t size, const char *cfg,
                          const char *id, char **args, int n)
{
    static const char *const keys[] = {"root", "process", "mounts", "linux", "hooks",
                                       "annotations", NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct native c = {.text = spec, .root = -1, .bundle_fd = -1};
    struct field e[F_COUNT];
    struct splice sp = {.n = 0};
    char rel[PATH_MAX], rootfs[PATH_MAX], runtime[PATH_MAX], where[PATH_MAX];
    const char *v[6], *ld_cache = "none";
    size_t raw_size = 0;
    int binds = 0, debian;

    if (!c.text || memchr(c.text, '\0', size) || !valid_utf8(c.text, size))
        HANDOVER("config.json unreadable, or not UTF-8");
    c.s.text = c.text;
    c.s.end = c.text + size;
    c.s.top = ws(c.text, c.s.end);
    const char *after = json_members(c.text, c.s.end, keys, v);
    if (!after || ws(after, c.s.end) != c.s.end)
        HANDOVER("config.json not read whole");
    c.s.root = v[0], c.s.process = v[1], c.s.mounts = v[2], c.s.linux_ = v[3];
    c.s.hooks = v[4], c.s.annotations = v[5];
    if (!c.s.root || string_member(c.s.root, c.s.end, "path", rel, sizeof rel) != 1 || !rel[0] ||
        snprintf(rootfs, sizeof rootfs, rel[0] == '/' ? "%s%s" : "%s/%s",
                 rel[0] == '/' ? "" : bundle, rel) >= (int)sizeof rootfs)
        HANDOVER("no root.path");
    if (read_process(&c.s) < 0)
        HANDOVER("process not read whole");
    if (c.s.annotations && strncmp(c.s.annotations, "null", 4) != 0 &&
        (*c.s.annotations != '{' ||
         each_member(c.s.annotations, c.s.end, visit_annotation, &c.s) < 0))
        HANDOVER("annotations not read whole");
    if (!(c.raw = read_file(cfg, &raw_size)) || memchr(c.raw, '\0', raw_size) ||
        !(c.raw_copy = strdup(c.raw)))
        HANDOVER("no config"); /* the shim says whether it must exist */
    if ((c.root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        HANDOVER("no rootfs");
    int fd = in_root(c.root, "/etc/debian_version", O_PATH);
    if (fd < 0 && errno != ENOENT)
        HANDOVER("no openat2"); /* ENOSYS */
    debian = fd >= 0;
    if (fd >= 0)
        close(fd);
    if (find_entry(&c, cfg, debian, e) < 0 || entry_runtime(&e[F_RUNTIMES], runtime,
                                                            sizeof runtime) < 0)
        HANDOVER("no entry, or no runtime");
    c.s.ours = e;

    /* Everything that could send the create to the shim, before the first write. */
    if (e[F_COMPAT].n) {
        fd = in_root(c.root, "/usr/local/cuda/compat", O_PATH);
        if (fd >= 0)
            close(fd);
        if (fd >= 0 || errno != ENOENT)
            HANDOVER("a CUDA compat directory"); /* its libcuda may go first: the shim decides */
    }
    if (libdirs_whole(&e[F_LIBDIRS]) < 0)
        HANDOVER("a library directory is not whole");
    if (plan_splice(&c.s, e, &sp) < 0 || sp.overflow)
        HANDOVER("the spec has what the shim edits itself");
    if (e[F_LD_CACHE].n) {
        char *text = strndup(e[F_LD_CACHE].p, e[F_LD_CACHE].n), *store = NULL;
        struct entry *extra = NULL;
        int missing = 0, k = text ? parse_entries(text, &extra, &store) : -1;
        int ok = k > 0 && merged_cache(c.root, extra, k, &c.cache, &missing) == 0;
        free(text);
        free(extra);
        free(store);
        if (!ok)
            HANDOVER("ld.so.cache not merged"); /* ldconfig, or a fresh cache: the shim's */
        ld_cache = "merged";
    }

    /* The writes, in the shim's order; the ld.so.cache last. */
    if (make_entry_links(c.root, &e[F_SYMLINKS]) < 0 ||
        (binds = make_binlinks(c.root, &e[F_BINLINKS], &c.binds)) < 0 ||
        write_entry_ld_conf(c.root, &e[F_LD_CONF]) < 0 ||
        (c.cache.len && write_image_cache(c.root, &c.cache) < 0))
        HANDOVER("a write failed"); /* the shim does the same writes again its own way */
    if (c.binds.len &&
        insert_cut(&sp, (size_t)(c.s.mounts_close - c.text), 0, c.s.mounts_any ? "," : "",
                   (struct field){c.binds.data, c.binds.len}, "") < 0)
        HANDOVER("too many edits"); /* the shim does the same writes again its own way */
    struct stat st;
    if (sp.n) { /* a container asking for no GPU: its spec stays as it is */
        apply_splice(&sp, &c.s, &c.out);
        if ((c.bundle_fd = open(bundle, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
            fstatat(c.bundle_fd, "config.json", &st, 0) < 0 ||
            replace_at(c.bundle_fd, "config.json", c.out.data, c.out.len, st.st_mode & 0777) < 0)
            HANDOVER("config.json not written");
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* The order's mounts (the destinations listed less the binaries') and the binaries' binds. */
    int nbin = count_items(&e[F_BINLINKS]) / 3, mounts = count_items(&e[F_MOUNT_DSTS]) - nbin;
    if (strcmp(bundle, ".") != 0 || !getcwd(where, sizeof where))
        snprintf(where, sizeof where, "%s", bundle);
    write_log(&e[F_LOG], &e[F_EVENTS], id, where, mounts + binds, nbin - binds, ld_cache,
              (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    native_free(&c);
    free_splice(&sp);
    exec_runtime(runtime, args, n);
handover:
    native_free(&c);
    free_splice(&sp);
}
