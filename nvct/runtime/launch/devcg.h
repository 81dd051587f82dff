/* The device-cgroup grant of a hook run without the shim, as nvct.container.cgroup.grant_devices
 * does it: the v1 devices controller's devices.allow, or on cgroup v2 every BPF device program
 * attached to the container's cgroup swapped (BPF_F_REPLACE) for one that allows the devices
 * first and then runs the old one (nvct.container.cgroup_v2, nvct.container.devfilter), so
 * the cgroup never allows less or more than the old rules plus the devices.
 *
 * The directory is chosen as the Python chooses it, quirks included: mountinfo is split as
 * bytes.splitlines and its fields as str.split() of the fsdecoded line (Unicode whitespace
 * too), escapes such as \040 stay as they are, and the cgroup lines break where
 * str.splitlines breaks them. Each error is one line as ApplyError.one_line gives it (the
 * message, then its fix), "PID" where the Python names the process by its pid.
 *
 * Included by hook.c after client.h (read_file), json.h and rootfs.h; needs _GNU_SOURCE.
 */
#include <linux/bpf.h>
#include <stdarg.h>
#include <sys/syscall.h>

#define DEVCG_ROOT "/sys/fs/cgroup"
#define DEVCG_MAX_PROGS 64   /* nvct.base.bpf.query_device_programs asks for this many */
#define DEVCG_LOG_SIZE 65536 /* the verifier's log: its last line says why it refused */
#define DEVCG_FIX_EXTEND "run the container with --runtime=nvidia (nvct-runtime), which puts " \
                         "the devices in the spec instead"

struct devno {
    unsigned major, minor;
};

struct devcg_str { /* a slice of mountinfo or of the cgroup lines; p == NULL: none */
    const char *p;
    size_t n;
};

__attribute__((format(printf, 3, 4))) static int devcg_fail(char *err, size_t cap,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int devcg_is(struct devcg_str s, const char *text)
{
    return s.p && s.n == strlen(text) && memcmp(s.p, text, s.n) == 0;
}

/* Whether `item` is one of the comma-separated items of `list`. */
static int devcg_has(struct devcg_str list, const char *item)
{
    const char *p = list.p, *end = list.p + list.n;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        if (devcg_is((struct devcg_str){p, (size_t)((comma ? comma : end) - p)}, item))
            return 1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* The length of the line break at `at`: bytes.splitlines' (\n, \r, \r\n), or with `text` also
 * str.splitlines' others (the Python's cgroup lines are decoded text); else 0. A whole UTF-8
 * sequence decodes to its character wherever it stands: none begins with a continuation byte. */
static size_t devcg_break(const char *at, const char *end, int text)
{
    const unsigned char *p = (const unsigned char *)at;
    size_t left = (size_t)(end - at);
    if (*p == '\n' || *p == '\r')
        return *p == '\r' && left > 1 && p[1] == '\n' ? 2 : 1;
    if (!text)
        return 0;
    if (*p == '\v' || *p == '\f' || (*p >= 0x1c && *p <= 0x1e))
        return 1;
    if (left >= 2 && p[0] == 0xc2 && p[1] == 0x85)
        return 2;
    return left >= 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9) ? 3 : 0;
}

/* The length of the character at `at` when str.isspace() holds of it after os.fsdecode; else 0. */
static size_t devcg_space(const char *at, const char *end)
{
    static const char wide[][4] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8",
                                   "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    const unsigned char *p = (const unsigned char *)at;
    size_t left = (size_t)(end - at);
    if (*p == ' ' || (*p >= '\t' && *p <= '\r') || (*p >= 0x1c && *p <= 0x1f))
        return 1;
    if (left >= 3 && p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0x80 && p[2] <= 0x8a)
        return 3; /* U+2000..U+200A */
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++) {
        size_t n = strlen(wide[i]);
        if (left >= n && memcmp(at, wide[i], n) == 0)
            return n;
    }
    return 0;
}

/* The next line of [*at, end) as [*s, *e), *at moved past its break; 0 when none is left. */
static int devcg_line(const char **at, const char *end, int text, const char **s, const char **e)
{
    if (*at >= end)
        return 0;
    const char *p = *s = *at;
    size_t brk = 0;
    while (p < end && !(brk = devcg_break(p, end, text)))
        p++;
    *e = p;
    *at = p + brk;
    return 1;
}

/* str.split() of [p, end): the first `max` words in w[], the last in *last; how many. */
static int devcg_words(const char *p, const char *end, struct devcg_str *w, int max,
                       struct devcg_str *last)
{
    int n = 0;
    while (p < end) {
        size_t sp = devcg_space(p, end);
        if (sp) {
            p += sp;
            continue;
        }
        const char *start = p;
        while (p < end && !devcg_space(p, end))
            p++;
        *last = (struct devcg_str){start, (size_t)(p - start)};
        if (n < max)
            w[n] = *last;
        n++;
    }
    return n;
}

struct devcg_host {
    struct devcg_str top_type, top_root; /* the last mount on /sys/fs/cgroup: the visible one */
    struct devcg_str devices, cgroup2;   /* the first v1 devices and the first cgroup2 mount */
};

/* What nvct.container.cgroup._mounts gives a grant, from mountinfo's text. The lines that
 * cannot matter (hundreds of KB of overlay mounts on a busy node) are passed over unsplit. */
static void devcg_mounts(const char *data, size_t size, struct devcg_host *h)
{
    const char *at = data, *end = data + size, *s, *e;
    memset(h, 0, sizeof *h);
    while (devcg_line(&at, end, 0, &s, &e)) {
        size_t len = (size_t)(e - s);
        if (!memmem(s, len, " - cgroup", 9) && !memmem(s, len, " " DEVCG_ROOT " ", 16))
            continue;
        const char *sep = memmem(s, len, " - ", 3);
        struct devcg_str f[5], x[1], last, opts;
        if (!sep || devcg_words(s, sep, f, 5, &last) < 5 ||
            devcg_words(sep + 3, e, x, 1, &opts) < 1) /* opts: the last word, super options */
            continue;
        if (devcg_is(f[4], DEVCG_ROOT))
            h->top_type = x[0], h->top_root = f[3];
        if (!h->devices.p && devcg_is(x[0], "cgroup") && devcg_has(opts, "devices"))
            h->devices = f[4];
        if (!h->cgroup2.p && devcg_is(x[0], "cgroup2"))
            h->cgroup2 = f[4];
    }
}

/* os.path.join(dir, rel.lstrip("/")) into out[PATH_MAX]: 0, or -1 when it is longer. */
static int devcg_join(char *out, struct devcg_str dir, struct devcg_str rel)
{
    while (rel.n && *rel.p == '/')
        rel.p++, rel.n--;
    size_t slash = dir.n && dir.p[dir.n - 1] != '/';
    if (dir.n + slash + rel.n >= PATH_MAX)
        return -1;
    memcpy(out, dir.p, dir.n);
    memcpy(out + dir.n, "/", slash);
    memcpy(out + dir.n + slash, rel.p, rel.n);
    out[dir.n + slash + rel.n] = '\0';
    return 0;
}

/* The device cgroup directory into dir[PATH_MAX] and whether it is cgroup v2 (*v2), decided as
 * grant_devices decides it (unified_cgroup_dir, devices_cgroup_dir, _any_cgroup2_dir): 0 or -1. */
static int devcg_dir(const struct devcg_host *h, const char *lines, char *dir, int *v2, char *err,
                     size_t cap)
{
    struct devcg_str rel = {0}, dev_rel = {0}, root = h->top_root;
    const char *at = lines, *end = lines + strlen(lines), *s, *e;
    int bad = 0; /* a line before the devices one that is not ID:CONTROLLERS:PATH */
    while (devcg_line(&at, end, 1, &s, &e)) {
        size_t len = (size_t)(e - s);
        if (!rel.p && len >= 3 && memcmp(s, "0::", 3) == 0)
            rel = (struct devcg_str){s + 3, len - 3};
        const char *c1 = dev_rel.p || bad ? NULL : memchr(s, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(e - c1 - 1)) : NULL;
        bad = bad || (!dev_rel.p && !c2);
        if (c2 && devcg_has((struct devcg_str){c1 + 1, (size_t)(c2 - c1 - 1)}, "devices"))
            dev_rel = (struct devcg_str){c2 + 1, (size_t)(e - c2 - 1)};
    }
    struct devcg_str base = {DEVCG_ROOT, strlen(DEVCG_ROOT)};
    *v2 = 1;
    if (devcg_is(h->top_type, "cgroup2")) { /* a unified host: the mount's root is not in it */
        if (!rel.p)
            return devcg_fail(err, cap, "/proc/PID/cgroup has no cgroup v2 entry on a cgroup v2 "
                                        "host");
        if (!devcg_is(root, "/") && rel.n >= root.n && memcmp(rel.p, root.p, root.n) == 0)
            rel.p += root.n, rel.n -= root.n;
    } else if (bad) {
        return devcg_fail(err, cap, "a line of /proc/PID/cgroup is not ID:CONTROLLERS:PATH");
    } else if (dev_rel.p) {
        if (!h->devices.p)
            return devcg_fail(err, cap, "the devices cgroup controller is not mounted on the host");
        base = h->devices, rel = dev_rel, *v2 = 0;
    } else if (h->cgroup2.p && rel.p) {
        base = h->cgroup2;
    } else {
        return devcg_fail(err, cap, "the process is in no device cgroup nvct can find "
                          "(neither the v1 devices controller nor a cgroup2 mount) (fix: "
                          "mount the cgroup filesystems, or run the container with "
                          "--runtime=nvidia)");
    }
    if (devcg_join(dir, base, rel) < 0)
        return devcg_fail(err, cap, "the container's device cgroup path is too long");
    return 0;
}

/* v1: one rule per open and write of devices.allow, as the kernel file takes them. */
static int devcg_grant_v1(const char *dir, const struct devno *devs, int n, char *err, size_t cap)
{
    char allow[PATH_MAX], rule[64];
    if (snprintf(allow, sizeof allow, "%s/devices.allow", dir) >= (int)sizeof allow)
        return devcg_fail(err, cap, "cannot write %s/devices.allow: path too long", dir);
    for (int i = 0; i < n; i++) {
        int len = snprintf(rule, sizeof rule, "c %u:%u rwm\n", devs[i].major, devs[i].minor);
        int fd = open(allow, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        int ok = fd >= 0 && write(fd, rule, (size_t)len) == len;
        int why = errno;
        if (fd >= 0 && close(fd) < 0 && ok)
            ok = 0, why = errno;
        if (!ok)
            return devcg_fail(err, cap, "cannot write %s: %s", allow, strerror(why));
    }
    return 0;
}

static long devcg_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

/* One struct bpf_insn, little-endian, as nvct.container.devfilter.insn packs it. */
static unsigned char *devcg_insn(unsigned char *at, int op, int dst, int src, int off, int32_t imm)
{
    uint32_t u = (uint32_t)imm;
    unsigned char b[8] = {(unsigned char)op, (unsigned char)(src << 4 | dst), (unsigned char)off,
                          (unsigned char)(off >> 8), (unsigned char)u, (unsigned char)(u >> 8),
                          (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
    return memcpy(at, b, 8), at + 8;
}

static int devcg_order(const void *a, const void *b)
{
    const struct devno *x = a, *y = b;
    return x->major != y->major ? (x->major > y->major) - (x->major < y->major)
                                : (x->minor > y->minor) - (x->minor < y->minor);
}

/* devfilter.allow_rules of `sorted` (ascending): return 1 for each distinct char device, else
 * fall through. r1, the context, is never written: the old program finds it as it was. */
static size_t devcg_rules(unsigned char *code, const struct devno *sorted, int n)
{
    unsigned char *at = code;
    at = devcg_insn(at, 0x61, 2, 1, 0, 0);     /* r2 = access_type */
    at = devcg_insn(at, 0x54, 2, 0, 0, 0xffff); /* r2 = device type */
    at = devcg_insn(at, 0x61, 4, 1, 4, 0);     /* r4 = major */
    at = devcg_insn(at, 0x61, 5, 1, 8, 0);     /* r5 = minor */
    for (int i = 0; i < n; i++) {
        if (i && devcg_order(&sorted[i - 1], &sorted[i]) == 0)
            continue;
        at = devcg_insn(at, 0x55, 2, 0, 4, 2); /* not a char device */
        at = devcg_insn(at, 0x55, 4, 0, 3, (int32_t)sorted[i].major);
        at = devcg_insn(at, 0x55, 5, 0, 2, (int32_t)sorted[i].minor);
        at = devcg_insn(at, 0xb4, 0, 0, 0, 1); /* r0 = 1 */
        at = devcg_insn(at, 0x95, 0, 0, 0, 0); /* exit */
    }
    return (size_t)(at - code);
}

/* devfilter.prepend_allow's check of the old program: whole instructions, and none that its
 * kernel dump rewrites (a 64-bit immediate's map pointer, a call), so it can be loaded again. */
static int devcg_reloadable(const unsigned char *old, __u32 len, char *why, size_t cap)
{
    if (len == 0 || len % 8)
        return devcg_fail(why, cap, "a device program of %u bytes is not whole instructions", len);
    for (__u32 at = 0; at < len; at += 8)
        if (old[at] == 0x18 || old[at] == 0x85)
            return devcg_fail(why, cap, "the attached device program uses opcode %#04x at "
                              "instruction %u, which cannot be reloaded from its kernel dump",
                              old[at], at / 8);
    return 0;
}

/* Program `old_fd`'s instructions (xlated: as the kernel holds them) in a new buffer after
 * `head` bytes left for the rules, their length in *len; NULL with the reason in why[]. */
static unsigned char *devcg_xlated(int old_fd, size_t head, __u32 *len, char *why, size_t cap)
{
    struct bpf_prog_info info = {0};
    union bpf_attr a = {0};
    a.info.bpf_fd = (__u32)old_fd, a.info.info_len = sizeof info, a.info.info = (uintptr_t)&info;
    if (devcg_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
        return devcg_fail(why, cap, "%s", strerror(errno)), NULL;
    *len = info.xlated_prog_len;
    unsigned char *code = malloc(head + *len + 1);
    if (!code)
        return devcg_fail(why, cap, "out of memory"), NULL;
    memset(&info, 0, sizeof info);
    info.xlated_prog_len = *len, info.xlated_prog_insns = (uintptr_t)(code + head);
    if (devcg_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
        devcg_fail(why, cap, "%s", strerror(errno));
    else if (devcg_reloadable(code + head, *len, why, cap) == 0)
        return code;
    free(code);
    return NULL;
}

/* Load code[0..len) as a device program: its fd, or -1 with the reason in why[] (the error,
 * then the verifier's last line, as nvct.base.bpf.load_device_program gives it). */
static int devcg_load(const unsigned char *code, size_t len, char *why, size_t cap)
{
    char *log = calloc(1, DEVCG_LOG_SIZE);
    if (!log)
        return devcg_fail(why, cap, "out of memory");
    union bpf_attr a = {0};
    a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE, a.expected_attach_type = BPF_CGROUP_DEVICE;
    a.insns = (uintptr_t)code, a.insn_cnt = (__u32)(len / 8);
    a.license = (uintptr_t) "Apache-2.0";
    a.log_level = 1, a.log_size = DEVCG_LOG_SIZE, a.log_buf = (uintptr_t)log;
    memcpy(a.prog_name, "nvct_devices", sizeof "nvct_devices");
    int fd = (int)devcg_bpf(BPF_PROG_LOAD, &a);
    if (fd < 0) {
        int err = errno;
        size_t end = strnlen(log, DEVCG_LOG_SIZE - 1), start;
        while (end && strchr(" \t\n\r\v\f", log[end - 1]))
            end--;
        for (start = end; start && log[start - 1] != '\n';)
            start--;
        devcg_fail(why, cap, "%s%s%.*s", strerror(err), end ? " " : "", (int)(end - start),
                   log + start);
    }
    free(log);
    return fd;
}

/* Swap program `id` of the cgroup `cg` (at `dir`) for itself after rules[0..nrules): 0 or -1. */
static int devcg_replace(int cg, const char *dir, __u32 id, __u32 flags,
                         const unsigned char *rules, size_t nrules, char *err, size_t cap)
{
    union bpf_attr a = {0};
    a.prog_id = id;
    int old_fd = (int)devcg_bpf(BPF_PROG_GET_FD_BY_ID, &a), new_fd = -1, rc = -1;
    if (old_fd < 0)
        return devcg_fail(err, cap, "cannot open device program %u of %s: %s", id, dir,
                          strerror(errno));
    char why[512] = "";
    __u32 len = 0;
    unsigned char *code = devcg_xlated(old_fd, nrules, &len, why, sizeof why);
    if (code) {
        memcpy(code, rules, nrules);
        new_fd = devcg_load(code, nrules + len, why, sizeof why);
        free(code);
    }
    if (new_fd < 0) {
        devcg_fail(err, cap, "cannot extend device program %u of %s: %s (fix: %s)", id, dir, why,
                   DEVCG_FIX_EXTEND);
    } else {
        memset(&a, 0, sizeof a);
        a.target_fd = (__u32)cg, a.attach_bpf_fd = (__u32)new_fd;
        a.attach_type = BPF_CGROUP_DEVICE, a.attach_flags = flags; /* a single one: replaced */
        if (flags & BPF_F_ALLOW_MULTI) /* one of several: swapped in its place, atomically */
            a.attach_flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE, a.replace_bpf_fd = (__u32)old_fd;
        rc = (int)devcg_bpf(BPF_PROG_ATTACH, &a);
        if (rc < 0)
            devcg_fail(err, cap, "cannot attach the extended device program to %s: %s (fix: "
                       "BPF_F_REPLACE needs Linux 5.6 or later)", dir, strerror(errno));
        close(new_fd);
    }
    close(old_fd);
    return rc < 0 ? -1 : 0;
}

/* v2: every program attached to the cgroup itself extended (none: nothing is denied here). */
static int devcg_grant_v2(const char *dir, const struct devno *devs, int n, char *err, size_t cap)
{
    struct devno *sorted = malloc((size_t)n * sizeof *sorted);
    unsigned char *rules = malloc((size_t)(4 + 5 * n) * 8);
    int cg = -1, rc = -1;
    if (!sorted || !rules) {
        devcg_fail(err, cap, "out of memory");
        goto out;
    }
    memcpy(sorted, devs, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, devcg_order);
    size_t nrules = devcg_rules(rules, sorted, n);
    cg = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (cg < 0) {
        devcg_fail(err, cap, "cannot open the container's cgroup %s: %s", dir, strerror(errno));
        goto out;
    }
    __u32 ids[DEVCG_MAX_PROGS];
    union bpf_attr q = {0};
    q.query.target_fd = (__u32)cg, q.query.attach_type = BPF_CGROUP_DEVICE;
    q.query.prog_ids = (uintptr_t)ids, q.query.prog_cnt = DEVCG_MAX_PROGS;
    if (devcg_bpf(BPF_PROG_QUERY, &q) < 0) {
        devcg_fail(err, cap, "cannot list the device programs of %s: %s (fix: the hook needs "
                   "CAP_SYS_ADMIN and a kernel with cgroup BPF (4.15+))", dir, strerror(errno));
        goto out;
    }
    rc = 0;
    for (__u32 i = 0; i < q.query.prog_cnt && i < DEVCG_MAX_PROGS && rc == 0; i++)
        rc = devcg_replace(cg, dir, ids[i], q.query.attach_flags, rules, nrules, err, cap);
out:
    if (cg >= 0)
        close(cg);
    free(sorted);
    free(rules);
    return rc;
}

static int grant_devices(const char *mountinfo, const char *lines, const struct devno *devs, int n,
                         char *err, size_t cap)
{
    if (n <= 0)
        return 0; /* nothing to grant: nothing is read */
    size_t size;
    char *data = read_file(mountinfo, &size);
    if (!data)
        return devcg_fail(err, cap, "cannot read %s: %s", mountinfo, strerror(errno));
    struct devcg_host host;
    char dir[PATH_MAX];
    int v2 = 0;
    devcg_mounts(data, size, &host);
    int rc = devcg_dir(&host, lines, dir, &v2, err, cap);
    free(data); /* host's slices point into it */
    if (rc < 0)
        return -1;
    return v2 ? devcg_grant_v2(dir, devs, n, err, cap) : devcg_grant_v1(dir, devs, n, err, cap);
}
