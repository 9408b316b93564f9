/*
 * The journal's writer thread, compiled (bookie/storage/journal_writer.py selects it): the same
 * interface and the same behaviour as bookie.storage.journal_writer.ThreadWriter, but its thread
 * never holds the interpreter lock. A record handed over wakes it without waiting for the
 * event loop to let go of the lock, and its group's completion wakes the loop through an
 * eventfd without the thread taking the lock back first: the two hand-overs of every
 * acknowledged add, the largest share of a lone add's time in a bookie, become two plain
 * thread wake-ups.
 *
 * Writer(group_max_bytes, group_wait_s)
 *   submit(fd, seed, parts, sync)   queue a job (any thread holding the lock): frame the
 *                                   concatenation of ``parts`` as one record (length and
 *                                   CRC32C seeded with ``seed``) and write it to ``fd``;
 *                                   no parts: write nothing. ``sync``: the group holding
 *                                   the job is fdatasync'ed before it completes. A thread
 *                                   waiting for work is not woken: see wake().
 *   wake()                          wake the thread for the jobs submitted (once per
 *                                   event-loop turn: what a turn queued forms one group).
 *   run()                           the thread's body: until stop(), take the queued jobs
 *                                   as groups (consecutive jobs on one fd, up to
 *                                   group_max_bytes; with group_wait_s > 0 a group that
 *                                   syncs waits that long from its first job for more),
 *                                   write each group with writev, sync it when a job asks,
 *                                   and signal the eventfd.
 *   fileno()                        the eventfd, readable once a group completed.
 *   collect()                       the completed jobs in submission order, each
 *                                   (group_no, errno, synced, started, written, done):
 *                                   errno 0 when written (and synced if ``synced``); once
 *                                   a write or sync failed, that job and every later one
 *                                   carry its errno, ECANCELED for jobs dropped by stop().
 *   stop(abandon)                   end run() once the queue is written (abandon: drop
 *                                   what is queued).
 *
 * Times are CLOCK_MONOTONIC seconds (time.monotonic() on Linux). Each part is held as a
 * buffer (a reference to its object) from submit() until collect() returns its job.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "_crc32c.h"

#define FRAME_BYTES 8 /* ">II": payload length, CRC32C */
#define MAX_IOV 1024  /* IOV_MAX on Linux */

typedef struct Job {
    struct Job *next;
    int fd;
    int sync;
    uint32_t seed;
    double enqueued;
    Py_ssize_t size; /* framed bytes: 0 for a job without parts */
    Py_ssize_t nparts;
    Py_buffer *parts;
    unsigned char frame[FRAME_BYTES];
    /* set by the thread */
    unsigned long long group;
    int error;
    int synced;
    double started, written, done;
} Job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mutex;
    pthread_cond_t cond; /* jobs queued, or stop() */
    Job *head, *tail;    /* queued */
    Job *done_head, *done_tail;
    int efd;
    int stopping, abandon;
    int failed; /* the errno every later job gets */
    Py_ssize_t group_max_bytes;
    double group_wait_s;
    unsigned long long groups;
} Writer;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
job_free(Job *job)
{
    for (Py_ssize_t i = 0; i < job->nparts; i++) {
        PyBuffer_Release(&job->parts[i]);
    }
    PyMem_Free(job->parts);
    PyMem_Free(job);
}

static void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Frame a job (thread, no lock needed: the job is the thread's alone once taken). */
static void
frame(Job *job)
{
    uint32_t state = ~job->seed;
    for (Py_ssize_t i = 0; i < job->nparts; i++) {
        state = crc_update(state, (const unsigned char *)job->parts[i].buf,
                           (size_t)job->parts[i].len);
    }
    put_u32(job->frame, (uint32_t)(job->size - FRAME_BYTES));
    put_u32(job->frame + 4, ~state);
}

/* Write every byte of iov[0..count) to fd; 0 or an errno. */
static int
write_all(int fd, struct iovec *iov, int count)
{
    while (count > 0) {
        ssize_t n = writev(fd, iov, count);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        while (count > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* Write the jobs first..last (one fd) in writev calls of at most MAX_IOV pieces. */
static int
write_group(Job *first, Job *last)
{
    struct iovec iov[MAX_IOV];
    int count = 0;
    for (Job *job = first;; job = job->next) {
        if (job->nparts > 0) {
            frame(job);
            if (count + 1 + job->nparts > MAX_IOV && count > 0) {
                int error = write_all(first->fd, iov, count);
                if (error) {
                    return error;
                }
                count = 0;
            }
            iov[count].iov_base = job->frame;
            iov[count++].iov_len = FRAME_BYTES;
            for (Py_ssize_t i = 0; i < job->nparts; i++) {
                if (count == MAX_IOV) { /* one record of more parts than a call takes */
                    int error = write_all(first->fd, iov, count);
                    if (error) {
                        return error;
                    }
                    count = 0;
                }
                iov[count].iov_base = job->parts[i].buf;
                iov[count++].iov_len = (size_t)job->parts[i].len;
            }
        }
        if (job == last) {
            break;
        }
    }
    return count > 0 ? write_all(first->fd, iov, count) : 0;
}

static void
signal_loop(Writer *self)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(self->efd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
}

/* Move first..last (taken off the queue) to the done list (mutex held). */
static void
finish(Writer *self, Job *first, Job *last)
{
    last->next = NULL;
    if (self->done_tail) {
        self->done_tail->next = first;
    }
    else {
        self->done_head = first;
    }
    self->done_tail = last;
}

static void
timed_wait(Writer *self, double deadline)
{
    double left = deadline - now();
    if (left <= 0) {
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + left;
    ts.tv_sec = (time_t)whole;
    ts.tv_nsec = (long)((whole - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&self->cond, &self->mutex, &ts);
}

/* The thread's loop, without the interpreter lock. */
static void
run_loop(Writer *self)
{
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        while (!self->head && !self->stopping) {
            pthread_cond_wait(&self->cond, &self->mutex);
        }
        if (self->stopping && (self->abandon || !self->head)) {
            break;
        }
        Job *first = self->head, *last = first;
        Py_ssize_t size = first->size;
        int sync = first->sync;
        for (;;) {
            while (last->next && last->next->fd == first->fd && size < self->group_max_bytes) {
                last = last->next;
                size += last->size;
                sync |= last->sync;
            }
            if (!sync || self->group_wait_s <= 0 || self->stopping || last->next ||
                size >= self->group_max_bytes) {
                break;
            }
            double deadline = first->enqueued + self->group_wait_s;
            if (now() >= deadline) {
                break;
            }
            timed_wait(self, deadline);
        }
        self->head = last->next;
        if (!self->head) {
            self->tail = NULL;
        }
        int failed = self->failed;
        pthread_mutex_unlock(&self->mutex);

        double started = now();
        int error = failed ? failed : write_group(first, last);
        double written = now(), done = written;
        int synced = 0;
        if (!error && sync) {
            while (fdatasync(first->fd) != 0) {
                if (errno != EINTR) {
                    error = errno;
                    break;
                }
            }
            synced = !error;
            done = now();
        }

        pthread_mutex_lock(&self->mutex);
        if (error && !self->failed) {
            self->failed = error;
        }
        unsigned long long group = ++self->groups;
        for (Job *job = first;; job = job->next) {
            job->group = group;
            job->error = error;
            job->synced = synced;
            job->started = started;
            job->written = written;
            job->done = done;
            if (job == last) {
                break;
            }
        }
        finish(self, first, last);
        pthread_mutex_unlock(&self->mutex);
        signal_loop(self);
        pthread_mutex_lock(&self->mutex);
    }
    if (self->head) { /* dropped by stop(abandon=True) */
        for (Job *job = self->head; job; job = job->next) {
            job->error = ECANCELED;
        }
        finish(self, self->head, self->tail);
        self->head = self->tail = NULL;
    }
    pthread_mutex_unlock(&self->mutex);
    signal_loop(self);
}

static PyObject *
Writer_run(Writer *self, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    run_loop(self);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
Writer_submit(Writer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "submit(fd, seed, parts, sync) takes 4 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "bad file descriptor %ld", fd);
        return NULL;
    }
    unsigned long seed = PyLong_AsUnsignedLong(args[1]);
    if (seed == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    int sync = PyObject_IsTrue(args[3]);
    if (sync < 0) {
        return NULL;
    }
    PyObject *parts = PySequence_Fast(args[2], "parts must be a sequence of buffers");
    if (parts == NULL) {
        return NULL;
    }
    Py_ssize_t nparts = PySequence_Fast_GET_SIZE(parts);
    Job *job = PyMem_Calloc(1, sizeof(Job));
    Py_buffer *buffers = nparts ? PyMem_Calloc((size_t)nparts, sizeof(Py_buffer)) : NULL;
    if (job == NULL || (nparts && buffers == NULL)) {
        PyMem_Free(job);
        PyMem_Free(buffers);
        Py_DECREF(parts);
        return PyErr_NoMemory();
    }
    job->parts = buffers;
    Py_ssize_t size = nparts ? FRAME_BYTES : 0;
    PyObject **items = PySequence_Fast_ITEMS(parts);
    for (Py_ssize_t i = 0; i < nparts; i++) {
        if (PyObject_GetBuffer(items[i], &buffers[i], PyBUF_SIMPLE) < 0) {
            job_free(job);
            Py_DECREF(parts);
            return NULL;
        }
        job->nparts = i + 1;
        size += buffers[i].len;
    }
    Py_DECREF(parts);
    if (size - FRAME_BYTES > (Py_ssize_t)UINT32_MAX) {
        job_free(job);
        PyErr_SetString(PyExc_ValueError, "a journal record holds at most 4 GiB");
        return NULL;
    }
    job->fd = (int)fd;
    job->seed = (uint32_t)seed;
    job->sync = sync;
    job->size = size;
    job->enqueued = now();
    pthread_mutex_lock(&self->mutex);
    if (self->tail) {
        self->tail->next = job;
    }
    else {
        self->head = job;
    }
    self->tail = job;
    pthread_mutex_unlock(&self->mutex);
    Py_RETURN_NONE;
}

static PyObject *
Writer_wake(Writer *self, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&self->mutex);
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    Py_RETURN_NONE;
}

static PyObject *
Writer_collect(Writer *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t count;
    while (read(self->efd, &count, sizeof count) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&self->mutex);
    Job *job = self->done_head;
    self->done_head = self->done_tail = NULL;
    pthread_mutex_unlock(&self->mutex);
    PyObject *out = PyList_New(0);
    while (job) {
        Job *next = job->next;
        PyObject *item = out ? Py_BuildValue("(Kiiddd)", job->group, job->error, job->synced,
                                             job->started, job->written, job->done)
                             : NULL;
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_CLEAR(out);
        }
        Py_XDECREF(item);
        job_free(job);
        job = next;
    }
    return out;
}

static PyObject *
Writer_stop(Writer *self, PyObject *abandon)
{
    int drop = PyObject_IsTrue(abandon);
    if (drop < 0) {
        return NULL;
    }
    pthread_mutex_lock(&self->mutex);
    self->stopping = 1;
    self->abandon = drop;
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    Py_RETURN_NONE;
}

static PyObject *
Writer_fileno(Writer *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->efd);
}

static int
Writer_init(Writer *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"group_max_bytes", "group_wait_s", NULL};
    Py_ssize_t group_max_bytes;
    double group_wait_s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nd", names, &group_max_bytes, &group_wait_s)) {
        return -1;
    }
    if (self->efd >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "Writer is initialised already");
        return -1;
    }
    self->group_max_bytes = group_max_bytes > 0 ? group_max_bytes : 1;
    self->group_wait_s = group_wait_s;
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static PyObject *
Writer_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds))
{
    Writer *self = (Writer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->efd = -1;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&self->mutex, NULL);
    return (PyObject *)self;
}

static void
Writer_dealloc(Writer *self)
{
    /* run() holds a reference while it runs: nothing else touches the lists now. */
    Job *lists[2] = {self->head, self->done_head};
    for (int i = 0; i < 2; i++) {
        for (Job *job = lists[i], *next; job; job = next) {
            next = job->next;
            job_free(job);
        }
    }
    if (self->efd >= 0) {
        close(self->efd);
    }
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->mutex);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Writer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Writer_submit, METH_FASTCALL,
     "Queue a job: frame parts as one record for fd (none: write nothing); sync: the group "
     "is synced before it completes."},
    {"wake", (PyCFunction)Writer_wake, METH_NOARGS,
     "Wake the thread for the jobs submitted since it last looked."},
    {"run", (PyCFunction)Writer_run, METH_NOARGS,
     "The writer thread's body, without the interpreter lock, until stop()."},
    {"collect", (PyCFunction)Writer_collect, METH_NOARGS,
     "The completed jobs, in order: (group_no, errno, synced, started, written, done)."},
    {"stop", (PyCFunction)Writer_stop, METH_O,
     "End run() once the queue is written (abandon: drop what is queued)."},
    {"fileno", (PyCFunction)Writer_fileno, METH_NOARGS,
     "The eventfd that turns readable once a group completed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bookie.storage._fastjournal.Writer",
    .tp_doc = "The journal's writer thread, compiled; see bookie/storage/_fastjournal.c.",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Writer_new,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "bookie.storage._fastjournal",
    "The journal's writer thread, compiled (see bookie/storage/journal_writer.py).",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__fastjournal(void)
{
    crc_select();
    if (PyType_Ready(&WriterType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(module, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
