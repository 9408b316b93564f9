/*
 * The per-entry checks of a bookie's add path, compiled (bookie/storage/fastpath.py selects them).
 * Both return exactly what their pure-Python versions return:
 *
 * unpack_entries(blob) -> (entries, problem)
 *     walog.wire.packing.unpack_entries: the entries packed in ``blob`` (each a 24-byte
 *     big-endian header ``entry_id:int64 lac:int64 digest:uint32 length:uint32`` then
 *     ``length`` payload bytes) as a list of walog.wire.packing.PackedEntry (entry_id, lac,
 *     digest, data: a named tuple, made here as ``tuple.__new__`` makes one), ``data``
 *     a slice of ``blob`` (bytes for bytes, bytearray for a bytearray, ``blob[a:b]`` for
 *     any other buffer of single bytes); and None, or what is wrong with the tail: a short
 *     header or a length past the end. The blob comes from the network: every length is
 *     checked against what is left before anything is read.
 *
 * refused_entries(ledger_id, entries, max_entry_bytes, bad_request, digest_mismatch,
 *                 too_large) -> {entry_id: status}
 *     bookie.storage.fastpath.refused_entries_python: ``bad_request`` for an entry with a negative
 *     ledger or entry id or a lac not in [-1, entry_id), else ``too_large`` for more than
 *     ``max_entry_bytes`` of payload, else ``digest_mismatch`` when its digest is not the CRC32C of
 *     ``DIGEST_HEADER.pack(ledger_id, entry_id, lac)`` then the payload. ``entries`` is any
 *     iterable of 4-item iterables; ids, lacs and the limit must be ints (TypeError
 *     otherwise), the digest may be anything (compared with ``!=``), the payload anything
 *     with a length and a buffer. Ids past int64 are refused where Python refuses them, and
 *     raise struct.error where Python's DIGEST_HEADER.pack would.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_crc32c.h"

#define HEADER_BYTES 24 /* ">qqII" */
#define DIGEST_HEADER_BYTES 24 /* ">qqq" */

/* struct.error, what DIGEST_HEADER.pack raises for an id past int64 */
static PyObject *struct_error;

/* walog.wire.packing.PackedEntry, the named tuple of an unpacked entry */
static PyTypeObject *entry_type;

static inline uint32_t
get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t
get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* -- unpack_entries ------------------------------------------------------------------------ */

enum { BLOB_BYTES, BLOB_BYTEARRAY, BLOB_OTHER };

/* blob[start:stop] as Python slices it; a new reference or NULL. */
static PyObject *
slice_of(PyObject *blob, int kind, const char *base, Py_ssize_t start, Py_ssize_t stop)
{
    switch (kind) {
    case BLOB_BYTES:
        return PyBytes_FromStringAndSize(base + start, stop - start);
    case BLOB_BYTEARRAY:
        return PyByteArray_FromStringAndSize(base + start, stop - start);
    default:
        return PySequence_GetSlice(blob, start, stop);
    }
}

static PyObject *
unpack_entries(PyObject *Py_UNUSED(module), PyObject *blob)
{
    Py_buffer view;
    int have_view = 0, kind;
    const unsigned char *base;
    Py_ssize_t end;
    if (PyBytes_CheckExact(blob)) { /* a subclass may slice or count otherwise */
        kind = BLOB_BYTES;
        base = (const unsigned char *)PyBytes_AS_STRING(blob);
        end = PyBytes_GET_SIZE(blob);
    }
    else {
        if (PyObject_GetBuffer(blob, &view, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
        have_view = 1;
        kind = PyByteArray_CheckExact(blob) ? BLOB_BYTEARRAY : BLOB_OTHER;
        base = view.buf;
        end = view.len;
        if (kind == BLOB_OTHER) {
            /* Slices count items: only a buffer of single bytes slices as it reads. */
            Py_ssize_t items = PyObject_Length(blob);
            if (items < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            if (items != end) {
                PyBuffer_Release(&view);
                PyErr_Format(PyExc_TypeError,
                             "blob must be a buffer of bytes, not of %zd items in %zd bytes",
                             items, end);
                return NULL;
            }
        }
    }

    /* First pass: count the whole entries and find where the tail goes wrong. */
    Py_ssize_t count = 0, offset = 0;
    PyObject *problem = NULL;
    while (offset < end) {
        Py_ssize_t left = end - offset;
        if (left < HEADER_BYTES) {
            problem = PyUnicode_FromFormat("%zd stray bytes after %zd entries", left, count);
            break;
        }
        const unsigned char *head = base + offset;
        uint32_t length = get_u32(head + 20);
        Py_ssize_t room = left - HEADER_BYTES;
        if ((uint64_t)length > (uint64_t)room) {
            problem = PyUnicode_FromFormat("entry %lld claims %lu bytes, %zd left",
                                           (long long)get_u64(head), (unsigned long)length,
                                           room);
            break;
        }
        offset += HEADER_BYTES + (Py_ssize_t)length;
        count++;
    }
    if (offset < end && problem == NULL) { /* PyUnicode_FromFormat failed */
        goto fail_early;
    }

    PyObject *entries = PyList_New(count);
    if (entries == NULL) {
        goto fail_early;
    }
    offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *head = base + offset;
        Py_ssize_t start = offset + HEADER_BYTES;
        Py_ssize_t stop = start + (Py_ssize_t)get_u32(head + 20);
        /* What tuple.__new__(PackedEntry, ...) does: a tuple subclass without a __dict__. */
        PyObject *entry = entry_type->tp_alloc(entry_type, 4);
        if (entry == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(entries, i, entry); /* steals */
        PyObject *item = PyLong_FromLongLong((long long)get_u64(head));
        if (item == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(entry, 0, item);
        item = PyLong_FromLongLong((long long)get_u64(head + 8));
        if (item == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(entry, 1, item);
        item = PyLong_FromUnsignedLong((unsigned long)get_u32(head + 16));
        if (item == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(entry, 2, item);
        item = slice_of(blob, kind, (const char *)base, start, stop);
        if (item == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(entry, 3, item);
        offset = stop;
    }
    if (have_view) {
        PyBuffer_Release(&view);
    }
    PyObject *result = PyTuple_Pack(2, entries, problem == NULL ? Py_None : problem);
    Py_DECREF(entries);
    Py_XDECREF(problem);
    return result;

fail:
    /* A tuple's unset items are NULL, which its deallocation skips. */
    Py_DECREF(entries);
fail_early:
    Py_XDECREF(problem);
    if (have_view) {
        PyBuffer_Release(&view);
    }
    return NULL;
}

/* -- refused_entries ----------------------------------------------------------------------- */

/* An int's value, and whether it is past int64 (-1 below, 1 above, 0 in range). */
typedef struct {
    long long value;
    int overflow;
} Int;

static int
int_arg(PyObject *obj, const char *what, Int *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not '%.100s'", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    out->value = PyLong_AsLongLongAndOverflow(obj, &out->overflow);
    if (out->value == -1 && PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

/* a < b for ints known as Int (their objects for the rare case past int64). */
static int
int_less(const Int *a, PyObject *a_obj, const Int *b, PyObject *b_obj)
{
    if (a->overflow == 0 && b->overflow == 0) {
        return a->value < b->value;
    }
    return PyObject_RichCompareBool(a_obj, b_obj, Py_LT);
}

/* Whether the entry is a bad request (1), too large (2), neither (0), or -1 with an
 * exception, in the order (and with the short cuts) of the pure-Python conditions. */
static int
bad_request_of(int bad_ledger, PyObject *entry_obj, const Int *entry, PyObject *lac_obj,
               const Int *lac, PyObject *data, const Int *max)
{
    if (bad_ledger || entry->overflow < 0 || (entry->overflow == 0 && entry->value < 0)) {
        return 1;
    }
    /* not -1 <= lac < entry_id */
    if (lac->overflow < 0 || (lac->overflow == 0 && lac->value < -1)) {
        return 1;
    }
    int below = int_less(lac, lac_obj, entry, entry_obj);
    if (below <= 0) {
        return below < 0 ? -1 : 1;
    }
    Py_ssize_t size =
        PyBytes_CheckExact(data) ? PyBytes_GET_SIZE(data) : PyObject_Length(data);
    if (size < 0) {
        return -1;
    }
    if (max->overflow != 0) {
        return max->overflow < 0 ? 2 : 0;
    }
    return (long long)size > max->value ? 2 : 0;
}

/* Whether the entry's digest does not match (1, 0, -1 with an exception). */
static int
digest_mismatch_of(const Int *ledger, const Int *entry, const Int *lac, PyObject *digest,
                   PyObject *data)
{
    if (ledger->overflow || entry->overflow || lac->overflow) {
        PyErr_SetString(struct_error,
                        "'q' format requires -9223372036854775808 <= number <= "
                        "9223372036854775807");
        return -1;
    }
    unsigned char header[DIGEST_HEADER_BYTES];
    put_u64(header, (uint64_t)ledger->value);
    put_u64(header + 8, (uint64_t)entry->value);
    put_u64(header + 16, (uint64_t)lac->value);
    uint32_t state = crc_update(0xFFFFFFFFu, header, DIGEST_HEADER_BYTES);
    if (PyBytes_Check(data)) {
        state = crc_update(state, (const unsigned char *)PyBytes_AS_STRING(data),
                           (size_t)PyBytes_GET_SIZE(data));
    }
    else {
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            return -1;
        }
        state = crc_update(state, view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    uint32_t crc = state ^ 0xFFFFFFFFu;
    if (PyLong_CheckExact(digest)) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(digest, &overflow);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        return overflow != 0 || value != (long long)crc;
    }
    PyObject *crc_obj = PyLong_FromUnsignedLong((unsigned long)crc);
    if (crc_obj == NULL) {
        return -1;
    }
    int differs = PyObject_RichCompareBool(crc_obj, digest, Py_NE);
    Py_DECREF(crc_obj);
    return differs;
}

/* The four parts of an entry, new references (Python code run later, an entry's __len__
 * or __ne__, may change a list they came from); 0 or -1 with an exception. */
static int
entry_parts(PyObject *item, PyObject **parts)
{
    PyObject *seq = item;
    if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 4) {
        Py_INCREF(seq);
    }
    else {
        seq = PySequence_Fast(item, "cannot unpack a non-iterable entry");
        if (seq == NULL) {
            return -1;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n != 4) {
            if (n > 4) {
                PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 4)");
            }
            else {
                PyErr_Format(PyExc_ValueError,
                             "not enough values to unpack (expected 4, got %zd)", n);
            }
            Py_DECREF(seq);
            return -1;
        }
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (int i = 0; i < 4; i++) {
        parts[i] = items[i];
        Py_INCREF(parts[i]);
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *
refused_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "refused_entries() takes 6 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *ledger_obj = args[0], *entries = args[1], *bad_request = args[3],
             *digest_mismatch = args[4], *too_large = args[5];
    Int ledger, max;
    if (int_arg(ledger_obj, "ledger_id", &ledger) < 0 ||
        int_arg(args[2], "max_entry_bytes", &max) < 0) {
        return NULL;
    }
    int bad_ledger = ledger.overflow < 0 || (ledger.overflow == 0 && ledger.value < 0);
    PyObject *seq = PySequence_Fast(entries, "entries must be iterable");
    if (seq == NULL) {
        return NULL;
    }
    PyObject *refused = PyDict_New();
    if (refused == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    /* Python code may run in the loop (an entry's __iter__, __len__, __ne__) and change a
     * list of entries: its size is read again for each entry, as Python's for loop does. */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *parts[4];
        PyObject *status = NULL;
        Int entry, lac;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(item);
        int rc = entry_parts(item, parts);
        Py_DECREF(item);
        if (rc < 0) {
            Py_DECREF(refused);
            Py_DECREF(seq);
            return NULL;
        }
        if (int_arg(parts[0], "entry_id", &entry) < 0 || int_arg(parts[1], "lac", &lac) < 0) {
            rc = -1;
        }
        else {
            rc = bad_request_of(bad_ledger, parts[0], &entry, parts[1], &lac, parts[3], &max);
            if (rc > 0) {
                status = rc == 2 ? too_large : bad_request;
                rc = 1;
            }
            else if (rc == 0) {
                rc = digest_mismatch_of(&ledger, &entry, &lac, parts[2], parts[3]);
                if (rc > 0) {
                    status = digest_mismatch;
                }
            }
        }
        if (rc >= 0 && status != NULL) {
            rc = PyDict_SetItem(refused, parts[0], status);
        }
        for (int k = 0; k < 4; k++) {
            Py_DECREF(parts[k]);
        }
        if (rc < 0) {
            Py_DECREF(refused);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return refused;
}

static PyMethodDef methods[] = {
    {"unpack_entries", unpack_entries, METH_O,
     "The entries packed in a blob and what is wrong with its tail (None when nothing), as "
     "walog.wire.packing.unpack_entries; see bookie/storage/_fastadd.c."},
    {"refused_entries", (PyCFunction)(void (*)(void))refused_entries, METH_FASTCALL,
     "The entries of an add batch a bookie refuses, by entry id, as "
     "bookie.storage.fastpath.refused_entries_python; see bookie/storage/_fastadd.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "bookie.storage._fastadd",
    "The per-entry checks of a bookie's add path, compiled (bookie/storage/fastpath.py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__fastadd(void)
{
    const char *impl = crc_select();
    if (struct_error == NULL) {
        PyObject *struct_module = PyImport_ImportModule("struct");
        if (struct_module == NULL) {
            return NULL;
        }
        struct_error = PyObject_GetAttrString(struct_module, "error");
        Py_DECREF(struct_module);
        if (struct_error == NULL) {
            return NULL;
        }
    }
    if (entry_type == NULL) {
        PyObject *packing = PyImport_ImportModule("walog.wire.packing");
        if (packing == NULL) {
            return NULL;
        }
        PyObject *type = PyObject_GetAttrString(packing, "PackedEntry");
        Py_DECREF(packing);
        if (type == NULL) {
            return NULL;
        }
        if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
            || ((PyTypeObject *)type)->tp_dictoffset != 0) {
            Py_DECREF(type);
            PyErr_SetString(PyExc_TypeError,
                            "walog.wire.packing.PackedEntry must be a named tuple");
            return NULL;
        }
        entry_type = (PyTypeObject *)type;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddStringConstant(module, "CRC32C_IMPL", impl) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
