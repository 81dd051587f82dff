/* nvct-runtime's create of a kind of container nvct has prepared before, with no interpreter.
 *
 * The Python shim (in a daemon worker or started here) plans a container's GPUs once per kind
 * and caches the work order (nvct.plan.cached). Where the launcher asked it to
 * (NVCT_NATIVE_ENV names this launcher's code), it also writes that order as a native entry
 * (nvct.plan.native_entry): the spec's additions as JSON text, the rootfs's links, the
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
 * Included by launcher.c after native.h.
 */
/* --- What the create checks in config.json beside native.h's reads. */

static int visit_mount(const char *p, const char *end, void *ctx)
{
    struct spec *s = ctx;
    char dst[PATH_MAX];
    int has = string_member(p, end, "destination", dst, sizeof dst);
    if (has < 0)
        return -1;
    if (has && strncmp(dst, NVCT_DEVICE_MOUNT_DIR, strlen(NVCT_DEVICE_MOUNT_DIR)) == 0)
        return NOTE_WHY("config.json has a device-list mount"), -1; /* the shim's */
    if (has && listed(&s->ours[F_MOUNT_DSTS], dst, strlen(dst)))
        return NOTE_WHY("config.json has one of the entry's mounts already"), -1;
    return 0;
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
    if (num_end && listed(&s->ours[F_MAJORS], v[0], (size_t)(num_end - v[0])))
        return NOTE_WHY("config.json has a device rule for a major of the entry's already"), -1;
    return num_end ? 0 : -1;
}

/* A prestart hook nvct's create replaces (nvct.plan.spec_edits._is_gpu_hook): the shim
 * removes it. */
static int visit_prestart_arg(const char *p, const char *end, void *ctx)
{
    (void)ctx;
    const char *after = json_string(p, end, NULL, 0);
    if (!after)
        return -1;
    if (memmem(p, (size_t)(after - p), NVCT_HOOK_MARK, strlen(NVCT_HOOK_MARK)))
        return NOTE_WHY("config.json has a GPU prestart hook, which the shim removes"), -1;
    return 0;
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
                return NOTE_WHY("config.json has a GPU prestart hook, which the shim removes"), -1;
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
    if (p >= s->end || *p == '}') /* the shim writes it whole */
        return NOTE_WHY("config.json has an empty object where nvct adds an array"), -1;
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
        DECLINE("config.json has no process.env array"); /* the shim makes one */
    if (insert_cut(sp, (size_t)(v[0] - s->text), (size_t)(close + 1 - v[0]), "[", e[F_ENV],
                   "]") < 0)
        DECLINE("too many edits to config.json");
    struct buf *kept = &sp->items[sp->n - 1].owned;
    for (int i = 0; i < spans.n; i++) {
        size_t cap = (size_t)(spans.end[i] - spans.start[i]); /* the decoded text is shorter */
        char *name = malloc(cap);
        if (!name || !json_string(spans.start[i], s->end, name, cap)) {
            free(name);
            DECLINE("config.json's env has an entry that is not a string"); /* the shim says so */
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
            DECLINE("the entry has two sources for one hook stage"); /* the shim orders them */
        bodies[k] = body;
        wanted = 1;
    }
    if (!s->hooks || strncmp(s->hooks, "null", 4) == 0) {
        if (!wanted)
            return 0;
        if (s->hooks)
            DECLINE("config.json has hooks: null"); /* the shim's */
        char head[64] = "\"hooks\":{";
        for (int k = 0, first = 1; k < HOOK_STAGES; k++) {
            if (!bodies[k].n)
                continue;
            /* one insertion per stage at the spec's '{', in order: the first opens "hooks" */
            snprintf(head, sizeof head, "%s\"%s\":[", first ? "\"hooks\":{" : ",", STAGES[k]);
            if (insert_cut(sp, (size_t)(s->top + 1 - s->text), 0, head, bodies[k], "]") < 0)
                DECLINE("too many edits to config.json");
            first = 0;
        }
        insert(sp, (size_t)(s->top + 1 - s->text), "", (struct field){"", 0}, "},");
        return 0;
    }
    if (*s->hooks != '{' || !json_members(s->hooks, s->end, STAGES, hv))
        DECLINE("config.json's hooks are not an object");
    if (hv[0] && strncmp(hv[0], "null", 4) != 0 &&
        each_element(hv[0], s->end, visit_prestart, NULL, &close, &any) < 0)
        DECLINE("config.json's prestart hooks are not an array");
    for (int k = 0; k < HOOK_STAGES; k++) {
        if (!bodies[k].n)
            continue;
        if (hv[k]) {
            if (*hv[k] != '[' || each_element(hv[k], s->end, NULL, NULL, &close, &any) < 0 || any)
                /* hooks of its own there: the shim compares them with ours */
                DECLINE("config.json has hooks of a stage nvct adds to");
            insert(sp, (size_t)(close - s->text), "", bodies[k], "");
            continue;
        }
        const char *p = ws(s->hooks + 1, s->end);
        char head[64];
        if (p >= s->end || *p == '}')
            DECLINE("config.json's hooks are an empty object"); /* the shim writes it whole */
        snprintf(head, sizeof head, "\"%s\":[", STAGES[k]);
        if (insert_cut(sp, (size_t)(s->hooks + 1 - s->text), 0, head, bodies[k], "],") < 0)
            DECLINE("too many edits to config.json");
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
        DECLINE("config.json has no linux object");
    if (append_to(sp, s, lv[0], s->linux_, "\"devices\":[", e[F_DEVICES], visit_device) < 0)
        DECLINE("config.json's linux.devices is not an array");
    if (lv[1]) {
        if (*lv[1] != '{' || !json_members(lv[1], s->end, res_keys, rv) ||
            append_to(sp, s, rv[0], lv[1], "\"devices\":[", e[F_RULES], visit_rule) < 0)
            DECLINE("config.json's linux.resources.devices is not an array");
    } else if (e[F_RULES].n) {
        const char *p = ws(s->linux_ + 1, s->end);
        if (p >= s->end || *p == '}')
            DECLINE("config.json has an empty object where nvct adds an array");
        insert(sp, (size_t)(s->linux_ + 1 - s->text), "\"resources\":{\"devices\":[",
               e[F_RULES], "]},");
    }
    /* No mounts array at all: not a runc spec this scanner knows. */
    if (!s->mounts || *s->mounts != '[' ||
        each_element(s->mounts, s->end, visit_mount, s, &s->mounts_close, &s->mounts_any) < 0)
        DECLINE("config.json's mounts are not an array, or hold a mount of the entry's");
    if (e[F_MOUNTS].n) {
        insert(sp, (size_t)(s->mounts_close - s->text), s->mounts_any ? "," : "", e[F_MOUNTS],
               "");
        s->mounts_any = 1;
    }
    if (plan_env(s, e, sp) < 0)
        DECLINE("config.json's env could not be edited");
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

/* The checks the create makes before its first write: no CUDA compat directory, the library
 * directories whole, and the image's ld.so.cache merged (image_cache). 0, or -1. (nvct-hook
 * makes the image's two on the rootfs as the container's mount namespace has it.) */
static int image_ready(struct native *c, const struct field *e, const char **how)
{
    if (image_compat(c, e) < 0 || libdirs_whole(&e[F_LIBDIRS]) < 0)
        return -1; /* each notes why */
    return image_cache(c, e, how);
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct native c = {.text = spec, .root = -1, .bundle_fd = -1};
    struct field e[F_COUNT];
    struct splice sp = {.n = 0};
    char rootfs[PATH_MAX], runtime[PATH_MAX], where[PATH_MAX];
    const char *ld_cache = "none";
    int binds = 0;

    if (read_bundle(&c, bundle, size, cfg, rootfs, sizeof rootfs) < 0 ||
        find_entry(&c, "create", cfg, c.debian, e) < 0 || entry_runtime(&e[F_RUNTIMES], runtime,
                                                            sizeof runtime) < 0)
        HANDOVER("the entry names no low-level runtime found here");
    c.s.ours = e;

    /* Everything that could send the create to the shim, before the first write. */
    if (image_ready(&c, e, &ld_cache) < 0)
        HANDOVER("the image"); /* image_ready says what */
    if (plan_splice(&c.s, e, &sp) < 0 || sp.overflow)
        HANDOVER("config.json has what the shim edits itself");

    /* The writes, in the shim's order; the ld.so.cache last. */
    if (make_entry_links(c.root, &e[F_SYMLINKS]) < 0 ||
        (binds = make_binlinks(c.root, &e[F_BINLINKS], &c.binds)) < 0 ||
        write_entry_ld_conf(c.root, &e[F_LD_CONF]) < 0 ||
        (c.cache.len && write_image_cache(c.root, &c.cache) < 0))
        HANDOVER("a write in the rootfs failed"); /* the shim does them again its own way */
    if (c.binds.len &&
        insert_cut(&sp, (size_t)(c.s.mounts_close - c.text), 0, c.s.mounts_any ? "," : "",
                   (struct field){c.binds.data, c.binds.len}, "") < 0)
        HANDOVER("too many edits to config.json"); /* the shim does them again its own way */
    struct stat st;
    if (sp.n) { /* a container asking for no GPU: its spec stays as it is */
        apply_splice(&sp, &c.s, &c.out);
        if ((c.bundle_fd = open(bundle, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
            fstatat(c.bundle_fd, "config.json", &st, 0) < 0 ||
            replace_at(c.bundle_fd, "config.json", c.out.data, c.out.len, st.st_mode & 0777) < 0)
            HANDOVER("config.json could not be written");
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* The order's mounts (the destinations listed less the binaries') and the binaries' binds. */
    int nbin = count_items(&e[F_BINLINKS]) / 3, mounts = count_items(&e[F_MOUNT_DSTS]) - nbin;
    if (strcmp(bundle, ".") != 0 || !getcwd(where, sizeof where))
        snprintf(where, sizeof where, "%s", bundle);
    write_log(&e[F_LOG], &e[F_EVENTS], id, where, "", mounts + binds, nbin - binds, ld_cache,
              ms_between(t0, t1));
    native_free(&c);
    free_splice(&sp);
    exec_runtime(runtime, args, n);
handover:
    native_free(&c);
    free_splice(&sp);
}
