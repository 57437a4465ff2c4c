/*
 * meshwire-pod: holds a lab pod's namespaces, as a pause container does, and
 * runs commands inside them.
 *
 *   meshwire-pod hold --netns PATH --hostname NAME [--bind HOST:POD[:ro]]... [--ready FD]
 *   meshwire-pod exec PID [--] CMD [ARGS...]
 *
 * hold: joins the network namespace at PATH (the one the pod's CNI ADD got:
 * the network namespace stays the runtime's), then makes new UTS, IPC, mount
 * and PID namespaces. In the mount namespace (private: nothing propagates to
 * the host) /tmp, /var/tmp, /run and /var/run (when a directory, not a link) are new
 * tmpfs, /sys is a sysfs of the pod's network namespace, and each bind is
 * mounted (read-only with `:ro`). A bind's HOST path is opened before any
 * mount, so it may lie under a directory the pod's tmpfs then hides. A bind's
 * POD path must exist, unless it lies under /tmp or /run, where it is made
 * (an empty file or directory, like HOST). The hostname is NAME.
 * It then forks the pod's init (PID 1 of the new PID namespace), which mounts
 * /proc, writes "ready\n" to FD and closes it, reaps orphans, and on SIGTERM,
 * SIGINT or SIGHUP sends SIGTERM to every process of the pod, waits up to
 * GRACE_SECONDS for them and exits: the kernel then kills what is left.
 * The holding process forwards those signals to init and exits with init's
 * status, so its PID stands for the pod's life.
 * Any failure: a message naming the step on stderr, exit 1, and FD is closed
 * without "ready".
 *
 * exec: joins the IPC, UTS, network, PID and mount namespaces of the holding
 * process PID, changes to /, forks CMD (the PID namespace applies to children
 * only) and exits with its status (128+N when killed by signal N), passing on
 * SIGTERM, SIGINT, SIGHUP and SIGQUIT. Exit 127 when CMD cannot be run, 126
 * when the pod cannot be entered (it is gone), each with a message.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BINDS 64
#define GRACE_SECONDS 3
#define EXIT_CANNOT_ENTER 126
#define EXIT_NOT_FOUND 127

struct bind {
    const char *host, *pod;
    int read_only, fd, is_dir;
};

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "meshwire-pod: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
            strerror(errno));
    exit(1);
}

static void usage(void) {
    fputs("usage: meshwire-pod hold --netns PATH --hostname NAME [--bind HOST:POD[:ro]]... "
          "[--ready FD]\n"
          "       meshwire-pod exec PID [--] CMD [ARGS...]\n",
          stderr);
    exit(2);
}

/* Whether `path` lies under `dir` (or is it). */
static int under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* mkdir -p of `path`'s parents, and of `path` itself when `last`. */
static void make_dirs(const char *path, int last) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        fail("bind", path);
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) fail("mkdir", buf);
        *p = '/';
    }
    if (last && mkdir(buf, 0755) != 0 && errno != EEXIST) fail("mkdir", buf);
}

static void parse_bind(char *spec, struct bind *b) {
    char *colon = strchr(spec, ':');
    if (!colon || colon == spec) usage();
    *colon = '\0';
    b->host = spec;
    b->pod = colon + 1;
    char *mode = strchr(colon + 1, ':');
    b->read_only = 0;
    if (mode) {
        *mode = '\0';
        if (strcmp(mode + 1, "ro") == 0)
            b->read_only = 1;
        else if (strcmp(mode + 1, "rw") != 0)
            usage();
    }
    if (b->pod[0] != '/') {
        errno = EINVAL;
        fail("bind: the pod path must be absolute:", b->pod);
    }
}

static void mount_tmpfs(const char *dir, const char *mode) {
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return; /* /var/run -> /run */
    if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, mode) != 0) fail("tmpfs on", dir);
}

static void mount_bind(const struct bind *b) {
    struct stat st;
    if (stat(b->pod, &st) != 0) {
        if (errno != ENOENT || !(under(b->pod, "/tmp") || under(b->pod, "/run"))) {
            if (errno == ENOENT)
                fprintf(stderr,
                        "meshwire-pod: bind %s: %s does not exist in the pod (only paths under "
                        "/tmp and /run are made)\n",
                        b->host, b->pod);
            else
                fprintf(stderr, "meshwire-pod: bind %s: %s: %s\n", b->host, b->pod,
                        strerror(errno));
            exit(1);
        }
        make_dirs(b->pod, b->is_dir);
        if (!b->is_dir) {
            int fd = open(b->pod, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
            if (fd < 0) fail("bind: create", b->pod);
            close(fd);
        }
    }
    char source[64];
    snprintf(source, sizeof source, "/proc/self/fd/%d", b->fd);
    if (mount(source, b->pod, NULL, MS_BIND | MS_REC, NULL) != 0) fail("bind onto", b->pod);
    if (b->read_only &&
        mount(NULL, b->pod, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0)
        fail("read-only bind", b->pod);
}

static sigset_t handled_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGCHLD);
    return set;
}

static void reap_all(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

/* Whether a process other than init is left in the pod (its /proc lists PIDs). */
static int others_left(void) {
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int found = 0;
    struct dirent *entry;
    while (!found && (entry = readdir(proc)) != NULL)
        found = entry->d_name[0] >= '1' && entry->d_name[0] <= '9' && strcmp(entry->d_name, "1");
    closedir(proc);
    return found;
}

/* PID 1 of the pod: holds the namespaces, reaps orphans, stops the pod on a signal. */
static int pod_init(int ready) {
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        fail("mount", "/proc");
    if (ready >= 0) {
        if (write(ready, "ready\n", 6) != 6) fail("write", "ready");
        close(ready);
    }
    sigset_t set = handled_signals();
    for (;;) {
        siginfo_t info;
        if (sigwaitinfo(&set, &info) < 0) continue;
        if (info.si_signo == SIGCHLD) {
            reap_all();
            continue;
        }
        if (info.si_signo == SIGQUIT) continue;
        kill(-1, SIGTERM);
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += GRACE_SECONDS;
        for (;;) {
            reap_all();
            if (!others_left()) return 0;
            struct timespec now, left;
            clock_gettime(CLOCK_MONOTONIC, &now);
            left.tv_sec = deadline.tv_sec - now.tv_sec;
            left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
            if (left.tv_nsec < 0) {
                left.tv_sec -= 1;
                left.tv_nsec += 1000000000L;
            }
            if (left.tv_sec < 0) return 0;
            /* A process entered by `exec` is not init's child: poll, a tenth of a second. */
            struct timespec tick = {0, 100000000L};
            sigset_t child;
            sigemptyset(&child);
            sigaddset(&child, SIGCHLD);
            sigtimedwait(&child, NULL, left.tv_sec > 0 || left.tv_nsec > tick.tv_nsec ? &tick : &left);
        }
    }
}

/* Waits for `child`, passing on stop signals; returns its status as an exit code. */
static int follow(pid_t child) {
    sigset_t set = handled_signals();
    for (;;) {
        int status;
        pid_t got = waitpid(child, &status, WNOHANG);
        if (got == child) {
            if (WIFEXITED(status)) return WEXITSTATUS(status);
            return 128 + WTERMSIG(status);
        }
        if (got < 0 && errno != EINTR) return 1;
        siginfo_t info;
        if (sigwaitinfo(&set, &info) < 0) continue;
        if (info.si_signo != SIGCHLD) kill(child, info.si_signo);
    }
}

static int hold(int argc, char **argv) {
    const char *netns = NULL, *hostname = NULL;
    struct bind binds[MAX_BINDS];
    int nbinds = 0, ready = -1;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--netns") == 0) {
            netns = argv[++i];
        } else if (strcmp(argv[i], "--hostname") == 0) {
            hostname = argv[++i];
        } else if (strcmp(argv[i], "--ready") == 0) {
            char *end;
            long fd = strtol(argv[++i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0' || fd < 3 || fd > 1024) usage();
            ready = (int)fd;
        } else if (strcmp(argv[i], "--bind") == 0) {
            if (nbinds == MAX_BINDS) {
                errno = E2BIG;
                fail("bind", "(too many)");
            }
            parse_bind(argv[++i], &binds[nbinds++]);
        } else {
            usage();
        }
    }
    if (!netns || !hostname) usage();
    int net = open(netns, O_RDONLY | O_CLOEXEC);
    if (net < 0) fail("netns", netns);
    if (setns(net, CLONE_NEWNET) != 0) fail("join netns", netns);
    close(net);
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID) != 0)
        fail("unshare", NULL);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("make / private", NULL);
    /* Opened in the pod's mount namespace (a bind's source must be one of its mounts), and
     * before the tmpfs mounts that may hide them. */
    for (int i = 0; i < nbinds; i++) {
        struct stat st;
        binds[i].fd = open(binds[i].host, O_PATH | O_CLOEXEC);
        if (binds[i].fd < 0 || fstat(binds[i].fd, &st) != 0) fail("bind", binds[i].host);
        binds[i].is_dir = S_ISDIR(st.st_mode);
    }
    mount_tmpfs("/tmp", "mode=1777");
    mount_tmpfs("/var/tmp", "mode=1777");
    mount_tmpfs("/run", "mode=0755");
    mount_tmpfs("/var/run", "mode=0755");
    if (umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL) fail("unmount", "/sys");
    if (mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        fail("mount", "/sys");
    for (int i = 0; i < nbinds; i++) mount_bind(&binds[i]);
    for (int i = 0; i < nbinds; i++) close(binds[i].fd);
    if (sethostname(hostname, strlen(hostname)) != 0) fail("hostname", hostname);
    if (chdir("/") != 0) fail("chdir", "/");

    sigset_t set = handled_signals();
    sigprocmask(SIG_BLOCK, &set, NULL);
    pid_t init = fork();
    if (init < 0) fail("fork", "init");
    if (init == 0) exit(pod_init(ready));
    if (ready >= 0) close(ready);
    return follow(init);
}

static int run(int argc, char **argv) {
    if (argc < 2) usage();
    const char *pid = argv[0];
    int first = 1;
    if (strcmp(argv[1], "--") == 0) first = 2;
    if (first >= argc) usage();
    /* The mount namespace last: after it, /proc is the pod's. */
    static const char *const kinds[] = {"ipc", "uts", "net", "pid_for_children", "mnt"};
    enum { N = sizeof kinds / sizeof kinds[0] };
    int fds[N];
    for (int i = 0; i < N; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/ns/%s", pid, kinds[i]);
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            fprintf(stderr, "meshwire-pod: pod of pid %s: %s: %s\n", pid, path, strerror(errno));
            return EXIT_CANNOT_ENTER;
        }
    }
    for (int i = 0; i < N; i++) {
        if (setns(fds[i], 0) != 0) {
            fprintf(stderr, "meshwire-pod: pod of pid %s: join %s: %s\n", pid, kinds[i],
                    strerror(errno));
            return EXIT_CANNOT_ENTER;
        }
        close(fds[i]);
    }
    if (chdir("/") != 0) fail("chdir", "/");
    sigset_t set = handled_signals();
    sigprocmask(SIG_BLOCK, &set, NULL);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "meshwire-pod: pod of pid %s: fork: %s (is the pod stopping?)\n", pid,
                strerror(errno));
        return EXIT_CANNOT_ENTER;
    }
    if (child == 0) {
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        execvp(argv[first], argv + first);
        fprintf(stderr, "meshwire-pod: %s: %s\n", argv[first], strerror(errno));
        _exit(EXIT_NOT_FOUND);
    }
    return follow(child);
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    if (strcmp(argv[1], "hold") == 0) return hold(argc - 2, argv + 2);
    if (strcmp(argv[1], "exec") == 0) return run(argc - 2, argv + 2);
    usage();
    return 2;
}
