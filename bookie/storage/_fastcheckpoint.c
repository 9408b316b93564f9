/*
 * The per-entry work of a bookie checkpoint (bookie/storage/entry_storage.py, EntryStorage._write),
 * compiled. Everything with a side effect beyond memory stays in Python: the entry-log
 * writes, syncs and rolls, error handling and LMDB. This module only turns entries into
 *
 *   - entry-log records (header ">IqqqI": data_len, ledger, entry, lac, digest; then the
 *     data), appended to one bytearray per write chunk, and
 *   - index run rows, one per run of consecutive entries of a ledger written back to back
 *     (key ">qq" ledger, first entry; value crc32c:u32 then ">IQ" log, offset of the
 *     first record, then ">I" per record: its length; the crc covers key and the rest),
 *     appended to the ledger's row list, plus the record bytes added to the (log, ledger)
 *     live-byte counters. A run closes at another ledger, a gap in the entry ids, at
 *     MAX_RUN entries and when this call returns (a roll, a chunk to write, the end),
 *
 * byte for byte what the pure-Python loop produces.
 *
 * append_entries(entries, held, buf, used, rows, live, log_id, offset, flushed, limit,
 *                chunk) -> (status, held, used, offset, count)
 *
 *   entries  an iterator of (ledger_id, entry_id, (lac, digest, data))
 *   held     an item already taken from ``entries`` and not yet appended, or None
 *   buf      the chunk's bytearray; records go in at ``used`` (it grows as needed)
 *   rows     {ledger_id: [(key, value), ...]}
 *   live     {log_id: {ledger_id: record bytes}}
 *   log_id   the entry log being appended to (-1: none open)
 *   offset   the log's offset at buf[0 + used]; ``flushed`` its offset at buf[0]
 *   limit    roll the log once ``offset`` reaches it; ``chunk``: write the buffer out
 *            once it holds this many bytes
 *
 * Returns with ``status``:
 *   DONE   entries are exhausted;
 *   ROLL   the next entry (returned as ``held``) needs a new log: no log is open or the
 *          current one is full;
 *   FLUSH  the buffer holds at least ``chunk`` bytes;
 * and the new ``used`` and ``offset``, and how many entries this call appended.
 *
 * Bad input raises TypeError or ValueError, as the pure-Python loop does.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_crc32c.h"

enum { STATUS_DONE = 0, STATUS_ROLL = 1, STATUS_FLUSH = 2 };

#define RECORD_BYTES 32 /* ">IqqqI" */
#define KEY_BYTES 16    /* ">qq" */
#define RUN_HEAD_BYTES 12 /* ">IQ": log, offset of the run's first record */
#define MAX_RUN 256       /* bookie/storage/index.py MAX_RUN_ENTRIES */

/* -- big-endian packing ---------------------------------------------------------------- */

static inline void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

/* -- argument checks --------------------------------------------------------------------- */

/* An int (or an object with __index__) in [low, high]; -1 with TypeError/ValueError set. */
static int
int_in_range(PyObject *obj, const char *what, long long low, long long high, long long *out)
{
    if (!PyLong_Check(obj) && !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not '%.100s'", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || value < low || value > high) {
        PyErr_Format(PyExc_ValueError, "%s out of range [%lld, %lld]: %R", what, low, high,
                     obj);
        return -1;
    }
    *out = value;
    return 0;
}

/* Py_ssize_t-sized counters of the state passed in (offsets, sizes). */
static int
state_arg(PyObject *obj, const char *what, long long low, long long *out)
{
    return int_in_range(obj, what, low, LLONG_MAX, out);
}

/* -- the loop ------------------------------------------------------------------------------ */

typedef struct {
    PyObject *ledger;     /* the run's ledger id object (the rows/live key), or NULL */
    long long ledger_id;  /* its value */
    PyObject *bucket;     /* rows[ledger] */
    PyObject *per_ledger; /* live[log_id] */
    long long bytes;      /* record bytes of the run not yet added to per_ledger[ledger] */
    long long first;      /* the open index run: its first entry id, */
    long long following;  /* the id that would continue it, */
    long long offset;     /* its first record's offset, */
    Py_ssize_t count;     /* how many entries it holds (0: none open) */
    uint32_t lengths[MAX_RUN];
} Run;

static void
run_clear(Run *run)
{
    Py_CLEAR(run->ledger);
    Py_CLEAR(run->bucket);
    Py_CLEAR(run->per_ledger);
    run->bytes = 0;
    run->count = 0;
}

/* Add the run's bytes to live[log][ledger]; 0 or -1 with an exception. */
static int
run_settle(Run *run)
{
    if (run->ledger == NULL || run->bytes == 0) {
        return 0;
    }
    PyObject *old = PyDict_GetItemWithError(run->per_ledger, run->ledger); /* borrowed */
    if (old == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "live-byte counter vanished");
        }
        return -1;
    }
    PyObject *add = PyLong_FromLongLong(run->bytes);
    if (add == NULL) {
        return -1;
    }
    PyObject *sum = PyNumber_Add(old, add);
    Py_DECREF(add);
    if (sum == NULL) {
        return -1;
    }
    int rc = PyDict_SetItem(run->per_ledger, run->ledger, sum);
    Py_DECREF(sum);
    if (rc < 0) {
        return -1;
    }
    run->bytes = 0;
    return 0;
}

/* Start a run of ``ledger`` in log ``log``: rows.setdefault(ledger, []),
 * live.setdefault(log, {}).setdefault(ledger, 0), in the pure loop's order. */
static int
run_start(Run *run, PyObject *ledger, long long ledger_id, PyObject *log, PyObject *rows,
          PyObject *live)
{
    if (run_settle(run) < 0) {
        return -1;
    }
    run_clear(run);
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL) {
        return -1;
    }
    PyObject *bucket = PyDict_SetDefault(rows, ledger, fresh); /* borrowed */
    Py_DECREF(fresh);
    if (bucket == NULL) {
        return -1;
    }
    if (!PyList_Check(bucket)) {
        PyErr_SetString(PyExc_TypeError, "rows must map ledger ids to lists");
        return -1;
    }
    Py_INCREF(bucket);
    run->bucket = bucket;
    fresh = PyDict_New();
    if (fresh == NULL) {
        return -1;
    }
    PyObject *per_ledger = PyDict_SetDefault(live, log, fresh); /* borrowed */
    Py_DECREF(fresh);
    if (per_ledger == NULL) {
        return -1;
    }
    if (!PyDict_Check(per_ledger)) {
        PyErr_SetString(PyExc_TypeError, "live must map log ids to dicts");
        return -1;
    }
    Py_INCREF(per_ledger);
    run->per_ledger = per_ledger;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) {
        return -1;
    }
    PyObject *slot = PyDict_SetDefault(per_ledger, ledger, zero); /* borrowed */
    Py_DECREF(zero);
    if (slot == NULL) {
        return -1;
    }
    Py_INCREF(ledger);
    run->ledger = ledger;
    run->ledger_id = ledger_id;
    return 0;
}

/* Close the open index run (if any): its row goes to the run's bucket. 0 or -1. */
static int
run_emit(Run *run, long long log_id)
{
    if (run->count == 0) {
        return 0;
    }
    unsigned char both[KEY_BYTES + RUN_HEAD_BYTES + 4 * MAX_RUN];
    put_u64(both, (uint64_t)run->ledger_id);
    put_u64(both + 8, (uint64_t)run->first);
    put_u32(both + KEY_BYTES, (uint32_t)log_id);
    put_u64(both + KEY_BYTES + 4, (uint64_t)run->offset);
    for (Py_ssize_t i = 0; i < run->count; i++) {
        put_u32(both + KEY_BYTES + RUN_HEAD_BYTES + 4 * i, run->lengths[i]);
    }
    size_t payload = RUN_HEAD_BYTES + 4 * (size_t)run->count;
    run->count = 0;
    PyObject *key = PyBytes_FromStringAndSize((const char *)both, KEY_BYTES);
    if (key == NULL) {
        return -1;
    }
    PyObject *value = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 + payload));
    if (value == NULL) {
        Py_DECREF(key);
        return -1;
    }
    unsigned char *sealed = (unsigned char *)PyBytes_AS_STRING(value);
    put_u32(sealed, crc_of(both, KEY_BYTES + payload));
    memcpy(sealed + 4, both + KEY_BYTES, payload);
    PyObject *row = PyTuple_New(2);
    if (row == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        return -1;
    }
    PyTuple_SET_ITEM(row, 0, key); /* steals */
    PyTuple_SET_ITEM(row, 1, value);
    int rc = PyList_Append(run->bucket, row);
    Py_DECREF(row);
    return rc;
}

/* Make room for ``need`` bytes in ``buf``; 0 or -1 with an exception. */
static int
reserve(PyObject *buf, Py_ssize_t need)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(buf);
    if (need <= size) {
        return 0;
    }
    Py_ssize_t grown = size > PY_SSIZE_T_MAX / 2 ? PY_SSIZE_T_MAX : size * 2;
    if (grown < 65536) {
        grown = 65536;
    }
    if (grown < need) {
        grown = need;
    }
    return PyByteArray_Resize(buf, grown);
}

/* Split an item into its parts (borrowed references); 0 or -1 with an exception. */
static int
unpack_item(PyObject *item, PyObject **ledger, PyObject **entry, PyObject **lac,
            PyObject **digest, PyObject **data)
{
    if (!PyTuple_Check(item)) {
        PyErr_Format(PyExc_TypeError,
                     "an entry must be a tuple (ledger_id, entry_id, (lac, digest, data)), "
                     "not '%.100s'",
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    if (PyTuple_GET_SIZE(item) != 3) {
        PyErr_Format(PyExc_ValueError,
                     "an entry must be (ledger_id, entry_id, (lac, digest, data)), "
                     "got a tuple of %zd",
                     PyTuple_GET_SIZE(item));
        return -1;
    }
    PyObject *cached = PyTuple_GET_ITEM(item, 2);
    if (!PyTuple_Check(cached)) {
        PyErr_Format(PyExc_TypeError, "a cached entry must be a tuple (lac, digest, data), "
                                      "not '%.100s'",
                     Py_TYPE(cached)->tp_name);
        return -1;
    }
    if (PyTuple_GET_SIZE(cached) != 3) {
        PyErr_Format(PyExc_ValueError,
                     "a cached entry must be (lac, digest, data), got a tuple of %zd",
                     PyTuple_GET_SIZE(cached));
        return -1;
    }
    *ledger = PyTuple_GET_ITEM(item, 0);
    *entry = PyTuple_GET_ITEM(item, 1);
    *lac = PyTuple_GET_ITEM(cached, 0);
    *digest = PyTuple_GET_ITEM(cached, 1);
    *data = PyTuple_GET_ITEM(cached, 2);
    return 0;
}

/* Append one entry: its record to buf at *used, its row to the run's bucket.
 * 0 or -1 with an exception (nothing of the entry is counted then). */
static int
append_one(PyObject *item, PyObject *buf, Py_ssize_t *used, PyObject *rows, PyObject *live,
           PyObject *log, long long log_id, long long *offset, Run *run)
{
    PyObject *ledger, *entry, *lac_obj, *digest_obj, *data;
    if (unpack_item(item, &ledger, &entry, &lac_obj, &digest_obj, &data) < 0) {
        return -1;
    }
    long long ledger_id, entry_id, lac, digest;
    if (int_in_range(ledger, "ledger id", 0, LLONG_MAX, &ledger_id) < 0 ||
        int_in_range(entry, "entry id", 0, LLONG_MAX, &entry_id) < 0 ||
        int_in_range(lac_obj, "lac", LLONG_MIN, LLONG_MAX, &lac) < 0 ||
        int_in_range(digest_obj, "digest", 0, 0xFFFFFFFFLL, &digest) < 0) {
        return -1;
    }
    Py_buffer view;
    const char *bytes;
    Py_ssize_t data_len;
    int have_view = 0;
    if (PyBytes_Check(data)) {
        bytes = PyBytes_AS_STRING(data);
        data_len = PyBytes_GET_SIZE(data);
    }
    else {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            return -1;
        }
        have_view = 1;
        bytes = view.buf;
        data_len = view.len;
    }
    int rc = -1;
    if ((unsigned long long)data_len > 0xFFFFFFFFull - RECORD_BYTES) {
        PyErr_Format(PyExc_ValueError, "entry data of %zd bytes: a record holds at most %llu",
                     data_len, 0xFFFFFFFFull - RECORD_BYTES);
        goto done;
    }
    long long length = RECORD_BYTES + (long long)data_len;
    if (*offset > LLONG_MAX - length) {
        PyErr_SetString(PyExc_ValueError, "entry log offset overflows");
        goto done;
    }
    if (*used > PY_SSIZE_T_MAX - (Py_ssize_t)length) {
        PyErr_NoMemory();
        goto done;
    }
    if (reserve(buf, *used + (Py_ssize_t)length) < 0) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buf) + *used;
    put_u32(out, (uint32_t)data_len);
    put_u64(out + 4, (uint64_t)ledger_id);
    put_u64(out + 12, (uint64_t)entry_id);
    put_u64(out + 20, (uint64_t)lac);
    put_u32(out + 28, (uint32_t)digest);
    if (data_len > 0) {
        memcpy(out + RECORD_BYTES, bytes, (size_t)data_len);
    }

    if (run->ledger == NULL || run->ledger_id != ledger_id) {
        if (run_emit(run, log_id) < 0 ||
            run_start(run, ledger, ledger_id, log, rows, live) < 0) {
            goto done;
        }
    }
    else if (run->count > 0 && (entry_id != run->following || run->count >= MAX_RUN)) {
        if (run_emit(run, log_id) < 0) {
            goto done;
        }
    }
    if (run->count == 0) {
        run->first = entry_id;
        run->offset = *offset;
    }
    run->lengths[run->count++] = (uint32_t)length;
    run->following = entry_id + 1;
    run->bytes += length;
    *used += (Py_ssize_t)length;
    *offset += length;
    rc = 0;
done:
    if (have_view) {
        PyBuffer_Release(&view);
    }
    return rc;
}

static PyObject *
append_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "append_entries() takes 11 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *entries = args[0], *held = args[1], *buf = args[2], *rows = args[4],
             *live = args[5], *log = args[6];
    if (!PyIter_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries must be an iterator");
        return NULL;
    }
    if (!PyByteArray_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "buf must be a bytearray");
        return NULL;
    }
    if (!PyDict_Check(rows) || !PyDict_Check(live)) {
        PyErr_SetString(PyExc_TypeError, "rows and live must be dicts");
        return NULL;
    }
    long long used_ll, log_id, offset, flushed, limit, chunk;
    if (state_arg(args[3], "used", 0, &used_ll) < 0 ||
        int_in_range(log, "log id", -1, 0xFFFFFFFFLL, &log_id) < 0 ||
        state_arg(args[7], "offset", 0, &offset) < 0 ||
        state_arg(args[8], "flushed", 0, &flushed) < 0 ||
        state_arg(args[9], "limit", 0, &limit) < 0 ||
        state_arg(args[10], "chunk", 0, &chunk) < 0) {
        return NULL;
    }
    if (used_ll > PyByteArray_GET_SIZE(buf) || flushed > offset) {
        PyErr_SetString(PyExc_ValueError, "inconsistent buffer state");
        return NULL;
    }
    Py_ssize_t used = (Py_ssize_t)used_ll;
    Py_ssize_t count = 0;
    int status = STATUS_DONE;
    Run run = {NULL, 0, NULL, NULL, 0, 0, 0, 0, 0, {0}};
    PyObject *item = NULL;
    if (held != Py_None) {
        item = held;
        Py_INCREF(item);
    }
    for (;;) {
        if (item == NULL) {
            item = PyIter_Next(entries);
            if (item == NULL) {
                if (PyErr_Occurred()) {
                    goto error;
                }
                break; /* exhausted */
            }
        }
        if (log_id < 0 || offset >= limit) {
            status = STATUS_ROLL; /* ``item`` goes back as ``held`` */
            break;
        }
        if (append_one(item, buf, &used, rows, live, log, log_id, &offset, &run) < 0) {
            goto error;
        }
        Py_CLEAR(item);
        count++;
        if (offset - flushed >= chunk) {
            status = STATUS_FLUSH;
            break;
        }
    }
    if (run_emit(&run, log_id) < 0 || run_settle(&run) < 0) {
        goto error;
    }
    run_clear(&run);
    PyObject *result = Py_BuildValue("(iOnLn)", status, item == NULL ? Py_None : item, used,
                                     offset, count);
    Py_XDECREF(item);
    return result;
error:
    Py_XDECREF(item);
    run_clear(&run);
    return NULL;
}

static PyObject *
crc32c_py(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t crc = crc_of(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *
crc32c_software_py(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t crc = crc_software(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"append_entries", (PyCFunction)(void (*)(void))append_entries, METH_FASTCALL,
     "Append entries' records to a chunk buffer and their index rows to row lists; see "
     "bookie/storage/_fastcheckpoint.c."},
    {"crc32c", crc32c_py, METH_O, "CRC32C of a bytes-like object (as crc32c.crc32c)."},
    {"crc32c_software", crc32c_software_py, METH_O,
     "CRC32C of a bytes-like object, always by table (checks the hardware path)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "bookie.storage._fastcheckpoint",
    "The per-entry work of a bookie checkpoint, compiled (bookie/storage/entry_storage.py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__fastcheckpoint(void)
{
    const char *impl = crc_select();
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "DONE", STATUS_DONE) < 0 ||
        PyModule_AddIntConstant(module, "ROLL", STATUS_ROLL) < 0 ||
        PyModule_AddIntConstant(module, "FLUSH", STATUS_FLUSH) < 0 ||
        PyModule_AddStringConstant(module, "CRC32C_IMPL", impl) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
