/*
 * The log writer's per-record path, compiled (walog/log/records.py and walog/log/writer.py
 * select it; WALOG_PURE_PYTHON=1 or an unbuilt extension selects the pure-Python code). Both
 * give exactly what their pure-Python versions give:
 *
 * Batch(max_bytes, max_records, version)
 *     walog.log.records.RecordBatch (version 1) or TaggedRecordBatch (version 2): records
 *     gathered for one entry. Each record is written into one growing buffer as it is added
 *     (its header packed in place, its payload copied once), so encode() copies the buffer
 *     once behind the entry header. Same limits, same errors, same bytes.
 *
 * resolve(sinks, ledger_id, entry_id, position_type, already_settled) -> None
 *     The records of an acknowledged entry: sinks[slot].set_result(Position(ledger_id,
 *     entry_id, slot)) for each slot, the position made as tuple.__new__(position_type, ...)
 *     makes it (walog.log.position.unchecked_position); a sink whose set_result raises one
 *     of ``already_settled`` (a caller cancelled it) is passed over, any other error stops
 *     the loop and is raised.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#define HEADER_BYTES 5          /* ">BI": version, record count */
#define RECORD1_BYTES 12        /* ">dI": timestamp, payload length */
#define RECORD2_PLAIN_BYTES 13  /* ">dxI": timestamp, no producer, payload length */
#define TAGGED_FIXED_BYTES 21   /* ">d" + name length byte + ">QI" (without the name) */
#define MAX_ENTRY ((Py_ssize_t)HEADER_BYTES + RECORD1_BYTES + 0xFFFFFFFFLL)

static PyObject *str_set_result;

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_bytes;
    Py_ssize_t max_records;
    Py_ssize_t count;
    Py_ssize_t size;          /* bytes of the entry these records encode to */
    Py_ssize_t payloads;      /* bytes of the payloads alone */
    int version;
    unsigned char *buf;       /* the records, without the entry header */
    Py_ssize_t cap;
} Batch;

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

static inline void
put_f64(unsigned char *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64(p, v);
}

static int
Batch_init(Batch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_bytes", "max_records", "version", NULL};
    Py_ssize_t max_bytes, max_records;
    int version = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn|i", kwlist, &max_bytes, &max_records,
                                     &version)) {
        return -1;
    }
    if (version != 1 && version != 2) {
        PyErr_Format(PyExc_ValueError, "entry format version must be 1 or 2, got %d", version);
        return -1;
    }
    if (max_bytes <= HEADER_BYTES + RECORD1_BYTES) {
        PyErr_Format(PyExc_ValueError, "max entry bytes %zd leaves no room for a record",
                     max_bytes);
        return -1;
    }
    if (max_bytes > MAX_ENTRY) {
        PyErr_Format(PyExc_ValueError, "max entry bytes %zd exceeds the 4 GiB format limit",
                     max_bytes);
        return -1;
    }
    if (max_records < 1) {
        PyErr_Format(PyExc_ValueError, "max records per entry must be >= 1, got %zd",
                     max_records);
        return -1;
    }
    self->max_bytes = max_bytes;
    self->max_records = max_records;
    self->version = version;
    self->count = 0;
    self->size = HEADER_BYTES;
    self->payloads = 0;
    return 0;
}

static void
Batch_dealloc(Batch *self)
{
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Room for ``more`` bytes past what the records hold. */
static int
reserve(Batch *self, Py_ssize_t more)
{
    Py_ssize_t used = self->size - HEADER_BYTES;
    if (used + more <= self->cap) {
        return 0;
    }
    Py_ssize_t cap = self->cap ? self->cap : 4096;
    while (cap < used + more) {
        cap *= 2;
    }
    unsigned char *buf = PyMem_Realloc(self->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buf = buf;
    self->cap = cap;
    return 0;
}

static inline Py_ssize_t
plain_overhead(const Batch *self)
{
    return self->version == 1 ? RECORD1_BYTES : RECORD2_PLAIN_BYTES;
}

static inline int
is_full(const Batch *self)
{
    return self->count >= self->max_records ||
           self->size + plain_overhead(self) > self->max_bytes;
}

static PyObject *
Batch_fits(Batch *self, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyBool_FromLong(self->count < self->max_records &&
                           self->size + plain_overhead(self) + n <= self->max_bytes);
}

static PyObject *
Batch_fits_tagged(Batch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fits_tagged(payload_len, prefix)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t prefix = PyObject_Length(args[1]);
    if (prefix < 0) {
        return NULL;
    }
    if (self->version == 1) {
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(self->count < self->max_records &&
                           self->size + TAGGED_FIXED_BYTES - 1 + prefix + n <= self->max_bytes);
}

static PyObject *
Batch_add(Batch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add(timestamp, payload)");
        return NULL;
    }
    double stamp = PyFloat_AsDouble(args[0]);
    if (stamp == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if ((uint64_t)view.len > 0xFFFFFFFFULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "a record's payload is at most 4 GiB - 1 bytes");
        return NULL;
    }
    Py_ssize_t head = plain_overhead(self);
    if (reserve(self, head + view.len) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *p = self->buf + (self->size - HEADER_BYTES);
    put_f64(p, stamp);
    if (self->version == 2) {
        p[8] = 0; /* no producer */
    }
    put_u32(p + head - 4, (uint32_t)view.len);
    memcpy(p + head, view.buf, (size_t)view.len);
    self->count += 1;
    self->size += head + view.len;
    self->payloads += view.len;
    PyBuffer_Release(&view);
    return PyBool_FromLong(is_full(self));
}

static PyObject *
Batch_add_tagged(Batch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->version == 1) {
        PyErr_SetString(PyExc_ValueError, "a record of a producer needs an entry of format 2");
        return NULL;
    }
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "add_tagged(timestamp, payload, prefix, seq)");
        return NULL;
    }
    double stamp = PyFloat_AsDouble(args[0]);
    if (stamp == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[3]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view, prefix;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &prefix, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *result = NULL;
    if ((uint64_t)view.len > 0xFFFFFFFFULL || prefix.len > 256) { /* length byte + 255 */
        PyErr_SetString(PyExc_ValueError, "a record's payload or producer prefix is too long");
        goto done;
    }
    Py_ssize_t head = TAGGED_FIXED_BYTES - 1 + prefix.len; /* the prefix holds its length */
    if (reserve(self, head + view.len) < 0) {
        goto done;
    }
    unsigned char *p = self->buf + (self->size - HEADER_BYTES);
    put_f64(p, stamp);
    memcpy(p + 8, prefix.buf, (size_t)prefix.len);
    put_u64(p + 8 + prefix.len, (uint64_t)seq);
    put_u32(p + 16 + prefix.len, (uint32_t)view.len);
    memcpy(p + head, view.buf, (size_t)view.len);
    self->count += 1;
    self->size += head + view.len;
    self->payloads += view.len;
    result = PyBool_FromLong(is_full(self));
done:
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
Batch_encode(Batch *self, PyObject *Py_UNUSED(ignored))
{
    if (self->count == 0) {
        PyErr_SetString(PyExc_ValueError, "an entry holds at least one record");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->size);
    if (out == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    p[0] = (unsigned char)self->version;
    put_u32(p + 1, (uint32_t)self->count);
    memcpy(p + HEADER_BYTES, self->buf, (size_t)(self->size - HEADER_BYTES));
    return out;
}

static PyObject *
Batch_max_tagged_payload_bytes(Batch *self, PyObject *prefix)
{
    Py_ssize_t n = PyObject_Length(prefix);
    if (n < 0) {
        return NULL;
    }
    return PyLong_FromSsize_t(self->max_bytes - HEADER_BYTES - TAGGED_FIXED_BYTES - n + 1);
}

static Py_ssize_t
Batch_len(Batch *self)
{
    return self->count;
}

static PyObject *
Batch_get_count(Batch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->count);
}

static PyObject *
Batch_get_size(Batch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->size);
}

static PyObject *
Batch_get_version(Batch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->version);
}

static PyObject *
Batch_get_max_payload_bytes(Batch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->max_bytes - HEADER_BYTES - plain_overhead(self));
}

static PyObject *
Batch_get_payload_bytes(Batch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->payloads);
}

static PyObject *
Batch_get_full(Batch *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(!(self->count < self->max_records &&
                             self->size + plain_overhead(self) <= self->max_bytes));
}

static PyMethodDef Batch_methods[] = {
    {"fits", (PyCFunction)Batch_fits, METH_O,
     "True when a record without a producer of this payload size can join."},
    {"fits_tagged", (PyCFunction)(void (*)(void))Batch_fits_tagged, METH_FASTCALL,
     "fits() for a record of the producer of ``prefix``; never in format 1."},
    {"add", (PyCFunction)(void (*)(void))Batch_add, METH_FASTCALL,
     "Add a record without a producer; True when the batch is full afterwards."},
    {"add_tagged", (PyCFunction)(void (*)(void))Batch_add_tagged, METH_FASTCALL,
     "Add a record of the producer of ``prefix`` with sequence number ``seq``."},
    {"encode", (PyCFunction)Batch_encode, METH_NOARGS, "The entry bytes."},
    {"max_tagged_payload_bytes", (PyCFunction)Batch_max_tagged_payload_bytes, METH_O,
     "The largest payload a record of the producer of ``prefix`` may have."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Batch_getset[] = {
    {"count", (getter)Batch_get_count, NULL, "records added so far", NULL},
    {"size", (getter)Batch_get_size, NULL, "bytes of the entry these records encode to", NULL},
    {"version", (getter)Batch_get_version, NULL, "the entry format it encodes to", NULL},
    {"max_payload_bytes", (getter)Batch_get_max_payload_bytes, NULL,
     "the largest payload a record without a producer may have", NULL},
    {"payload_bytes", (getter)Batch_get_payload_bytes, NULL, "bytes of the payloads alone",
     NULL},
    {"full", (getter)Batch_get_full, NULL, "True when not even an empty record fits any more",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Batch_as_sequence = {
    .sq_length = (lenfunc)Batch_len,
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "walog.log._fastrecords.Batch",
    .tp_basicsize = sizeof(Batch),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_as_sequence = &Batch_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records gathered for one entry of format 1 or 2 (walog.log.records.RecordBatch).",
    .tp_methods = Batch_methods,
    .tp_getset = Batch_getset,
    .tp_init = (initproc)Batch_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *
resolve(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "resolve(sinks, ledger_id, entry_id, position_type, already_settled)");
        return NULL;
    }
    PyObject *sinks = args[0], *ledger_id = args[1], *entry_id = args[2];
    PyObject *settled = args[4];
    if (!PyList_Check(sinks) || !PyType_Check(args[3]) ||
        !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "resolve: sinks must be a list, position_type a tuple type");
        return NULL;
    }
    PyTypeObject *position_type = (PyTypeObject *)args[3];
    for (Py_ssize_t slot = 0; slot < PyList_GET_SIZE(sinks); slot++) {
        PyObject *position = position_type->tp_alloc(position_type, 3);
        if (position == NULL) {
            return NULL;
        }
        PyObject *index = PyLong_FromSsize_t(slot);
        if (index == NULL) {
            Py_DECREF(position);
            return NULL;
        }
        Py_INCREF(ledger_id);
        Py_INCREF(entry_id);
        PyTuple_SET_ITEM(position, 0, ledger_id);
        PyTuple_SET_ITEM(position, 1, entry_id);
        PyTuple_SET_ITEM(position, 2, index);
        /* Three ints can form no cycle: keep it out of the collector's passes, as the
         * collector itself leaves such tuples once it has seen them. Made at the rate of
         * records and held until the caller reads them, positions otherwise fill the
         * young generations and get promoted, and full collections come more often. */
        if (PyObject_GC_IsTracked(position)) {
            PyObject_GC_UnTrack(position);
        }
        PyObject *sink = PyList_GET_ITEM(sinks, slot);
        Py_INCREF(sink);
        PyObject *out = PyObject_CallMethodOneArg(sink, str_set_result, position);
        Py_DECREF(sink);
        Py_DECREF(position);
        if (out != NULL) {
            Py_DECREF(out);
        } else if (PyErr_ExceptionMatches(settled)) {
            PyErr_Clear(); /* its caller cancelled it */
        } else {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"resolve", (PyCFunction)(void (*)(void))resolve, METH_FASTCALL,
     "Resolve each sink of an acknowledged entry with its record's position."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "walog.log._fastrecords",
    .m_doc = "The log writer's per-record path, compiled (walog/log/records.py selects it).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastrecords(void)
{
    if (PyType_Ready(&BatchType) < 0) {
        return NULL;
    }
    str_set_result = PyUnicode_InternFromString("set_result");
    if (str_set_result == NULL) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&BatchType);
    if (PyModule_AddObject(module, "Batch", (PyObject *)&BatchType) < 0) {
        Py_DECREF(&BatchType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
