/* nvct-hook's prestart from a native entry: the work of `docker run --gpus` and of podman's
 * hooks.d for a kind of container the Python hook (in a daemon worker, or run here) has done
 * before, with no interpreter and no daemon.
 *
 * Where this hook asked for it (NVCT_NATIVE_ENV names its code), the Python hook writes a
 * native entry of kind "hook" after its prestart (nvct.plan.native_entry). A later
 * container of that kind is then done here, in the Python hook's order and on its terms:
 *
 * - the entry is found and checked as the launcher's create checks its own (native.h: the
 *   key, the driver's fingerprint); the library directories are checked whole, and the spec
 *   (no device-list mount, none of the entry's nodes already in it);
 * - the container's process is pinned as nvct.hook.pinned pins it: a pidfd, a child of our
 *   own parent (the runtime), in a mount namespace of its own, its cgroup read while the
 *   pidfd shows it alive; its pid is never used again;
 * - the image is checked in that mount namespace, as the container will see it with its
 *   volumes (no CUDA compat directory, an ld.so.cache the driver's entries merge into), and
 *   this process goes back to its own namespace;
 * - then, committed: the device cgroup grant in the host's namespace (devcg.h), the
 *   container's mount namespace joined, the device nodes made, the driver's files bound (each
 *   mount point resolved with openat2(RESOLVE_IN_ROOT), the new mount checked to be the
 *   source's before it is made read-only and private), the links, the ld.so.conf.d entry,
 *   the merged ld.so.cache (rootfs.h), and /proc/driver/nvidia covered (procdrv.h).
 *
 * Anything unexpected before the commit returns -1, with nothing done: the daemon or the
 * Python hook does the work from the start. A failure after it fails the hook with one line
 * on stderr and a hook_failed event in nvct's log, and the runtime does not start the
 * container, as with the Python hook.
 *
 * Included by hook.c after native.h, devcg.h and procdrv.h.
 */
#include <sched.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* --- The container's process, pinned (nvct.hook.pinned). */

struct pinned {
    int pidfd, mnt;
    char *cgroup; /* its /proc/PID/cgroup, read while it was alive */
};

static void unpin(struct pinned *p)
{
    if (p->pidfd >= 0)
        close(p->pidfd);
    if (p->mnt >= 0)
        close(p->mnt);
    free(p->cgroup);
    *p = (struct pinned){-1, -1, NULL};
}

/* The parent pid in an open /proc/PID's stat (the command's name may hold ')'), or -1. */
static long stat_parent(int proc_dir)
{
    char buf[4096], state;
    long ppid;
    int fd = openat(proc_dir, "stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && sscanf(paren + 1, " %c %ld", &state, &ppid) == 2 ? ppid : -1;
}

/* Pin `pid`, the state's process, for this hook: 0, or -1 with nothing held. */
static int pin(long pid, struct pinned *p)
{
    char path[64];
    struct stat ours, theirs;
    size_t n = 0;
    long runtime = (long)getppid();
    *p = (struct pinned){-1, -1, NULL};
    if (pid <= 1 || pid == (long)getpid() || runtime <= 1)
        return -1;
    p->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    snprintf(path, sizeof path, "/proc/%ld", pid);
    int dir = p->pidfd >= 0 ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    int ok = dir >= 0 && stat_parent(dir) == runtime;
    if (ok && (p->mnt = openat(dir, "ns/mnt", O_RDONLY | O_CLOEXEC)) >= 0 &&
        stat("/proc/self/ns/mnt", &ours) == 0 && fstat(p->mnt, &theirs) == 0 &&
        (ours.st_dev != theirs.st_dev || ours.st_ino != theirs.st_ino)) {
        int fd = openat(dir, "cgroup", O_RDONLY | O_CLOEXEC);
        p->cgroup = fd >= 0 ? read_all(fd, 1 << 20, &n) : NULL;
        if (fd >= 0)
            close(fd);
    }
    /* Alive now, so alive since the pidfd was opened: no other process had its pid. */
    ok = p->cgroup && syscall(SYS_pidfd_send_signal, p->pidfd, 0, NULL, 0) == 0;
    if (dir >= 0)
        close(dir);
    if (!ok)
        unpin(p);
    return ok ? 0 : -1;
}

/* --- The work in the container's mount namespace (nvct.container.apply). */

#define ERR(...) (snprintf(err, cap, __VA_ARGS__), -1)

/* mknod the entry's `path\0major\0minor\0mode` nodes (create_device_nodes): their count, or
 * -1 with the reason in err. */
static int make_nodes(int root, const struct field *f, char *err, size_t cap)
{
    size_t at = 0;
    struct field path, major, minor, mode;
    char dir[PATH_MAX];
    int count = 0;
    while (next_item(f, &at, &path) && next_item(f, &at, &major) && next_item(f, &at, &minor) &&
           next_item(f, &at, &mode)) {
        dev_t dev = makedev(strtoul(major.p, NULL, 10), strtoul(minor.p, NULL, 10));
        const char *name = split(path.p, dir, sizeof dir);
        int parent = name ? make_dirs(root, dir, 0) : -1;
        if (parent < 0)
            return ERR("cannot resolve %s in the container: %s", path.p, strerror(errno));
        struct stat st;
        int rc = mknodat(parent, name, S_IFCHR | (mode_t)strtoul(mode.p, NULL, 10), dev), why = errno;
        if (rc < 0 && why == EEXIST &&
            (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISCHR(st.st_mode) ||
             st.st_rdev != dev)) {
            close(parent);
            return ERR("%s exists in the container but is not device %s:%s (fix: remove it from "
                       "the image)", path.p, major.p, minor.p);
        }
        close(parent);
        if (rc < 0 && why != EEXIST)
            return ERR("cannot create %s in the container: %s", path.p, strerror(why));
        count++;
    }
    return count;
}

/* The mount flags of a spec mount's options that a bind's remount applies. */
static unsigned long bind_flags(const char *options)
{
    static const struct {
        const char *name;
        unsigned long flag;
    } known[] = {{"ro", MS_RDONLY}, {"nosuid", MS_NOSUID}, {"nodev", MS_NODEV},
                 {"noexec", MS_NOEXEC}};
    unsigned long flags = 0;
    for (const char *p = options; *p;) {
        size_t n = strcspn(p, ",");
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            if (n == strlen(known[i].name) && memcmp(p, known[i].name, n) == 0)
                flags |= known[i].flag;
        p += n + (p[n] == ',');
    }
    return flags;
}

/* Bind `source` (a host path) on `target` in the root, then restrict it (apply.bind_mount):
 * 0, or -1 with the reason in err. */
static int bind_one(int root, const char *source, const char *target, const char *options,
                    char *err, size_t cap)
{
    struct stat src, st;
    char dir[PATH_MAX], at[64];
    if (stat(source, &src) < 0)
        return ERR("driver file %s is missing: %s (fix: run `nvct-cli list --no-cache` to "
                   "refresh the inventory)", source, strerror(errno));
    int is_dir = S_ISDIR(src.st_mode);
    const char *name = split(target, dir, sizeof dir);
    int parent = name ? make_dirs(root, dir, 0) : -1;
    if (parent < 0)
        return ERR("cannot resolve %s in the container: %s", target, strerror(errno));
    int made = is_dir ? mkdirat(parent, name, 0755)
                      : openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                               0644);
    int why = errno;
    if (!is_dir && made >= 0)
        close(made);
    close(parent);
    if (made < 0 && why != EEXIST)
        return ERR("cannot create %s in the container: %s", target, strerror(why));
    /* What is there now, resolved in the root (an image's link to its own file is followed). */
    int fd = in_root(root, target, O_PATH);
    if (fd < 0)
        return ERR("cannot resolve %s in the container: %s", target, strerror(errno));
    if (fstat(fd, &st) < 0 || (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
        close(fd);
        return ERR("%s in the container is not a %s (fix: remove it from the image)", target,
                   is_dir ? "directory" : "regular file");
    }
    if (pd_mount(source, fd, NULL, MS_BIND) < 0) /* fd closed, errno kept */
        return ERR("cannot mount %s on %s: %s", source, target, strerror(errno));
    int rc = 0;
    /* The descriptor named the covered inode: resolved again, the path reaches the new mount,
     * checked to be the source's before its flags change. */
    if ((fd = in_root(root, target, O_PATH)) < 0)
        return ERR("cannot resolve %s in the container: %s", target, strerror(errno));
    snprintf(at, sizeof at, "/proc/self/fd/%d", fd);
    if (fstat(fd, &st) < 0 || st.st_dev != src.st_dev || st.st_ino != src.st_ino)
        rc = ERR("%s changed while it was being mounted; refusing", target);
    else if (mount(NULL, at, NULL, MS_REMOUNT | MS_BIND | bind_flags(options), NULL) < 0 ||
             mount(NULL, at, NULL, MS_PRIVATE, NULL) < 0)
        rc = ERR("cannot restrict the mount on %s: %s", target, strerror(errno));
    close(fd);
    return rc;
}

/* The entry's `source\0target\0options` binds: their count, or -1. */
static int make_binds(int root, const struct field *f, char *err, size_t cap)
{
    size_t at = 0;
    struct field source, target, options;
    int count = 0;
    while (next_item(f, &at, &source) && next_item(f, &at, &target) &&
           next_item(f, &at, &options)) {
        if (bind_one(root, source.p, target.p, options.p, err, cap) < 0)
            return -1;
        count++;
    }
    return count;
}

static int visit_option(const char *p, const char *end, void *ctx)
{
    char option[32];
    struct buf *b = ctx;
    if (!json_string(p, end, option, sizeof option))
        return json_string(p, end, NULL, 0) ? 0 : -1; /* a longer option sets no flag */
    if (b->len)
        put_text(b, ",");
    put_text(b, option);
    return 0;
}

/* The binaries' links (links.link_binaries), each bound instead where the image holds its
 * path: the count bound, or -1. */
static int hook_binlinks(int root, const struct field *f, char *err, size_t cap)
{
    size_t at = 0;
    struct field path, target, mount;
    char dir[PATH_MAX], source[PATH_MAX];
    int count = 0;
    while (next_item(f, &at, &path) && next_item(f, &at, &target) && next_item(f, &at, &mount)) {
        const char *name = split(path.p, dir, sizeof dir), *end = mount.p + mount.n, *close_;
        int fd = name ? make_dirs(root, dir, 0) : -1;
        int made = fd >= 0 ? link_only(fd, name, target.p) : -1;
        if (fd >= 0)
            close(fd);
        if (made < 0)
            return ERR("cannot link %s in the container: %s", path.p, strerror(errno));
        if (made)
            continue;
        static const char *const keys[] = {"source", "options", NULL};
        const char *v[2];
        struct buf options = {0};
        int any, rc = json_members(mount.p, end, keys, v) && v[0] &&
                              json_string(v[0], end, source, sizeof source) &&
                              (!v[1] || each_element(v[1], end, visit_option, &options, &close_,
                                                     &any) == 0)
                          ? bind_one(root, source, path.p, options.data ? options.data : "", err,
                                     cap)
                          : ERR("the native entry's mount for %s is unreadable", path.p);
        free(options.data);
        if (rc < 0)
            return -1;
        count++;
    }
    return count;
}

/* --- The prestart. */

static int visit_hook_mount(const char *p, const char *end, void *ctx)
{
    char dst[PATH_MAX];
    (void)ctx;
    int has = string_member(p, end, "destination", dst, sizeof dst);
    if (has > 0 && strncmp(dst, NVCT_DEVICE_MOUNT_DIR, strlen(NVCT_DEVICE_MOUNT_DIR)) == 0)
        return NOTE_WHY("config.json has a device-list mount"), -1; /* the Python hook's */
    return has < 0 ? -1 : 0;
}

/* The spec's own mounts and devices leave the work to this hook: 0, or -1. */
static int spec_leaves_it_to_us(struct spec *s)
{
    static const char *const keys[] = {"devices", NULL};
    const char *v[1] = {NULL}, *close_;
    int any;
    if (s->mounts && *s->mounts != 'n' &&
        each_element(s->mounts, s->end, visit_hook_mount, s, &close_, &any) < 0)
        return -1;
    if (s->linux_ && *s->linux_ != 'n' &&
        (*s->linux_ != '{' || !json_members(s->linux_, s->end, keys, v)))
        return -1;
    /* A node of the entry's already in the spec: the Python hook makes only the others. */
    return v[0] && *v[0] != 'n' && each_element(v[0], s->end, visit_device, s, &close_, &any) < 0
               ? -1
               : 0;
}

/* The committed work; 0, or -1 with the reason in err. */
static int hook_work(struct native *c, const struct field *e, struct pinned *p, int *nodes,
                     int *binds, char *err, size_t cap)
{
    int n = count_items(&e[F_NODES]) / 4, k = 0;
    struct devno *devs = calloc((size_t)n + 1, sizeof *devs);
    size_t at = 0;
    struct field item, major, minor, mode;
    if (!devs)
        return ERR("out of memory");
    while (k < n && next_item(&e[F_NODES], &at, &item) && next_item(&e[F_NODES], &at, &major) &&
           next_item(&e[F_NODES], &at, &minor) && next_item(&e[F_NODES], &at, &mode))
        devs[k++] = (struct devno){(unsigned)strtoul(major.p, NULL, 10),
                                   (unsigned)strtoul(minor.p, NULL, 10)};
    int rc = grant_devices("/proc/self/mountinfo", p->cgroup, devs, k, err, cap);
    free(devs);
    if (rc < 0)
        return -1;
    /* c->root is the rootfs as the container's namespace has it already (image_in_container) */
    if (setns(p->mnt, CLONE_NEWNS) < 0)
        return ERR("cannot join the container's mount namespace: %s", strerror(errno));
    make_link_targets = 1; /* as the Python hook's Rootfs.makedirs */
    if ((*nodes = make_nodes(c->root, &e[F_NODES], err, cap)) < 0 ||
        (*binds = make_binds(c->root, &e[F_BINDS], err, cap)) < 0)
        return -1;
    if (make_entry_links(c->root, &e[F_SYMLINKS]) < 0)
        return ERR("cannot make the driver's links in the container: %s", strerror(errno));
    int bound = hook_binlinks(c->root, &e[F_BINLINKS], err, cap);
    if (bound < 0)
        return -1;
    *binds += bound;
    if (write_entry_ld_conf(c->root, &e[F_LD_CONF]) < 0 ||
        (c->cache.len && write_image_cache(c->root, &c->cache) < 0))
        return ERR("cannot write the container's ld.so.cache or ld.so.conf.d: %s",
                   strerror(errno));
    if (e[F_PROC].n) {
        int np;
        const char **proc = items_of(&e[F_PROC], &np);
        rc = proc ? stage_proc_driver(c->root, proc[0], proc + 1, np - 1, err, cap)
                  : ERR("out of memory");
        free(proc);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The image's checks (the create's image_ready but the host's library directories) on the
 * rootfs as the container's mount namespace has it (runc binds it onto itself there), as the
 * Python hook makes them: a volume may hide or bring /etc/ld.so.cache or
 * /usr/local/cuda/compat. That rootfs replaces c->root, for the work. 0, back in this
 * process's namespace; -1 (hand over), back in it too; -2 (the hook fails) when it cannot go
 * back. */
static int image_in_container(struct native *c, const struct field *e, const struct pinned *p,
                              const char *rootfs, const char **how)
{
    int own = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC), rc = -1;
    if (own < 0)
        DECLINE("this process's mount namespace cannot be opened");
    if (setns(p->mnt, CLONE_NEWNS) < 0) {
        close(own);
        DECLINE("the container's mount namespace cannot be joined");
    }
    int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        NOTE_WHY("the container's rootfs cannot be opened in its mount namespace");
    else {
        close(c->root);
        c->root = root;
        rc = image_compat(c, e) < 0 || image_cache(c, e, how) < 0 ? -1 : 0;
    }
    if (setns(own, CLONE_NEWNS) < 0) {
        int why = errno;
        close(own);
        errno = why;
        return -2;
    }
    close(own);
    return rc;
}

/* Do a prestart from its native entry. Returns the hook's exit status (0, or 1 after a failure
 * it reported), or -1 when the daemon or the Python hook must do it (nothing done). `spec` is
 * the bundle's config.json (`size` bytes) as hook.c read it, freed here. */
static int native_prestart(const char *bundle, long pid, char *spec, size_t size,
                           const char *cfg, const char *id)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct native c = {.text = spec, .root = -1, .bundle_fd = -1};
    struct field e[F_COUNT];
    struct pinned p = {-1, -1, NULL};
    char rootfs[PATH_MAX], err[PATH_MAX * 2 + 256];
    const char *ld_cache = "none";
    int nodes = 0, binds = 0;

    if (read_bundle(&c, bundle, size, cfg, rootfs, sizeof rootfs) < 0 ||
        find_entry(&c, "hook", cfg, c.debian, e) < 0)
        HANDOVER("no entry"); /* read_bundle or find_entry says why */
    c.s.ours = e;
    if (e[F_HOOKS].n || e[F_ENV].n || e[F_CDI_HOOKS].n)
        HANDOVER("the entry has spec edits, which a hook cannot make"); /* not a hook's */
    if (libdirs_whole(&e[F_LIBDIRS]) < 0)
        HANDOVER("the library directories"); /* libdirs_whole says what */
    if (spec_leaves_it_to_us(&c.s) < 0)
        HANDOVER("config.json has a device-list mount, or one of the entry's device nodes");
    if (!e[F_NODES].n && !e[F_BINDS].n && !e[F_SYMLINKS].n && !e[F_BINLINKS].n) {
        /* A container that asks for no GPU: the events the Python hook logs for it. */
        clock_gettime(CLOCK_MONOTONIC, &t1);
        write_log(&e[F_LOG], &e[F_EVENTS], id, bundle, "", 0, 0, ld_cache, ms_between(t0, t1));
        native_free(&c);
        return 0;
    }
    if (pin(pid, &p) < 0)
        HANDOVER("the container's process could not be pinned beyond doubt");
    int rc = image_in_container(&c, e, &p, rootfs, &ld_cache);
    if (rc == -1)
        HANDOVER("the image"); /* image_in_container says what */

    /* Committed: from here on the outcome is this hook's. */
    if (rc == 0)
        rc = hook_work(&c, e, &p, &nodes, &binds, err, sizeof err);
    else
        snprintf(err, sizeof err, "cannot return to the hook's own mount namespace: %s",
                 strerror(errno));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = ms_between(t0, t1);
    if (rc < 0) {
        struct buf line = {0}, fields = {0};
        struct field level = {"error", 5};
        put_text(&fields, "\"error\":");
        put_json_string(&fields, err);
        log_line(&line, &level, "hook_failed", id, bundle, fields.data, fields.len);
        append_log(&e[F_LOG], &line);
        free(line.data);
        free(fields.data);
        fprintf(stderr, PROGRAM ": error: %s\n", err);
    } else {
        char extra[64];
        int nbin = count_items(&e[F_BINLINKS]) / 3, bound = binds - count_items(&e[F_BINDS]) / 3;
        snprintf(extra, sizeof extra, "\"nodes_created_by_hook\":%d,", nodes);
        write_log(&e[F_LOG], &e[F_EVENTS], id, bundle, extra, binds, nbin - bound, ld_cache, ms);
    }
    unpin(&p);
    native_free(&c);
    return rc < 0 ? 1 : 0;
handover:
    unpin(&p);
    native_free(&c);
    return -1;
}
