/*
 * The per-record and per-entry work of journal replay at a bookie's start
 * (bookie/storage/replay.py, bookie/storage/journal_files.py), compiled. Nothing here reads
 * or writes a file, or touches the index: Python reads the journal in large chunks, cuts
 * torn tails, syncs, and answers which entries the index holds. This module only
 *
 *   - finds the intact records of a chunk (frame ``length:u32 crc32c:u32`` big endian,
 *     then the payload; the CRC seeded with the file's own seed), and
 *   - checks the entries of one ADD record and picks those for the write cache, as the pure-Python
 *     replay does entry by entry, and sums up what they do to the ledger's state.
 *
 * scan_frames(chunk, seed, max_record_bytes) -> (frames, used, problem)
 *
 *   frames   [(payload offset, payload length), ...] of the whole, intact records from
 *            chunk[0] on, in order
 *   used     where the first record not in ``frames`` starts
 *   problem  None when that record is merely not whole in the chunk (or the chunk ends
 *            there); else why it is bad, in the words of the pure-Python replay:
 *            "bad record length N" or "CRC mismatch"
 *
 * apply_entries(ledger_id, blob, present_of)
 *     -> (accepted, last_entry_id, lac, runs, bad, problem, kept_ids, kept_starts, count, whole)
 *
 *   blob        an ADD record's packed entries (walog/wire/packing.py: 24-byte header
 *               ``entry_id:int64 lac:int64 digest:uint32 length:uint32`` then the payload)
 *   present_of  None, or called once as ``present_of(lowest id, highest id)`` of the
 *               record's entries: a set of the ids in that range stored already (in the
 *               index or the write cache)
 *
 *   Each entry whose digest matches (CRC32C of ``DIGEST_HEADER.pack(ledger_id, entry_id,
 *   lac)`` then the payload) is accepted; one not in ``present_of``'s set is kept for the
 *   write cache. Returns how many were accepted, the highest accepted id and lac (-1 when
 *   none), the accepted ids as ascending runs [(first, last), ...] in record order, the ids
 *   with a bad digest, what is wrong with the blob's tail (None when nothing), as
 *   walog.wire.packing.unpack_entries says it; the kept entries' ids and where they start
 *   in ``blob``, each as native int64s in bytes (array("q") reads them); and how many
 *   whole entries the blob holds and where they end. Entries before a malformed tail are
 *   applied.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_crc32c.h"

#define FRAME_BYTES 8         /* ">II" */
#define ENTRY_HEADER_BYTES 24 /* ">qqII" */
#define DIGEST_HEADER_BYTES 24 /* ">qqq" */

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

/* -- scan_frames ------------------------------------------------------------------------- */

static PyObject *
scan_frames(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "scan_frames takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    unsigned long seed = PyLong_AsUnsignedLong(args[1]);
    if (seed == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (seed > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_ValueError, "seed must fit in 32 bits");
        return NULL;
    }
    long long max_record_bytes = PyLong_AsLongLong(args[2]);
    if (max_record_bytes == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *base = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *frames = PyList_New(0), *problem = NULL;
    if (frames == NULL) {
        goto fail;
    }
    while (end - pos >= FRAME_BYTES) {
        uint32_t length = get_u32(base + pos);
        uint32_t crc = get_u32(base + pos + 4);
        if (length == 0 || (long long)length > max_record_bytes) {
            problem = PyUnicode_FromFormat("bad record length %lu", (unsigned long)length);
            if (problem == NULL) {
                goto fail;
            }
            break;
        }
        if ((uint64_t)length > (uint64_t)(end - pos - FRAME_BYTES)) {
            break; /* not whole in this chunk */
        }
        const unsigned char *payload = base + pos + FRAME_BYTES;
        if (crc_extend((uint32_t)seed, payload, length) != crc) {
            problem = PyUnicode_FromString("CRC mismatch");
            if (problem == NULL) {
                goto fail;
            }
            break;
        }
        PyObject *frame = Py_BuildValue("(nn)", pos + FRAME_BYTES, (Py_ssize_t)length);
        if (frame == NULL) {
            goto fail;
        }
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0) {
            goto fail;
        }
        pos += FRAME_BYTES + (Py_ssize_t)length;
    }
    PyBuffer_Release(&view);
    if (problem == NULL) {
        problem = Py_NewRef(Py_None);
    }
    return Py_BuildValue("(NnN)", frames, pos, problem);

fail:
    PyBuffer_Release(&view);
    Py_XDECREF(frames);
    Py_XDECREF(problem);
    return NULL;
}

/* -- apply_entries ----------------------------------------------------------------------- */

/* Append (first, last) to ``runs``; 0 or -1 with an exception. */
static int
add_run(PyObject *runs, long long first, long long last)
{
    PyObject *run = Py_BuildValue("(LL)", first, last);
    if (run == NULL) {
        return -1;
    }
    int appended = PyList_Append(runs, run);
    Py_DECREF(run);
    return appended;
}

static PyObject *
apply_entries(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "apply_entries takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *present_of = args[2];
    long long ledger_id = PyLong_AsLongLong(args[0]);
    if (ledger_id == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *base = view.buf;
    Py_ssize_t end = view.len;
    PyObject *present = NULL, *runs = NULL, *bad = NULL, *problem = NULL;
    long long *kept_ids = NULL, *kept_starts = NULL;

    /* First pass: the whole entries, their id range, what is wrong with the tail. */
    Py_ssize_t count = 0, whole = 0, offset = 0;
    long long low = 0, high = 0;
    while (offset < end) {
        Py_ssize_t left = end - offset;
        if (left < ENTRY_HEADER_BYTES) {
            problem = PyUnicode_FromFormat("%zd stray bytes after %zd entries", left, count);
            break;
        }
        const unsigned char *head = base + offset;
        long long entry_id = (long long)get_u64(head);
        uint32_t length = get_u32(head + 20);
        Py_ssize_t room = left - ENTRY_HEADER_BYTES;
        if ((uint64_t)length > (uint64_t)room) {
            problem = PyUnicode_FromFormat("entry %lld claims %lu bytes, %zd left", entry_id,
                                           (unsigned long)length, room);
            break;
        }
        low = count == 0 || entry_id < low ? entry_id : low;
        high = count == 0 || entry_id > high ? entry_id : high;
        offset += ENTRY_HEADER_BYTES + (Py_ssize_t)length;
        count++;
    }
    whole = offset;
    if (whole < end && problem == NULL) { /* PyUnicode_FromFormat failed */
        goto fail;
    }
    if (count > 0 && present_of != Py_None) {
        present = PyObject_CallFunction(present_of, "LL", low, high);
        if (present == NULL) {
            goto fail;
        }
        if (!PyAnySet_Check(present)) {
            PyErr_SetString(PyExc_TypeError, "present_of must return a set");
            goto fail;
        }
        if (PySet_GET_SIZE(present) == 0) {
            Py_CLEAR(present);
        }
    }
    runs = PyList_New(0);
    bad = PyList_New(0);
    kept_ids = PyMem_Malloc(sizeof(long long) * (size_t)(count > 0 ? count : 1));
    kept_starts = PyMem_Malloc(sizeof(long long) * (size_t)(count > 0 ? count : 1));
    if (runs == NULL || bad == NULL || kept_ids == NULL || kept_starts == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto fail;
    }

    /* Second pass: check each digest, keep what ``present_of`` lacks, sum up the rest. */
    unsigned char digest_header[DIGEST_HEADER_BYTES];
    put_u64(digest_header, (uint64_t)ledger_id);
    Py_ssize_t accepted = 0, kept = 0;
    long long last_entry_id = -1, lac = -1, run_first = 0, run_last = 0;
    offset = 0;
    while (offset < whole) {
        Py_ssize_t start = offset;
        const unsigned char *head = base + offset;
        long long entry_id = (long long)get_u64(head);
        long long entry_lac = (long long)get_u64(head + 8);
        uint32_t digest = get_u32(head + 16);
        Py_ssize_t length = (Py_ssize_t)get_u32(head + 20);
        const unsigned char *data = head + ENTRY_HEADER_BYTES;
        offset += ENTRY_HEADER_BYTES + length;
        put_u64(digest_header + 8, (uint64_t)entry_id);
        put_u64(digest_header + 16, (uint64_t)entry_lac);
        uint32_t crc = crc_extend(crc_of(digest_header, DIGEST_HEADER_BYTES), data, length);
        if (crc != digest) {
            PyObject *id = PyLong_FromLongLong(entry_id);
            if (id == NULL || PyList_Append(bad, id) < 0) {
                Py_XDECREF(id);
                goto fail;
            }
            Py_DECREF(id);
            continue;
        }
        if (accepted == 0) {
            last_entry_id = entry_id;
            lac = entry_lac;
            run_first = run_last = entry_id;
        }
        else {
            last_entry_id = entry_id > last_entry_id ? entry_id : last_entry_id;
            lac = entry_lac > lac ? entry_lac : lac;
            if (run_last < LLONG_MAX && entry_id == run_last + 1) {
                run_last = entry_id;
            }
            else {
                if (add_run(runs, run_first, run_last) < 0) {
                    goto fail;
                }
                run_first = run_last = entry_id;
            }
        }
        accepted++;
        if (present != NULL) {
            PyObject *id = PyLong_FromLongLong(entry_id);
            if (id == NULL) {
                goto fail;
            }
            int held = PySet_Contains(present, id);
            Py_DECREF(id);
            if (held < 0) {
                goto fail;
            }
            if (held) {
                continue; /* stored already: not cached again */
            }
        }
        kept_ids[kept] = entry_id;
        kept_starts[kept] = (long long)start;
        kept++;
    }
    if (accepted > 0 && add_run(runs, run_first, run_last) < 0) {
        goto fail;
    }
    PyBuffer_Release(&view);
    Py_XDECREF(present);
    if (problem == NULL) {
        problem = Py_NewRef(Py_None);
    }
    PyObject *result = Py_BuildValue(
        "(nLLNNNy#y#nn)", accepted, last_entry_id, lac, runs, bad, problem, (const char *)kept_ids,
        (Py_ssize_t)(kept * (Py_ssize_t)sizeof(long long)), (const char *)kept_starts,
        (Py_ssize_t)(kept * (Py_ssize_t)sizeof(long long)), count, whole);
    PyMem_Free(kept_ids);
    PyMem_Free(kept_starts);
    return result;

fail:
    PyMem_Free(kept_ids);
    PyMem_Free(kept_starts);
    PyBuffer_Release(&view);
    Py_XDECREF(present);
    Py_XDECREF(runs);
    Py_XDECREF(bad);
    Py_XDECREF(problem);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_FASTCALL,
     "The intact journal records of a chunk, where the first other one starts and what is "
     "wrong with it; see bookie/storage/_fastreplay.c."},
    {"apply_entries", (PyCFunction)(void (*)(void))apply_entries, METH_FASTCALL,
     "Check the entries of one ADD record, say which to cache and sum up their effect on the "
     "ledger's state; see bookie/storage/_fastreplay.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "bookie.storage._fastreplay",
    "Journal replay's per-record and per-entry work, compiled (bookie/storage/replay.py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__fastreplay(void)
{
    const char *impl = crc_select();
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
