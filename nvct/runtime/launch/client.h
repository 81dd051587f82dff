/* What nvct's native programs share: errors, argv building, starting the Python fallback, and
 * asking the shim daemon (nvct.runtime.launch.daemon) to do their work.
 *
 * Included by launcher.c (nvct-runtime) and hook.c (nvct-hook); the generated header gives
 * NVCT_PYTHON (the Python program's argv), NVCT_SOCKET ("" = never ask a daemon),
 * NVCT_CODE_ID (a daemon running other nvct code declines) and NVCT_MARKERS (what a
 * config.json that may ask for a GPU holds). PROGRAM names the program in its error lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define DAEMON_TIMEOUT_S 120

extern char **environ;

static void fail(const char *message, const char *fix)
{
    fprintf(stderr, PROGRAM ": error: %s (fix: %s)\n", message, fix);
    exit(1);
}

/* A NULL-terminated argv: the `nhead` words of `head`, then the `n` of `args`. */
static char **argv_of(const char *const *head, int nhead, char **args, int n)
{
    char **argv = calloc((size_t)(nhead + n + 1), sizeof *argv);
    if (!argv)
        fail("out of memory", "free memory");
    for (int i = 0; i < nhead; i++)
        argv[i] = (char *)head[i];
    for (int i = 0; i < n; i++)
        argv[nhead + i] = args[i];
    return argv;
}

/* Run the Python program (NVCT_PYTHON) with `args`; never returns. */
static void exec_python(char **args, int n)
{
    int np = 0;
    while (NVCT_PYTHON[np])
        np++;
    char **argv = argv_of(NVCT_PYTHON, np, args, n);
    if (strchr(argv[0], '/')) {
        execv(argv[0], argv);
    } else {
        /* A wheel's launcher names its interpreter by name: the one beside it (a venv's
         * bin/, not resolved through its symlink, so Python finds its venv), else on PATH. */
        char self[PATH_MAX], beside[PATH_MAX];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        char *slash = len > 0 ? (self[len] = 0, strrchr(self, '/')) : NULL;
        if (slash && snprintf(beside, sizeof beside, "%.*s/%s", (int)(slash - self), self,
                              argv[0]) < (int)sizeof beside) {
            const char *name = argv[0];
            argv[0] = beside; /* Python finds its venv from the path it was started as */
            execv(beside, argv);
            argv[0] = (char *)name;
        }
        execvp(argv[0], argv);
    }
    fprintf(stderr, PROGRAM ": error: cannot run %s: %s (fix: reinstall nvct)\n", argv[0],
            strerror(errno));
    exit(127);
}

#define MAX_FILE (64 << 20)

/* All of ``fd``, NUL-terminated, at most ``max`` bytes; NULL with errno set when it cannot be
 * read (EFBIG: longer than ``max``; ENOMEM: out of memory). */
static char *read_all(int fd, size_t max, size_t *size)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (len == cap) {
            char *bigger = cap >= max ? NULL : realloc(buf, cap * 2 + 1);
            if (!bigger) {
                int why = cap >= max ? EFBIG : ENOMEM;
                free(buf);
                errno = why;
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int why = errno;
            free(buf);
            errno = why;
            return NULL;
        }
        if (got == 0) {
            buf[len] = '\0';
            *size = len;
            return buf;
        }
        len += (size_t)got;
    }
    errno = ENOMEM;
    return NULL;
}

/* The whole file, NUL-terminated; NULL when it cannot be read. */
static char *read_file(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *buf = read_all(fd, MAX_FILE, size);
    close(fd);
    return buf;
}

/* A container asks for nothing when its config.json names none of NVCT_MARKERS (generated
 * from the shim's constants: its NVIDIA variables, device mount and CDI annotations, and for
 * the launcher the GPU hooks the shim replaces); an unreadable config.json goes to Python,
 * which reports it properly. */
static int asks_for_gpus(const char *spec, size_t size)
{
    int found = !spec;
    for (int i = 0; NVCT_MARKERS[i] && !found; i++)
        found = memmem(spec, size, NVCT_MARKERS[i], strlen(NVCT_MARKERS[i])) != NULL;
    return found;
}

/* `<bundle>/config.json`, NUL-terminated; NULL when it cannot be read. */
static char *bundle_spec(const char *bundle, size_t *size)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/config.json", bundle) >= (int)sizeof path)
        return NULL;
    return read_file(path, size);
}

struct buf {
    char *data;
    size_t len, cap;
};

static void put_bytes(struct buf *b, const char *s, size_t n)
{
    if (!n)
        return; /* b->data may still be NULL: memcpy must not see it */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n > cap)
            cap *= 2;
        char *bigger = realloc(b->data, cap);
        if (!bigger)
            fail("out of memory", "free memory");
        b->data = bigger;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void put(struct buf *b, const char *s)
{
    put_bytes(b, s, strlen(s) + 1);
}

/* All of `data` to `fd`: a socket (`sock`: no SIGPIPE when the peer is gone) or a file. */
static int write_all(int fd, const char *data, size_t len, int sock)
{
    while (len) {
        ssize_t sent = sock ? send(fd, data, len, MSG_NOSIGNAL) : write(fd, data, len);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0)
            return -1;
        data += sent;
        len -= (size_t)sent;
    }
    return 0;
}

/* The request: a 4-byte length, then NUL-terminated strings: code id, kind ("create" or
 * "prestart"), payload (the OCI state for a prestart hook; it holds no NUL: JSON), working
 * directory, umask, this executable, argc, the arguments, the environment. Our stderr
 * travels with it (SCM_RIGHTS), so the daemon's messages reach whoever reads ours. */
static int send_request(int fd, const char *kind, const char *payload, size_t payload_len,
                        char **args, int n)
{
    struct buf b = {0};
    char num[32], cwd[PATH_MAX], exe[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = '\0';
    mode_t mask = umask(0);
    umask(mask);
    put(&b, NVCT_CODE_ID);
    put(&b, kind);
    put_bytes(&b, payload, payload_len);
    put_bytes(&b, "", 1);
    put(&b, cwd);
    snprintf(num, sizeof num, "%o", (unsigned)mask);
    put(&b, num);
    put(&b, exe);
    snprintf(num, sizeof num, "%d", n);
    put(&b, num);
    for (int i = 0; i < n; i++)
        put(&b, args[i]);
    for (char **e = environ; *e; e++)
        put(&b, *e);
    uint32_t total = (uint32_t)b.len;

    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = &total, .iov_len = sizeof total};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    int err_fd = STDERR_FILENO;
    memcpy(CMSG_DATA(cm), &err_fd, sizeof err_fd);
    ssize_t sent;
    do
        sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    int rc = sent == (ssize_t)sizeof total ? write_all(fd, b.data, b.len, 1) : -1;
    free(b.data);
    return rc;
}

/* Give the Python hook the OCI state a native hook read: a memory file as its stdin (the
 * hooks' only: the launcher reads no state). */
__attribute__((unused)) static void state_to_stdin(const char *state, size_t size)
{
    int fd = memfd_create("nvct-oci-state", MFD_CLOEXEC);
    if (fd < 0 || write_all(fd, state, size, 0) < 0 || lseek(fd, 0, SEEK_SET) != 0 ||
        dup2(fd, STDIN_FILENO) < 0)
        fail("cannot hand the OCI state to the Python hook", "free memory");
    close(fd);
}

/* Ask the daemon to do a `kind` request. Returns 0 when the caller must do the work itself
 * (no daemon, or one that declined before touching anything); else 1 with the daemon's reply
 * line (no newline) in `reply`, which is empty when the daemon ended without one (it may have
 * begun: the caller must fail closed, with `*timed_out` telling why). */
static int ask_daemon(const char *kind, const char *payload, size_t payload_len, char **args,
                      int n, char *reply, size_t cap, int *timed_out)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    *timed_out = 0;
    if (!NVCT_SOCKET[0] || strlen(NVCT_SOCKET) >= sizeof addr.sun_path)
        return 0;
    strcpy(addr.sun_path, NVCT_SOCKET);
    /* Non-blocking connect: a missing daemon or a full backlog fails at once, and nothing
     * has been asked yet, so the work can still be done here. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return 0;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        close(fd);
        return 0;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {.tv_sec = DAEMON_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (send_request(fd, kind, payload, payload_len, args, n) < 0) {
        /* The daemon reads a request whole before it acts on it: a partial one is dropped. */
        close(fd);
        return 0;
    }
    shutdown(fd, SHUT_WR);
    size_t len = 0;
    while (len < cap - 1) {
        ssize_t got = recv(fd, reply + len, cap - 1 - len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && errno == ECONNRESET && len == 0) {
            /* Reset with our request unread: nobody read it whole, so nothing was done
             * (a stopping daemon closing its queue). */
            close(fd);
            return 0;
        }
        if (got < 0) {
            *timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
            break;
        }
        if (got == 0)
            break;
        len += (size_t)got;
        if (memchr(reply, '\n', len))
            break;
    }
    close(fd);
    reply[len] = '\0';
    char *nl = strchr(reply, '\n');
    if (!nl) {
        reply[0] = '\0';
        return 1;
    }
    *nl = '\0';
    return strcmp(reply, "fallback") != 0;
}

/* The line a program prints when the daemon may have begun its work and gave no answer. */
static void fail_no_answer(int timed_out)
{
    fprintf(stderr,
            PROGRAM ": error: the nvct shim daemon on %s %s (fix: see its log; restart it, or "
            "stop it and nvct does the work itself)\n",
            NVCT_SOCKET, timed_out ? "did not answer in time" : "ended without an answer");
    exit(1);
}
