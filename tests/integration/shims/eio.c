/* An LD_PRELOAD library that makes a bookie's disk fail on demand, for tests.
 *
 * While the file named by WALOG_EIO_TRIGGER exists, the calls listed in WALOG_EIO_CALLS
 * (any of "fsync", "fdatasync", "write", "pread"; default all four; "write" covers writev
 * too) fail with EIO on file descriptors whose path starts with WALOG_EIO_DIR (a directory,
 * or one file). Every other call, and every call while
 * the trigger file is absent, goes to the C library unchanged. The kernel here has no
 * device-mapper (no dm "error" or "flakey" target), so the failure is injected at the
 * C library boundary that Python's os.fsync, os.fdatasync, os.write and os.pread go through,
 * and the compiled journal writer's writev and fdatasync.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int failing(const char *call, int fd) {
    const char *trigger = getenv("WALOG_EIO_TRIGGER");
    const char *dir = getenv("WALOG_EIO_DIR");
    const char *calls = getenv("WALOG_EIO_CALLS");
    if (trigger == NULL || dir == NULL || access(trigger, F_OK) != 0) {
        return 0;
    }
    if (calls != NULL && strstr(calls, call) == NULL) {
        return 0;
    }
    char link[64];
    char target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) {
        return 0;
    }
    target[n] = '\0';
    return strncmp(target, dir, strlen(dir)) == 0;
}

int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    }
    if (failing("fsync", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int) = NULL;
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    }
    if (failing("fdatasync", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t) = NULL;
    if (real == NULL) {
        real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    }
    if (failing("write", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd, buf, count);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    static ssize_t (*real)(int, const struct iovec *, int) = NULL;
    if (real == NULL) {
        real = (ssize_t (*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    }
    if (failing("write", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd, iov, iovcnt);
}

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    static pread_fn real = NULL;
    if (real == NULL) {
        real = (pread_fn)dlsym(RTLD_NEXT, "pread");
    }
    if (failing("pread", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd, buf, count, offset);
}

/* What Python's os.pread calls (the same function as pread on this 64-bit C library). */
ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    static pread_fn real = NULL;
    if (real == NULL) {
        real = (pread_fn)dlsym(RTLD_NEXT, "pread64");
    }
    if (failing("pread", fd)) {
        errno = EIO;
        return -1;
    }
    return real(fd, buf, count, offset);
}
