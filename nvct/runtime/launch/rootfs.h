/* What nvct's native programs do inside a container's root: resolve paths with
 * openat2(RESOLVE_IN_ROOT) (an image's symlink never leads out of its root), make
 * directories, links and files with *at calls under descriptors so resolved, and merge the
 * driver's entries into the image's ld.so.cache in ldconfig's order (nvct.base.ldcache_format,
 * line for line where it decides). Each function says when it declines; the callers then
 * hand the work to their Python half, which does it the same way or runs ldconfig.
 *
 * Included by cdihook.c and launcher.c after client.h and json.h.
 */
#include <linux/openat2.h>
#include <sys/syscall.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define MAX_CACHE (16 << 20) /* nvct.base.ldcache_format.MAX_SIZE */
#define MAX_STRING 4096      /* the longest cache string read; a longer one is not a cache */
#define OLD_MAGIC "ld.so-1.7.0"
#define NEW_MAGIC "glibc-ld.so.cache1.1"
#define NEW_HEADER 48
#define NEW_ENTRY 24
#define HWCAP_EXTENSION (1ULL << 62)
#define LD_CONF_DIR "/etc/ld.so.conf.d"
#define LD_CONF_NAME "000-nvidia-driver.conf"
#define LD_CONF_HEAD "# The host's NVIDIA driver libraries, bound here by nvct\n"

struct link {
    const char *target, *path;
};

struct entry {
    int32_t flags;
    const char *key, *value;
    size_t klen, vlen;
    uint32_t osversion;
    uint64_t hwcap;
};

/* --- Paths inside the root. */

/* A descriptor of `path` resolved inside the root (symlinks confined to it); -1 with errno. */
static int in_root(int root, const char *path, int flags)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    for (int i = 0; i < 32; i++) { /* EAGAIN: a rename raced the lookup; the kernel asks again */
        long fd = syscall(SYS_openat2, root, path, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN)
            return (int)fd;
    }
    return -1;
}

/* `path` in the root, open for reading, where it is a regular file; -1 with errno (EINVAL: it
 * is something else). The image controls the file: its type is read from an O_PATH descriptor
 * before anything opens it, since opening a FIFO blocks (the container never starts) and
 * opening a device node acts on the host's device (this runs as root, outside the container's
 * device cgroup). The same inode is then opened through /proc/self/fd. */
static int open_regular(int root, const char *path)
{
    struct stat st, again;
    char self[64];
    int at = in_root(root, path, O_PATH | O_NOFOLLOW), fd = -1, why = EINVAL;
    if (at < 0)
        return -1;
    if (fstat(at, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(self, sizeof self, "/proc/self/fd/%d", at);
        fd = open(self, O_RDONLY | O_CLOEXEC);
        why = errno;
        if (fd >= 0 && (fstat(fd, &again) < 0 || again.st_dev != st.st_dev ||
                        again.st_ino != st.st_ino)) { /* no procfs of ours there */
            close(fd);
            fd = -1, why = EINVAL;
        }
    }
    close(at);
    errno = why;
    return fd;
}

/* The last component of `path` (never empty, "." or ".."), its directory in `dir`. */
static const char *split(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || n + 2 > cap)
        return NULL;
    memcpy(dir, path, n);
    strcpy(dir + n, n ? "" : "/");
    return name;
}

/* `path` made lexical into `out`, as the Python Rootfs.makedirs reads a link's target: no empty
 * or "." components, each ".." taking the one before it away (never above "/"). 0, or -1. */
static int lexical(const char *path, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n > 0 && out[--n] != '/')
                ;
        } else if (len && !(len == 1 && p[0] == '.')) {
            if (n + 1 + len + 1 > cap)
                return -1;
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len + (p[len] == '/');
    }
    if (cap < 2)
        return -1;
    if (!n)
        out[n++] = '/';
    out[n] = '\0';
    return 0;
}

/* Whether make_dirs makes a dangling symlink's target (nvct-hook, which has committed to the
 * work by then) or declines (the launcher and the CDI hook hand such an image to Python). */
static int make_link_targets;

/* The directory `dir` inside the root, made (with its parents) where missing: an O_PATH
 * descriptor, or -1. A component that exists but does not resolve (a dangling symlink) is
 * made as the link's target inside the root, as mkdir -p in a chroot would (the Python
 * Rootfs.makedirs), where make_link_targets says so; else -1. */
static int make_dirs(int root, const char *dir, int depth)
{
    int fd = in_root(root, dir, O_PATH | O_DIRECTORY);
    if (fd >= 0 || errno != ENOENT || depth > 40)
        return fd >= 0 ? fd : -1;
    char parent[PATH_MAX];
    const char *name = split(dir, parent, sizeof parent);
    if (!name)
        return -1;
    int pfd = make_dirs(root, parent, depth + 1);
    if (pfd < 0)
        return -1;
    int made = mkdirat(pfd, name, 0755), why = made < 0 ? errno : 0;
    if (why == EEXIST && make_link_targets) {
        char target[PATH_MAX], in[PATH_MAX * 2 + 2], clean[PATH_MAX];
        ssize_t n = readlinkat(pfd, name, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            snprintf(in, sizeof in, target[0] == '/' ? "%s%s" : "%s/%s",
                     target[0] == '/' ? "" : parent, target);
            /* "/opt/lib/", "lib/.", "../lib": split() takes only a clean path */
            int linked = lexical(in, clean, sizeof clean) == 0 ? make_dirs(root, clean, depth + 1)
                                                                : -1;
            if (linked < 0) {
                close(pfd);
                return -1;
            }
            close(linked);
        }
    }
    close(pfd);
    if (why && why != EEXIST)
        return -1;
    return in_root(root, dir, O_PATH | O_DIRECTORY);
}

/* `name` -> `target` under `dir`: made, or an existing symlink replaced when it points
 * elsewhere; an image file of that name is kept. 0, or -1. */
static int symlink_at(int dir, const char *name, const char *target)
{
    if (symlinkat(target, dir, name) == 0)
        return 0;
    struct stat st;
    if (errno != EEXIST || fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!S_ISLNK(st.st_mode))
        return 0;
    char now[PATH_MAX];
    ssize_t n = readlinkat(dir, name, now, sizeof now);
    if (n >= 0 && (size_t)n == strlen(target) && memcmp(now, target, (size_t)n) == 0)
        return 0;
    if (unlinkat(dir, name, 0) < 0 || symlinkat(target, dir, name) < 0)
        return -1;
    return 0;
}

/* The links `links[0..n)`, grouped by directory: 0, or -1. */
static int make_links(int root, const struct link *links, int n)
{
    char last[PATH_MAX] = "", dir[PATH_MAX];
    int fd = -1, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *name = split(links[i].path, dir, sizeof dir);
        if (!name)
            rc = -1;
        else if (fd < 0 || strcmp(dir, last) != 0) { /* links come grouped by directory */
            if (fd >= 0)
                close(fd);
            fd = make_dirs(root, dir, 0);
            strcpy(last, dir);
            rc = fd < 0 ? -1 : 0;
        }
        if (rc == 0)
            rc = symlink_at(fd, name, links[i].target);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Replace `name` under `dir` with `data`, as nvct.base.atomic.write_atomic does: a temporary
 * file beside it (never through a symlink), its mode set past the umask, renamed over it. */
static int replace_at(int dir, const char *name, const char *data, size_t len, mode_t mode)
{
    char tmp[NAME_MAX + 1];
    if (snprintf(tmp, sizeof tmp, ".%s.%d.0.tmp", name, (int)getpid()) >= (int)sizeof tmp)
        return -1;
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dir, tmp, flags, mode);
    if (fd < 0 && errno == EEXIST && unlinkat(dir, tmp, 0) == 0) /* a killed run's leftover */
        fd = openat(dir, tmp, flags, mode);
    if (fd < 0)
        return -1;
    int ok = write_all(fd, data, len, 0) == 0 && fchmod(fd, mode) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && renameat(dir, tmp, dir, name) == 0)
        return 0;
    unlinkat(dir, tmp, 0);
    return -1;
}

/* The image's /etc/ld.so.conf.d entry naming `dirs` (nvct.container.ld_conf): 0 when written
 * or when the image has no such directory; -1 when it cannot be written. */
static int write_ld_conf(int root, const char *const *dirs, int n)
{
    int dir = in_root(root, LD_CONF_DIR, O_PATH | O_DIRECTORY);
    if (dir < 0) /* an image without it runs no ldconfig that reads it */
        return errno == ENOSYS ? -1 : 0;
    struct buf text = {0};
    put_bytes(&text, LD_CONF_HEAD, strlen(LD_CONF_HEAD));
    for (int i = 0; i < n; i++) {
        put_bytes(&text, dirs[i], strlen(dirs[i]));
        put_bytes(&text, "\n", 1);
    }
    int rc = replace_at(dir, LD_CONF_NAME, text.data, text.len, 0644);
    free(text.data);
    close(dir);
    return rc;
}

/* --- The ld.so.cache (nvct.base.ldcache_format, line for line where it decides). */

static int is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* glibc's _dl_cache_libcmp: byte order, but runs of digits compare as numbers (of any
 * length, as Python's int compares them). */
static int libcmp(const char *a, size_t la, const char *b, size_t lb)
{
    size_t i = 0, j = 0;
    while (i < la) {
        int ca = (unsigned char)a[i], cb = j < lb ? (unsigned char)b[j] : 0;
        if (is_digit(ca)) {
            if (!is_digit(cb))
                return 1;
            size_t i0 = i, j0 = j;
            while (i < la && is_digit((unsigned char)a[i]))
                i++;
            while (j < lb && is_digit((unsigned char)b[j]))
                j++;
            while (i0 < i - 1 && a[i0] == '0') /* leading zeros count for nothing */
                i0++;
            while (j0 < j - 1 && b[j0] == '0')
                j0++;
            if (i - i0 != j - j0)
                return i - i0 > j - j0 ? 1 : -1;
            int diff = memcmp(a + i0, b + j0, i - i0);
            if (diff)
                return diff;
        } else if (is_digit(cb)) {
            return -1;
        } else if (ca != cb) {
            return ca - cb;
        } else {
            i++;
            j++;
        }
    }
    return j < lb ? -(unsigned char)b[j] : 0;
}

/* Whether ldconfig writes `a` before `b` (ldcache_format._before). */
static int before(const struct entry *a, const struct entry *b)
{
    int res = libcmp(b->key, b->klen, a->key, a->klen);
    if (res)
        return res < 0;
    if (a->flags != b->flags)
        return a->flags > b->flags;
    return a->hwcap > b->hwcap;
}

static uint32_t u32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The NUL-terminated string at `base + offset`, at most MAX_STRING bytes; NULL otherwise. */
static const char *cstring(const char *data, size_t size, size_t base, uint32_t offset, size_t *n)
{
    size_t at = base + offset;
    if (at >= size)
        return NULL;
    size_t span = size - at < MAX_STRING ? size - at : MAX_STRING;
    const char *nul = memchr(data + at, '\0', span);
    if (!nul)
        return NULL;
    *n = (size_t)(nul - (data + at));
    return data + at;
}

/* The new-format header's flags byte and the entries of `data` (room left for `extra`
 * more); -1 when it is not a glibc 1.1 cache or holds what only ldconfig can order. */
static int read_cache(const char *data, size_t size, int extra, int *flags,
                      struct entry **out, size_t *count)
{
    size_t offset = 0;
    if (size >= strlen(OLD_MAGIC) && memcmp(data, OLD_MAGIC, strlen(OLD_MAGIC)) == 0) {
        if (size < 16)
            return -1;
        offset = (16 + (size_t)u32(data + 12) * 12 + 7) & ~(size_t)7;
        if (offset > size)
            return -1;
    }
    if (size < offset + NEW_HEADER || memcmp(data + offset, NEW_MAGIC, strlen(NEW_MAGIC)) != 0)
        return -1;
    size_t nlibs = u32(data + offset + 20), start = offset + NEW_HEADER;
    *flags = (unsigned char)data[offset + 28];
    if (nlibs > (size - start) / NEW_ENTRY)
        return -1;
    struct entry *entries = calloc(nlibs + (size_t)extra + 1, sizeof *entries);
    if (!entries)
        return -1;
    for (size_t i = 0; i < nlibs; i++) {
        const char *e = data + start + i * NEW_ENTRY;
        struct entry *x = &entries[i];
        memcpy(&x->flags, e, 4);
        x->osversion = u32(e + 12);
        memcpy(&x->hwcap, e + 16, 8);
        x->key = cstring(data, size, offset, u32(e + 4), &x->klen);
        x->value = cstring(data, size, offset, u32(e + 8), &x->vlen);
        if (!x->key || !x->value || (x->hwcap & HWCAP_EXTENSION) ||
            !is_ascii(x->key, x->klen) || !is_ascii(x->value, x->vlen)) {
            free(entries);
            return -1;
        }
    }
    *out = entries;
    *count = nlibs;
    return 0;
}

/* The strings of the cache being written, each once, in order of first use. */
struct strings {
    struct buf table;
    uint32_t *slots; /* 1 + offset in `table` of each string, by hash; 0: free */
    size_t nslots;
};

static uint32_t intern(struct strings *s, const char *str, size_t n, uint32_t base)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)str[i]) * 1099511628211ULL;
    for (size_t i = h & (s->nslots - 1);; i = (i + 1) & (s->nslots - 1)) {
        uint32_t slot = s->slots[i];
        if (!slot) {
            uint32_t at = (uint32_t)s->table.len;
            s->slots[i] = at + 1;
            put_bytes(&s->table, str, n);
            put_bytes(&s->table, "", 1);
            return base + at;
        }
        const char *have = s->table.data + slot - 1;
        if (strlen(have) == n && memcmp(have, str, n) == 0)
            return base + slot - 1;
    }
}

/* ldcache_format.write_cache: the new format alone, no extension section. */
static int write_cache(int flags, const struct entry *entries, size_t n, struct buf *out)
{
    struct strings s = {.nslots = 16};
    while (s.nslots < 4 * n + 16)
        s.nslots *= 2;
    s.slots = calloc(s.nslots, sizeof *s.slots);
    if (!s.slots)
        return -1;
    uint32_t base = (uint32_t)(NEW_HEADER + n * NEW_ENTRY);
    struct buf packed = {0};
    for (size_t i = 0; i < n; i++) {
        char e[NEW_ENTRY];
        uint32_t key = intern(&s, entries[i].key, entries[i].klen, base);
        uint32_t value = intern(&s, entries[i].value, entries[i].vlen, base);
        memcpy(e, &entries[i].flags, 4);
        memcpy(e + 4, &key, 4);
        memcpy(e + 8, &value, 4);
        memcpy(e + 12, &entries[i].osversion, 4);
        memcpy(e + 16, &entries[i].hwcap, 8);
        put_bytes(&packed, e, sizeof e);
    }
    char header[NEW_HEADER] = {0};
    uint32_t nlibs = (uint32_t)n, len = (uint32_t)s.table.len;
    memcpy(header, NEW_MAGIC, strlen(NEW_MAGIC));
    memcpy(header + 20, &nlibs, 4);
    memcpy(header + 24, &len, 4);
    header[28] = (char)flags;
    put_bytes(out, header, sizeof header);
    if (packed.len)
        put_bytes(out, packed.data, packed.len);
    if (s.table.len)
        put_bytes(out, s.table.data, s.table.len);
    free(packed.data);
    free(s.table.data);
    free(s.slots);
    return 0;
}

/* The planner's entries, `[[soname, path, flags], ...]`, into `out` (strings decoded into
 * `store`); their count, or -1 when they are not that (the Python hook decides then). */
static int parse_entries(const char *text, struct entry **out, char **store)
{
    const char *p = ws(text, text + strlen(text)), *end = text + strlen(text);
    size_t cap = (size_t)(end - p) + 1, used = 0;
    int n = 0, room = 16;
    struct entry *e = malloc((size_t)room * sizeof *e);
    char *strs = malloc(cap);
    if (!e || !strs || p >= end || *p++ != '[')
        goto bad;
    for (p = ws(p, end); p < end && *p != ']';) {
        if (n == room) {
            struct entry *more = realloc(e, (size_t)(room *= 2) * sizeof *e);
            if (!more)
                goto bad;
            e = more;
        }
        const char *s[2];
        size_t len[2];
        if (*p++ != '[')
            goto bad;
        for (int k = 0; k < 2; k++) {
            s[k] = strs + used;
            if (!(p = json_string(ws(p, end), end, strs + used, cap - used)))
                goto bad;
            len[k] = strlen(s[k]);
            used += len[k] + 1;
            p = ws(p, end);
            if (p >= end || *p++ != ',')
                goto bad;
        }
        p = ws(p, end);
        const char *num = p;
        if (p < end && *p == '-')
            p++;
        const char *digits_end = digits(p, end);
        if (!digits_end || digits_end - num > 9)
            goto bad; /* not a plain int: the Python hook's int() decides */
        e[n] = (struct entry){.flags = (int32_t)strtol(num, NULL, 10), .key = s[0],
                              .klen = len[0], .value = s[1], .vlen = len[1]};
        n++;
        p = ws(digits_end, end);
        if (p >= end || *p++ != ']')
            goto bad;
        p = ws(p, end);
        if (p < end && *p == ',')
            p = ws(p + 1, end);
        else if (p >= end || *p != ']')
            goto bad;
    }
    if (p >= end || ws(p + 1, end) != end)
        goto bad;
    *out = e;
    *store = strs;
    return n;
bad:
    free(e);
    free(strs);
    return -1;
}

/* The image's cache with the `n` entries of `extra` merged, into `out`: 0; -1 when the image
 * has no cache (`*missing` set: ldconfig knows what else such an image holds) or the merge
 * cannot match what ldconfig would write. */
static int merged_cache(int root, const struct entry *extra, int n, struct buf *out, int *missing)
{
    struct entry *entries = NULL;
    char *data = NULL;
    size_t size = 0, count = 0;
    int flags = 0, rc = -1;
    *missing = 0;
    int fd = open_regular(root, "/etc/ld.so.cache");
    if (fd < 0) {
        *missing = errno == ENOENT;
        return -1;
    }
    data = read_all(fd, MAX_CACHE, &size);
    close(fd);
    if (!data || n <= 0 || read_cache(data, size, n, &flags, &entries, &count) < 0)
        goto done;
    for (int i = 0; i < n; i++) {
        if (!is_ascii(extra[i].key, extra[i].klen) || !is_ascii(extra[i].value, extra[i].vlen))
            goto done;
        for (size_t k = 0; k < count; k++) /* the image's: 32 and 64-bit ones share a SONAME */
            if (entries[k].klen == extra[i].klen &&
                memcmp(entries[k].key, extra[i].key, extra[i].klen) == 0)
                goto done; /* which one the loader finds depends on the image's ld.so.conf */
    }
    for (int i = 0; i < n; i++) {
        size_t lo = 0, hi = count;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (before(&entries[mid], &extra[i]))
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(&entries[lo + 1], &entries[lo], (count - lo) * sizeof *entries);
        entries[lo] = extra[i];
        count++;
    }
    rc = write_cache(flags, entries, count, out);
done:
    free(entries);
    free(data);
    return rc;
}

/* `data` over the image's /etc/ld.so.cache: 0, or -1. */
static int write_image_cache(int root, const struct buf *data)
{
    int etc = in_root(root, "/etc", O_PATH | O_DIRECTORY);
    if (etc < 0)
        return -1;
    int rc = replace_at(etc, "ld.so.cache", data->data, data->len, 0644);
    close(etc);
    return rc;
}
