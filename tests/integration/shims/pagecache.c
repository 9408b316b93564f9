/* An LD_PRELOAD library that gives a bookie process a page cache of its own, for tests.
 *
 * write() and writev() to a regular file whose path matches the glob WALOG_PAGECACHE_FILES
 * (fnmatch(3), "*" matches "/" too) are held in the process's memory, in order, and reach the file only when the descriptor is
 * fsync'ed, fdatasync'ed or closed. Killing the process (SIGKILL) then loses exactly what a
 * crash of the bookie's machine loses from the kernel's page cache: what was written and not
 * yet synced. Without it a killed bookie loses nothing (the kernel keeps its writes), so a
 * test of what a restart's lost writes do to a client needs it; the kernel here has no
 * device-mapper (no dm "flakey" target that drops unsynced writes) and a test cannot cut
 * the machine's power.
 *
 * Meant for files written sequentially through one descriptor, as the bookie's journal is
 * (its files are read only at start, before anything is held): held bytes are not visible
 * to reads, and a positioned write (pwrite) or a seek is not held and does not wait for
 * them. Every other call, and every call on other descriptors, goes to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536

struct held {
    char *data;
    size_t len;
    size_t cap;
};

static struct held table[MAX_FDS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_close)(int);

static void resolve(void) {
    if (real_write == NULL) {
        real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
        real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
        real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
        real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
        real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    }
}

/* Whether writes to fd are held: a regular file matching WALOG_PAGECACHE_FILES. */
static int held_fd(int fd) {
    const char *pattern = getenv("WALOG_PAGECACHE_FILES");
    struct stat st;
    char link[64];
    char target[4096];
    if (pattern == NULL || fd < 0 || fd >= MAX_FDS) {
        return 0;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return 0;
    }
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) {
        return 0;
    }
    target[n] = '\0';
    return fnmatch(pattern, target, 0) == 0;
}

/* Append to fd's held bytes; -1 (ENOMEM) if they cannot grow. Called with the lock. */
static int hold(int fd, const void *data, size_t len) {
    struct held *h = &table[fd];
    if (h->len + len > h->cap) {
        size_t cap = h->cap ? h->cap : 65536;
        while (cap < h->len + len) {
            cap *= 2;
        }
        char *grown = realloc(h->data, cap);
        if (grown == NULL) {
            errno = ENOMEM;
            return -1;
        }
        h->data = grown;
        h->cap = cap;
    }
    memcpy(h->data + h->len, data, len);
    h->len += len;
    return 0;
}

/* Write fd's held bytes to the file; 0, or -1 with errno. Called with the lock. */
static int release(int fd) {
    struct held *h = &table[fd];
    size_t done = 0;
    while (done < h->len) {
        ssize_t n = real_write(fd, h->data + done, h->len - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        done += (size_t)n;
    }
    free(h->data);
    h->data = NULL;
    h->len = h->cap = 0;
    return 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
    resolve();
    if (!held_fd(fd)) {
        return real_write(fd, buf, count);
    }
    pthread_mutex_lock(&lock);
    int rc = hold(fd, buf, count);
    pthread_mutex_unlock(&lock);
    return rc == 0 ? (ssize_t)count : -1;
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    resolve();
    if (!held_fd(fd)) {
        return real_writev(fd, iov, iovcnt);
    }
    size_t total = 0;
    int rc = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < iovcnt && rc == 0; i++) {
        rc = hold(fd, iov[i].iov_base, iov[i].iov_len);
        total += iov[i].iov_len;
    }
    pthread_mutex_unlock(&lock);
    return rc == 0 ? (ssize_t)total : -1;
}

static int release_held(int fd) {
    if (fd < 0 || fd >= MAX_FDS) {
        return 0;
    }
    pthread_mutex_lock(&lock);
    int rc = table[fd].len ? release(fd) : 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

int fsync(int fd) {
    resolve();
    return release_held(fd) == 0 ? real_fsync(fd) : -1;
}

int fdatasync(int fd) {
    resolve();
    return release_held(fd) == 0 ? real_fdatasync(fd) : -1;
}

int close(int fd) {
    resolve();
    /* A close is no crash: what the process wrote stays in the file (unsynced). */
    release_held(fd);
    return real_close(fd);
}
