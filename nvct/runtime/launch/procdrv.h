/* /proc/driver/nvidia as NVIDIA's toolkit shows it to a container: nvct.container.procfs's
 * stage_proc_driver, step for step. A read-only tmpfs over the container's /proc/driver/nvidia
 * holds a copy of params (ModifyDeviceFiles: 0), version and registry, and a read-only bind of
 * each host entry asked for (gpus/<bus id>, capabilities/gpu<minor>, ...). Where the container
 * has no /proc/driver/nvidia and the proc root is not the host's /proc, its /proc/driver gets a
 * read-only tmpfs holding an empty nvidia/ first. Every path in the root is resolved with
 * in_root, every mount targets /proc/self/fd/N of such a descriptor, and a path just mounted on
 * is resolved again to reach the new mount. Unlike the Python, the entries are checked before
 * anything is mounted, so a refused entry leaves the container as it was.
 *
 * Included by hook.c after client.h, json.h and rootfs.h; called in the container's mount
 * namespace.
 */
#include <sys/mount.h>

#define PD_DIR "/proc/driver/nvidia"
#define PD_MAX_FILE (1 << 20) /* procfs._MAX_FILE: what is copied of each file */
#define PD_TMPFS (MS_NOSUID | MS_NODEV | MS_NOEXEC)

/* -1, the reason in `err`: what failed (`what`, `name`) and errno's text ("..." if cut). */
static int pd_fail(char *err, size_t cap, const char *what, const char *name)
{
    if (snprintf(err, cap, "cannot cover " PD_DIR " in the container: %s%s: %s", what, name,
                 strerror(errno)) >= (int)cap && cap > 3)
        memcpy(err + cap - 4, "...", 4);
    return -1;
}

/* close(2) of `fd` (none: -1), errno kept. */
static void pd_close(int fd)
{
    int why = errno;
    if (fd >= 0)
        close(fd);
    errno = why;
}

/* mount(2) on what `fd` names (procfs's fd_path), then `fd` closed; errno kept. */
static int pd_mount(const char *source, int fd, const char *fstype, unsigned long flags)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = mount(source, path, fstype, flags, NULL);
    pd_close(fd);
    return rc;
}

/* Whether posixpath.normpath(path) == "/proc" (POSIX keeps exactly two leading slashes). */
static int pd_is_proc(const char *p)
{
    char out[PATH_MAX];
    size_t len = 0;
    if (p[0] != '/' || (p[1] == '/' && p[2] != '/'))
        return 0;
    for (size_t k; *p; p += k) {
        p += strspn(p, "/");
        k = strcspn(p, "/");
        if (k == 2 && p[0] == '.' && p[1] == '.')
            while (len && out[--len] != '/')
                ;
        else if (k && !(k == 1 && p[0] == '.')) {
            if (len + k + 1 > sizeof out)
                return 0;
            out[len++] = '/';
            memcpy(out + len, p, k);
            len += k;
        }
    }
    return len == 5 && memcmp(out, "/proc", 5) == 0;
}

/* Whether `rel` names an entry: not "/"-leading, no "" or ".." component. */
static int pd_entry_ok(const char *rel)
{
    for (const char *p = rel; *rel != '/'; p += strcspn(p, "/") + 1) {
        size_t k = strcspn(p, "/");
        if (k == 0 || (k == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        if (!p[k])
            return 1;
    }
    return 0;
}

/* The host's `dir/name` (at most PD_MAX_FILE bytes) as `name` under `top`; params with
 * ModifyDeviceFiles: 0 (procfs.container_params). A file the host lacks is skipped. */
static int pd_copy(int top, const char *dir, const char *name, char *err, size_t cap)
{
    char path[PATH_MAX], *data = NULL;
    size_t len = 0;
    errno = ENAMETOOLONG;
    int fd = snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path
                 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return errno == ENOENT ? 0 : pd_fail(err, cap, "open ", path);
    ssize_t got = (data = malloc(PD_MAX_FILE)) ? 1 : -1;
    while (got && len < PD_MAX_FILE && (got > 0 || errno == EINTR))
        if ((got = read(fd, data + len, PD_MAX_FILE - len)) > 0)
            len += (size_t)got;
    pd_close(fd);
    if (got < 0) {
        free(data);
        return pd_fail(err, cap, "read ", path);
    }
    static const char from[] = "ModifyDeviceFiles: 1";
    for (char *at = data; strcmp(name, "params") == 0 &&
                          (at = memmem(at, len - (size_t)(at - data), from, sizeof from - 1));)
        at[sizeof from - 2] = '0', at += sizeof from - 1;
    int out = openat(top, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    int ok = out >= 0 && write_all(out, data, len, 0) == 0, why = errno;
    if (out >= 0 && close(out) < 0 && ok)
        ok = 0, why = errno;
    free(data);
    errno = why;
    return ok ? 0 : pd_fail(err, cap, "write ", name);
}

/* The host's `source` bound read-only on a new `rel` under `top` (procfs._entry_parent and
 * _bind_ro): its directories made as needed, then a directory or an empty file to mount on. */
static int pd_bind(int top, const char *rel, const char *source, int is_dir, char *err,
                   size_t cap)
{
    char part[NAME_MAX + 1];
    int dir = fcntl(top, F_DUPFD_CLOEXEC, 0);
    const char *p = rel;
    for (size_t k; dir >= 0 && p[k = strcspn(p, "/")]; p += k + 1) {
        if (k > NAME_MAX) {
            close(dir);
            errno = ENAMETOOLONG;
            return pd_fail(err, cap, "make ", rel);
        }
        memcpy(part, p, k);
        part[k] = '\0';
        int next = mkdirat(dir, part, 0555) == 0 || errno == EEXIST
                       ? openat(dir, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                       : -1;
        pd_close(dir);
        dir = next;
    }
    int made = dir < 0    ? -1
               : is_dir ? mkdirat(dir, p, 0555)
                        : openat(dir, p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (!is_dir)
        pd_close(made);
    int point = made < 0 ? -1 : openat(dir, p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (point < 0 || pd_mount(source, point, NULL, MS_BIND | MS_REC) < 0) {
        pd_close(dir);
        return pd_fail(err, cap, point < 0 ? "make " : "bind on ", rel);
    }
    /* Resolved again, the name reaches the new mount (the descriptor names what it covers). */
    int mounted = openat(dir, p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    pd_close(dir);
    if (mounted < 0 || pd_mount(NULL, mounted, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | PD_TMPFS))
        return pd_fail(err, cap, "remount read-only ", rel);
    return 0;
}

/* The container's /proc/driver/nvidia (O_PATH) on a new read-only tmpfs over /proc/driver. */
static int pd_cover_driver(int root, char *err, size_t cap)
{
    int covered = in_root(root, "/proc/driver", O_PATH | O_DIRECTORY);
    if (covered < 0 || pd_mount("tmpfs", covered, "tmpfs", PD_TMPFS) < 0)
        return pd_fail(err, cap, covered < 0 ? "open " : "mount tmpfs on ", "/proc/driver");
    int driver = in_root(root, "/proc/driver", O_RDONLY | O_DIRECTORY); /* the new tmpfs */
    if (driver < 0)
        return pd_fail(err, cap, "open ", "/proc/driver");
    if (mkdirat(driver, "nvidia", 0555) < 0 || fchmod(driver, 0555) < 0) {
        pd_close(driver);
        return pd_fail(err, cap, "make ", PD_DIR);
    }
    int nvidia = openat(driver, "nvidia", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nvidia < 0 || pd_mount(NULL, driver, NULL, MS_REMOUNT | MS_RDONLY | PD_TMPFS) < 0) {
        pd_close(nvidia < 0 ? driver : nvidia);
        return pd_fail(err, cap, nvidia < 0 ? "open " : "remount read-only ", "/proc/driver");
    }
    return nvidia;
}

/* Cover the container's /proc/driver/nvidia under `root` (an O_PATH directory descriptor of the
 * rootfs, the caller in the container's mount namespace) as nvct.container.procfs.
 * stage_proc_driver does, showing the host's `entries[0..n)` (relative to
 * <proc_root>/driver/nvidia). Returns 1 (masked), 0 (absent: nothing to show), or -1 with a
 * one-line reason in err[0..cap). */
static int stage_proc_driver(int root, const char *proc_root, const char *const *entries, int n,
                             char *err, size_t cap)
{
    static const char *const copied[] = {"params", "version", "registry"};
    char host[PATH_MAX], source[PATH_MAX];
    size_t plen = strlen(proc_root);
    const char *sep = plen == 0 || proc_root[plen - 1] == '/' ? "" : "/"; /* posixpath.join */
    struct stat st;
    if (snprintf(host, sizeof host, "%s%sdriver/nvidia", proc_root, sep) >= (int)sizeof host ||
        stat(host, &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    int target = in_root(root, PD_DIR, O_PATH | O_DIRECTORY);
    if (target < 0 && (errno != ENOENT || pd_is_proc(proc_root)))
        return errno == ENOENT ? 0 : pd_fail(err, cap, "open ", PD_DIR);
    for (int i = 0; i < n; i++)
        if (!pd_entry_ok(entries[i])) {
            pd_close(target);
            errno = EINVAL;
            return pd_fail(err, cap, entries[i], " is not an entry of " PD_DIR);
        }
    if (target < 0 && (target = pd_cover_driver(root, err, cap)) < 0)
        return -1;
    if (pd_mount("tmpfs", target, "tmpfs", PD_TMPFS) < 0)
        return pd_fail(err, cap, "mount tmpfs on ", PD_DIR);
    /* Resolved again, the path reaches the new tmpfs's root. */
    int top = in_root(root, PD_DIR, O_RDONLY | O_DIRECTORY);
    if (top < 0)
        return pd_fail(err, cap, "open ", PD_DIR);
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = pd_copy(top, host, copied[i], err, cap);
    for (int i = 0; i < n && rc == 0; i++) {
        if (snprintf(source, sizeof source, "%s/%s", host, entries[i]) >= (int)sizeof source ||
            stat(source, &st) < 0)
            continue; /* e.g. no MIG capabilities for a GPU without MIG */
        rc = pd_bind(top, entries[i], source, S_ISDIR(st.st_mode), err, cap);
    }
    if (rc == 0 && fchmod(top, 0555) < 0)
        rc = pd_fail(err, cap, "chmod ", PD_DIR);
    if (rc < 0) {
        pd_close(top);
        return -1;
    }
    if (pd_mount(NULL, top, NULL, MS_REMOUNT | MS_RDONLY | PD_TMPFS) < 0)
        return pd_fail(err, cap, "remount read-only ", PD_DIR);
    return 1;
}
